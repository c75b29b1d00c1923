// Hot/cold placement (gc/placement.h): the classification rules, the pool
// sending overwrites to the hot segment and first writes to the cold one,
// and the cleaner model (bench/greedy_sim.cc) showing that the rule lowers
// write amplification on a skewed workload without raising it on a uniform
// one.

#include "gc/placement.h"

#include <gtest/gtest.h>

#include <cmath>

#include <random>
#include <vector>

#include "absl/synchronization/blocking_counter.h"

#include "ftl/pool.h"
#include "greedy_sim.h"
#include "status_asserts.h"
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

TEST(Placement, PassiveSendsRelocationsToGc) {
  Placement p;
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.ForRelocation(true, 99, 100), Slot::kGc);
  p.set_active(true);
  EXPECT_EQ(p.ForRelocation(true, 99, 100), Slot::kHotGc);
  EXPECT_EQ(p.ForRelocation(false, 99, 100), Slot::kGc);
}

// Feeds `n` random overwrites over `blocks` blocks (a fraction `hot_writes`
// of them to the first fifth) to a SampledSeparation, a window every
// `window` writes; returns the last verdict.
std::optional<bool> SampledVerdict(double hot_writes, uint64_t blocks, uint64_t n, uint64_t window,
                                   gc::SampledSeparation* m) {
  std::mt19937_64 rng(3);
  std::optional<bool> last;
  for (uint64_t b = 0; b < blocks; ++b) m->NoteWrite(0, b, b);
  const uint64_t hot = blocks / 5;
  for (uint64_t t = blocks; t < blocks + n; ++t) {
    const bool to_hot = double(rng() >> 11) * 0x1.0p-53 < hot_writes;
    m->NoteWrite(0, to_hot ? rng() % hot : hot + rng() % (blocks - hot), t);
    if (t % window == 0)
      if (auto v = m->EndWindow()) last = v;
  }
  return last;
}

TEST(SampledSeparation, SkewedWritesPayUniformOnesDoNot) {
  gc::SampledSeparation skewed(10000);
  EXPECT_EQ(SampledVerdict(0.8, 10000, 100000, 2500, &skewed), std::optional<bool>(true));
  EXPECT_GT(skewed.threshold(), 0u);
  gc::SampledSeparation uniform(10000);
  EXPECT_EQ(SampledVerdict(0.2, 10000, 100000, 2500, &uniform), std::optional<bool>(false));
  EXPECT_EQ(uniform.live_hot() + uniform.live_other(), 10000u);  // a small pool: every block
}

TEST(SampledSeparation, FirstWritesAreColdAndNoVerdictBeforeAThreshold) {
  gc::SampledSeparation m(1000);
  for (uint64_t b = 0; b < 1000; ++b) m.NoteWrite(0, b, b);
  EXPECT_EQ(m.live_other(), 1000u);
  EXPECT_EQ(m.live_hot(), 0u);
  // No overwrite yet: no samples, no threshold, no verdict.
  EXPECT_EQ(m.EndWindow(), std::nullopt);
  EXPECT_EQ(m.threshold(), 0u);
  // Overwrites before a threshold exists all stay cold; the window sets one.
  for (uint64_t b = 0; b < 100; ++b) m.NoteWrite(0, b, 2000 + b);
  EXPECT_EQ(m.live_hot(), 0u);
  EXPECT_EQ(m.EndWindow(), std::nullopt);  // no hot live blocks to compare with
  EXPECT_GT(m.threshold(), 0u);
}

TEST(SampledSeparation, LargePoolsAreSampled) {
  gc::SampledSeparation big(uint64_t(1) << 30);  // 4 TiB of blocks
  EXPECT_EQ(big.shift(), 16u);
  for (uint64_t b = 0; b < (uint64_t(1) << 20); ++b) big.NoteWrite(0, b, b);
  // About 1 in 65536 of 2^20 blocks: ~16.
  EXPECT_GT(big.live_other(), 2u);
  EXPECT_LT(big.live_other(), 64u);
  EXPECT_EQ(gc::SampledSeparation(1000).shift(), 0u);
  // Many volumes at the same rate: the sample stops growing at the cap.
  gc::SampledSeparation small(1000);
  for (uint32_t vol = 0; vol < 100; ++vol)
    for (uint64_t b = 0; b < 1000; ++b) small.NoteWrite(vol, b, b);
  EXPECT_EQ(small.live_hot() + small.live_other(), gc::SampledSeparation::kMaxSampled);
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

// Through the pool: while separation is passive every write goes to the
// cold segment; reads return what was written, and a clean reopen adopts
// the open segments.
TEST(PlacementPool, PassiveSendsAllUserWritesCold) {
  auto media = NewMemMedia(64 << 20);
  auto pool = Pool::Format(media, testing::SmallFormat(), testing::QuietOpen(false));
  ASSERT_OK(pool);
  Volume* vol = (*pool)->PrimaryVolume();
  const size_t kB = 4096;
  for (uint64_t b = 0; b < 64; ++b) {
    auto data = testing::Pattern(1, b * kB, kB);
    ASSERT_OK(vol->Write(b * kB, data));
  }
  PoolStats s = (*pool)->Stats();
  EXPECT_EQ(s.user_write_bytes, 64 * kB);
  EXPECT_EQ(s.user_hot_write_bytes, 0u);
  for (uint64_t b = 0; b < 16; ++b) {
    auto data = testing::Pattern(2, b * kB, kB);
    ASSERT_OK(vol->Write(b * kB, data));
  }
  s = (*pool)->Stats();
  EXPECT_EQ(s.user_hot_write_bytes, 0u);
  std::vector<std::byte> got(kB);
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_OK(vol->Read(b * kB, got));
    EXPECT_EQ(got, testing::Pattern(b < 16 ? 2 : 1, b * kB, kB)) << "block " << b;
  }
  auto check = (*pool)->Check(true);
  ASSERT_OK(check);
  EXPECT_TRUE(check->problems.empty()) << check->problems[0];
  ASSERT_OK((*pool)->Close());
  auto again = Pool::Open(media, testing::QuietOpen(false));
  ASSERT_OK(again);
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_OK((*again)->PrimaryVolume()->Read(b * kB, got));
    EXPECT_EQ(got, testing::Pattern(b < 16 ? 2 : 1, b * kB, kB)) << "block " << b;
  }
  auto check2 = (*again)->Check(true);
  ASSERT_OK(check2);
  EXPECT_TRUE(check2->problems.empty()) << check2->problems[0];
  ASSERT_OK((*again)->Close());
}

