// Range operations in-process (issue 5, "Benchmarks"): single-block clone
// and move rates at map level (no persistence) and through the Pool with
// group-committed notes, regular I/O on a volume whose halves are clones of
// each other vs a plain volume, the first write to a cloned block vs a
// normal overwrite (whole writes, and the map's share alone:
// MapWriteCost), and cloning a whole volume (sequential and fragmented).
//
//   range_bench            quick: 1 Mi-block trees, 1 GiB pools, 2 GiB
//                          whole-volume clone
//   range_bench --full     4 Mi-block trees, 2 GiB pools, 8 GiB clone
//
// Memory media except the whole-volume clone (a sparse file under
// $FTL_BENCH_DIR, default /tmp: its two volumes need twice the logical
// space of the data).

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "map/range_clone.h"
#include "state/map_state.h"
#include "log/log_format.h"
#include "snap_common.h"
#include "util/logging.h"

namespace ftl::bench {
namespace {

using log::Bno;

// ---------------------------------------------------------------- map level

// CloneRange of one block between random LBAs of one tree (src != dst), as
// MapState applies a clone note; a move also unmaps the source block (the
// trim the note carries). No log, no locks.
void BM_MapRangeOp(benchmark::State& state, bool random_map, bool move) {
  const Bno blocks = FullMode() ? Bno(4) << 20 : Bno(1) << 20;
  const uint64_t n = FullMode() ? 2'000'000 : 1'000'000;
  for (auto _ : state) {
    MapFixture f(blocks);
    map::ExtentTree tree(f.ctx_ptr());
    if (random_map) {
      f.FillRandom(&tree, 1);
    } else {
      f.FillSequential(&tree);
    }
    const uint64_t extents0 = tree.extent_count();
    std::mt19937_64 rng(5);
    std::vector<std::pair<Bno, Bno>> pairs(n);
    for (auto& [s, d] : pairs) {
      s = Bno(rng() % blocks);
      do d = Bno(rng() % blocks); while (d == s);
    }
    const double load0 = LoadAvg1();
    const double cpu0 = ThreadCpuSeconds();
    auto t0 = Clock::now();
    for (auto [s, d] : pairs) {
      map::CloneRange(tree, s, &tree, d, 1, &f.vbas());
      if (move) tree.Assign(s, 1, log::kNoBlock);
    }
    const double secs = Seconds(Clock::now() - t0);
    const double cpu = ThreadCpuSeconds() - cpu0;
    const double rate = double(n) / secs, cpu_rate = double(n) / cpu;
    state.SetIterationTime(secs);
    state.counters["ops_per_s"] = rate;
    Result r{"map level (no persistence)",
             absl::StrFormat("single-block %s, %s, %d Mi-block tree", move ? "move" : "clone",
                             random_map ? "random map" : "sequential map", blocks >> 20),
             rate / 1000, "k ops/s (wall)", ">= 400k ops/s", rate >= 400'000,
             absl::StrFormat("%.2f us per op (wall); by CPU time %.0f k ops/s (%.2f us); %d ops; "
                             "extents %d -> %d; load %.1f",
                             1e6 / rate, cpu_rate / 1000, 1e6 / cpu_rate, n, extents0,
                             tree.extent_count(), load0)};
    if (!r.met && cpu_rate >= 400'000) r.met_text = "wall **no**, CPU time yes";
    Report(r);
  }
}

// ---------------------------------------------------------------- pool level

RangeOp OneBlock(bool move, uint64_t src, uint64_t dst) {
  RangeOp op;
  op.kind = move ? RangeOp::Kind::kMove : RangeOp::Kind::kClone;
  op.src = src * kBlockSize;
  op.dst = dst * kBlockSize;
  op.len = kBlockSize;
  return op;
}

// Single-block clones or moves between random blocks of a sequentially
// filled volume through Pool::ApplyRangeOpsAsync with `depth` in flight
// (threads == 0), or from `threads` threads calling ApplyRangeOps.
void BM_PoolRangeOps(benchmark::State& state, bool move, int depth, int threads,
                     int per_call = 1) {
  const uint64_t bytes = FullMode() ? 2ull << 30 : 1ull << 30;
  const uint64_t blocks = bytes / kBlockSize;
  const uint64_t n = threads ? (FullMode() ? 200'000 : 100'000)
                             : (FullMode() ? 1'000'000 : 400'000);
  for (auto _ : state) {
    const double load0 = LoadAvg1();
    BenchPool bp(MediaKind::kMemory, bytes, "", 0, /*auto_checkpoint=*/true);
    FillSequential(bp.vol(), bytes);
    PoolStats s0 = bp.pool->Stats();
    std::atomic<uint64_t> failed{0};
    absl::Status first_error;
    absl::Mutex mu;
    const double cpu0 = ProcessCpuSeconds();
    const long csw0 = VoluntarySwitches();
    Phase("range-ops");
    auto t0 = Clock::now();
    if (threads == 0) {
      int in_flight = 0;
      std::pair<int*, int> below{&in_flight, depth};
      std::mt19937_64 rng(7);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t s = rng() % blocks, d;
        do d = rng() % blocks; while (d == s);
        {
          absl::MutexLock l(&mu);
          mu.Await(absl::Condition(
              +[](std::pair<int*, int>* p) { return *p->first < p->second; }, &below));
          ++in_flight;
        }
        bp.pool->ApplyRangeOpsAsync({OneBlock(move, s, d)}, [&](absl::Status st) {
          absl::MutexLock l(&mu);
          if (!st.ok()) {
            if (failed++ == 0) first_error = st;
          }
          --in_flight;
        });
      }
      absl::MutexLock l(&mu);
      mu.Await(absl::Condition(+[](int* k) { return *k == 0; }, &in_flight));
    } else {
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
          std::mt19937_64 rng(100 + t);
          std::vector<RangeOp> ops;
          for (uint64_t i = 0; i < n / threads; i += per_call) {
            ops.clear();
            for (int k = 0; k < per_call; ++k) {
              // Distinct blocks within one call (a move's source must not
              // be another op's destination in the same batch).
              uint64_t s = rng() % (blocks / 2) * 2, d = rng() % (blocks / 2) * 2 + 1;
              ops.push_back(OneBlock(move, s, d));
            }
            absl::Status st = bp.pool->ApplyRangeOps(ops);
            if (!st.ok()) {
              absl::MutexLock l(&mu);
              if (failed++ == 0) first_error = st;
            }
          }
        });
      }
      for (auto& t : ts) t.join();
    }
    const double secs = Seconds(Clock::now() - t0);
    const double cpu = ProcessCpuSeconds() - cpu0;
    const long csw = VoluntarySwitches() - csw0;
    Phase("range-ops-end");
    if (failed > 0) CheckOk(first_error, "range op");
    const uint64_t per_thread = threads ? (n / threads + per_call - 1) / per_call * per_call : 0;
    const uint64_t done = threads ? per_thread * threads : n;
    PoolStats s1 = bp.pool->Stats();
    const double rate = double(done) / secs;
    const double records = double(s1.next_seq - s0.next_seq);
    state.SetIterationTime(secs);
    state.counters["ops_per_s"] = rate;
    Report({"pool, group-committed notes",
            absl::StrFormat("single-block %s, %s", move ? "move" : "clone",
                            threads ? absl::StrFormat("%d threads x ApplyRangeOps%s", threads,
                                                      per_call > 1
                                                          ? absl::StrFormat(" of %d ops (one note each)", per_call)
                                                          : std::string())
                                    : absl::StrFormat("ApplyRangeOpsAsync, %d in flight", depth)),
            rate / 1000, "k ops/s", ">= 250k ops/s", rate >= 250'000,
            absl::StrFormat("%.2f us per op, process CPU %.2f us per op; %.1f ops per note "
                            "record; %.2f thread sleeps per op; %.0f media bytes per op (incl. "
                            "checkpoints, %d of them); %d ops; load %.1f",
                            1e6 / rate, cpu * 1e6 / double(done), double(done) / records,
                            double(csw) / double(done),
                            double(s1.media_write_bytes - s0.media_write_bytes) / double(done),
                            s1.checkpoint_count - s0.checkpoint_count, done, load0)});
  }
}

