// The map (issue 2, "Benchmarks"): memory per mapped 4 KiB block through the
// public Pool API, and lookup / update rates of the ExtentTree with a
// VbaTable and SegmentTable behind it, wired as state/map_state.h does.
//
//   map_bench            quick: 1 GiB volume / 1 Mi-block trees
//   map_bench --full     4 GiB volume / 4 Mi-block trees (FTL_BENCH_FULL=1)

#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench_util.h"
#include "ftl/pool.h"
#include "log/segment_table.h"
#include "map/extent_tree.h"
#include "map/vba_table.h"
#include "util/logging.h"

namespace ftl::bench {
namespace {

using log::Bno;
using log::kNoBlock;

// ---------------------------------------------------------------- fixture

// One volume's tree over a VBA table and a segment table twice the volume's
// size, as MapState builds them. Physical blocks are handed out by a log
// head that skips blocks still valid (no cleaner here).
class MapFixture {
 public:
  explicit MapFixture(Bno blocks)
      : blocks_(blocks),
        segs_(uint32_t((uint64_t(blocks) * 2 + kSegBlocks - 1) / kSegBlocks), kSegBlocks),
        vbas_(&segs_, Bno(uint64_t(segs_.count()) * kSegBlocks + 1024)),
        ctx_(&vbas_),
        tree_(&ctx_) {}

  Bno blocks() const { return blocks_; }
  map::ExtentTree& tree() { return tree_; }
  map::VbaTable& vbas() { return vbas_; }
  const map::TreeContext& ctx() const { return ctx_; }

  // Maps [lba, lba+n) to freshly allocated VBAs and gives them PBAs (a
  // first write, or a write that breaks sharing).
  void WriteNew(Bno lba, Bno n) {
    runs_.clear();
    vbas_.Allocate(n, &runs_);
    for (auto [vba, len] : runs_) {
      tree_.Assign(lba, len, vba);
      for (Bno k = 0; k < len; ++k) vbas_.SetPba(vba + k, NextPba());
      lba += len;
    }
  }

  // The overwrite path of the engine for one block whose VBA is private:
  // PlanWrite (lookup, refcount, exclusivity) then ApplyWrite (lookup to see
  // the tree already maps it, new PBA).
  void Overwrite(Bno lba) {
    Bno cur = tree_.LookupOne(lba);
    if (cur == kNoBlock || vbas_.Get(cur).refs != 1 || !tree_.Exclusive(lba)) {
      WriteNew(lba, 1);
      return;
    }
    benchmark::DoNotOptimize(tree_.LookupOne(lba) == cur);
    vbas_.SetPba(cur, NextPba());
  }

  // Every block once, in random order (one extent per block).
  void FillRandom(uint64_t seed) {
    std::vector<Bno> order(blocks_);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    for (Bno lba : order) WriteNew(lba, 1);
  }
  // Sequential 128 KiB writes (contiguous VBAs: one extent per run).
  void FillSequential() {
    for (Bno lba = 0; lba < blocks_; lba += 32) WriteNew(lba, std::min<Bno>(32, blocks_ - lba));
  }

 private:
  static constexpr uint32_t kSegBlocks = 1024;
  Bno NextPba() {
    const Bno phys = Bno(uint64_t(segs_.count()) * kSegBlocks);
    while (segs_.IsValid(head_)) head_ = (head_ + 1) % phys;
    Bno p = head_;
    head_ = (head_ + 1) % phys;
    return p;
  }

