// Crash tests of the engine over VolatileCacheMedia (tests/README.md: the
// crash tier), the media layer behind `ftld --simulate-volatile-cache`: a
// pool runs on the volatile cache over a memory image behind a gate, and the
// "process dies" when the gate closes (at once, or after a few more writes
// reach the image, which tears the write-through in progress at sector
// granularity). The cache is then thrown away unsynced, the pool is
// reopened directly on the memory image, and:
//  - everything flushed before the death reads back exactly;
//  - the volume equals the flushed state plus some prefix of the writes
//    issued since the last flush, each write (at most the atomic size)
//    entirely old or entirely new: no torn block, nothing never written.
// Iterations: $FTL_CRASH_ITERATIONS (default 1000; this test runs a fifth).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "ftl/pool.h"
#include "media/volatile_cache_media.h"
#include "prefix_model.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using media::VolatileCacheMedia;

constexpr uint64_t kSector = 512;

// The boundary of the "process": passes everything to the image until it
// dies, then refuses every write, discard and sync and changes nothing.
// Reads pass (the dead process no longer reads; the test reads after).
class Gate : public Media {
 public:
  explicit Gate(std::shared_ptr<Media> image) : image_(std::move(image)) {}
  uint64_t size() const override { return image_->size(); }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    return image_->Read(offset, out);
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override {
    if (!Pass()) return Dead();
    return image_->Write(offset, data);
  }
  absl::Status Sync() override {
    if (dead_) return Dead();
    ++syncs_;
    return image_->Sync();
  }
  absl::Status Discard(uint64_t offset, uint64_t length) override {
    if (!Pass()) return Dead();
    return image_->Discard(offset, length);
  }
  std::string Describe() const override { return "gate"; }

  void Kill() { dead_ = true; }
  // Dies when n more writes or discards have passed.
  void KillAfter(int64_t n) { left_ = n; }
  bool dead() const { return dead_; }
  bool died_writing() const { return died_writing_; }
  uint64_t syncs() const { return syncs_; }

 private:
  bool Pass() {
    if (dead_) return false;
    if (left_.fetch_sub(1) <= 0) {
      died_writing_ = true;  // this write was cut off: a write-through is torn
      dead_ = true;
      return false;
    }
    return true;
  }
  static absl::Status Dead() { return absl::UnavailableError("the process is dead"); }

  std::shared_ptr<Media> image_;
  std::atomic<bool> dead_{false}, died_writing_{false};
  std::atomic<int64_t> left_{INT64_MAX};
  std::atomic<uint64_t> syncs_{0};
};

// The flushed state of the volume and the writes issued since, in order.
using Model = testing::PrefixModel;

// Sector-aligned writes (as a database's redo log makes them) and block
// writes, each covering at most the atomic size in blocks, so each is one
// record; flushes now and then. Stops at the first error (the gate died).
struct Worker {
  Volume* vol;
  Model* model;
  uint64_t atomic;
  uint64_t seed;
  std::atomic<bool>* stop;
  uint64_t tag = 0;
  size_t writes = 0, flushes = 0;

  void Run() {
    std::mt19937_64 rng(seed);
    const uint64_t size = vol->size_bytes();
    while (!stop->load()) {
      if (rng() % 8 == 0) {
        size_t issued = model->pending();
        if (!vol->Flush().ok()) return;
        model->Flushed(issued);
        ++flushes;
        continue;
      }
      uint64_t off, len;
      if (rng() % 3 == 0) {  // 512-byte granular, inside a few blocks
        off = (rng() % (size / kSector)) * kSector;
        len = (1 + rng() % 24) * kSector;
      } else {
        off = (rng() % (size / kBlockSize)) * kBlockSize;
        len = (rng() % 20 == 0 ? 1 + rng() % (atomic / kBlockSize) : 1 + rng() % 8) * kBlockSize;
      }
      len = std::min(len, size - off);
      // At most the atomic size in covering blocks.
      uint64_t b0 = off / kBlockSize * kBlockSize;
      uint64_t b1 = (off + len + kBlockSize - 1) / kBlockSize * kBlockSize;
      if (b1 - b0 > atomic) len = b0 + atomic - off;
      auto data = testing::Pattern(++tag, off, len);
      model->Add(off, data);
      if (!vol->Write(off, data).ok()) return;
      ++writes;
    }
  }
};

int Iterations(int dflt) {
  const char* e = std::getenv("FTL_CRASH_ITERATIONS");
  return e ? std::max(1, std::atoi(e) / 5) : dflt;
}

