// Snapshots in-process (issue 4, "Benchmarks"): create latency with and
// without the media sync, activation latency by size and lineage depth,
// deactivate / delete latency, first-write-after-snapshot cost, and map
// memory added per snapshot as a function of the data changed after it.
//
//   snapshot_bench            quick: 1 GiB (memory, file) and 4 GiB (file)
//   snapshot_bench --full     1 and 4 GiB on memory, 1 and 16 GiB on file
//
// Pools are formatted with automatic checkpoints off (a checkpoint would
// land inside a timed call at random); the cleaner runs. File media are
// sparse files under $FTL_BENCH_DIR (default /tmp), written through the page
// cache; the engine fdatasyncs every catalogue note, and a TimedMedia
// wrapper measures that sync so it can be subtracted ("excluding the sync").
// The written data is a sequential fill plus 1/16 of the blocks rewritten at
// random under a temporary snapshot, so the tree has ~2 extents per
// rewritten block instead of one extent for the whole volume.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "snap_common.h"
#include "util/logging.h"

namespace ftl::bench {
namespace {

constexpr double kNodeBytes = sizeof(map::Leaf);

// Per media kind and size: the p50s that must stay flat across sizes.
struct FlatKey {
  std::string what;
  std::string kind;
  bool operator<(const FlatKey& o) const {
    return std::tie(what, kind) < std::tie(o.what, o.kind);
  }
};
std::map<FlatKey, std::map<uint64_t, double>>& Flat() {
  static auto* m = new std::map<FlatKey, std::map<uint64_t, double>>;
  return *m;
}

// Timing of one synchronous catalogue call: wall time and the part spent in
// Media::Sync (the pool is otherwise idle, so every sync belongs to it).
struct Timed {
  double us = 0;
  double sync_us = 0;
  double write_us = 0;  // in Media::Write (the note's record)
  double cpu_us = 0;    // process CPU time (every thread) during the call
};
template <typename F>
Timed TimeCall(BenchPool& bp, F&& f) {
  uint64_t s0 = bp.media->sync_ns(), w0 = bp.media->write_ns();
  const double c0 = ProcessCpuSeconds();
  auto t0 = Clock::now();
  f();
  auto t1 = Clock::now();
  const double c1 = ProcessCpuSeconds();
  return {Us(t1 - t0), double(bp.media->sync_ns() - s0) / 1000.0,
          double(bp.media->write_ns() - w0) / 1000.0, (c1 - c0) * 1e6};
}

struct TimedSamples {
  Samples total, excl, io, cpu;  // io: sync + media write
  void Add(const Timed& t) {
    total.Add(t.us);
    excl.Add(t.us - t.sync_us);
    io.Add(t.us - t.sync_us - t.write_us);
    cpu.Add(t.cpu_us);
  }
  void Sort() {
    total.Sort();
    excl.Sort();
    io.Sort();
    cpu.Sort();
  }
};


// ---------------------------------------------------- first write after

// QD1 4 KiB writes at random blocks for `seconds` (WriteInline: the NBD
// server's path); per-write latency in us.
class SyncWriter {
 public:
  SyncWriter(Volume* vol, uint64_t seed) : vol_(vol), rng_(seed) {
    buf_ = static_cast<std::byte*>(std::aligned_alloc(4096, kBlockSize));
    for (size_t k = 0; k < kBlockSize; k += 8) {
      uint64_t v = rng_();
      std::memcpy(buf_ + k, &v, 8);
    }
  }
  ~SyncWriter() { std::free(buf_); }
  void Run(double seconds, Samples* out, uint64_t max_writes = ~0ull) {
    const uint64_t blocks = vol_->size_bytes() / kBlockSize;
    auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(seconds));
    for (uint64_t i = 0; i < max_writes; ++i) {
      ++stamp_;
      std::memcpy(buf_, &stamp_, sizeof(stamp_));
      uint64_t off = (rng_() % blocks) * kBlockSize;
      auto t0 = Clock::now();
      CheckOk(WriteInline(vol_, off, std::span<const std::byte>(buf_, kBlockSize)), "write");
      auto t1 = Clock::now();
      out->Add(Us(t1 - t0));
      if (t1 >= end) break;
    }
  }

