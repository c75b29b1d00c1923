// Tests for media::FaultMedia: the volatile-cache crash model, tearing,
// injected I/O errors and bit flips.

#include "media/fault_media.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "status_asserts.h"

namespace ftl::media {
namespace {

using testing::HasSubstr;
using Mode = CrashPlan::Mode;

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kSize = 1 << 20;

std::vector<std::byte> Fill(size_t n, int value) {
  return std::vector<std::byte>(n, std::byte(value));
}

std::vector<std::byte> ReadAll(FaultMedia& m, uint64_t offset, size_t n) {
  std::vector<std::byte> out(n);
  absl::Status s = m.Read(offset, out);
  EXPECT_OK(s);
  return out;
}

std::vector<std::byte> Image(FaultMedia& m) { return ReadAll(m, 0, m.size()); }

CrashPlan Plan(Mode mode, size_t keep_count = 0, bool tear = false,
               uint64_t seed = 1) {
  CrashPlan p;
  p.mode = mode;
  p.keep_count = keep_count;
  p.tear_next = tear;
  p.seed = seed;
  return p;
}

TEST(FaultMediaTest, FreshMediaIsZeroWithZeroCounters) {
  FaultMedia m(kSize);
  EXPECT_EQ(m.size(), kSize);
  EXPECT_EQ(m.Describe(), "fault-injecting memory");
  EXPECT_EQ(Image(m), Fill(kSize, 0));
  EXPECT_FALSE(m.crashed());
  EXPECT_EQ(m.unsynced_writes(), 0u);
  EXPECT_EQ(m.writes(), 0u);
  EXPECT_EQ(m.bytes_written(), 0u);
  EXPECT_EQ(m.syncs(), 0u);
}

TEST(FaultMediaTest, WritesAreVisibleBeforeSyncAndCounted) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(kBlock, 1)));
  ASSERT_OK(m.Write(kBlock, Fill(100, 2)));
  EXPECT_EQ(ReadAll(m, 0, kBlock), Fill(kBlock, 1));
  EXPECT_EQ(ReadAll(m, kBlock, 100), Fill(100, 2));
  EXPECT_EQ(m.unsynced_writes(), 2u);
  EXPECT_EQ(m.writes(), 2u);
  EXPECT_EQ(m.bytes_written(), kBlock + 100);
  ASSERT_OK(m.Sync());
  EXPECT_EQ(m.unsynced_writes(), 0u);
  EXPECT_EQ(m.syncs(), 1u);
}

TEST(FaultMediaTest, DropAllLosesUnsyncedKeepsSynced) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(kBlock, 0xa1)));
  ASSERT_OK(m.Sync());
  ASSERT_OK(m.Write(0, Fill(kBlock, 0xb2)));  // overwrite, unsynced
  ASSERT_OK(m.Write(8 * kBlock, Fill(kBlock, 0xc3)));  // new, unsynced
  m.Crash();
  EXPECT_TRUE(m.crashed());
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_FALSE(m.crashed());
  EXPECT_EQ(m.unsynced_writes(), 0u);
  std::vector<std::byte> want = Fill(kSize, 0);
  std::fill_n(want.begin(), kBlock, std::byte{0xa1});
  EXPECT_EQ(Image(m), want);
  // The device works normally after Restart.
  ASSERT_OK(m.Write(kBlock, Fill(kBlock, 0xd4)));
  ASSERT_OK(m.Sync());
  m.Crash();
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_EQ(ReadAll(m, kBlock, kBlock), Fill(kBlock, 0xd4));
}

TEST(FaultMediaTest, KeepPrefixKeepsExactlyThePrefixInIssueOrder) {
  for (size_t keep = 0; keep <= 6; ++keep) {
    FaultMedia m(kSize);
    ASSERT_OK(m.Write(0, Fill(6 * kBlock, 0xee)));
    ASSERT_OK(m.Sync());
    // Writes 0..4 go to blocks 0..4 with value i+1; write 5 overwrites block 0.
    for (int i = 0; i < 5; ++i) {
      ASSERT_OK(m.Write(i * kBlock, Fill(kBlock, i + 1)));
    }
    ASSERT_OK(m.Write(0, Fill(kBlock, 0x66)));
    ASSERT_EQ(m.unsynced_writes(), 6u);
    m.Crash();
    m.Restart(Plan(Mode::kKeepPrefix, keep));
    std::vector<std::byte> want = Fill(kSize, 0);
    std::fill_n(want.begin(), 6 * kBlock, std::byte{0xee});
    for (size_t i = 0; i < std::min<size_t>(keep, 5); ++i) {
      std::fill_n(want.begin() + i * kBlock, kBlock, std::byte(i + 1));
    }
    if (keep == 6) std::fill_n(want.begin(), kBlock, std::byte{0x66});
    EXPECT_EQ(Image(m), want) << "keep_count=" << keep;
  }
}