// ---------------------------------------------------------------- regular I/O

// One measured phase: wall-clock rate and process CPU time per operation
// (all engine threads; less sensitive to other load on a shared machine
// than the wall clock).
struct Meas {
  double rate = 0;    // ops per second, wall clock
  double cpu_us = 0;  // process CPU us per op
  double lat_us = 0;  // mean wall us per op (QD1 phases)
  double ops = 0;
};

template <typename F>
Meas Measure(uint64_t ops, F&& f) {
  const double c0 = ProcessCpuSeconds();
  auto t0 = Clock::now();
  f();
  const double secs = Seconds(Clock::now() - t0);
  const double cpu = ProcessCpuSeconds() - c0;
  return {double(ops) / secs, cpu * 1e6 / double(ops), secs * 1e6 / double(ops), double(ops)};
}

// Synchronous 4 KiB reads at random blocks from `threads` threads.
Meas RandomReads(Volume* vol, uint64_t n, int threads, uint64_t seed) {
  const uint64_t blocks = vol->size_bytes() / kBlockSize;
  std::atomic<bool> bad{false};
  Meas m = Measure(n / threads * threads, [&] {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        auto* buf = static_cast<std::byte*>(std::aligned_alloc(4096, kBlockSize));
        std::mt19937_64 rng(seed + t);
        for (uint64_t i = 0; i < n / threads; ++i) {
          if (!vol->Read((rng() % blocks) * kBlockSize, std::span<std::byte>(buf, kBlockSize))
                   .ok())
            bad = true;
        }
        std::free(buf);
      });
    }
    for (auto& t : ts) t.join();
  });
  if (bad) CheckOk(absl::InternalError("a read failed"), "reads");
  return m;
}

