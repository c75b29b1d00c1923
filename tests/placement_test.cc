// Hot/cold placement (gc/placement.h): the classification rules, the pool
// sending overwrites to the hot segment and first writes to the cold one,
// and the cleaner model (bench/greedy_sim.cc) showing that the rule lowers
// write amplification on a skewed workload without raising it on a uniform
// one.

#include "gc/placement.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "absl/synchronization/blocking_counter.h"

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
  p.set_active(true);
  EXPECT_EQ(p.hot_lifespan(), 0u);
  EXPECT_EQ(p.ForUserWrite(std::nullopt, 1000), Slot::kCold);  // first write
  EXPECT_EQ(p.ForUserWrite(OldVersion{1, false}, 1'000'000), Slot::kHot);
  EXPECT_EQ(p.ForRelocation(true, 1, 1'000'000), Slot::kHotGc);
  EXPECT_EQ(p.ForRelocation(false, 999'999, 1'000'000), Slot::kGc);
}

TEST(Placement, YoungOverwritesAreHotAndHotBlocksStayHotLonger) {
  Placement p;
  p.set_active(true);
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
  EXPECT_EQ(p.ForRelocation(true, now - 3999, now), Slot::kHotGc);
  EXPECT_EQ(p.ForRelocation(true, now - 4000, now), Slot::kGc);
  EXPECT_EQ(p.ForRelocation(false, now - 10, now), Slot::kGc);
  // A version dated after `now` (a clock estimate) counts as age 0.
  EXPECT_EQ(p.ForUserWrite(OldVersion{now + 5, false}, now), Slot::kHot);
}

TEST(Placement, PassiveSendsRelocationsToGcAndProbesEveryNthBatch) {
  Placement p;
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.ForRelocation(true, 99, 100), Slot::kGc);
  int open = 0;
  for (uint64_t b = 0; b < 8 * Placement::kProbeEvery; ++b) open += p.HotSlotOpen(b);
  EXPECT_EQ(open, 8);
  p.set_active(true);
  EXPECT_TRUE(p.HotSlotOpen(1));
  EXPECT_EQ(p.ForRelocation(true, 99, 100), Slot::kHotGc);
}