// Random 4 KiB overwrites in batches of 32 on a pool filled to 70%: with
// 80% of them on 20% of the blocks the pool switches separation on and the
// hot slot takes most user writes; with uniform ones it stays passive and
// the hot slot gets next to nothing. The data stays intact either way.
PoolStats RunSkewed(double hot_fraction, std::vector<uint8_t>* model, Volume** vol_out,
                    std::unique_ptr<Pool>* pool_out) {
  auto media = NewMemMedia(64 << 20);
  FormatOptions f = testing::SmallFormat();
  f.over_provision = 0.05;
  auto probe = Pool::Format(media, f, testing::QuietOpen());
  EXPECT_OK(probe);
  const Geometry geo = (*probe)->geometry();
  EXPECT_OK((*probe)->Close());
  const uint64_t blocks = uint64_t(0.7 * geo.segment_count * geo.segment_blocks);
  f.volume_bytes = blocks * 4096;
  auto pool = Pool::Format(media, f, testing::QuietOpen());
  EXPECT_OK(pool);
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
                      EXPECT_OK(s);
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
    ASSERT_OK(vol->Read(b * 4096, got));
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
  ASSERT_OK(check);
  EXPECT_TRUE(check->problems.empty()) << check->problems[0];
  ASSERT_OK(pool->Close());

  PoolStats uniform = RunSkewed(0.2, &model, &vol, &pool);
  EXPECT_LT(uniform.user_hot_write_bytes, uniform.user_write_bytes / 4);
  ExpectModel(vol, model);
  ASSERT_OK(pool->Close());
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

// The fluid limit: greedy = oldest-first, u = (1 - x) / -ln(x); checked
// against hand-solved points, and the two-class optimum can never lose to
// mixing both classes in one region (h = the hot data's share of the data).
TEST(PlacementModel, FluidLimitMatchesItsClosedForm) {
  for (double u : {0.5, 0.7, 0.8, 0.9}) {
    const double wa = bench::FluidGreedyWa(u);
    const double x = 1 - 1 / wa;
    EXPECT_NEAR((1 - x) / -std::log(x), u, 1e-9) << u;
  }
  EXPECT_NEAR(bench::FluidGreedyWa(0.8), 2.693, 0.001);
  EXPECT_NEAR(bench::FluidGreedyWa(0.9), 5.179, 0.001);
  double hot_space = 0;
  const double two = bench::FluidTwoClassWa({0.8, 0.2}, 0.8, &hot_space);
  EXPECT_NEAR(two, 1.998, 0.002);  // issue 2's "80/20 at 0.8 <= 2.0"
  EXPECT_NEAR(hot_space, 0.259, 0.002);
  // Uniform writes split by LBA gain nothing from separation.
  EXPECT_NEAR(bench::FluidTwoClassWa({0.2, 0.2}, 0.8), bench::FluidGreedyWa(0.8), 0.002);
}

// OpenOptions::placement pins the choice: off never uses the hot slot, on
// splits batches from the first overwrite.
TEST(PlacementPool, ModeOffNeverSeparatesModeOnAlways) {
  for (auto mode : {OpenOptions::Placement::kOff, OpenOptions::Placement::kOn}) {
    auto media = NewMemMedia(64 << 20);
    auto open = testing::QuietOpen(false);
    open.placement = mode;
    auto pool = Pool::Format(media, testing::SmallFormat(), open);
    ASSERT_OK(pool);
    Volume* vol = (*pool)->PrimaryVolume();
    const size_t kB = 4096;
    for (int round = 1; round <= 2; ++round)
      for (uint64_t b = 0; b < 32; ++b)
        ASSERT_OK(vol->Write(b * kB, testing::Pattern(round, b * kB, kB)));
    const uint64_t hot = (*pool)->Stats().user_hot_write_bytes;
    if (mode == OpenOptions::Placement::kOff) EXPECT_EQ(hot, 0u);
    else EXPECT_EQ(hot, 32 * kB);  // every overwrite, before any hot segment was cleaned
    std::vector<std::byte> got(kB);
    for (uint64_t b = 0; b < 32; ++b) {
      ASSERT_OK(vol->Read(b * kB, got));
      EXPECT_EQ(got, testing::Pattern(2, b * kB, kB));
    }
  }
}

}  // namespace
}  // namespace ftl