// Writes `old_value` durably over [0, 64 KiB), then one unsynced 64 KiB write
// whose every 512-byte sector holds a distinct non-zero value, then a second
// unsynced write elsewhere; crashes and restarts with `plan`.
void TornWriteScenario(FaultMedia& m, const CrashPlan& plan) {
  ASSERT_OK(m.Write(0, Fill(64 * 1024, 0xaa)));
  ASSERT_OK(m.Sync());
  std::vector<std::byte> fresh(64 * 1024);
  for (size_t i = 0; i < fresh.size(); ++i) fresh[i] = std::byte(1 + i / 512);
  ASSERT_OK(m.Write(0, fresh));
  ASSERT_OK(m.Write(128 * 1024, Fill(kBlock, 0x77)));
  m.Crash();
  m.Restart(plan);
}

TEST(FaultMediaTest, TearNextMixesWholeOldAndNewSectorsOnly) {
  FaultMedia m(kSize);
  TornWriteScenario(m, Plan(Mode::kDropAll, 0, /*tear=*/true, /*seed=*/42));
  auto img = Image(m);
  int old_sectors = 0, new_sectors = 0;
  for (size_t s = 0; s < 128; ++s) {
    auto first = img[s * 512];
    bool is_old = first == std::byte{0xaa};
    bool is_new = first == std::byte(1 + s);
    ASSERT_TRUE(is_old || is_new) << "sector " << s << " holds neither";
    for (size_t i = 1; i < 512; ++i) {
      ASSERT_EQ(img[s * 512 + i], first) << "sector " << s << " is itself torn";
    }
    (is_old ? old_sectors : new_sectors)++;
  }
  EXPECT_GT(old_sectors, 0);
  EXPECT_GT(new_sectors, 0);
  // Only the first non-kept write is torn; the rest of the media is untouched.
  img.erase(img.begin(), img.begin() + 64 * 1024);
  EXPECT_EQ(img, Fill(kSize - 64 * 1024, 0));
}

TEST(FaultMediaTest, TearIsDeterministicForASeed) {
  FaultMedia a(kSize), b(kSize), c(kSize);
  TornWriteScenario(a, Plan(Mode::kDropAll, 0, true, 7));
  TornWriteScenario(b, Plan(Mode::kDropAll, 0, true, 7));
  TornWriteScenario(c, Plan(Mode::kDropAll, 0, true, 8));
  EXPECT_EQ(Image(a), Image(b));
  EXPECT_NE(Image(a), Image(c));
}

TEST(FaultMediaTest, TearNextTearsTheFirstWriteAfterTheKeptPrefix) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(kBlock, 0x11)));            // kept
  ASSERT_OK(m.Write(kBlock, Fill(32 * kBlock, 0x22)));  // torn
  ASSERT_OK(m.Write(64 * kBlock, Fill(kBlock, 0x33)));  // dropped
  m.Crash();
  m.Restart(Plan(Mode::kKeepPrefix, 1, true, 3));
  EXPECT_EQ(ReadAll(m, 0, kBlock), Fill(kBlock, 0x11));
  auto torn = ReadAll(m, kBlock, 32 * kBlock);
  size_t new_sectors = 0;
  for (size_t s = 0; s < torn.size() / 512; ++s) {
    auto sector = std::vector<std::byte>(torn.begin() + s * 512,
                                         torn.begin() + (s + 1) * 512);
    if (sector == Fill(512, 0x22)) {
      ++new_sectors;
    } else {
      EXPECT_EQ(sector, Fill(512, 0)) << s;
    }
  }
  EXPECT_GT(new_sectors, 0u);
  EXPECT_LT(new_sectors, torn.size() / 512);
  EXPECT_EQ(ReadAll(m, 64 * kBlock, kBlock), Fill(kBlock, 0));
}

