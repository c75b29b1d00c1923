// Tests for media::VolatileCacheMedia: the cache over an inner media, what
// reaches the inner media and when (sync, destage, a torn sync), newest-wins
// coalescing against a byte model, and concurrent use.

#include "media/volatile_cache_media.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "media/fault_media.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl::media {
namespace {

constexpr uint64_t kSector = 512;
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kSize = 1 << 20;

std::vector<std::byte> Fill(size_t n, int value) {
  return std::vector<std::byte>(n, std::byte(value));
}

std::vector<std::byte> ReadAll(Media& m, uint64_t offset, size_t n) {
  std::vector<std::byte> out(n);
  absl::Status s = m.Read(offset, out);
  EXPECT_OK(s);
  return out;
}

std::vector<std::byte> Image(Media& m) { return ReadAll(m, 0, m.size()); }

// An inner media that counts Write calls and can run a hook before each
// (to act on the cache while a write-through is in progress) or refuse
// everything from some write on (the process died there).
class HookMedia : public Media {
 public:
  explicit HookMedia(uint64_t size) : inner_(NewMemMedia(size)) {}
  uint64_t size() const override { return inner_->size(); }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    return inner_->Read(offset, out);
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override {
    uint64_t n = ++writes_;
    if (hook_) hook_(n);
    if (dead_after_ != 0 && n > dead_after_) return absl::UnavailableError("dead");
    return inner_->Write(offset, data);
  }
  absl::Status Sync() override {
    ++syncs_;
    return dead_after_ != 0 && writes_ >= dead_after_ ? absl::UnavailableError("dead")
                                                      : absl::OkStatus();
  }
  absl::Status Discard(uint64_t offset, uint64_t length) override {
    ++discards_;
    return inner_->Discard(offset, length);
  }
  std::string Describe() const override { return "hooked memory"; }