 private:
  Volume* vol_;
  std::mt19937_64 rng_;
  std::byte* buf_;
  uint64_t stamp_ = 0;
};

// 3 rounds of: 1 s of QD1 writes, snapshot, 1 s of QD1 writes, delete the
// snapshot (so the next "before" second sees no sharing).
void FirstWriteAfterSnapshot(BenchPool& bp, const std::string& label) {
  Volume* vol = bp.vol();
  SyncWriter w(vol, 77);
  Samples before, after, first, first100;
  for (int round = 0; round < 3; ++round) {
    w.Run(1.0, &before);
    auto s = bp.pool->CreateSnapshot("", absl::StrCat("fw-", round));
    CheckOk(s.status(), "snapshot");
    Samples a;
    w.Run(1.0, &a);
    first.Add(a.v[0]);
    for (size_t i = 0; i < std::min<size_t>(100, a.size()); ++i) first100.Add(a.v[i]);
    for (double x : a.v) after.Add(x);
    CheckOk(bp.pool->DeleteSnapshot("", absl::StrCat("fw-", round)), "delete snapshot");
  }
  before.Sort();
  after.Sort();
  first.Sort();
  first100.Sort();
  Report({"first write", label + ": 4 KiB random write QD1, second before a snapshot",
          before.Pct(0.99), "us p99", "", true,
          absl::StrFormat("p50 %.1f us, p99.9 %.1f, max %.0f; %d writes in 3 s", before.Pct(0.5),
                          before.Pct(0.999), before.Max(), before.size())});
  Report({"first write", label + ": same, first second after the snapshot", after.Pct(0.99),
          "us p99", "", true,
          absl::StrFormat("p50 %.1f us (%.2fx before), p99 %.2fx before, p99.9 %.1f, max %.0f; "
                          "%d writes in 3 s; first write after each snapshot %.0f-%.0f us, "
                          "first 100 writes p50 %.1f us",
                          after.Pct(0.5), after.Pct(0.5) / before.Pct(0.5),
                          after.Pct(0.99) / before.Pct(0.99), after.Pct(0.999), after.Max(),
                          after.size(), first.v.front(), first.v.back(), first100.Pct(0.5))});
}

// ---------------------------------------------------- catalogue operations

void BM_SnapshotOps(benchmark::State& state, MediaKind kind, uint64_t bytes) {
  const std::string label = absl::StrFormat("%s, %s", KindName(kind), SizeName(bytes));
  for (auto _ : state) {
    const double load0 = LoadAvg1();
    // Twice the usual media: the cleaner stays out of the timed calls.
    BenchPool bp(kind, bytes, "ftld-bench-snapshot.img", 2 * MediaFor(bytes));
    Volume* vol = bp.vol();
    const uint64_t blocks = bytes / kBlockSize;

    // Setup: sequential fill; then the first write after a snapshot of that
    // one-extent tree (it copies the leaf, taking a reference on every VBA
    // of its extents); then the rest of the fragmenting rewrites.
    auto t0 = Clock::now();
    FillSequential(vol, bytes);
    const double fill_s = Seconds(Clock::now() - t0);
    const CheckReport seq_check = MustCheck(bp.pool.get());
    CheckOk(bp.pool->CreateSnapshot("", "fill-frag").status(), "snapshot");
    {
      SyncWriter w(vol, 3);
      Samples s;
      w.Run(10, &s, 100);
      const double first_us = s.v[0];
      s.v.erase(s.v.begin());
      s.Sort();
      Report({"first write", label + ": first write after a snapshot of the sequential fill",
              first_us, "us", "", true,
              absl::StrFormat("tree of %d extents; writes 2-100 p50 %.1f us, max %.1f us",
                              seq_check.extents, s.Pct(0.5), s.Max())});
    }
    t0 = Clock::now();
    WriteBlocks(vol, DistinctBlocks(blocks, blocks / 16, 5));
    CheckOk(bp.pool->DeleteSnapshot("", "fill-frag"), "delete");
    CheckOk(vol->Flush(), "flush");
    const double frag_s = Seconds(Clock::now() - t0);
    CheckReport ck = MustCheck(bp.pool.get());
    PoolStats st = bp.pool->Stats();
    Report({"setup", label, double(ck.extents), "extents", "", true,
            absl::StrFormat("sequential fill %.1f s (%.0f MiB/s), %d random 4 KiB rewrites "
                            "under a snapshot %.1f s; %d tree nodes, map %.1f MiB; load %.1f",
                            fill_s, bytes / kMiB / fill_s, blocks / 16, frag_s, ck.tree_nodes,
                            st.map_memory_bytes / kMiB, load0)});

    FirstWriteAfterSnapshot(bp, label);

    // Create: K snapshots, 16 random 4 KiB writes between two (not timed).
    const int K = 200;
    TimedSamples create, del, list;
    std::mt19937_64 rng(9);
    for (int i = 0; i < K; ++i) {
      std::vector<uint64_t> b(16);
      for (auto& x : b) x = rng() % blocks;
      WriteBlocks(vol, b, 100 + i);
      create.Add(TimeCall(bp, [&] {
        CheckOk(bp.pool->CreateSnapshot("", absl::StrCat("s", i)).status(), "create");
      }));
    }
    for (int i = 0; i < 5; ++i)
      list.Add(TimeCall(bp, [&] { benchmark::DoNotOptimize(bp.pool->ListSnapshots("")); }));
    create.Sort();
    list.Sort();
    const double sync_p50 = create.total.Pct(0.5) - create.excl.Pct(0.5);
    Report({"create", label + ": CreateSnapshot, excluding the media sync", create.excl.Pct(0.5),
            "us p50", "<= 50 us", create.excl.Pct(0.5) <= 50,
            absl::StrFormat("p99 %.1f us, max %.1f; excluding the note's media write too: p50 "
                            "%.1f us, p99 %.1f; process CPU per create p50 %.1f us (mean %.1f); "
                            "%d snapshots, 16 writes between; load %.1f",
                            create.excl.Pct(0.99), create.excl.Max(), create.io.Pct(0.5),
                            create.io.Pct(0.99), create.cpu.Pct(0.5), create.cpu.Mean(), K,
                            LoadAvg1())});
    Report({"create", label + ": CreateSnapshot, total", create.total.Pct(0.5), "us p50", "", true,
            absl::StrFormat("p99 %.1f us, max %.1f; sync ~%.1f us of the p50", create.total.Pct(0.99),
                            create.total.Max(), sync_p50)});
    Flat()[{"create p50 excl. sync", KindName(kind)}][bytes] = create.excl.Pct(0.5);
    Flat()[{"create process CPU p50", KindName(kind)}][bytes] = create.cpu.Pct(0.5);
    Report({"list", label + absl::StrFormat(": ListSnapshots with %d snapshots", K),
            list.total.Pct(0.5), "us p50", "", true, "includes exclusive bytes per snapshot"});

    // Activation at depth 1: a snapshot of the primary volume, activated
    // and deactivated again and again.
    const int A = 50;
    CheckOk(bp.pool->CreateSnapshot("", "act-base").status(), "snapshot");
    TimedSamples act1, deact;
    const uint64_t disc0 = bp.media->discards(), disc_ns0 = bp.media->discard_ns();
    const uint64_t syncs0 = bp.media->syncs(), sync_ns0 = bp.media->sync_ns();
    for (int i = 0; i < A; ++i) {
      act1.Add(TimeCall(bp, [&] {
        CheckOk(bp.pool->ActivateSnapshot("", "act-base", "act-vol", false).status(), "activate");
      }));
      deact.Add(TimeCall(bp, [&] { CheckOk(bp.pool->DeactivateVolume("act-vol"), "deactivate"); }));
    }
    const uint64_t act_discards = bp.media->discards() - disc0;
    const double act_discard_ms = double(bp.media->discard_ns() - disc_ns0) / 1e6;
    const double act_sync_us =
        double(bp.media->sync_ns() - sync_ns0) / 1e3 / double(bp.media->syncs() - syncs0);
    // Deactivation of a volume that wrote 4096 random blocks (frees the
    // leaves it copied and the VBAs it allocated).
    TimedSamples deact_w;
    for (int i = 0; i < 5; ++i) {
      auto v = bp.pool->ActivateSnapshot("", "act-base", "act-vol", false);
      CheckOk(v.status(), "activate");
      WriteBlocks(*v, DistinctBlocks(blocks, 4096, 200 + i));
      deact_w.Add(
          TimeCall(bp, [&] { CheckOk(bp.pool->DeactivateVolume("act-vol"), "deactivate"); }));
    }
    // Depth 10: activate, write 256 blocks, snapshot that volume, activate
    // the new snapshot, ... ten times; then time the activation of the
    // deepest snapshot.
    std::string cur_vol = "", cur_snap = "act-base";
    for (int d = 1; d < 10; ++d) {
      std::string v = absl::StrCat("chain", d);
      auto vv = bp.pool->ActivateSnapshot(cur_vol, cur_snap, v, false);
      CheckOk(vv.status(), "activate chain");
      WriteBlocks(*vv, DistinctBlocks(blocks, 256, 300 + d));
      std::string s = absl::StrCat("c", d);
      CheckOk(bp.pool->CreateSnapshot(v, s).status(), "snapshot chain");
      cur_vol = v;
      cur_snap = s;
    }
    std::string lineage;
    for (const SnapshotInfo& si : bp.pool->ListSnapshots(cur_vol)) {
      if (si.name == cur_snap) lineage = si.parent;
    }
    TimedSamples act10;
    for (int i = 0; i < A; ++i) {
      act10.Add(TimeCall(bp, [&] {
        CheckOk(bp.pool->ActivateSnapshot(cur_vol, cur_snap, "act-deep", false).status(),
                "activate deep");
      }));
      CheckOk(bp.pool->DeactivateVolume("act-deep"), "deactivate");
    }
    act1.Sort();
    act10.Sort();
    deact.Sort();
    deact_w.Sort();
    for (auto [name, s] : {std::pair{"depth 1", &act1}, std::pair{"depth 10", &act10}}) {
      Result r{"activate", label + ": ActivateSnapshot, " + name, s->total.Pct(0.5), "us p50",
              "<= 1000 us", s->total.Pct(0.5) <= 1000,
              absl::StrFormat("p99 %.1f us, max %.1f; excluding the sync p50 %.1f us; process "
                              "CPU p50 %.1f us; n=%d%s",
                              s->total.Pct(0.99), s->total.Max(), s->excl.Pct(0.5),
                              s->cpu.Pct(0.5), s->total.size(),
                              s == &act10 ? "; parent of the deepest snapshot: " + lineage
                                          : std::string())};
      if (r.met && s->total.Pct(0.99) > 1000) r.met_text = "p50 yes, p99 **no**";
      Report(r);
      Flat()[{std::string("activate p50 ") + name, KindName(kind)}][bytes] = s->total.Pct(0.5);
      Flat()[{std::string("activate process CPU p50 ") + name, KindName(kind)}][bytes] =
          s->cpu.Pct(0.5);
    }
    Report({"deactivate", label + ": DeactivateVolume, no writes", deact.total.Pct(0.5), "us p50",
            "", true,
            absl::StrFormat("p99 %.1f us; excluding the sync p50 %.1f us; during these %d "
                            "activations + deactivations: mean sync %.0f us, %d discards by "
                            "the pool's idle discard (%.1f ms in Media::Discard)",
                            deact.total.Pct(0.99), deact.excl.Pct(0.5), A, act_sync_us,
                            act_discards, act_discard_ms)});
    Report({"deactivate", label + ": DeactivateVolume after 4096 random writes",
            deact_w.total.Pct(0.5), "us p50", "", true,
            absl::StrFormat("max %.1f us; excluding the sync p50 %.1f us; n=5",
                            deact_w.total.Max(), deact_w.excl.Pct(0.5))});

    // Delete the K snapshots of the create phase, oldest first (each held
    // the 16 blocks written after it).
    for (int i = 0; i < K; ++i) {
      del.Add(TimeCall(bp, [&] {
        CheckOk(bp.pool->DeleteSnapshot("", absl::StrCat("s", i)), "delete");
      }));
    }
    del.Sort();
    Report({"delete", label + ": DeleteSnapshot", del.total.Pct(0.5), "us p50", "", true,
            absl::StrFormat("p99 %.1f us, max %.1f; excluding the sync p50 %.1f us; process "
                            "CPU p50 %.1f us; n=%d",
                            del.total.Pct(0.99), del.total.Max(), del.excl.Pct(0.5),
                            del.cpu.Pct(0.5), K)});
    MustCheck(bp.pool.get());
    state.SetIterationTime(1);
    state.counters["create_p50_excl_sync_us"] = create.excl.Pct(0.5);
    state.counters["create_p50_us"] = create.total.Pct(0.5);
    state.counters["activate_p50_us"] = act1.total.Pct(0.5);
    state.counters["activate10_p50_us"] = act10.total.Pct(0.5);
    state.counters["load"] = LoadAvg1();
  }
}

// The first write after a snapshot of a sequentially written volume (one
// long extent per leaf): 20 rounds of snapshot, one timed 4 KiB write at a
// random block, a second timed write elsewhere, delete the snapshot.
void BM_FirstWriteSequential(benchmark::State& state, uint64_t bytes) {
  for (auto _ : state) {
    BenchPool bp(MediaKind::kMemory, bytes, "", 2 * MediaFor(bytes));
    FillSequential(bp.vol(), bytes);
    const CheckReport ck = MustCheck(bp.pool.get());
    SyncWriter w(bp.vol(), 5);
    Samples first, second;
    for (int i = 0; i < 20; ++i) {
      CheckOk(bp.pool->CreateSnapshot("", "fws").status(), "snapshot");
      Samples s;
      w.Run(10, &s, 2);
      first.Add(s.v[0]);
      second.Add(s.v[1]);
      CheckOk(bp.pool->DeleteSnapshot("", "fws"), "delete");
    }
    first.Sort();
    second.Sort();
    Report({"first write",
            absl::StrFormat("memory, %s sequential fill (%d extents): first write after a snapshot",
                            SizeName(bytes), ck.extents),
            first.Pct(0.5), "us p50", "", true,
            absl::StrFormat("max %.0f us; the second write p50 %.1f us; n=20", first.Max(),
                            second.Pct(0.5))});
    // ListSnapshots (what `snapshot list` and, in the daemon, `snapshot
    // delete` call) on this tree: 10 snapshots, one 4 KiB write after each.
    for (int i = 0; i < 10; ++i) {
      CheckOk(bp.pool->CreateSnapshot("", absl::StrCat("l", i)).status(), "snapshot");
      Samples s;
      w.Run(10, &s, 1);
    }
    Samples list;
    for (int i = 0; i < 5; ++i) {
      auto t0 = Clock::now();
      benchmark::DoNotOptimize(bp.pool->ListSnapshots(""));
      list.Add(Us(Clock::now() - t0));
    }
    list.Sort();
    Report({"list", absl::StrFormat("memory, %s sequential fill: ListSnapshots with 10 snapshots",
                                    SizeName(bytes)),
            list.Pct(0.5) / 1000, "ms p50", "", true,
            "one write after each snapshot; exclusive_bytes walks every block of the leaves "
            "only the snapshot holds"});
    auto t0 = Clock::now();
    CheckOk(bp.pool->DeleteSnapshot("", "l0"), "delete");
    const double del_us = Us(Clock::now() - t0);
    Report({"delete", absl::StrFormat("memory, %s sequential fill: DeleteSnapshot (oldest of 10)",
                                      SizeName(bytes)),
            del_us, "us", "", true,
            "frees the leaf only it held: a reference per block of its extents; the daemon's "
            "`snapshot delete` also calls ListSnapshots first"});
    state.SetIterationTime(1);
  }
}

// ---------------------------------------------------- memory per snapshot

const uint64_t kChanged[] = {0, 1, 16, 256, 4096, 65536};

// Through the Pool API: snapshot, overwrite N distinct random blocks,
// map_memory_bytes delta; the tree part is (distinct nodes after - before,
// from Pool::Check) x node size; the rest is the VBA table (new VBAs for
// the broken blocks, and vector growth). Control: the same overwrites
// without a snapshot.
void BM_MemoryPool(benchmark::State& state, bool random_fill) {
  const uint64_t bytes = FullMode() ? 4ull << 30 : 1ull << 30;
  const uint64_t blocks = bytes / kBlockSize;
  const std::string shape = random_fill ? "random-order fill" : "sequential fill + 1/16 rewritten";
  for (auto _ : state) {
    BenchPool bp(MediaKind::kMemory, bytes, "");
    if (random_fill) {
      FillRandomOrder(bp.vol(), bytes);
    } else {
      FillSeqFragmented(bp.pool.get(), bytes, 1.0 / 16);
    }
    int round = 0;
    for (uint64_t n : kChanged) {
      // Control first: no snapshot.
      PoolStats c0 = bp.pool->Stats();
      WriteBlocks(bp.vol(), DistinctBlocks(blocks, n, 1000 + n));
      PoolStats c1 = bp.pool->Stats();
      // With a snapshot.
      CheckReport k0 = MustCheck(bp.pool.get());
      PoolStats s0 = bp.pool->Stats();
      CheckOk(bp.pool->CreateSnapshot("", absl::StrCat("m", round)).status(), "snapshot");
      PoolStats s1 = bp.pool->Stats();
      WriteBlocks(bp.vol(), DistinctBlocks(blocks, n, 2000 + n));
      PoolStats s2 = bp.pool->Stats();
      CheckReport k2 = MustCheck(bp.pool.get());
      const double dmem = double(s2.map_memory_bytes) - double(s0.map_memory_bytes);
      const double dtree = (double(k2.tree_nodes) - double(k0.tree_nodes)) * kNodeBytes;
      const double dctl = double(c1.map_memory_bytes) - double(c0.map_memory_bytes);
      Report({"memory per snapshot",
              absl::StrFormat("pool, %s, %s: %d blocks changed", SizeName(bytes), shape, n), dmem,
              "B", n == 0 ? "0 B" : "proportional to changed leaves",
              n == 0 ? dmem == 0 : true,
              absl::StrFormat("create alone %+.0f B; tree %+.0f B (%+d nodes), VBA table %+.0f B; "
                              "%.0f B per changed block; same writes without a snapshot %+.0f B; "
                              "extents %d before the snapshot, %d after it counted over both trees",
                              double(s1.map_memory_bytes) - double(s0.map_memory_bytes), dtree,
                              int64_t(k2.tree_nodes) - int64_t(k0.tree_nodes), dmem - dtree,
                              n ? dmem / double(n) : 0.0, dctl, k0.extents, k2.extents)});
      if (n > 0) state.counters[absl::StrCat("dmem_", n)] = dmem;
      CheckOk(bp.pool->DeleteSnapshot("", absl::StrCat("m", round)), "delete");
      ++round;
    }
    state.SetIterationTime(1);
  }
}

// The same at map level (ExtentTree + VbaTable, as MapState wires them),
// where the leaves on the paths of the changed blocks can be counted before
// the writes: delta of tree memory vs distinct leaves touched x leaf size.
void BM_MemoryMap(benchmark::State& state, bool random_fill) {
  const log::Bno blocks = FullMode() ? log::Bno(1) << 20 : log::Bno(1) << 18;
  const std::string shape = random_fill ? "random-order fill" : "sequential fill + 1/16 rewritten";
  for (auto _ : state) {
    MapFixture f(blocks);
    map::ExtentTree vol(f.ctx_ptr());
    if (random_fill) {
      f.FillRandom(&vol, 11);
    } else {
      f.FillSequential(&vol);
      map::ExtentTree tmp = vol.Share();
      for (uint64_t b : DistinctBlocks(blocks, blocks / 16, 5)) f.Write(&vol, log::Bno(b));
    }
    for (uint64_t n : kChanged) {
      std::vector<uint64_t> target = DistinctBlocks(blocks, n, 3000 + n);
      const uint64_t leaves0 = f.ctx().leaves, inners0 = f.ctx().inners;
      const uint64_t tree0 = f.ctx().memory_bytes(), vba0 = f.vbas().memory_bytes();
      map::ExtentTree snap = vol.Share();
      std::set<const map::Node*> leaves, inners;
      for (uint64_t b : target) {
        std::vector<const map::Node*> path;
        leaves.insert(MapFixture::LeafOf(vol, log::Bno(b), &path));
        inners.insert(path.begin(), path.end());
      }
      auto t0 = Clock::now();
      for (uint64_t b : target) f.Write(&vol, log::Bno(b));
      const double us = Us(Clock::now() - t0);
      const double dtree = double(f.ctx().memory_bytes()) - double(tree0);
      const double dvba = double(f.vbas().memory_bytes()) - double(vba0);
      const double expect = double(leaves.size() + inners.size()) * kNodeBytes;
      Report({"memory per snapshot",
              absl::StrFormat("map, %d Ki blocks, %s: %d blocks changed", blocks >> 10, shape, n),
              dtree, "B tree", n == 0 ? "0 B" : "~ leaves touched x 776 B",
              n == 0 ? dtree == 0 : dtree <= 1.25 * expect,
              absl::StrFormat("%d distinct leaves (+%d inner nodes) on the changed paths = %.0f B "
                              "-> tree delta %.2fx of that (+%d leaves, +%d inner); VBA table "
                              "%+.0f B; %.2f us per changed block",
                              leaves.size(), inners.size(), expect, expect ? dtree / expect : 0.0,
                              int64_t(f.ctx().leaves) - int64_t(leaves0),
                              int64_t(f.ctx().inners) - int64_t(inners0), dvba,
                              n ? us / double(n) : 0.0)});
      // Dropping the snapshot returns the volume to a private tree.
    }
    state.SetIterationTime(1);
  }
}

void ReportFlatness() {
  for (const auto& [key, by_size] : Flat()) {
    if (by_size.size() < 2) continue;
    double lo = by_size.begin()->second, hi = by_size.rbegin()->second;
    double ratio = hi / lo;
    Report({"flat across sizes",
            absl::StrFormat("%s, %s: %s -> %s", key.what, key.kind, SizeName(by_size.begin()->first),
                            SizeName(by_size.rbegin()->first)),
            ratio, "x", "within 20% (0.8-1.2x)", ratio >= 0.8 && ratio <= 1.2,
            absl::StrFormat("%.1f us -> %.1f us", lo, hi)});
  }
}

}  // namespace
}  // namespace ftl::bench

