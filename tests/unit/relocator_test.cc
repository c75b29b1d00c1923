// gc::Relocator on its own: the parts of an open pool wired as PoolImpl
// wires them (part_test_util.h: Engine), the relocator handing relocations
// to the committer, no cleaner thread. Candidates, CleanSegment,
// ReleaseCleaned and what they leave in the map and on the media.

#include "gc/relocator.h"

#include <gtest/gtest.h>

#include <map>

#include "part_test_util.h"

namespace ftl::gc {
namespace {

using log::Bno;
using parts::Blocks;
using parts::Engine;

class RelocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    e_ = std::make_unique<Engine>(parts::FormattedMem());
    ASSERT_OK(e_->Open());
    reloc_ = std::make_unique<Relocator>(e_->media, &e_->state, &e_->durability,
                                         &e_->checkpointer, &e_->placement);
    reloc_->Configure({e_->sb().data_offset, e_->sb().segment_blocks, /*discard=*/false});
    reloc_->set_sink(&e_->committer);
  }
  void TearDown() override {
    if (e_) {
      EXPECT_OK(e_->Close());
    }
  }
  uint32_t SegmentOf(Bno pba) { return pba / e_->sb().segment_blocks; }
  log::SegmentState StateOf(uint32_t seg) {
    absl::ReaderMutexLock l(&e_->state.map_mu);
    return e_->state.map->segments().at(seg).state;
  }
  std::unique_ptr<Engine> e_;
  std::unique_ptr<Relocator> reloc_;
};

TEST_F(RelocatorTest, CleaningMovesOnlyLiveBlocksAndKeepsTheirData) {
  const Bno seg_blocks = e_->sb().segment_blocks;
  // Blocks 0..n-1 written one record each, then half of them overwritten:
  // the first segment holds live and dead blocks.
  std::vector<std::unique_ptr<Blocks>> versions;
  std::map<Bno, const Blocks*> last;  // lba -> what it must read as
  const Bno n = seg_blocks;  // more than fits one segment with headers
  for (Bno i = 0; i < n; ++i) {
    versions.push_back(std::make_unique<Blocks>(1000 + i, 1));
    ASSERT_OK(e_->Write(0, i, *versions.back()));
    last[i] = versions.back().get();
  }
  const uint32_t victim = SegmentOf(e_->Pba(0, 0));
  ASSERT_EQ(StateOf(victim), log::SegmentState::kFull);
  std::vector<Bno> live_in_victim;
  for (Bno i = 0; i < n; ++i) {
    if (SegmentOf(e_->Pba(0, i)) != victim) continue;
    if (i % 2 == 0) {
      versions.push_back(std::make_unique<Blocks>(2000 + i, 1));
      ASSERT_OK(e_->Write(0, i, *versions.back()));
      last[i] = versions.back().get();
    } else {
      live_in_victim.push_back(i);
    }
  }
  ASSERT_FALSE(live_in_victim.empty());

  VictimInput in = reloc_->Candidates();
  bool listed = false;
  for (const auto& c : in.full) listed |= c.seg == victim;
  EXPECT_TRUE(listed);

  absl::StatusOr<uint32_t> moved = reloc_->CleanSegment(victim);
  ASSERT_OK(moved);
  EXPECT_EQ(*moved, live_in_victim.size());
  EXPECT_EQ(StateOf(victim), log::SegmentState::kCleaning);
  for (Bno lba : live_in_victim) {
    EXPECT_NE(SegmentOf(e_->Pba(0, lba)), victim) << "lba " << lba;
    EXPECT_TRUE(e_->Holds(0, lba, *last[lba], 0)) << "lba " << lba;
  }
  const uint32_t free_before = reloc_->FreeSegments();
  ASSERT_OK(reloc_->ReleaseCleaned());
  EXPECT_EQ(StateOf(victim), log::SegmentState::kFree);
  EXPECT_EQ(reloc_->FreeSegments(), free_before + 1);
  // Everything still reads as last written.
  for (const auto& [lba, data] : last) EXPECT_TRUE(e_->Holds(0, lba, *data, 0)) << "lba " << lba;
}

TEST_F(RelocatorTest, ASegmentWithNothingLiveIsReleasedWithoutReading) {
  const Bno seg_blocks = e_->sb().segment_blocks;
  Blocks a(1, 1), b(2, 1);
  for (Bno i = 0; i < seg_blocks; ++i) ASSERT_OK(e_->Write(0, 0, a));  // one LBA, many versions
  // Find a full segment none of whose blocks is live.
  ASSERT_OK(e_->Write(0, 0, b));
  const uint32_t now = SegmentOf(e_->Pba(0, 0));
  uint32_t victim = UINT32_MAX;
  {
    absl::ReaderMutexLock l(&e_->state.map_mu);
    const auto& segs = e_->state.map->segments();
    for (uint32_t s = 0; s < segs.count(); ++s)
      if (s != now && segs.at(s).state == log::SegmentState::kFull && segs.at(s).live == 0)
        victim = s;
  }
  ASSERT_NE(victim, UINT32_MAX);
  absl::StatusOr<uint32_t> moved = reloc_->CleanSegment(victim);
  ASSERT_OK(moved);
  EXPECT_EQ(*moved, 0u);
  ASSERT_OK(reloc_->ReleaseCleaned());
  EXPECT_EQ(StateOf(victim), log::SegmentState::kFree);
  EXPECT_TRUE(e_->Holds(0, 0, b, 0));
}

TEST_F(RelocatorTest, OnlyFullSegmentsAreCandidatesAndCleaningAnotherIsANoOp) {
  Blocks a(1, 4);
  ASSERT_OK(e_->Write(0, 0, a));
  const uint32_t open = SegmentOf(e_->Pba(0, 0));
  ASSERT_EQ(StateOf(open), log::SegmentState::kOpen);
  for (const auto& c : reloc_->Candidates().full) EXPECT_NE(c.seg, open);
  absl::StatusOr<uint32_t> moved = reloc_->CleanSegment(open);
  ASSERT_OK(moved);
  EXPECT_EQ(*moved, 0u);
  EXPECT_EQ(StateOf(open), log::SegmentState::kOpen);
  ASSERT_OK(reloc_->ReleaseCleaned());  // nothing was cleaned
  EXPECT_EQ(StateOf(open), log::SegmentState::kOpen);
  EXPECT_TRUE(e_->Holds(0, 0, a, 0));
}

}  // namespace
}  // namespace ftl::gc