  std::shared_ptr<Media> inner_;
  std::function<void(uint64_t)> hook_;  // called with the write's number (from 1)
  std::atomic<uint64_t> dead_after_{0};  // 0: never; else writes after this one fail
  std::atomic<uint64_t> writes_{0}, syncs_{0}, discards_{0};
};

TEST(VolatileCacheMediaTest, DescribesItselfAndTheInnerMedia) {
  VolatileCacheMedia m(NewMemMedia(kSize), 1);
  EXPECT_EQ(m.Describe(), "volatile cache over memory");
  EXPECT_EQ(m.size(), kSize);
  EXPECT_TRUE(m.gathers_writes());
  auto pub = NewVolatileCacheMedia(NewMemMedia(kSize), 1);
  EXPECT_EQ(pub->Describe(), "volatile cache over memory");
}

TEST(VolatileCacheMediaTest, OutOfRangeIsRefused) {
  VolatileCacheMedia m(NewMemMedia(kSize), 1);
  std::vector<std::byte> buf(kBlock);
  EXPECT_EQ(m.Read(kSize - 10, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.Write(kSize - 10, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.Discard(kSize, 1).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.cached_ranges(), 0u);
  ASSERT_OK(m.Write(kSize, {}));  // empty, at the end: fine, caches nothing
  EXPECT_EQ(m.cached_ranges(), 0u);
}

TEST(VolatileCacheMediaTest, ReadsSeeCachedWritesOverTheInnerMedia) {
  auto inner = NewMemMedia(kSize);
  ASSERT_OK(inner->Write(0, Fill(4 * kBlock, 0x11)));
  VolatileCacheMedia m(inner, 1);
  ASSERT_OK(m.Write(kBlock + 100, Fill(1000, 0x22)));
  std::vector<std::byte> want = Fill(4 * kBlock, 0x11);
  std::fill_n(want.begin() + kBlock + 100, 1000, std::byte{0x22});
  EXPECT_EQ(ReadAll(m, 0, 4 * kBlock), want);
  // A read inside the cached write, and one straddling its end.
  EXPECT_EQ(ReadAll(m, kBlock + 200, 10), Fill(10, 0x22));
  auto tail = Fill(20, 0x11);
  std::fill_n(tail.begin(), 10, std::byte{0x22});
  EXPECT_EQ(ReadAll(m, kBlock + 1090, 20), tail);
}

TEST(VolatileCacheMediaTest, NothingReachesTheInnerMediaBeforeSync) {
  auto inner = std::make_shared<HookMedia>(kSize);
  VolatileCacheMedia m(inner, 7);
  auto a = ::ftl::testing::Pattern(1, 0, 3 * kBlock);
  auto b = ::ftl::testing::Pattern(2, 100000, 777);
  ASSERT_OK(m.Write(0, a));
  const std::span<const std::byte> pieces[] = {std::span(b).first(300), std::span(b).subspan(300)};
  ASSERT_OK(m.WriteGather(100000, pieces));
  m.Prepare(0, 3 * kBlock);
  m.StartWriteback(0, 3 * kBlock);
  m.StartWriteback(100000, 777);
  EXPECT_EQ(inner->writes_, 0u);
  EXPECT_EQ(Image(*inner), Fill(kSize, 0));
  EXPECT_EQ(m.cached_bytes(), 3 * kBlock + 777);
  EXPECT_EQ(m.cached_ranges(), 2u);

  ASSERT_OK(m.Sync());
  EXPECT_EQ(inner->syncs_, 1u);
  EXPECT_EQ(m.cached_bytes(), 0u);
  EXPECT_EQ(m.cached_ranges(), 0u);
  EXPECT_EQ(ReadAll(*inner, 0, a.size()), a);
  EXPECT_EQ(ReadAll(*inner, 100000, b.size()), b);
  // One inner write per sector piece: 24 whole sectors, then 777 bytes at
  // 100000 = sector 195 + 160 bytes: 352 bytes to the sector's end, 425 in
  // the next, two pieces.
  EXPECT_EQ(inner->writes_, 24u + 2u);
  EXPECT_EQ(m.sectors_written_through(), 26u);
  // Reads are unchanged by the sync.
  EXPECT_EQ(ReadAll(m, 0, a.size()), a);
  EXPECT_EQ(ReadAll(m, 100000, b.size()), b);
  // A sync with nothing cached still syncs the inner media.
  ASSERT_OK(m.Sync());
  EXPECT_EQ(inner->syncs_, 2u);
  EXPECT_EQ(inner->writes_, 26u);
}

TEST(VolatileCacheMediaTest, DiscardReadsZerosAndReachesTheInnerMediaAtSync) {
  auto inner = std::make_shared<HookMedia>(kSize);
  ASSERT_OK(inner->Write(0, Fill(8 * kBlock, 0x33)));
  VolatileCacheMedia m(inner, 3);
  ASSERT_OK(m.Discard(0, 8 * kBlock));
  ASSERT_OK(m.Write(2 * kBlock, Fill(kBlock, 0x44)));  // inside the discard
  EXPECT_EQ(m.cached_bytes(), kBlock);                 // a discard holds no buffer
  EXPECT_EQ(m.cached_ranges(), 3u);                    // discard, write, discard
  std::vector<std::byte> want = Fill(8 * kBlock, 0);
  std::fill_n(want.begin() + 2 * kBlock, kBlock, std::byte{0x44});
  EXPECT_EQ(ReadAll(m, 0, 8 * kBlock), want);
  EXPECT_EQ(ReadAll(*inner, 0, 8 * kBlock), Fill(8 * kBlock, 0x33));  // old data after a crash
  ASSERT_OK(m.Sync());
  EXPECT_EQ(inner->discards_, 2u);  // one step per discarded range left
  EXPECT_EQ(ReadAll(*inner, 0, 8 * kBlock), want);
}

TEST(VolatileCacheMediaTest, OverlappingWritesNewestWinsAgainstAModel) {
  // Random writes and discards, many overlapping (sub-sector, unaligned,
  // splitting and covering each other), syncs now and then: the cache
  // always reads as the model, the inner media equals the model after every
  // sync, and the cached byte count returns to zero.
  constexpr uint64_t kSpan = 64 << 10;
  auto inner = NewMemMedia(kSpan);
  VolatileCacheMedia m(inner, 11);
  std::vector<std::byte> model(kSpan);
  std::mt19937_64 rng(5);
  for (int op = 0; op < 4000; ++op) {
    uint64_t off = rng() % kSpan;
    uint64_t len = 1 + rng() % (rng() % 4 == 0 ? 16384 : 1200);
    if (off + len > kSpan) len = kSpan - off;
    int kind = int(rng() % 20);
    if (kind < 15) {
      auto d = ::ftl::testing::Pattern(uint64_t(op) + 1, off, len);
      ASSERT_OK(m.Write(off, d));
      std::copy(d.begin(), d.end(), model.begin() + long(off));
    } else if (kind < 18) {
      ASSERT_OK(m.Discard(off, len));
      std::fill_n(model.begin() + long(off), len, std::byte{0});
    } else {
      ASSERT_OK(m.Sync());
      ASSERT_EQ(Image(*inner), model) << "op " << op;
      ASSERT_EQ(m.cached_bytes(), 0u);
    }
    if (op % 50 == 0) {
      ASSERT_EQ(Image(m), model) << "op " << op;
    }
    uint64_t ro = rng() % kSpan, rl = std::min<uint64_t>(1 + rng() % 5000, kSpan - ro);
    ASSERT_EQ(ReadAll(m, ro, rl),
              std::vector<std::byte>(model.begin() + long(ro), model.begin() + long(ro + rl)))
        << "op " << op;
  }
  ASSERT_OK(m.Sync());
  EXPECT_EQ(Image(*inner), model);
}

TEST(VolatileCacheMediaTest, CachedBytesCountBuffersUntilFullyOverwritten) {
  VolatileCacheMedia m(NewMemMedia(kSize), 1);
  ASSERT_OK(m.Write(0, Fill(64 * kBlock, 1)));
  ASSERT_OK(m.Write(8 * kBlock, Fill(kBlock, 2)));  // splits the first write in two
  EXPECT_EQ(m.cached_ranges(), 3u);
  EXPECT_EQ(m.cached_bytes(), 65 * kBlock);  // the first buffer is still referenced
  ASSERT_OK(m.Write(0, Fill(8 * kBlock, 3)));
  EXPECT_EQ(m.cached_bytes(), 73 * kBlock);
  ASSERT_OK(m.Write(9 * kBlock, Fill(55 * kBlock, 4)));  // the last piece of the first
  EXPECT_EQ(m.cached_bytes(), (1 + 8 + 55) * kBlock);
  EXPECT_EQ(m.cached_ranges(), 3u);
  ASSERT_OK(m.Write(0, Fill(64 * kBlock, 5)));  // covers everything
  EXPECT_EQ(m.cached_bytes(), 64 * kBlock);
  EXPECT_EQ(m.cached_ranges(), 1u);
}

TEST(VolatileCacheMediaTest, DestagesPastTheLimitWithoutSyncing) {
  auto inner = std::make_shared<HookMedia>(kSize);
  VolatileCacheMedia m(inner, 2, /*max_cached_bytes=*/16 * kBlock);
  std::vector<std::byte> model(kSize);
  for (uint64_t i = 0; i < 40; ++i) {
    auto d = ::ftl::testing::Pattern(i + 1, i * 5000, 3 * kBlock);
    ASSERT_OK(m.Write(i * 5000, d));
    std::copy(d.begin(), d.end(), model.begin() + long(i * 5000));
    EXPECT_LE(m.cached_bytes(), 16 * kBlock) << "write " << i;
  }
  EXPECT_EQ(m.destages(), 7u);  // five 12 KiB writes fit: writes 6, 11, ..., 36 destage
  EXPECT_EQ(inner->syncs_, 0u);  // a destage does not sync
  EXPECT_GT(inner->writes_, 0u);
  EXPECT_EQ(Image(m), model);
  // What was destaged is on the inner media; the rest is not yet.
  auto in = Image(*inner);
  EXPECT_NE(in, model);
  EXPECT_NE(in, Fill(kSize, 0));
  ASSERT_OK(m.Sync());
  EXPECT_EQ(Image(*inner), model);
  // One write larger than the limit is cached whole (then destaged by the next).
  ASSERT_OK(m.Write(0, Fill(20 * kBlock, 9)));
  EXPECT_EQ(m.cached_bytes(), 20 * kBlock);
  ASSERT_OK(m.Write(kSize - kBlock, Fill(kBlock, 8)));
  EXPECT_EQ(m.cached_bytes(), kBlock);
  EXPECT_EQ(ReadAll(*inner, 0, 20 * kBlock), Fill(20 * kBlock, 9));
}

TEST(VolatileCacheMediaTest, AFailedDestageFailsTheWriteAndChangesNothing) {
  auto inner = std::make_shared<HookMedia>(kSize);
  VolatileCacheMedia m(inner, 2, /*max_cached_bytes=*/2 * kBlock);
  ASSERT_OK(m.Write(0, Fill(2 * kBlock, 1)));
  inner->dead_after_ = 1;
  EXPECT_FALSE(m.Write(8 * kBlock, Fill(kBlock, 2)).ok());
  EXPECT_EQ(ReadAll(m, 8 * kBlock, kBlock), Fill(kBlock, 0));
  EXPECT_EQ(ReadAll(m, 0, 2 * kBlock), Fill(2 * kBlock, 1));  // put back, still cached
  EXPECT_EQ(m.cached_bytes(), 2 * kBlock);
  inner->dead_after_ = 0;
  ASSERT_OK(m.Sync());
  EXPECT_EQ(ReadAll(*inner, 0, 2 * kBlock), Fill(2 * kBlock, 1));
}

// The image of the inner media after a sync that died after k sector
// writes: every sector is its synced content or the newest cached content,
// exactly k are the new one (the patterns differ in every sector), and the
// sectors written are no prefix by offset (the order is shuffled).
TEST(VolatileCacheMediaTest, ATornSyncLeavesSyncedDataPlusASubsetOfInFlightSectors) {
  constexpr uint64_t kSpan = 256 << 10;
  const uint64_t sectors = kSpan / kSector;
  for (uint64_t k : {0ull, 1ull, 37ull, 150ull, 300ull}) {
    auto fault = std::make_shared<FaultMedia>(kSpan);
    VolatileCacheMedia m(fault, 100 + k);
    auto old_data = ::ftl::testing::Pattern(1, 0, kSpan);
    ASSERT_OK(m.Write(0, old_data));
    ASSERT_OK(m.Sync());
    // New data: overlapping writes over most of the span (some sectors are
    // left out: they must stay old), newest winning.
    std::vector<std::byte> newest = old_data;
    std::mt19937_64 rng(k);
    for (int i = 0; i < 40; ++i) {
      uint64_t off = (rng() % sectors) * kSector;
      uint64_t len = std::min<uint64_t>((1 + rng() % 64) * kSector, kSpan - off);
      auto d = ::ftl::testing::Pattern(uint64_t(i) + 2, off, len);
      ASSERT_OK(m.Write(off, d));
      std::copy(d.begin(), d.end(), newest.begin() + long(off));
    }
    std::vector<bool> in_flight(sectors);
    size_t in_flight_count = 0;
    for (uint64_t s = 0; s < sectors; ++s) {
      in_flight[s] = !std::equal(newest.begin() + long(s * kSector),
                                 newest.begin() + long((s + 1) * kSector),
                                 old_data.begin() + long(s * kSector));
      in_flight_count += in_flight[s];
    }
    ASSERT_GT(in_flight_count, k);
    ASSERT_LT(in_flight_count, sectors);
    fault->FailNthWrite(k + 1);
    EXPECT_FALSE(m.Sync().ok());
    // The device now holds the synced data plus exactly k in-flight sectors.
    auto image = Image(*fault);
    size_t new_sectors = 0, new_among_first_k = 0, in_flight_seen = 0;
    for (uint64_t s = 0; s < sectors; ++s) {
      auto got = std::span(image).subspan(s * kSector, kSector);
      bool is_old = std::equal(got.begin(), got.end(), old_data.begin() + long(s * kSector));
      bool is_new = std::equal(got.begin(), got.end(), newest.begin() + long(s * kSector));
      ASSERT_TRUE(is_old || is_new) << "k " << k << ": sector " << s << " is neither";
      if (in_flight[s] && in_flight_seen++ < k && is_new) ++new_among_first_k;
      if (is_new && !is_old) {
        ASSERT_TRUE(in_flight[s]);
        ++new_sectors;
      }
    }
    EXPECT_EQ(new_sectors, k);
    // Written in offset order, the k sectors would be the first k in flight.
    if (k >= 37) {
      EXPECT_LT(new_among_first_k, k) << "written in offset order";
    }
    // The failed sync kept everything cached: reads are the newest data,
    // and the next sync completes it.
    EXPECT_EQ(Image(m), newest);
    ASSERT_OK(m.Sync());
    EXPECT_EQ(Image(*fault), newest);
  }
}

TEST(VolatileCacheMediaTest, TheSeedFixesTheOrder) {
  auto torn = [](uint64_t seed) {
    auto fault = std::make_shared<FaultMedia>(64 << 10);
    VolatileCacheMedia m(fault, seed);
    EXPECT_OK(m.Write(0, Fill(64 << 10, 0x5a)));
    fault->FailNthWrite(40);
    EXPECT_FALSE(m.Sync().ok());
    return Image(*fault);
  };
  EXPECT_EQ(torn(1), torn(1));
  EXPECT_NE(torn(1), torn(2));
}

TEST(VolatileCacheMediaTest, WritesDuringASyncStayCachedAndReadsSeeTheSyncingData) {
  auto inner = std::make_shared<HookMedia>(kSize);
  VolatileCacheMedia m(inner, 4);
  auto a = ::ftl::testing::Pattern(1, 0, 16 * kBlock);
  auto b = ::ftl::testing::Pattern(2, 0, 2 * kBlock);
  auto c = ::ftl::testing::Pattern(3, 64 * kBlock, kBlock);
  ASSERT_OK(m.Write(0, a));
  std::vector<std::byte> seen_a, seen_b;
  // Halfway through the write-through of `a` (on the syncing thread itself:
  // the cache lock is free while it writes), read `a` back, overwrite part
  // of it and write elsewhere.
  inner->hook_ = [&](uint64_t n) {
    if (n != 64) return;
    seen_a = ReadAll(m, 0, a.size());
    EXPECT_OK(m.Write(kBlock, b));
    EXPECT_OK(m.Write(64 * kBlock, c));
    seen_b = ReadAll(m, 0, a.size());
  };
  ASSERT_OK(m.Sync());
  inner->hook_ = nullptr;
  EXPECT_EQ(seen_a, a);
  auto want = a;
  std::copy(b.begin(), b.end(), want.begin() + kBlock);
  EXPECT_EQ(seen_b, want);
  EXPECT_EQ(ReadAll(m, 0, a.size()), want);
  // The sync wrote `a` only; b and c wait for the next one.
  EXPECT_EQ(ReadAll(*inner, 0, a.size()), a);
  EXPECT_EQ(ReadAll(*inner, 64 * kBlock, kBlock), Fill(kBlock, 0));
  EXPECT_EQ(m.cached_bytes(), 3 * kBlock);
  ASSERT_OK(m.Sync());
  EXPECT_EQ(ReadAll(*inner, 0, a.size()), want);
  EXPECT_EQ(ReadAll(*inner, 64 * kBlock, kBlock), c);
}

TEST(VolatileCacheMediaTest, AFailedSyncPutsItsDataUnderNewerWrites) {
  auto inner = std::make_shared<HookMedia>(kSize);
  VolatileCacheMedia m(inner, 4);
  ASSERT_OK(m.Write(0, Fill(8 * kBlock, 1)));
  ASSERT_OK(m.Discard(16 * kBlock, 4 * kBlock));
  // During the write-through, newer writes land over parts of it; then the
  // inner media fails.
  inner->hook_ = [&](uint64_t n) {
    if (n != 10) return;
    EXPECT_OK(m.Write(2 * kBlock, Fill(kBlock, 2)));
    EXPECT_OK(m.Write(7 * kBlock + 100, Fill(2 * kBlock, 3)));
    EXPECT_OK(m.Write(17 * kBlock, Fill(kBlock, 4)));
    inner->dead_after_ = 20;
  };
  EXPECT_FALSE(m.Sync().ok());
  inner->hook_ = nullptr;
  std::vector<std::byte> want(24 * kBlock);
  std::fill_n(want.begin(), 8 * kBlock, std::byte{1});
  std::fill_n(want.begin() + 2 * kBlock, kBlock, std::byte{2});
  std::fill_n(want.begin() + 7 * kBlock + 100, 2 * kBlock, std::byte{3});
  std::fill_n(want.begin() + 17 * kBlock, kBlock, std::byte{4});
  EXPECT_EQ(ReadAll(m, 0, want.size()), want);
  EXPECT_EQ(m.cached_bytes(), 8 * kBlock + 4 * kBlock);  // every buffer counted once
  inner->dead_after_ = 0;
  ASSERT_OK(m.Sync());
  EXPECT_EQ(ReadAll(*inner, 0, want.size()), want);
  EXPECT_EQ(m.cached_bytes(), 0u);
}

TEST(VolatileCacheMediaTest, ConcurrentWritersReadersAndSyncs) {
  // Each writer owns a region and rewrites its blocks with increasing
  // versions, reading each back at once; one thread syncs, the limit forces
  // destages. At the end the inner media holds every last version.
  constexpr int kWriters = 4;
  constexpr uint64_t kRegion = 64 * kBlock;
  auto inner = NewMemMedia(kWriters * kRegion);
  VolatileCacheMedia m(inner, 9, /*max_cached_bytes=*/32 * kBlock);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::vector<std::byte>> last(kWriters, std::vector<std::byte>(kRegion));
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng{uint64_t(w)};
      for (uint64_t v = 1; v <= 3000; ++v) {
        uint64_t off = w * kRegion + (rng() % (kRegion / kSector)) * kSector;
        uint64_t len = std::min<uint64_t>((1 + rng() % 16) * kSector, (w + 1) * kRegion - off);
        auto d = ::ftl::testing::Pattern(v * 8 + uint64_t(w), off, len);
        if (!m.Write(off, d).ok()) ++failures;
        std::copy(d.begin(), d.end(), last[size_t(w)].begin() + long(off - w * kRegion));
        if (ReadAll(m, off, len) != d) ++failures;
      }
    });
  }
  std::thread syncer([&] {
    while (!stop) {
      if (!m.Sync().ok()) ++failures;
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  syncer.join();
  EXPECT_EQ(failures, 0);
  EXPECT_GT(m.destages(), 0u);
  ASSERT_OK(m.Sync());
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_EQ(ReadAll(*inner, w * kRegion, kRegion), last[size_t(w)]) << "writer " << w;
  }
}

}  // namespace
}  // namespace ftl::media