TEST(SeparationMeter, PaysWhenHotBlocksAreOverwrittenTwiceAsOften) {
  gc::SeparationMeter m;
  // 100 overwrites of 1000 hot blocks vs 300 of 9000 others: 0.1 vs 0.033.
  for (int i = 0; i < 100; ++i) m.NoteOverwrite(true);
  for (int i = 0; i < 300; ++i) m.NoteOverwrite(false);
  EXPECT_EQ(m.EndWindow(1000, 9000), std::optional<bool>(true));
  // Same rate per live block (uniform writes): does not pay.
  for (int i = 0; i < 100; ++i) m.NoteOverwrite(true);
  for (int i = 0; i < 900; ++i) m.NoteOverwrite(false);
  EXPECT_EQ(m.EndWindow(1000, 9000), std::optional<bool>(false));
  // Too few samples (the counts were reset by the last window): no verdict.
  for (int i = 0; i < 10; ++i) m.NoteOverwrite(true);
  for (int i = 0; i < 500; ++i) m.NoteOverwrite(false);
  EXPECT_EQ(m.EndWindow(1000, 9000), std::nullopt);
  // ... and they carry over: 10 + 190 hot against 500 + 100 others pays.
  for (int i = 0; i < 190; ++i) m.NoteOverwrite(true);
  for (int i = 0; i < 100; ++i) m.NoteOverwrite(false);
  EXPECT_EQ(m.EndWindow(1000, 9000), std::optional<bool>(true));
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

// Through the pool: first writes go to the cold segment; while separation
// is passive only every kProbeEvery-th batch may use the hot slot; reads
// return what was written wherever it went, and a clean reopen adopts the
// open segments.
TEST(PlacementPool, FirstWritesColdOverwritesProbeTheHotSlot) {
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
  // Synchronous writes are one batch each: batches 64..79, of which 64 and
  // 72 are probes (every overwrite counts as hot before a hot segment was
  // cleaned).
  for (uint64_t b = 0; b < 16; ++b) {
    auto data = testing::Pattern(2, b * kB, kB);
    ASSERT_TRUE(vol->Write(b * kB, data).ok());
  }
  s = (*pool)->Stats();
  EXPECT_EQ(s.user_hot_write_bytes, 16 * kB / gc::Placement::kProbeEvery);
  std::vector<std::byte> got(kB);
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_TRUE(vol->Read(b * kB, got).ok());
    EXPECT_EQ(got, testing::Pattern(b < 16 ? 2 : 1, b * kB, kB)) << "block " << b;
  }
  auto check = (*pool)->Check(true);
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << check->problems[0];
  ASSERT_TRUE((*pool)->Close().ok());
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

// Random 4 KiB overwrites in batches of 32 on a pool filled to 70%: with
// 80% of them on 20% of the blocks the pool switches separation on and the
// hot slot takes most user writes; with uniform ones it stays passive and
// the hot slot gets only probes. The data stays intact either way.
PoolStats RunSkewed(double hot_fraction, std::vector<uint8_t>* model, Volume** vol_out,
                    std::unique_ptr<Pool>* pool_out) {
  auto media = NewMemMedia(64 << 20);
  FormatOptions f = testing::SmallFormat();
  f.over_provision = 0.05;
  auto probe = Pool::Format(media, f, testing::QuietOpen());
  EXPECT_TRUE(probe.ok());
  const Geometry geo = (*probe)->geometry();
  EXPECT_TRUE((*probe)->Close().ok());
  const uint64_t blocks = uint64_t(0.7 * geo.segment_count * geo.segment_blocks);
  f.volume_bytes = blocks * 4096;
  auto pool = Pool::Format(media, f, testing::QuietOpen());
  EXPECT_TRUE(pool.ok());
  Volume* vol = (*pool)->PrimaryVolume();
  model->assign(blocks, 0);
  std::mt19937_64 rng(7);
  std::vector<std::vector<std::byte>> bufs(32, std::vector<std::byte>(4096));
  auto batch = [&](auto pick) {
    std::vector<Volume::AsyncWrite> ws;
    absl::BlockingCounter left(32);
    for (int i = 0; i < 32; ++i) {
      uint64_t b = pick();
      uint8_t tag = uint8_t(++(*model)[b] | 1);
      (*model)[b] = tag;
      std::fill(bufs[i].begin(), bufs[i].end(), std::byte(tag));
      ws.push_back({b * 4096, bufs[i], false, [&](absl::Status s) {
                      EXPECT_TRUE(s.ok()) << s;
                      left.DecrementCount();
                    }});
    }
    vol->WriteAsyncBatch(std::move(ws));
    left.Wait();
  };
  // Overlapping writes in one batch would share a slot; the model keeps
  // the last tag, which is what the pool must return too.
  uint64_t next = 0;
  for (uint64_t i = 0; i < blocks / 32; ++i) batch([&] { return next++; });
  const uint64_t hot = blocks / 5;
  auto random = [&] {
    if (double(rng() >> 11) * 0x1.0p-53 < hot_fraction) return rng() % hot;
    return hot + rng() % (blocks - hot);
  };
  for (uint64_t i = 0; i < 6 * blocks / 32; ++i) batch(random);
  PoolStats s0 = (*pool)->Stats();
  for (uint64_t i = 0; i < 2 * blocks / 32; ++i) batch(random);
  PoolStats s1 = (*pool)->Stats();
  PoolStats d;
  d.user_write_bytes = s1.user_write_bytes - s0.user_write_bytes;
  d.user_hot_write_bytes = s1.user_hot_write_bytes - s0.user_hot_write_bytes;
  *vol_out = vol;
  *pool_out = std::move(*pool);
  return d;
}

void ExpectModel(Volume* vol, const std::vector<uint8_t>& model) {
  std::vector<std::byte> got(4096);
  for (uint64_t b = 0; b < model.size(); ++b) {
    ASSERT_TRUE(vol->Read(b * 4096, got).ok());
    ASSERT_EQ(got[0], std::byte(model[b])) << "block " << b;
    ASSERT_EQ(got[4095], std::byte(model[b])) << "block " << b;
  }
}

TEST(PlacementPool, SkewedWritesGoHotUniformOnesStayPassive) {
  std::vector<uint8_t> model;
  Volume* vol = nullptr;
  std::unique_ptr<Pool> pool;
  PoolStats skewed = RunSkewed(0.8, &model, &vol, &pool);
  EXPECT_GT(skewed.user_hot_write_bytes, skewed.user_write_bytes / 2);
  ExpectModel(vol, model);
  auto check = pool->Check(false);
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << check->problems[0];
  ASSERT_TRUE(pool->Close().ok());

  PoolStats uniform = RunSkewed(0.2, &model, &vol, &pool);
  EXPECT_LT(uniform.user_hot_write_bytes, uniform.user_write_bytes / 4);
  ExpectModel(vol, model);
  ASSERT_TRUE(pool->Close().ok());
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

// OpenOptions::placement pins the choice: off never uses the hot slot (not
// even for probes), on splits batches from the first overwrite.
TEST(PlacementPool, ModeOffNeverSeparatesModeOnAlways) {
  for (auto mode : {OpenOptions::Placement::kOff, OpenOptions::Placement::kOn}) {
    auto media = NewMemMedia(64 << 20);
    auto open = testing::QuietOpen(false);
    open.placement = mode;
    auto pool = Pool::Format(media, testing::SmallFormat(), open);
    ASSERT_TRUE(pool.ok()) << pool.status();
    Volume* vol = (*pool)->PrimaryVolume();
    const size_t kB = 4096;
    for (int round = 1; round <= 2; ++round)
      for (uint64_t b = 0; b < 32; ++b) ASSERT_TRUE(vol->Write(b * kB, testing::Pattern(round, b * kB, kB)).ok());
    const uint64_t hot = (*pool)->Stats().user_hot_write_bytes;
    if (mode == OpenOptions::Placement::kOff) EXPECT_EQ(hot, 0u);
    else EXPECT_EQ(hot, 32 * kB);  // every overwrite, before any hot segment was cleaned
    std::vector<std::byte> got(kB);
    for (uint64_t b = 0; b < 32; ++b) {
      ASSERT_TRUE(vol->Read(b * kB, got).ok());
      EXPECT_EQ(got, testing::Pattern(2, b * kB, kB));
    }
  }
}

}  // namespace
}  // namespace ftl
