#pragma once
// Helpers shared by snapshot_bench and range_bench (issues 4 and 5): pools on
// memory or sparse-file media, a Media wrapper that times Sync(), latency
// percentiles, fills that give a non-trivial tree, and a map-level fixture
// (ExtentTree + VbaTable + SegmentTable wired as state/map_state.h does) that
// follows the engine's write path for snapshots and clones.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sys/resource.h>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "bench_util.h"
#include "ftl/media.h"
#include "ftl/pool.h"
#include "log/segment_table.h"
#include "map/extent_tree.h"
#include "map/vba_table.h"

namespace ftl::bench {

using Clock = std::chrono::steady_clock;

inline double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Media size whose default-format (20% over-provisioning) logical capacity
// holds `volume_bytes`.
inline uint64_t MediaFor(uint64_t volume_bytes) {
  return volume_bytes / 4 * 5 + volume_bytes / 16 + (64ull << 20);
}

// Forwards to another Media and adds up the time spent in Sync() (and
// in Write() and Discard()), so a caller can subtract the sync from an operation that
// ran alone.
class TimedMedia : public Media {
 public:
  explicit TimedMedia(std::shared_ptr<Media> inner) : inner_(std::move(inner)) {}
  uint64_t size() const override { return inner_->size(); }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    return inner_->Read(offset, out);
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override {
    auto t0 = Clock::now();
    absl::Status s = inner_->Write(offset, data);
    write_ns_.fetch_add(uint64_t(std::chrono::nanoseconds(Clock::now() - t0).count()),
                        std::memory_order_relaxed);
    writes_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  absl::Status Sync() override {
    auto t0 = Clock::now();
    absl::Status s = inner_->Sync();
    sync_ns_.fetch_add(uint64_t(std::chrono::nanoseconds(Clock::now() - t0).count()),
                       std::memory_order_relaxed);
    syncs_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  void Prepare(uint64_t offset, uint64_t length) override { inner_->Prepare(offset, length); }
  absl::Status Discard(uint64_t offset, uint64_t length) override {
    auto t0 = Clock::now();
    absl::Status s = inner_->Discard(offset, length);
    discard_ns_.fetch_add(uint64_t(std::chrono::nanoseconds(Clock::now() - t0).count()),
                          std::memory_order_relaxed);
    discards_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  std::string Describe() const override { return inner_->Describe(); }

  uint64_t sync_ns() const { return sync_ns_.load(); }
  uint64_t syncs() const { return syncs_.load(); }
  uint64_t writes() const { return writes_.load(); }
  uint64_t write_ns() const { return write_ns_.load(); }
  uint64_t discards() const { return discards_.load(); }
  uint64_t discard_ns() const { return discard_ns_.load(); }

 private:
  std::shared_ptr<Media> inner_;
  std::atomic<uint64_t> sync_ns_{0}, syncs_{0}, writes_{0}, write_ns_{0}, discards_{0},
      discard_ns_{0};
};

// Sorted samples; Pct(0.5) is the median.
struct Samples {
  std::vector<double> v;
  void Add(double x) { v.push_back(x); }
  void Sort() { std::sort(v.begin(), v.end()); }
  double Pct(double q) const {
    if (v.empty()) return 0;
    size_t i = size_t(q * double(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
  }
  double Max() const { return v.empty() ? 0 : v.back(); }
  double Mean() const {
    return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  }
  size_t size() const { return v.size(); }
};

enum class MediaKind { kMemory, kFile };
inline const char* KindName(MediaKind k) { return k == MediaKind::kMemory ? "memory" : "file"; }

// A formatted pool on memory or on a sparse file under $FTL_BENCH_DIR, its
// media wrapped in a TimedMedia. Automatic checkpoints are off unless asked
// for (they would land inside timed operations at random); the cleaner runs.
struct BenchPool {
  BenchPool(MediaKind kind, uint64_t volume_bytes, const std::string& file_name,
            uint64_t media_bytes = 0, bool auto_checkpoint = false) {
    if (media_bytes == 0) media_bytes = MediaFor(volume_bytes);
    std::shared_ptr<Media> inner;
    if (kind == MediaKind::kFile) {
      file = std::make_unique<TempFile>(file_name);
      auto m = OpenFileMedia(file->path, media_bytes);
      CheckOk(m.status(), "open file media");
      inner = *m;
    } else {
      inner = NewMemMedia(media_bytes);
    }
    media = std::make_shared<TimedMedia>(inner);
    FormatOptions f;
    f.volume_bytes = volume_bytes;
    OpenOptions o;
    o.auto_checkpoint = auto_checkpoint;
    if (!auto_checkpoint) o.checkpoint_interval = std::chrono::milliseconds(0);
    auto p = Pool::Format(media, f, o);
    CheckOk(p.status(), "format");
    pool = std::move(*p);
  }
  ~BenchPool() {
    if (pool) CheckOk(pool->Close(), "close");
    pool.reset();
    media.reset();
  }
  Volume* vol() { return pool->PrimaryVolume(); }

  std::unique_ptr<TempFile> file;
  std::shared_ptr<TimedMedia> media;
  std::unique_ptr<Pool> pool;
};

// Sequential 1 MiB writes QD 8 over [0, bytes) of `vol`, then Flush.
inline double FillSequential(Volume* vol, uint64_t bytes) {
  AsyncWriter w(vol, 8, 1 << 20);
  auto t0 = Clock::now();
  for (uint64_t off = 0; off + (1 << 20) <= bytes; off += 1 << 20) w.Submit(off);
  CheckOk(w.Drain(), "sequential fill");
  CheckOk(vol->Flush(), "flush");
  return Seconds(Clock::now() - t0);
}

// One write through Volume::WriteAsyncBatch, waiting for its completion:
// the path ftld's NBD server takes. When nobody else is committing, the
// calling thread commits it itself; Volume::Write instead hands every write
// to the writer thread and waits to be woken, and on this VM a cross-thread
// wake-up costs 5 us on a busy machine but ~100 us on an idle one, which
// would swamp what the benchmarks compare.
inline absl::Status WriteInline(Volume* vol, uint64_t offset, std::span<const std::byte> data) {
  absl::Notification n;
  absl::Status st;
  std::vector<Volume::AsyncWrite> w(1);
  w[0].offset = offset;
  w[0].data = data;
  w[0].done = [&](absl::Status s) {
    st = s;
    n.Notify();
  };
  vol->WriteAsyncBatch(std::move(w));
  n.WaitForNotification();
  return st;
}

// 4 KiB writes to the given blocks, WriteAsyncBatch(32) at QD 32.
inline double WriteBlocks(Volume* vol, const std::vector<uint64_t>& blocks, uint64_t seed = 7) {
  AsyncWriter w(vol, 32, kBlockSize, seed, 60, 32);
  auto t0 = Clock::now();
  for (uint64_t b : blocks) w.Submit(b * kBlockSize);
  CheckOk(w.Drain(), "4 KiB writes");
  return Seconds(Clock::now() - t0);
}

// n distinct blocks of [0, blocks), random order.
inline std::vector<uint64_t> DistinctBlocks(uint64_t blocks, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out;
  if (n * 4 >= blocks) {
    std::vector<uint64_t> all(blocks);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(std::min(n, blocks));
    return all;
  }
  std::unordered_set<uint64_t> seen;
  while (out.size() < n) {
    uint64_t b = rng() % blocks;
    if (seen.insert(b).second) out.push_back(b);
  }
  return out;
}

// Sequential fill, then a fraction `frag` of the blocks rewritten at random
// while a temporary snapshot holds the old versions (so they get new VBAs
// and the tree gets ~2 extents per rewritten block), then the snapshot is
// deleted. Without the snapshot the rewrites would reuse the VBAs and leave
// the tree as one extent.
inline void FillSeqFragmented(Pool* pool, uint64_t bytes, double frag, uint64_t seed = 5) {
  Volume* vol = pool->PrimaryVolume();
  FillSequential(vol, bytes);
  if (frag <= 0) return;
  auto snap = pool->CreateSnapshot("", "fill-frag");
  CheckOk(snap.status(), "fragmenting snapshot");
  WriteBlocks(vol, DistinctBlocks(bytes / kBlockSize, uint64_t(double(bytes / kBlockSize) * frag),
                                  seed));
  CheckOk(pool->DeleteSnapshot("", "fill-frag"), "delete fragmenting snapshot");
  CheckOk(vol->Flush(), "flush");
}

// Every block once, in random order (one extent per block), then Flush.
inline double FillRandomOrder(Volume* vol, uint64_t bytes, uint64_t seed = 11) {
  double s = WriteBlocks(vol, DistinctBlocks(bytes / kBlockSize, bytes / kBlockSize, seed));
  CheckOk(vol->Flush(), "flush");
  return s;
}

inline CheckReport MustCheck(Pool* pool) {
  auto r = pool->Check(false);
  CheckOk(r.status(), "check");
  if (!r->problems.empty())
    CheckOk(absl::InternalError("Pool::Check found problems: " + r->problems.front()), "check");
  return *r;
}

// ------------------------------------------------------------ map fixture

// Trees over one VBA table and segment table, as MapState builds them.
// Physical blocks come from a log head that skips blocks still valid (no
// cleaner). Write() follows MapState::PlanWrite + ApplyWrite: a block whose
// VBA has refcount 1 under an exclusive path is overwritten in place (new
// PBA), anything else gets a new VBA assigned (which copies shared nodes on
// the path).
class MapFixture {
 public:
  explicit MapFixture(log::Bno blocks, int max_trees_factor = 4)
      : blocks_(blocks),
        segs_(uint32_t((uint64_t(blocks) * max_trees_factor + kSegBlocks - 1) / kSegBlocks),
              kSegBlocks),
        vbas_(&segs_, log::Bno(uint64_t(segs_.count()) * kSegBlocks + 1024)),
        ctx_(&vbas_) {}

  log::Bno blocks() const { return blocks_; }
  map::VbaTable& vbas() { return vbas_; }
  map::TreeContext& ctx() { return ctx_; }
  map::TreeContext* ctx_ptr() { return &ctx_; }
  uint64_t memory_bytes() const { return ctx_.memory_bytes() + vbas_.memory_bytes(); }

  // Maps [lba, lba+n) of `t` to fresh VBAs with PBAs.
  void WriteNew(map::ExtentTree* t, log::Bno lba, log::Bno n) {
    runs_.clear();
    vbas_.Allocate(n, &runs_);
    for (auto [vba, len] : runs_) {
      t->Assign(lba, len, vba);
      for (log::Bno k = 0; k < len; ++k) vbas_.SetPba(vba + k, NextPba());
      lba += len;
    }
  }
  // One 4 KiB write as the engine does it.
  void Write(map::ExtentTree* t, log::Bno lba) {
    log::Bno cur = t->LookupOne(lba);
    if (cur != log::kNoBlock && vbas_.Get(cur).refs == 1 && t->Exclusive(lba)) {
      vbas_.SetPba(cur, NextPba());
      return;
    }
    WriteNew(t, lba, 1);
  }
  void FillSequential(map::ExtentTree* t) {
    for (log::Bno lba = 0; lba < blocks_; lba += 256)
      WriteNew(t, lba, std::min<log::Bno>(256, blocks_ - lba));
  }
  void FillRandom(map::ExtentTree* t, uint64_t seed) {
    for (uint64_t b : DistinctBlocks(blocks_, blocks_, seed)) WriteNew(t, log::Bno(b), 1);
  }

  // The leaf (and the inner nodes) on the path to `lba` in `t`.
  static const map::Leaf* LeafOf(const map::ExtentTree& t, log::Bno lba,
                                 std::vector<const map::Node*>* inners = nullptr) {
    const map::Node* n = t.root();
    while (n && !n->leaf) {
      if (inners) inners->push_back(n);
      const auto* in = static_cast<const map::Inner*>(n);
      int i = int(std::upper_bound(in->key + 1, in->key + in->count, lba) - in->key) - 1;
      n = in->kid[std::max(i, 0)];
    }
    return static_cast<const map::Leaf*>(n);
  }

 private:
  static constexpr uint32_t kSegBlocks = 1024;
  log::Bno NextPba() {
    const log::Bno phys = log::Bno(uint64_t(segs_.count()) * kSegBlocks);
    while (segs_.IsValid(head_)) head_ = (head_ + 1) % phys;
    log::Bno p = head_;
    head_ = (head_ + 1) % phys;
    return p;
  }

  log::Bno blocks_;
  log::SegmentTable segs_;
  map::VbaTable vbas_;
  map::TreeContext ctx_;
  log::Bno head_ = 0;
  std::vector<std::pair<log::Bno, log::Bno>> runs_;
};

inline std::string SizeName(uint64_t bytes) {
  return bytes >= (1ull << 30) ? absl::StrFormat("%d GiB", bytes >> 30)
                               : absl::StrFormat("%d MiB", bytes >> 20);
}

// CPU time of the calling thread, in seconds (on a shared machine the wall
// time of a single-threaded loop also counts the time it waited for a core).
inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// With FTL_BENCH_PHASES set, prints "phase NAME at T" (CLOCK_MONOTONIC
// seconds) to stderr, so a profile taken with `perf record -k
// CLOCK_MONOTONIC` can be cut to one phase with `perf report --time A,B`.
inline void Phase(const std::string& name) {
  static const bool on = std::getenv("FTL_BENCH_PHASES") != nullptr;
  if (!on) return;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  std::fprintf(stderr, "phase %s at %ld.%06ld\n", name.c_str(), long(ts.tv_sec),
               long(ts.tv_nsec / 1000));
}

// CPU time of the whole process (every engine thread), in seconds.
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Voluntary context switches of the whole process so far (a thread going to
// sleep: a lock or condition wait, a blocking syscall).
inline long VoluntarySwitches() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_nvcsw;
}

inline double LoadAvg1() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) < 1) return -1;
  return l[0];
}

}  // namespace ftl::bench
