// Hot/cold placement (gc/placement.h): the classification rules, the pool
// sending overwrites to the hot segment and first writes to the cold one,
// and the cleaner model (bench/greedy_sim.cc) showing that the rule lowers
// write amplification on a skewed workload without raising it on a uniform
// one.

#include "gc/placement.h"

#include <gtest/gtest.h>

#include <vector>

#include "ftl/pool.h"
#include "greedy_sim.h"
#include "test_util.h"

namespace ftl {
namespace {

using gc::OldVersion;
using gc::Placement;
using gc::Slot;

TEST(Placement, EveryOverwriteIsHotUntilAHotSegmentWasReclaimed) {
  Placement p;
  EXPECT_EQ(p.hot_lifespan(), 0u);
  EXPECT_EQ(p.ForUserWrite(std::nullopt, 1000), Slot::kCold);  // first write
  EXPECT_EQ(p.ForUserWrite(OldVersion{1, false}, 1'000'000), Slot::kHot);
  EXPECT_EQ(p.ForRelocation(true, 1, 1'000'000), Slot::kHot);
  EXPECT_EQ(p.ForRelocation(false, 999'999, 1'000'000), Slot::kGc);
}

TEST(Placement, YoungOverwritesAreHotAndHotBlocksStayHotLonger) {
  Placement p;
  p.HotSegmentReclaimed(1000);
  EXPECT_EQ(p.hot_lifespan(), 1000u);
  const uint64_t now = 100'000;
  // Younger than L: hot wherever the old version is.
  EXPECT_EQ(p.ForUserWrite(OldVersion{now - 999, false}, now), Slot::kHot);
  // Between L and 4L: hot only if the old version was hot.
  EXPECT_EQ(p.ForUserWrite(OldVersion{now - 2000, false}, now), Slot::kCold);
  EXPECT_EQ(p.ForUserWrite(OldVersion{now - 2000, true}, now), Slot::kHot);
  // Older than 4L: cold.
  EXPECT_EQ(p.ForUserWrite(OldVersion{now - 4000, true}, now), Slot::kCold);
  // Relocations: young blocks of hot segments stay hot, the rest go to the
  // relocation segment.
  EXPECT_EQ(p.ForRelocation(true, now - 3999, now), Slot::kHot);
  EXPECT_EQ(p.ForRelocation(true, now - 4000, now), Slot::kGc);
  EXPECT_EQ(p.ForRelocation(false, now - 10, now), Slot::kGc);
  // A version dated after `now` (a clock estimate) counts as age 0.
  EXPECT_EQ(p.ForUserWrite(OldVersion{now + 5, false}, now), Slot::kHot);
}

TEST(Placement, LifespanIsTheMeanOfTheLastWindow) {
  Placement p;
  for (uint32_t i = 0; i < Placement::kWindow; ++i) p.HotSegmentReclaimed(100);
  EXPECT_EQ(p.hot_lifespan(), 100u);
  // The window slides: after kWindow reclaims of 300 only those count.
  for (uint32_t i = 0; i < Placement::kWindow; ++i) p.HotSegmentReclaimed(300);
  EXPECT_EQ(p.hot_lifespan(), 300u);
  p.HotSegmentReclaimed(300 + 16 * Placement::kWindow);
  EXPECT_EQ(p.hot_lifespan(), 316u);
}

// Through the pool: a first write goes to the cold segment, an overwrite
// (before any hot segment was cleaned) to the hot one, and reads return
// what was written wherever it went.
TEST(PlacementPool, OverwritesGoToTheHotSegment) {
  auto media = NewMemMedia(64 << 20);
  auto pool = Pool::Format(media, testing::SmallFormat(), testing::QuietOpen(false));
  ASSERT_TRUE(pool.ok()) << pool.status();
  Volume* vol = (*pool)->PrimaryVolume();
  const size_t kB = 4096;
  for (uint64_t b = 0; b < 64; ++b) {
    auto data = testing::Pattern(1, b * kB, kB);
    ASSERT_TRUE(vol->Write(b * kB, data).ok());
  }
  PoolStats s = (*pool)->Stats();
  EXPECT_EQ(s.user_write_bytes, 64 * kB);
  EXPECT_EQ(s.user_hot_write_bytes, 0u);
  for (uint64_t b = 0; b < 16; ++b) {
    auto data = testing::Pattern(2, b * kB, kB);
    ASSERT_TRUE(vol->Write(b * kB, data).ok());
  }
  s = (*pool)->Stats();
  EXPECT_EQ(s.user_hot_write_bytes, 16 * kB);
  std::vector<std::byte> got(kB);
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_TRUE(vol->Read(b * kB, got).ok());
    EXPECT_EQ(got, testing::Pattern(b < 16 ? 2 : 1, b * kB, kB)) << "block " << b;
  }
  auto check = (*pool)->Check(true);
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << check->problems[0];
  ASSERT_TRUE((*pool)->Close().ok());
  // A clean reopen adopts the open segments (the hot one was sealed at
  // close) and the data is intact.
  auto again = Pool::Open(media, testing::QuietOpen(false));
  ASSERT_TRUE(again.ok()) << again.status();
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_TRUE((*again)->PrimaryVolume()->Read(b * kB, got).ok());
    EXPECT_EQ(got, testing::Pattern(b < 16 ? 2 : 1, b * kB, kB)) << "block " << b;
  }
  auto check2 = (*again)->Check(true);
  ASSERT_TRUE(check2.ok());
  EXPECT_TRUE(check2->problems.empty()) << check2->problems[0];
  ASSERT_TRUE((*again)->Close().ok());
}

// The cleaner model on a small geometry: with 80% of the writes to 20% of
// the blocks, temperature placement copies clearly less than separating
// relocations alone; with uniform writes it costs next to nothing.
double ModelWa(bench::Streams streams, bench::Workload wl) {
  bench::GreedyOptions o;
  o.segment_count = 128;
  o.segment_blocks = 256;
  o.volume_blocks = uint64_t(0.8 * o.segment_count * o.segment_blocks);
  o.reserve_segments = 4;
  o.policy = bench::VictimPolicy::kCostBenefit;
  o.streams = streams;
  o.workload = wl;
  o.warmup = 3;
  o.measure = 3;
  return bench::RunGreedy(o).write_amplification();
}

TEST(PlacementModel, SkewedWritesCopyLessUniformWritesNoMore) {
  const bench::Workload skewed{0.8, 0.2}, uniform{};
  const double sep = ModelWa(bench::Streams::kUserGc, skewed);
  const double temp = ModelWa(bench::Streams::kTemperature, skewed);
  const double oracle = ModelWa(bench::Streams::kOracle, skewed);
  EXPECT_LT(temp, sep - 0.2) << "user/relocation streams " << sep << ", placement " << temp;
  EXPECT_LE(oracle, temp) << "perfect separation must be at least as good";
  const double usep = ModelWa(bench::Streams::kUserGc, uniform);
  const double utemp = ModelWa(bench::Streams::kTemperature, uniform);
  EXPECT_LT(utemp, usep * 1.05) << "uniform: streams " << usep << ", placement " << utemp;
}

}  // namespace
}  // namespace ftl