// One flushed write, one unflushed: killing the process (no sync after the
// flush) loses the second entirely and keeps the first.
TEST(VolatileCacheCrashTest, KillKeepsFlushedAndLosesUnflushedWrites) {
  auto image = NewMemMedia(16 << 20);
  auto gate = std::make_shared<Gate>(image);
  auto vc = std::make_shared<VolatileCacheMedia>(gate, 1);
  auto open = testing::QuietOpen(/*cleaner=*/false);
  open.auto_checkpoint = false;
  ASSERT_OK_AND_ASSIGN(auto pool, Pool::Format(vc, testing::SmallFormat(), open));
  Volume* v = pool->PrimaryVolume();
  auto old_data = testing::Pattern(1, 0, 64 * kBlockSize);
  ASSERT_OK(v->Write(0, old_data));
  ASSERT_OK(v->Flush());
  const uint64_t syncs = gate->syncs();
  auto new_data = testing::Pattern(2, 16 * kBlockSize, 16 * kBlockSize);
  ASSERT_OK(v->Write(16 * kBlockSize, new_data));
  ASSERT_OK(v->Write(100 * kBlockSize, new_data));
  std::vector<std::byte> got(16 * kBlockSize);
  ASSERT_OK(v->Read(16 * kBlockSize, got));
  EXPECT_EQ(got, new_data);  // the process reads its writes from the cache
  EXPECT_GT(vc->cached_bytes(), 0u);
  gate->Kill();
  ASSERT_EQ(gate->syncs(), syncs) << "the engine synced without a flush: the test shows nothing";
  pool.reset();
  vc.reset();

  ASSERT_OK_AND_ASSIGN(auto reopened, Pool::Open(image, open));
  std::vector<std::byte> all(128 * kBlockSize);
  ASSERT_OK(reopened->PrimaryVolume()->Read(0, all));
  std::vector<std::byte> want(all.size());
  std::copy(old_data.begin(), old_data.end(), want.begin());
  EXPECT_TRUE(all == want) << "an unflushed write survived the kill, or a flushed one was lost";
  ASSERT_OK(reopened->Close());
}

// The same, the process dying while a flush's write-through is half done:
// the writes that flush covers are each all old or all new.
TEST(VolatileCacheCrashTest, DeathInsideAFlushTearsNoWrite) {
  int torn_flushes = 0, partly_kept = 0, complete = 0;
  for (int round = 0; round < 40; ++round) {
    auto image = NewMemMedia(16 << 20);
    auto gate = std::make_shared<Gate>(image);
    auto vc = std::make_shared<VolatileCacheMedia>(gate, uint64_t(round));
    auto open = testing::QuietOpen(/*cleaner=*/false);
    open.auto_checkpoint = false;
    ASSERT_OK_AND_ASSIGN(auto pool, Pool::Format(vc, testing::SmallFormat(), open));
    Volume* v = pool->PrimaryVolume();
    const uint64_t atomic = pool->geometry().max_atomic_bytes;
    Model model(v->size_bytes());
    // 8 writes of 16 KiB pages, flushed; then the same pages rewritten
    // (one of the atomic size) and a flush that dies part way.
    for (uint64_t p = 0; p < 8; ++p) {
      auto d = testing::Pattern(1, p * 16384, 16384);
      model.Add(p * 16384, d);
      ASSERT_OK(v->Write(p * 16384, d));
    }
    ASSERT_OK(v->Flush());
    model.Flushed(8);
    for (uint64_t p = 0; p < 8; ++p) {
      auto d = testing::Pattern(10 + p, p * 16384, p == 5 ? atomic : 16384);
      model.Add(p * 16384, d);
      ASSERT_OK(v->Write(p * 16384, d));
    }
    // The flush writes the records: 8 x 16 KiB and one of the atomic size
    // (64 KiB here), 424 sector writes with the headers; most rounds die
    // inside it.
    std::mt19937_64 rng{uint64_t(round)};
    gate->KillAfter(int64_t(rng() % 480));
    absl::Status flushed = v->Flush();
    if (flushed.ok()) ++complete;
    if (gate->died_writing()) ++torn_flushes;
    gate->Kill();
    pool.reset();
    vc.reset();
    ASSERT_OK_AND_ASSIGN(auto reopened, Pool::Open(image, open));
    std::vector<std::byte> vol_image(reopened->PrimaryVolume()->size_bytes());
    ASSERT_OK(reopened->PrimaryVolume()->Read(0, vol_image));
    const size_t pending = model.pending();
    long k = model.Match(vol_image);
    ASSERT_GE(k, 0) << "round " << round << ": a torn or invented write (flush "
                    << flushed.ToString() << ")";
    if (flushed.ok()) {
      EXPECT_EQ(size_t(k), pending) << "round " << round << ": flushed but lost";
    }
    if (k > 0 && size_t(k) < pending) ++partly_kept;
    ASSERT_OK(reopened->Close());
  }
  std::printf("flushes: 40, torn: %d (some writes kept: %d), complete: %d\n", torn_flushes,
              partly_kept, complete);
  EXPECT_GT(torn_flushes, 20);
  EXPECT_GT(complete, 0);
}