TEST(FaultMediaTest, KeepRandomIsDeterministicPerSeedAndKeepsWholeWrites) {
  auto run = [](uint64_t seed, double p) {
    auto m = std::make_unique<FaultMedia>(kSize);
    for (int i = 0; i < 64; ++i) {
      EXPECT_OK(m->Write(i * kBlock, Fill(kBlock, i + 1)));
    }
    m->Crash();
    CrashPlan plan = Plan(Mode::kKeepRandom, 0, false, seed);
    plan.keep_probability = p;
    m->Restart(plan);
    return Image(*m);
  };
  auto a = run(1234, 0.5);
  EXPECT_EQ(a, run(1234, 0.5));
  EXPECT_NE(a, run(4321, 0.5));
  int kept = 0;
  for (int i = 0; i < 64; ++i) {
    auto block = std::vector<std::byte>(a.begin() + i * kBlock,
                                        a.begin() + (i + 1) * kBlock);
    if (block == Fill(kBlock, i + 1)) {
      ++kept;
    } else {
      EXPECT_EQ(block, Fill(kBlock, 0)) << "block " << i << " partially kept";
    }
  }
  EXPECT_GT(kept, 10);
  EXPECT_LT(kept, 54);
  // Probability 0 and 1 are exact.
  auto none = run(5, 0.0);
  EXPECT_EQ(none, Fill(kSize, 0));
  auto all = run(5, 1.0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(all[i * kBlock], std::byte(i + 1));
}

TEST(FaultMediaTest, InjectedReadFailures) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(4 * kBlock, 5)));
  m.FailReads(kBlock, kBlock);
  std::vector<std::byte> ok_buf(kBlock);
  EXPECT_OK(m.Read(0, ok_buf));
  EXPECT_OK(m.Read(2 * kBlock, ok_buf));
  std::vector<std::byte> buf(kBlock);
  for (uint64_t off : {kBlock, kBlock - 1, 2 * kBlock - 1}) {
    absl::Status s = m.Read(off, buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << off;
    EXPECT_THAT(std::string(s.message()), HasSubstr("injected I/O error"));
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::to_string(off)));
  }
  // Writes are unaffected by read failures.
  EXPECT_OK(m.Write(kBlock, Fill(kBlock, 6)));
  m.ClearFailures();
  EXPECT_EQ(ReadAll(m, kBlock, kBlock), Fill(kBlock, 6));
}

TEST(FaultMediaTest, InjectedWriteFailuresChangeNothing) {
  FaultMedia m(kSize);
  m.FailWrites(2 * kBlock, kBlock);
  absl::Status s = m.Write(2 * kBlock + 10, Fill(10, 9));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("injected I/O error"));
  EXPECT_EQ(m.Write(kBlock, Fill(2 * kBlock, 9)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(m.Discard(2 * kBlock, kBlock).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(m.writes(), 0u);
  EXPECT_EQ(m.bytes_written(), 0u);
  EXPECT_EQ(m.unsynced_writes(), 0u);
  EXPECT_EQ(Image(m), Fill(kSize, 0));
  EXPECT_OK(m.Write(0, Fill(kBlock, 9)));  // outside the range
  std::vector<std::byte> buf(kBlock);
  EXPECT_OK(m.Read(2 * kBlock, buf));
  m.ClearFailures();
  EXPECT_OK(m.Write(2 * kBlock, Fill(kBlock, 9)));
}

TEST(FaultMediaTest, FailNthWrite) {
  FaultMedia m(kSize);
  m.FailNthWrite(3);
  EXPECT_OK(m.Write(0, Fill(kBlock, 1)));
  EXPECT_OK(m.Write(kBlock, Fill(kBlock, 2)));
  absl::Status s = m.Write(2 * kBlock, Fill(kBlock, 3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("injected I/O error"));
  EXPECT_OK(m.Write(3 * kBlock, Fill(kBlock, 4)));  // only the 3rd fails
  EXPECT_EQ(ReadAll(m, 2 * kBlock, kBlock), Fill(kBlock, 0));
  EXPECT_EQ(m.writes(), 3u);
  EXPECT_EQ(m.unsynced_writes(), 3u);

  m.FailNthWrite(1);
  EXPECT_FALSE(m.Write(0, Fill(kBlock, 5)).ok());
  EXPECT_OK(m.Write(0, Fill(kBlock, 5)));

  m.FailNthWrite(2);
  m.FailNthWrite(0);  // cancels
  for (int i = 0; i < 4; ++i) EXPECT_OK(m.Write(0, Fill(kBlock, i)));
}

TEST(FaultMediaTest, FlipBitIsVisibleAndDurable) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(kBlock, 0x0f)));
  ASSERT_OK(m.Sync());
  m.FlipBit(10, 7);
  EXPECT_EQ(ReadAll(m, 10, 1)[0], std::byte{0x8f});
  EXPECT_EQ(ReadAll(m, 9, 1)[0], std::byte{0x0f});
  m.Crash();
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_EQ(ReadAll(m, 10, 1)[0], std::byte{0x8f});

  // A flip in bytes covered by an unsynced write survives its Sync.
  ASSERT_OK(m.Write(kBlock, Fill(kBlock, 0x01)));
  m.FlipBit(kBlock + 5, 0);
  EXPECT_EQ(ReadAll(m, kBlock + 5, 1)[0], std::byte{0x00});
  ASSERT_OK(m.Sync());
  m.Crash();
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_EQ(ReadAll(m, kBlock + 5, 1)[0], std::byte{0x00});
  EXPECT_EQ(ReadAll(m, kBlock + 6, 1)[0], std::byte{0x01});
}