int main(int argc, char** argv) {
  using namespace ftl::bench;
  using ftl::bench::MediaKind;
  ParseFullFlag(&argc, argv);
  ftl::util::SetLogLevel("warn");
  // Debian's abseil is built with Mutex deadlock detection on (every lock
  // updates a lock graph); ftld turns it off (daemon/main.cc), and so do these
  // benchmarks unless FTL_BENCH_DEADLOCK_DETECTION=1.
  if (!std::getenv("FTL_BENCH_DEADLOCK_DETECTION"))
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto one = [](benchmark::internal::Benchmark* b) {
    b->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
  };
  const uint64_t G = 1ull << 30;
  std::vector<std::pair<MediaKind, uint64_t>> cases;
  if (FullMode()) {
    cases = {{MediaKind::kMemory, G}, {MediaKind::kMemory, 4 * G}, {MediaKind::kFile, G},
             {MediaKind::kFile, 16 * G}};
  } else {
    cases = {{MediaKind::kMemory, G}, {MediaKind::kFile, G}, {MediaKind::kFile, 4 * G}};
  }
  for (auto [kind, bytes] : cases) {
    one(benchmark::RegisterBenchmark(
        absl::StrFormat("SnapshotOps/%s/%dGiB", KindName(kind), bytes >> 30).c_str(),
        BM_SnapshotOps, kind, bytes));
  }
  for (uint64_t b : {G, 4 * G})
    one(benchmark::RegisterBenchmark(absl::StrFormat("FirstWriteSequential/%dGiB", b >> 30).c_str(),
                                     BM_FirstWriteSequential, b));
  one(benchmark::RegisterBenchmark("MemoryPerSnapshot/pool/seqfrag", BM_MemoryPool, false));
  one(benchmark::RegisterBenchmark("MemoryPerSnapshot/pool/random", BM_MemoryPool, true));
  one(benchmark::RegisterBenchmark("MemoryPerSnapshot/map/seqfrag", BM_MemoryMap, false));
  one(benchmark::RegisterBenchmark("MemoryPerSnapshot/map/random", BM_MemoryMap, true));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  ReportFlatness();
  PrintSummary();
  return 0;
}