void RunRandomKills(int iterations, uint64_t max_cached_bytes) {
  auto image = NewMemMedia(24 << 20);
  auto open = testing::QuietOpen(/*cleaner=*/true);
  std::mt19937_64 rng(20261125 + max_cached_bytes);
  {
    auto vc = std::make_shared<VolatileCacheMedia>(image, rng(), max_cached_bytes);
    ASSERT_OK_AND_ASSIGN(auto pool, Pool::Format(vc, testing::SmallFormat(256 << 10), open));
    ASSERT_OK(pool->Close());
  }
  std::unique_ptr<Model> model;
  size_t total_writes = 0, total_flushes = 0, lost = 0, torn = 0, destages = 0, cleaned = 0;
  for (int it = 0; it < iterations; ++it) {
    auto gate = std::make_shared<Gate>(image);
    auto vc = std::make_shared<VolatileCacheMedia>(gate, rng(), max_cached_bytes);
    auto opened = Pool::Open(vc, open);
    ASSERT_OK(opened) << "iteration " << it;
    std::unique_ptr<Pool> pool = std::move(*opened);
    const uint64_t size = pool->PrimaryVolume()->size_bytes();
    if (!model) {
      model = std::make_unique<Model>(size);
    }
    std::atomic<bool> stop{false};
    Worker w{pool->PrimaryVolume(), model.get(), pool->geometry().max_atomic_bytes, rng(), &stop};
    std::thread t([&] { w.Run(); });
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    if (rng() % 2) {
      gate->Kill();  // between write-throughs, or cutting one off
    } else {
      // After a few more sector writes: inside the next write-through.
      gate->KillAfter(int64_t(rng() % 300));
      for (int i = 0; i < 200 && !gate->dead(); ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      gate->Kill();
    }
    torn += gate->died_writing();
    stop = true;
    t.join();
    total_writes += w.writes;
    total_flushes += w.flushes;
    destages += vc->destages();
    cleaned += pool->Stats().gc_segments_cleaned;
    pool.reset();  // the engine's threads stop; nothing more gets through
    vc.reset();    // the cache is lost

    auto reopened = Pool::Open(image, open);
    ASSERT_OK(reopened) << "iteration " << it;
    std::vector<std::byte> vol_image(size);
    ASSERT_OK((*reopened)->PrimaryVolume()->Read(0, vol_image)) << "iteration " << it;
    const size_t pending = model->pending();
    long k = model->Match(vol_image);
    ASSERT_GE(k, 0) << "iteration " << it << ": the volume is no prefix of the " << pending
                    << " writes since the last flush (" << (*reopened)->OpenReport() << ")";
    lost += pending - size_t(k);
    if (it % 50 == 49) {
      auto report = (*reopened)->Check(/*verify_data=*/true);
      ASSERT_OK(report);
      ASSERT_TRUE(report->problems.empty()) << "iteration " << it << ": " << report->problems[0];
    }
    ASSERT_OK((*reopened)->Close());
  }
  std::printf("kills: %d (%zu inside a write-through), writes: %zu, flushes: %zu, "
              "unflushed writes lost: %zu, destages: %zu, segments cleaned: %zu\n",
              iterations, torn, total_writes, total_flushes, lost, destages, cleaned);
  EXPECT_GT(total_writes, size_t(iterations));
  EXPECT_GT(lost, 0u) << "no kill lost a write: the cache is not volatile";
  EXPECT_GT(torn, size_t(iterations) / 8) << "few kills cut a write-through";
}

TEST(VolatileCacheCrashTest, RandomKillsAgainstModel) {
  RunRandomKills(Iterations(200), VolatileCacheMedia::kDefaultMaxCachedBytes);
}

// A cache limit below the write rate between flushes: destages put
// unflushed writes on the image, which recovery must take or leave whole.
TEST(VolatileCacheCrashTest, RandomKillsWithDestages) {
  RunRandomKills(Iterations(200), 256 << 10);
}

}  // namespace
}  // namespace ftl