TEST(FaultMediaTest, CallsAfterCrashFailUnavailableAndChangeNothing) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(kBlock, 0x10)));
  ASSERT_OK(m.Sync());
  ASSERT_OK(m.Write(0, Fill(kBlock, 0x20)));  // unsynced
  m.Crash();
  std::vector<std::byte> buf(kBlock);
  EXPECT_EQ(m.Read(0, buf).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(m.Write(kBlock, Fill(kBlock, 0x30)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(m.Sync().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(m.Discard(0, kBlock).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(m.crashed());
  EXPECT_EQ(m.writes(), 2u);
  EXPECT_EQ(m.bytes_written(), 2 * kBlock);
  EXPECT_EQ(m.syncs(), 1u);
  EXPECT_EQ(m.unsynced_writes(), 1u);
  m.Crash();  // idempotent
  m.Restart(Plan(Mode::kDropAll));
  // The Sync after Crash did not make the unsynced write durable, and the
  // Write/Discard after Crash left nothing behind.
  std::vector<std::byte> want = Fill(kSize, 0);
  std::fill_n(want.begin(), kBlock, std::byte{0x10});
  EXPECT_EQ(Image(m), want);
}

TEST(FaultMediaTest, DiscardZeroesAndIsLostLikeAWrite) {
  FaultMedia m(kSize);
  ASSERT_OK(m.Write(0, Fill(2 * kBlock, 0x44)));
  ASSERT_OK(m.Sync());
  ASSERT_OK(m.Discard(0, kBlock));
  EXPECT_EQ(ReadAll(m, 0, kBlock), Fill(kBlock, 0));
  EXPECT_EQ(m.unsynced_writes(), 1u);
  m.Crash();
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_EQ(ReadAll(m, 0, 2 * kBlock), Fill(2 * kBlock, 0x44));
  ASSERT_OK(m.Discard(kBlock, kBlock));
  ASSERT_OK(m.Sync());
  m.Crash();
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_EQ(ReadAll(m, kBlock, kBlock), Fill(kBlock, 0));
  EXPECT_EQ(ReadAll(m, 0, kBlock), Fill(kBlock, 0x44));
}

TEST(FaultMediaTest, OutOfRange) {
  FaultMedia m(kSize);
  std::vector<std::byte> buf(kBlock);
  EXPECT_EQ(m.Read(kSize - 1, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.Write(kSize, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.Write(UINT64_MAX - 10, buf).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.Discard(kSize - kBlock, 2 * kBlock).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.writes(), 0u);
  EXPECT_EQ(m.unsynced_writes(), 0u);
}

TEST(FaultMediaTest, ConcurrentWritersAndSyncs) {
  FaultMedia m(kSize);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 32; ++i) {
        ASSERT_OK(m.Write(uint64_t(t * 32 + i) * kBlock, Fill(kBlock, t + 1)));
        if (i % 8 == 7) {
          ASSERT_OK(m.Sync());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_OK(m.Sync());
  m.Crash();
  m.Restart(Plan(Mode::kDropAll));
  EXPECT_EQ(m.writes(), 128u);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(ReadAll(m, uint64_t(t * 32) * kBlock, 32 * kBlock),
              Fill(32 * kBlock, t + 1));
  }
}

}  // namespace
}  // namespace ftl::media