  Bno blocks_;
  log::SegmentTable segs_;
  map::VbaTable vbas_;
  map::TreeContext ctx_;
  map::ExtentTree tree_;
  Bno head_ = 0;
  std::vector<std::pair<Bno, Bno>> runs_;
};

Bno TreeBlocks() { return FullMode() ? Bno(4) << 20 : Bno(1) << 20; }

// Trees are built once per shape and shared by the benchmarks (building one
// takes a second or more). `scratch` ones are for benchmarks that change
// the tree's shape.
MapFixture& Shared(bool random, bool scratch = false) {
  static MapFixture* fixtures[4] = {};
  MapFixture*& f = fixtures[(random ? 1 : 0) + (scratch ? 2 : 0)];
  if (!f) {
    f = new MapFixture(TreeBlocks());
    if (random) {
      f->FillRandom(1);
    } else {
      f->FillSequential();
    }
  }
  return *f;
}

const char* Shape(bool random_map) { return random_map ? "random-map" : "seq-map"; }

// ---------------------------------------------------------------- lookups

void BM_LookupOne(benchmark::State& state, bool random_map, bool random_lba) {
  MapFixture& f = Shared(random_map);
  std::mt19937_64 rng(3);
  Bno lba = 0;
  for (auto _ : state) {
    lba = random_lba ? Bno(rng() % f.blocks()) : (lba + 1 == f.blocks() ? 0 : lba + 1);
    benchmark::DoNotOptimize(f.tree().LookupOne(lba));
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
  state.counters["extents"] = double(f.tree().extent_count());
}

// A 128 KiB read's lookup: 32 blocks into a reused vector.
void BM_Lookup32(benchmark::State& state, bool random_map, bool random_lba) {
  MapFixture& f = Shared(random_map);
  std::mt19937_64 rng(4);
  std::vector<map::Extent> out;
  Bno lba = 0;
  for (auto _ : state) {
    lba = random_lba ? Bno(rng() % (f.blocks() - 32)) : (lba + 64 >= f.blocks() ? 0 : lba + 32);
    out.clear();
    f.tree().Lookup(lba, 32, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}

// ---------------------------------------------------------------- updates

// Engine overwrite path (VBA reused, only its PBA changes).
void BM_Overwrite(benchmark::State& state, bool random_map, bool random_lba) {
  MapFixture& f = Shared(random_map);
  std::mt19937_64 rng(5);
  Bno lba = 0;
  for (auto _ : state) {
    lba = random_lba ? Bno(rng() % f.blocks()) : (lba + 1 == f.blocks() ? 0 : lba + 1);
    f.Overwrite(lba);
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}

// Assign of a new VBA over a mapped block (a write that breaks sharing, or
// the first write): Allocate + Assign (incref new, decref and free old) +
// SetPba. Keeps the random map's shape (one extent per block); breaks the
// sequential map's extents up as it goes (it starts from one extent per
// 32 blocks).
void BM_AssignNew(benchmark::State& state, bool random_map, bool random_lba) {
  MapFixture& f = Shared(random_map, /*scratch=*/true);
  std::mt19937_64 rng(6);
  Bno lba = 0;
  for (auto _ : state) {
    lba = random_lba ? Bno(rng() % f.blocks()) : (lba + 1 == f.blocks() ? 0 : lba + 1);
    f.WriteNew(lba, 1);
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
  state.counters["extents"] = double(f.tree().extent_count());
}

// Building a tree from empty: random 4 KiB first writes, or sequential
// 128 KiB ones (items = blocks).
void BM_Build(benchmark::State& state, bool random) {
  const Bno n = TreeBlocks() / 4;
  for (auto _ : state) {
    auto f = std::make_unique<MapFixture>(n);
    if (random) {
      f->FillRandom(2);
    } else {
      f->FillSequential();
    }
    state.PauseTiming();
    state.counters["tree_B_per_block"] = double(f->ctx().memory_bytes()) / n;
    state.counters["vba_B_per_block"] = double(f->vbas().memory_bytes()) / n;
    state.counters["leaves"] = double(f->ctx().leaves);
    f.reset();  // releasing the tree is not part of the build
    state.ResumeTiming();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}

// ---------------------------------------------------------------- pool memory

// Stats().map_memory_bytes / mapped_blocks after writing a volume through
// the public API on memory media.
void BM_PoolMapMemory(benchmark::State& state, int pattern) {
  // pattern 0: every block once in random order (4 KiB writes)
  //         1: random 4 KiB writes, as many as the volume has blocks
  //            (about 63% of the blocks end up mapped)
  //         2: sequential 128 KiB writes over the whole volume
  const uint64_t vol_bytes = FullMode() ? 4ull << 30 : 1ull << 30;
  const uint64_t blocks = vol_bytes / kBlockSize;
  for (auto _ : state) {
    auto media = NewMemMedia(vol_bytes + vol_bytes / 3);
    FormatOptions f;
    f.volume_bytes = vol_bytes;
    f.over_provision = 0.2;
    OpenOptions o;
    auto pool = Pool::Format(media, f, o);
    CheckOk(pool.status(), "format");
    Volume* vol = (*pool)->PrimaryVolume();
    auto t0 = std::chrono::steady_clock::now();
    {
      AsyncWriter w(vol, 32, pattern == 2 ? 128 << 10 : kBlockSize);
      if (pattern == 0) {
        std::vector<uint32_t> order(blocks);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), std::mt19937_64(9));
        for (uint32_t b : order) w.Submit(uint64_t(b) * kBlockSize);
      } else if (pattern == 1) {
        std::mt19937_64 rng(10);
        for (uint64_t i = 0; i < blocks; ++i) w.Submit((rng() % blocks) * kBlockSize);
      } else {
        for (uint64_t off = 0; off < vol_bytes; off += 128 << 10) w.Submit(off);
      }
      CheckOk(w.Drain(), "writes");
    }
    state.SetIterationTime(Seconds(std::chrono::steady_clock::now() - t0));
    PoolStats s = (*pool)->Stats();
    const double per_block = double(s.map_memory_bytes) / double(s.mapped_blocks);
    // Not in map_memory_bytes: MapState keeps a 4-byte checksum for every
    // physical block (state/map_state.h csums_).
    const double csum_per_block =
        4.0 * (*pool)->geometry().segment_count * (*pool)->geometry().segment_blocks /
        double(s.mapped_blocks);
    const double vba_per_block = double(s.map_vba_table_bytes) / double(s.mapped_blocks);
    state.counters["map_B_per_block"] = per_block;
    state.counters["vba_table_B_per_block"] = vba_per_block;
    state.counters["mapped_blocks"] = double(s.mapped_blocks);
    state.counters["csum_B_per_block"] = csum_per_block;
    // What the map's form costs readers: 4 KiB reads at random LBAs, one
    // thread (tree descent, VBA-table lookup, copy and checksum).
    {
      std::vector<std::byte> buf(kBlockSize);
      std::mt19937_64 rng(11);
      constexpr int kReads = 200'000;
      auto r0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kReads; ++i)
        CheckOk(vol->Read((rng() % blocks) * kBlockSize, buf), "read");
      state.counters["read_us"] =
          Seconds(std::chrono::steady_clock::now() - r0) * 1e6 / kReads;
    }
    CheckOk((*pool)->Close(), "close");

    static const char* kNames[] = {"random 4 KiB, every block once",
                                   "random 4 KiB, 1x volume (63% mapped)",
                                   "sequential 128 KiB"};
    Result r{"map memory", kNames[pattern], per_block, "B/block", "", true, ""};
    r.note = absl::StrFormat(
        "%.0f MiB for %d mapped blocks (trees %.1f B/block, VBA table %.1f); per-block "
        "checksums add %.1f B/block outside map_memory_bytes",
        s.map_memory_bytes / kMiB, s.mapped_blocks, per_block - vba_per_block, vba_per_block,
        csum_per_block);
    if (pattern == 0) {
      r.goal = "<= 16";
      r.met = per_block <= 16;
    } else if (pattern == 2) {
      r.goal = "<= 2";
      r.met = per_block <= 2;
    }
    Report(r);
  }
}

void ReportFixtureBreakdown() {
  for (bool random : {true, false}) {
    MapFixture& f = Shared(random);
    const double n = f.tree().mapped_blocks();
    Report({"map memory", absl::StrFormat("ExtentTree + VbaTable breakdown, %s", Shape(random)),
            double(f.ctx().memory_bytes() + f.vbas().memory_bytes()) / n, "B/block", "", true,
            absl::StrFormat("tree %.2f B/block (%d leaves of %d B, %d inner nodes), VBA table "
                            "%.2f B/block (%d entries, %d of %d chunks dense); %d extents",
                            double(f.ctx().memory_bytes()) / n, f.ctx().leaves,
                            sizeof(map::Leaf), f.ctx().inners, double(f.vbas().memory_bytes()) / n,
                            f.vbas().size(), f.vbas().dense_chunks(),
                            (f.vbas().size() + map::VbaTable::kChunkSize - 1) / map::VbaTable::kChunkSize,
                            f.tree().extent_count())});
  }
}

}  // namespace
}  // namespace ftl::bench

int main(int argc, char** argv) {
  using namespace ftl::bench;
  ParseFullFlag(&argc, argv);
  ftl::util::SetLogLevel("warn");
  for (int p = 0; p < 3; ++p) {
    static const char* kNames[] = {"PoolMapMemory/random_every_block", "PoolMapMemory/random_1x",
                                   "PoolMapMemory/sequential_128k"};
    benchmark::RegisterBenchmark(kNames[p], BM_PoolMapMemory, p)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kSecond);
  }
  for (bool rm : {true, false}) {
    for (bool rl : {true, false}) {
      std::string suffix = absl::StrFormat("/%s/%s", Shape(rm), rl ? "random-lba" : "seq-lba");
      benchmark::RegisterBenchmark(("LookupOne" + suffix).c_str(), BM_LookupOne, rm, rl);
      benchmark::RegisterBenchmark(("Lookup32" + suffix).c_str(), BM_Lookup32, rm, rl);
      benchmark::RegisterBenchmark(("Overwrite" + suffix).c_str(), BM_Overwrite, rm, rl);
    }
  }
  for (bool rm : {true, false}) {
    for (bool rl : {true, false}) {
      std::string suffix = absl::StrFormat("/%s/%s", Shape(rm), rl ? "random-lba" : "seq-lba");
      benchmark::RegisterBenchmark(("AssignNew" + suffix).c_str(), BM_AssignNew, rm, rl);
    }
  }
  benchmark::RegisterBenchmark("Build/random-4k", BM_Build, true)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Build/seq-128k", BM_Build, false)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  ReportFixtureBreakdown();
  PrintSummary();
  return 0;
}
