// src/clone units: AttrMap intervals, CloneRange on trees, PlanMerge.

#include <gtest/gtest.h>

#include <random>

#include "map/attr_map.h"
#include "range/merge_plan.h"
#include "map/range_clone.h"
#include "log/segment_table.h"

namespace ftl::range {
namespace {

using log::kNoBlock;
using map::AttrMap;
using map::AttrRange;
using map::CloneRange;

TEST(AttrMapTest, SetClearSplitAndCoalesce) {
  AttrMap m;
  EXPECT_FALSE(m.Any(0, 100, 3));
  m.Apply(10, 10, 1, 0);  // [10,20) immutable
  EXPECT_TRUE(m.Any(19, 1, 1));
  EXPECT_FALSE(m.Any(20, 5, 1));
  EXPECT_FALSE(m.Any(0, 10, 1));
  EXPECT_FALSE(m.Any(10, 10, 2));
  m.Apply(15, 10, 2, 0);  // [15,25) non-persistent
  EXPECT_EQ(m.All(), (std::vector<AttrRange>{{10, 5, 1}, {15, 5, 3}, {20, 5, 2}}));
  m.Apply(12, 2, 0, 1);  // clear immutable in the middle
  EXPECT_EQ(m.All(), (std::vector<AttrRange>{{10, 2, 1}, {14, 1, 1}, {15, 5, 3}, {20, 5, 2}}));
  EXPECT_EQ(m.With(1), (std::vector<AttrRange>{{10, 2, 1}, {14, 6, 1}}));
  m.Apply(0, 100, 0, 3);
  EXPECT_TRUE(m.empty());
  m.Apply(0, 5, 1, 0);
  m.Apply(5, 5, 1, 0);
  EXPECT_EQ(m.All(), (std::vector<AttrRange>{{0, 10, 1}}));  // coalesced
}

TEST(AttrMapTest, RandomAgainstBitmap) {
  std::mt19937 rng(7);
  AttrMap m;
  std::vector<uint8_t> ref(300, 0);
  for (int it = 0; it < 2000; ++it) {
    Bno a = rng() % 300, n = 1 + rng() % 40;
    n = std::min<Bno>(n, 300 - a);
    uint8_t set = rng() % 4, clear = rng() % 4 & ~set;
    m.Apply(a, n, set, clear);
    for (Bno i = a; i < a + n; ++i) ref[i] = uint8_t((ref[i] | set) & ~clear);
    std::vector<uint8_t> got(300, 0);
    Bno prev_end = 0;
    for (const AttrRange& r : m.All()) {
      ASSERT_GE(r.lba, prev_end);
      ASSERT_NE(r.bits, 0);
      for (Bno i = r.lba; i < r.lba + r.count; ++i) got[i] = r.bits;
      prev_end = r.lba + r.count;
    }
    ASSERT_EQ(got, ref) << it;
    Bno q = rng() % 300, qn = 1 + rng() % 20;
    qn = std::min<Bno>(qn, 300 - q);
    bool any = false;
    for (Bno i = q; i < q + qn; ++i) any |= (ref[i] & 1) != 0;
    ASSERT_EQ(m.Any(q, qn, 1), any);
  }
}

TEST(CloneRangeTest, OverlappingCloneInOneTreeKeepsEveryVba) {
  log::SegmentTable segs(4, 64);
  map::VbaTable vbas(&segs, 1000);
  map::TreeContext ctx(&vbas);
  map::ExtentTree t(&ctx);
  // Blocks 0..7 map to VBAs 100..107, each with its own PBA.
  for (Bno i = 0; i < 8; ++i) vbas.Claim(100 + i);
  t.Assign(0, 8, 100);
  for (Bno i = 0; i < 8; ++i) vbas.SetPba(100 + i, i);
  CloneRange(t, 0, &t, 2, 8, &vbas);  // shift right by two, overlapping
  EXPECT_EQ(t.LookupOne(0), 100u);
  EXPECT_EQ(t.LookupOne(1), 101u);
  for (Bno i = 0; i < 8; ++i) EXPECT_EQ(t.LookupOne(2 + i), 100 + i);
  EXPECT_EQ(vbas.Get(100).refs, 2u);
  EXPECT_EQ(vbas.Get(107).refs, 1u);
  for (Bno i = 0; i < 8; ++i) EXPECT_EQ(vbas.Get(100 + i).pba, i);  // none was freed
  // Cloning a hole unmaps.
  CloneRange(t, 20, &t, 0, 4, &vbas);
  EXPECT_EQ(t.LookupOne(0), kNoBlock);
  EXPECT_EQ(t.LookupOne(3), kNoBlock);
  EXPECT_EQ(t.LookupOne(4), 102u);
}

TEST(MergePlanTest, ChangedInOneSourceConflictsAndPolicies) {
  std::vector<Bno> base = {1, 2, 3, 4, kNoBlock};
  std::vector<Bno> s0 = {1, 20, 3, 40, kNoBlock};
  std::vector<Bno> s1 = {1, 2, 30, 41, 50};
  MergePlan fail = PlanMerge(base, {s0, s1}, Policy::kFail);
  EXPECT_EQ(fail.conflicts, std::vector<Bno>{3});
  EXPECT_TRUE(fail.runs.empty());
  MergePlan first = PlanMerge(base, {s0, s1}, Policy::kFirst);
  EXPECT_EQ(first.conflicts, std::vector<Bno>{3});
  std::vector<int> pick;
  for (const MergeRun& r : first.runs)
    for (Bno k = 0; k < r.count; ++k) pick.push_back(r.source);
  EXPECT_EQ(pick, (std::vector<int>{-1, 0, 1, 0, 1}));
  MergePlan last = PlanMerge(base, {s0, s1}, Policy::kLast);
  pick.clear();
  for (const MergeRun& r : last.runs)
    for (Bno k = 0; k < r.count; ++k) pick.push_back(r.source);
  EXPECT_EQ(pick, (std::vector<int>{-1, 0, 1, 1, 1}));
  EXPECT_EQ(last.unchanged, 1u);
  EXPECT_EQ(last.taken, (std::vector<uint64_t>{1, 3}));
  // The same change in two sources is no conflict.
  MergePlan same = PlanMerge({1}, {{5}, {5}}, Policy::kFail);
  EXPECT_TRUE(same.conflicts.empty());
  EXPECT_EQ(same.runs.size(), 1u);
}

}  // namespace
}  // namespace ftl::range