// QD1 4 KiB writes to the given blocks (WriteInline: the NBD server's path).
Meas SyncWrites(Volume* vol, const std::vector<uint64_t>& blocks) {
  auto* buf = static_cast<std::byte*>(std::aligned_alloc(4096, kBlockSize));
  std::memset(buf, 0x5a, kBlockSize);
  uint64_t stamp = 0;
  Meas m = Measure(blocks.size(), [&] {
    for (uint64_t b : blocks) {
      ++stamp;
      std::memcpy(buf, &stamp, sizeof(stamp));
      CheckOk(WriteInline(vol, b * kBlockSize, std::span<const std::byte>(buf, kBlockSize)),
              "write");
    }
  });
  std::free(buf);
  return m;
}

Meas BatchWrites(Volume* vol, const std::vector<uint64_t>& blocks) {
  return Measure(blocks.size(), [&] { WriteBlocks(vol, blocks); });
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Two pools, built the same way: "plain" has every block written;
// "cloned" has the first half written the same way and the second half
// cloned from it (one ApplyRangeOps), so every block shares its VBA with
// its twin. Both exist at once and every phase alternates between them in
// chunks of a few milliseconds (ABBA order), so that the slow spells of a
// shared VM hit both sides alike; per rep, each side's chunks are summed.
// 5 reps (new pools each), medians:
//  - random 4 KiB reads over the whole volume, 1 and 2 threads;
//  - pass 1: writes to every block of the first half, in random order (a
//    quarter QD1, the rest QD32 batches): on "cloned" each is the first
//    write to a shared block (new VBA; the tree entry changes), on "plain"
//    an overwrite in place (same VBA, new PBA);
//  - pass 2: the same blocks again (private on both now).
void BM_ClonedIo(benchmark::State& state, bool random_fill) {
  const uint64_t bytes = FullMode() ? 2ull << 30 : 1ull << 30;
  const uint64_t blocks = bytes / kBlockSize, half = blocks / 2;
  const std::string shape = random_fill ? "random-order fill" : "sequential fill";
  const int reps = 5;
  for (auto _ : state) {
    const double load0 = LoadAvg1();
    enum { kRd1, kRd2, kQ1, kW1, kQ2, kW2, kN };
    std::vector<Meas> m[kN][2];
    uint64_t extents[2] = {0, 0};
    for (int rep = 0; rep < reps; ++rep) {
      std::unique_ptr<BenchPool> bps[2];
      for (int cloned = 0; cloned < 2; ++cloned) {
        bps[cloned] = std::make_unique<BenchPool>(MediaKind::kMemory, bytes, "", 2 * MediaFor(bytes));
        BenchPool& bp = *bps[cloned];
        Volume* vol = bp.vol();
        if (random_fill) {
          // The plain pool writes the second half in the same order.
          std::vector<uint64_t> order = DistinctBlocks(half, half, 11);
          std::vector<uint64_t> all = order;
          if (!cloned)
            for (uint64_t b : order) all.push_back(b + half);
          WriteBlocks(vol, all);
        } else {
          FillSequential(vol, cloned ? bytes / 2 : bytes);
        }
        if (cloned) {
          RangeOp op;
          op.src = 0;
          op.dst = bytes / 2;
          op.len = bytes / 2;
          CheckOk(bp.pool->ApplyRangeOps({op}), "clone half");
        }
        CheckOk(vol->Flush(), "flush");
        extents[cloned] = MustCheck(bp.pool.get()).extents;
      }
      // Runs chunk(side, k) for k = 0..chunks-1 on both sides, ABBA, and
      // adds each side's totals to m[phase][side].
      // With FTL_BENCH_PHASES each chunk is marked "<name>/plain" or
      // "<name>/cloned" (for perf, see RESULTS.md).
      auto interleave = [&](int phase, const std::string& name, int chunks, auto&& chunk) {
        double ops[2] = {0, 0}, secs[2] = {0, 0}, cpu_us[2] = {0, 0};
        for (int k = 0; k < chunks; ++k) {
          for (int j = 0; j < 2; ++j) {
            const int side = (k % 2 == 0) ? j : 1 - j;
            Phase(name + (side ? "/cloned" : "/plain"));
            const Meas x = chunk(bps[side]->vol(), k);
            ops[side] += x.ops;
            secs[side] += x.ops / x.rate;
            cpu_us[side] += x.cpu_us * x.ops;
          }
        }
        Phase(name + "-done");
        for (int side = 0; side < 2; ++side)
          m[phase][side].push_back({ops[side] / secs[side], cpu_us[side] / ops[side],
                                    secs[side] * 1e6 / ops[side], ops[side]});
      };
      interleave(kRd1, "reads1", 20, [&](Volume* v, int k) { return RandomReads(v, 20'000, 1, 10 + rep * 100 + k); });
      interleave(kRd2, "reads2", 20, [&](Volume* v, int k) { return RandomReads(v, 20'000, 2, 20 + rep * 100 + k); });
      std::vector<uint64_t> w = DistinctBlocks(half, half, 30 + rep);
      std::vector<uint64_t> head(w.begin(), w.begin() + long(half / 4)),
          tail(w.begin() + long(half / 4), w.end());
      const int q_chunks = 16, w_chunks = 24;
      auto part = [](const std::vector<uint64_t>& v, int chunks, int k) {
        const size_t a = v.size() * size_t(k) / size_t(chunks),
                     b = v.size() * size_t(k + 1) / size_t(chunks);
        return std::vector<uint64_t>(v.begin() + long(a), v.begin() + long(b));
      };
      interleave(kQ1, "qd1-pass1", q_chunks, [&](Volume* v, int k) { return SyncWrites(v, part(head, q_chunks, k)); });
      interleave(kW1, "qd32-pass1", w_chunks, [&](Volume* v, int k) { return BatchWrites(v, part(tail, w_chunks, k)); });
      interleave(kQ2, "qd1-pass2", q_chunks, [&](Volume* v, int k) { return SyncWrites(v, part(head, q_chunks, k)); });
      interleave(kW2, "qd32-pass2", w_chunks, [&](Volume* v, int k) { return BatchWrites(v, part(tail, w_chunks, k)); });
    }
    struct Cmp {
      double plain, cloned, cpu_plain, cpu_cloned;
      double slower() const { return (plain - cloned) / plain * 100; }  // rates
      double cpu_more() const { return (cpu_cloned - cpu_plain) / cpu_plain * 100; }
    };
    auto cmp = [&](int k, bool latency) {
      std::vector<double> a, b, ca, cb;
      for (const Meas& x : m[k][0]) a.push_back(latency ? 1e6 / x.lat_us : x.rate), ca.push_back(x.cpu_us);
      for (const Meas& x : m[k][1]) b.push_back(latency ? 1e6 / x.lat_us : x.rate), cb.push_back(x.cpu_us);
      return Cmp{Median(a), Median(b), Median(ca), Median(cb)};
    };
    const std::string sz = absl::StrFormat("%d GiB, %s", bytes >> 30, shape);
    auto report = [&](const std::string& section, const std::string& name, const Cmp& c,
                      double goal, const std::string& unit_note) {
      Result r{section, absl::StrFormat("%s: %s", sz, name), c.slower(), "% slower (wall)",
               absl::StrFormat("<= %.0f%%", goal), c.slower() <= goal,
               absl::StrFormat("plain %s, cloned %s; CPU per op %.2f vs %.2f us (%+.1f%%); "
                               "medians of %d; extents %d vs %d; load %.1f",
                               unit_note == "us" ? absl::StrFormat("%.2f us", 1e6 / c.plain)
                                                 : absl::StrFormat("%.0f k/s", c.plain / 1000),
                               unit_note == "us" ? absl::StrFormat("%.2f us", 1e6 / c.cloned)
                                                 : absl::StrFormat("%.0f k/s", c.cloned / 1000),
                               c.cpu_plain, c.cpu_cloned, c.cpu_more(), reps, extents[0],
                               extents[1], load0)};
      const bool cpu_ok = c.cpu_more() <= goal;
      if (r.met != cpu_ok)
        r.met_text = absl::StrFormat("wall %s, CPU %s", r.met ? "yes" : "**no**",
                                     cpu_ok ? "yes" : "**no**");
      Report(r);
    };
    report("regular I/O with clones", "random 4 KiB reads, 1 thread", cmp(kRd1, false), 3, "");
    report("regular I/O with clones", "random 4 KiB reads, 2 threads", cmp(kRd2, false), 3, "");
    report("regular I/O with clones",
           "4 KiB writes QD1, blocks already written once since the clone", cmp(kQ2, true), 3,
           "us");
    report("regular I/O with clones",
           "4 KiB writes QD32 batches, blocks already written once since the clone",
           cmp(kW2, false), 3, "");
    report("first write to a cloned block", "4 KiB writes QD1, first write vs overwrite",
           cmp(kQ1, true), 10, "us");
    report("first write to a cloned block", "4 KiB writes QD32 batches, first write vs overwrite",
           cmp(kW1, false), 10, "");
    state.SetIterationTime(1);
  }
}

// ---------------------------------------------------------------- map cost of a write

// The committer's map work for 4 KiB writes without the media, log buffers
// or locks around it: LookupWrites, PlanWrite and ApplyRecord on a
// MapState, one record per batch. Two states built as ClonedIo builds its
// pools ("plain": every block written; "cloned": the first half written,
// the second half a clone note of it), measured alternately in chunks; the
// extra nanoseconds of a first write to a shared block over an overwrite
// are what ClonedIo's "first write" rows add to a whole write. Steadier
// than ClonedIo (no media copy, no checksums, no threads), so it can tell
// map changes of a few percent of a write apart. The "/copy" variants copy
// each written block into a 256 MiB ring between planning and applying a
// record and then fence, as the committer copies it to the media and then
// takes the map lock: the map then works in a cache the data keeps
// flushing, as in ClonedIo.
class MapWriter {
 public:
  static constexpr Bno kSegBlocks = 1024;
  MapWriter(Bno blocks, bool copy)
      : state_(uint32_t(blocks * 4 / kSegBlocks + 8), uint32_t(kSegBlocks)), copy_(copy) {
    state_.AddVolume(0, "vol", blocks);
  }

  // One record of single-block writes to `lbas` (at most one per LBA).
  void Write(const uint64_t* lbas, size_t n) {
    lbas_.assign(lbas, lbas + n);
    state_.LookupWrites(0, lbas_);
    log::RecordHeader h;
    h.seq = ++seq_;
    h.ops.resize(n);
    for (size_t k = 0; k < n; ++k) {
      log::Op& o = h.ops[k];
      o.type = log::OpType::kWrite;
      o.write.vol = 0;
      o.write.lba = Bno(lbas[k]);
      state_.PlanWrite(0, Bno(lbas[k]), 1, &o.write.vba);
      o.write.csum.assign(1, uint32_t(seq_));
    }
    h.data_blocks = uint32_t(n);
    if (copy_) {
      CopyToRing(n);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    Apply(h, Bno(n));
  }
  // Sequential writes of `run` blocks over [0, n).
  void FillSequential(Bno n, Bno run) {
    for (Bno lba = 0; lba < n; lba += run) {
      log::RecordHeader h;
      h.seq = ++seq_;
      log::Op o;
      o.type = log::OpType::kWrite;
      o.write.lba = lba;
      state_.PlanWrite(0, lba, std::min(run, n - lba), &o.write.vba);
      o.write.csum.assign(o.write.vba.size(), 0);
      h.data_blocks = uint32_t(o.write.vba.size());
      h.ops.push_back(std::move(o));
      Apply(h, h.data_blocks);
    }
  }
  // A clone note: [0, n) onto [n, 2n).
  void CloneHalf(Bno n) {
    log::RecordHeader h;
    h.seq = ++seq_;
    log::Op o;
    o.type = log::OpType::kClone;
    o.clone = {0, 0, 0, n, n};
    h.ops.push_back(o);
    Apply(h, 0);
  }
  uint64_t extents() const { return state_.volume(0)->tree.extent_count(); }

  // n blocks of data into the next places of a ring shared by all writers
  // (its pages touched once, so no page faults are measured).
  static void CopyToRing(size_t n) {  // n = 0: only sets the ring up
    constexpr size_t kRing = size_t(256) << 20;
    static std::byte* ring = [] {
      auto* r = static_cast<std::byte*>(std::aligned_alloc(4096, kRing));
      std::memset(r, 1, kRing);
      return r;
    }();
    static std::byte block[kBlockSize] = {};
    static size_t at = 0;
    for (size_t k = 0; k < n; ++k) {
      std::memcpy(ring + at, block, kBlockSize);
      at = (at + kBlockSize) % kRing;
    }
  }
 private:
  void Apply(const log::RecordHeader& h, Bno data) {
    // Records never span segments (as the committer's).
    if ((pba_ % kSegBlocks) + 1 + data > kSegBlocks) pba_ = (pba_ / kSegBlocks + 1) * kSegBlocks;
    state_.ApplyRecord(h, pba_);
    pba_ += 1 + data;
  }
  state::MapState state_;
  bool copy_;
  std::vector<Bno> lbas_;
  uint64_t seq_ = 0;
  Bno pba_ = 0;
};

void BM_MapWriteCost(benchmark::State& state, bool random_fill, bool copy) {
  const uint64_t blocks = (FullMode() ? 2ull << 30 : 1ull << 30) / kBlockSize, half = blocks / 2;
  const int reps = 15;
  for (auto _ : state) {
    const double load0 = LoadAvg1();
    // [batch size 1 / 32][pass 1 / 2][side]: ns per write, per rep.
    std::vector<double> ns[2][2][2];
    uint64_t extents[2] = {0, 0};
    if (copy) MapWriter::CopyToRing(0);
    for (int rep = 0; rep < reps; ++rep) {
      std::unique_ptr<MapWriter> w[2];
      for (int cloned = 0; cloned < 2; ++cloned) {
        w[cloned] = std::make_unique<MapWriter>(Bno(blocks), copy);
        if (random_fill) {
          std::vector<uint64_t> order = DistinctBlocks(half, half, 11);
          if (!cloned)
            for (uint64_t b : DistinctBlocks(half, half, 11)) order.push_back(b + half);
          for (size_t k = 0; k < order.size(); k += 32)
            w[cloned]->Write(order.data() + k, std::min<size_t>(32, order.size() - k));
        } else {
          w[cloned]->FillSequential(Bno(cloned ? half : blocks), 32);
        }
        if (cloned) w[cloned]->CloneHalf(Bno(half));
        extents[cloned] = w[cloned]->extents();
      }
      // A quarter of the first half at QD1 (one write per record), the rest
      // in records of 32; then the same blocks again. Chunks alternate ABBA.
      const std::vector<uint64_t> order = DistinctBlocks(half, half, 30 + rep);
      const size_t q = order.size() / 4;
      for (int pass = 0; pass < 2; ++pass) {
        for (int b = 0; b < 2; ++b) {
          const size_t from = b == 0 ? 0 : q, to = b == 0 ? q : order.size();
          const size_t per = b == 0 ? 1 : 32;
          const int chunks = 16;
          double secs[2] = {0, 0};
          for (int k = 0; k < chunks; ++k) {
            const size_t lo = from + (to - from) * size_t(k) / chunks;
            const size_t hi = from + (to - from) * size_t(k + 1) / chunks;
            for (int j = 0; j < 2; ++j) {
              const int side = (k % 2 == 0) ? j : 1 - j;
              Phase(absl::StrFormat("%s-pass%d/%s", b == 0 ? "qd1" : "qd32", pass + 1,
                                    side ? "cloned" : "plain"));
              const double c0 = ThreadCpuSeconds();
              for (size_t i = lo; i < hi; i += per)
                w[side]->Write(order.data() + i, std::min(per, hi - i));
              secs[side] += ThreadCpuSeconds() - c0;
            }
          }
          Phase("chunks-done");
          for (int side = 0; side < 2; ++side)
            ns[b][pass][side].push_back(secs[side] * 1e9 / double(to - from));
        }
      }
    }
    for (int b = 0; b < 2; ++b) {
      const double plain = Median(ns[b][0][0]), cloned = Median(ns[b][0][1]);
      const double plain2 = Median(ns[b][1][0]), cloned2 = Median(ns[b][1][1]);
      Report({"map cost of a write (no media)",
              absl::StrFormat("%d GiB, %s%s: 4 KiB writes %s, first write vs overwrite",
                              blocks * kBlockSize >> 30,
                              random_fill ? "random-order fill" : "sequential fill",
                              copy ? ", data copied" : "",
                              b == 0 ? "one per record" : "32 per record"),
              cloned - plain, "ns more per write", "", true,
              absl::StrFormat("thread CPU per write: overwrite %.0f ns, first write %.0f ns; "
                              "again (both private): %.0f vs %.0f ns; medians of %d; extents "
                              "%d vs %d; load %.1f",
                              plain, cloned, plain2, cloned2, reps, extents[0], extents[1], load0)});
    }
    state.SetIterationTime(1);
  }
}

// ---------------------------------------------------------------- whole volume

// A pool whose primary volume gets `bytes` of data and a second, empty
// volume of the same size (an activated snapshot taken before any write);
// then one ApplyRangeOps clones the whole primary into it (one note, one
// RangeOp of len = bytes). A reader thread does QD1 4 KiB reads of the
// primary meanwhile (the clone holds the map lock exclusively).
void BM_WholeVolumeClone(benchmark::State& state, bool random_fill) {
  const uint64_t bytes = FullMode() ? 8ull << 30 : 2ull << 30;
  const std::string shape = random_fill ? "random-order fill (one extent per block)"
                                        : "sequential fill";
  for (auto _ : state) {
    const double load0 = LoadAvg1();
    BenchPool bp(MediaKind::kFile, bytes, "ftld-bench-clone.img");
    CheckOk(bp.pool->CreateSnapshot("", "empty").status(), "snapshot");
    auto copy = bp.pool->ActivateSnapshot("", "empty", "copy", false);
    CheckOk(copy.status(), "activate");
    auto tf = Clock::now();
    if (random_fill) {
      FillRandomOrder(bp.vol(), bytes);
    } else {
      FillSequential(bp.vol(), bytes);
    }
    const double fill_s = Seconds(Clock::now() - tf);
    CheckOk(bp.pool->Checkpoint(), "checkpoint");
    const CheckReport k0 = MustCheck(bp.pool.get());
    const PoolStats s0 = bp.pool->Stats();

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> reads{0};
    Samples rlat;
    std::thread reader([&] {
      auto* buf = static_cast<std::byte*>(std::aligned_alloc(4096, kBlockSize));
      std::mt19937_64 rng(3);
      while (!stop) {
        auto a = Clock::now();
        CheckOk(bp.vol()->Read((rng() % (bytes / kBlockSize)) * kBlockSize,
                               std::span<std::byte>(buf, kBlockSize)),
                "read");
        rlat.Add(Us(Clock::now() - a));
        ++reads;
      }
      std::free(buf);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    RangeOp op;
    op.to = "copy";
    op.len = bytes;
    const uint64_t sync0 = bp.media->sync_ns();
    auto t0 = Clock::now();
    CheckOk(bp.pool->ApplyRangeOps({op}), "whole-volume clone");
    const double secs = Seconds(Clock::now() - t0);
    const double sync_s = double(bp.media->sync_ns() - sync0) / 1e9;
    // Again, onto the now fully mapped copy (replaces every extent there).
    auto t1 = Clock::now();
    CheckOk(bp.pool->ApplyRangeOps({op}), "whole-volume clone again");
    const double secs2 = Seconds(Clock::now() - t1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
    reader.join();
    rlat.Sort();
    const CheckReport k1 = MustCheck(bp.pool.get());
    const PoolStats s1 = bp.pool->Stats();
    const double extents = double(k0.extents);  // the primary's (the copy is empty)
    Report({"whole-volume clone",
            absl::StrFormat("%s volume, %s: one ApplyRangeOps", SizeName(bytes), shape),
            secs * 1000, "ms", "", true,
            absl::StrFormat("%.0f extents: %.3f us per extent (btrfs FICLONERANGE, issue: ~5 us "
                            "per extent, ~4.4 us per call); %.3f ns per block; sync %.2f ms; "
                            "again onto the mapped copy %.0f ms; map %.0f -> %.0f MiB; fill "
                            "%.0f s; load %.1f",
                            extents, secs * 1e6 / extents, secs * 1e9 / double(bytes / kBlockSize),
                            sync_s * 1000, secs2 * 1000, s0.map_memory_bytes / kMiB,
                            s1.map_memory_bytes / kMiB, fill_s, load0)});
    Report({"whole-volume clone",
            absl::StrFormat("%s volume, %s: 4 KiB reads of the primary during the clones",
                            SizeName(bytes), shape),
            rlat.Max() / 1000, "ms max", "", true,
            absl::StrFormat("p50 %.1f us, p99 %.1f us, %d reads; extents after: %d over both "
                            "volumes",
                            rlat.Pct(0.5), rlat.Pct(0.99), rlat.size(), k1.extents)});
    state.SetIterationTime(secs);
    state.counters["us_per_extent"] = secs * 1e6 / extents;
  }
}

}  // namespace
}  // namespace ftl::bench

int main(int argc, char** argv) {
  using namespace ftl::bench;
  ParseFullFlag(&argc, argv);
  ftl::util::SetLogLevel("warn");
  // Debian's abseil is built with Mutex deadlock detection on (every lock
  // updates a lock graph); ftld turns it off (daemon/main.cc), and so do these
  // benchmarks unless FTL_BENCH_DEADLOCK_DETECTION=1.
  if (!std::getenv("FTL_BENCH_DEADLOCK_DETECTION"))
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto one = [](benchmark::internal::Benchmark* b) {
    b->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  };
  for (bool random_map : {true, false})
    for (bool move : {false, true})
      one(benchmark::RegisterBenchmark(
          absl::StrFormat("MapRangeOp/%s/%s", move ? "move" : "clone",
                          random_map ? "random-map" : "seq-map")
              .c_str(),
          BM_MapRangeOp, random_map, move));
  for (bool move : {false, true}) {
    const char* k = move ? "move" : "clone";
    one(benchmark::RegisterBenchmark(absl::StrFormat("PoolRangeOps/%s/async256", k).c_str(),
                                     BM_PoolRangeOps, move, 256, 0, 1));
    for (int t : {1, 4, 16, 64})
      one(benchmark::RegisterBenchmark(absl::StrFormat("PoolRangeOps/%s/threads:%d", k, t).c_str(),
                                       BM_PoolRangeOps, move, 0, t, 1));
    one(benchmark::RegisterBenchmark(absl::StrFormat("PoolRangeOps/%s/threads:1/batch:64", k).c_str(),
                                     BM_PoolRangeOps, move, 0, 1, 64));
  }
  one(benchmark::RegisterBenchmark("MapWriteCost/random-fill", BM_MapWriteCost, true, false));
  one(benchmark::RegisterBenchmark("MapWriteCost/seq-fill", BM_MapWriteCost, false, false));
  one(benchmark::RegisterBenchmark("MapWriteCost/random-fill/copy", BM_MapWriteCost, true, true));
  one(benchmark::RegisterBenchmark("MapWriteCost/seq-fill/copy", BM_MapWriteCost, false, true));
  one(benchmark::RegisterBenchmark("ClonedIo/random-fill", BM_ClonedIo, true));
  one(benchmark::RegisterBenchmark("ClonedIo/seq-fill", BM_ClonedIo, false));
  one(benchmark::RegisterBenchmark("WholeVolumeClone/seq", BM_WholeVolumeClone, false));
  one(benchmark::RegisterBenchmark("WholeVolumeClone/random", BM_WholeVolumeClone, true));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  PrintSummary();
  return 0;
}
