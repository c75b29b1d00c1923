// commit::SegmentAllocator on its own, over a fresh MapState (all segments
// free): one open segment per placement slot, sealing, the three claims on
// the last free segments, the freeing reserve, resuming open segments at a
// clean open and sealing the hot ones at close (docs/architecture.md,
// "Segments").

#include <gtest/gtest.h>

#include <set>

#include "commit/segment_allocator.h"
#include "part_test_util.h"

namespace ftl::commit {
namespace {

using gc::Slot;
using log::SegmentState;
using log::Stream;

constexpr uint32_t kSegs = 16;
constexpr uint32_t kBlocks = 64;
constexpr uint64_t kDataOffset = 1 << 20;

class SegmentAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.map = std::make_unique<state::MapState>(kSegs, kBlocks);
    state_.InitPins(kSegs);
    alloc_.Configure(kDataOffset, kBlocks);
  }
  log::SegmentTable& segs() { return state_.map->segments(); }
  // Leaves exactly n segments free among those not open (taking or giving
  // back the highest-numbered ones, as if elsewhere filled or released).
  void SetFree(uint32_t n) {
    uint32_t free = segs().free_count();
    for (uint32_t s = kSegs; s-- > 0 && free > n;) {
      if (segs().at(s).state == SegmentState::kFree) {
        segs().Load(s, SegmentState::kFull);
        --free;
      }
    }
    for (uint32_t s = kSegs; s-- > 0 && free < n;) {
      if (segs().at(s).state == SegmentState::kFull) {
        segs().Load(s, SegmentState::kFree);
        ++free;
      }
    }
    ASSERT_EQ(segs().free_count(), n);
  }
  bool Ensure(Slot slot, Claim claim, uint32_t blocks = 1, uint64_t next_seq = 100) {
    const Stream stream = claim == Claim::kRelocation ? Stream::kRelocation : Stream::kUser;
    return alloc_.EnsureRoom(slot, stream, blocks, claim, next_seq);
  }
  // Fills the slot's open segment (no room for anything).
  void Fill(Slot slot) { segs().at(alloc_.open(slot)).write_ptr = kBlocks; }

  state::PoolState state_;
  gc::Placement placement_;  // passive unless a test activates it
  std::shared_ptr<parts::CountingMedia> media_ =
      std::make_shared<parts::CountingMedia>(NewMemMedia(kDataOffset + kSegs * kBlocks * kBlockSize));
  SegmentAllocator alloc_{media_, &state_, &placement_};
};

TEST_F(SegmentAllocatorTest, NothingIsOpenAtFirst) {
  for (Slot s : {Slot::kHot, Slot::kCold, Slot::kGc, Slot::kHotGc}) {
    EXPECT_EQ(alloc_.open(s), UINT32_MAX);
    for (Claim c : {Claim::kPlain, Claim::kFreeing, Claim::kRelocation})
      EXPECT_EQ(alloc_.Room(s, c), 0u);
  }
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 0u);
}

TEST_F(SegmentAllocatorTest, EnsureRoomOpensOneSegmentPerSlot) {
  ASSERT_TRUE(alloc_.EnsureRoom(Slot::kCold, Stream::kUser, 10, Claim::kPlain, 5));
  ASSERT_TRUE(alloc_.EnsureRoom(Slot::kHot, Stream::kUser, 1, Claim::kPlain, 6));
  ASSERT_TRUE(alloc_.EnsureRoom(Slot::kGc, Stream::kRelocation, 1, Claim::kRelocation, 7));
  ASSERT_TRUE(alloc_.EnsureRoom(Slot::kHotGc, Stream::kRelocation, 1, Claim::kRelocation, 8));
  std::set<uint32_t> opened;
  struct Want {
    Slot slot;
    Stream stream;
    bool hot;
    uint64_t seq;
  };
  for (Want w : {Want{Slot::kCold, Stream::kUser, false, 5}, Want{Slot::kHot, Stream::kUser, true, 6},
                 Want{Slot::kGc, Stream::kRelocation, false, 7},
                 Want{Slot::kHotGc, Stream::kRelocation, true, 8}}) {
    const uint32_t s = alloc_.open(w.slot);
    ASSERT_LT(s, kSegs);
    opened.insert(s);
    const log::SegmentInfo& si = segs().at(s);
    EXPECT_EQ(si.state, SegmentState::kOpen);
    EXPECT_EQ(si.stream, w.stream);
    EXPECT_EQ(si.hot, w.hot);
    EXPECT_EQ(si.opened_seq, w.seq);
    EXPECT_EQ(si.write_ptr, 0u);
  }
  EXPECT_EQ(opened.size(), 4u);
  EXPECT_EQ(segs().free_count(), kSegs - 4);
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kPlain), kBlocks);
  // The media was told each opened segment is about to be written in full.
  absl::MutexLock l(&media_->mu);
  ASSERT_EQ(media_->prepared.size(), 4u);
  for (auto [off, len] : media_->prepared) {
    EXPECT_EQ((off - kDataOffset) % (uint64_t(kBlocks) * kBlockSize), 0u);
    EXPECT_TRUE(opened.count(uint32_t((off - kDataOffset) / (uint64_t(kBlocks) * kBlockSize))));
    EXPECT_EQ(len, uint64_t(kBlocks) * kBlockSize);
  }
}

TEST_F(SegmentAllocatorTest, TheOpenSegmentIsKeptWhileItHasRoomThenSealed) {
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, 10, 5));
  const uint32_t first = alloc_.open(Slot::kCold);
  segs().at(first).write_ptr = 50;
  segs().at(first).max_seq = 30;
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kPlain), 14u);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, 14, 31));
  EXPECT_EQ(alloc_.open(Slot::kCold), first);
  EXPECT_EQ(segs().free_count(), kSegs - 1);
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 0u);
  // 15 blocks do not fit: sealed (dated by the last seq before the next
  // record) and a fresh one opened.
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, 15, 31));
  const uint32_t second = alloc_.open(Slot::kCold);
  EXPECT_NE(second, first);
  EXPECT_EQ(segs().at(first).state, SegmentState::kFull);
  EXPECT_EQ(segs().at(first).sealed_seq, 30u);
  EXPECT_EQ(segs().at(first).write_ptr, 50u);
  EXPECT_EQ(segs().at(second).state, SegmentState::kOpen);
  EXPECT_EQ(segs().free_count(), kSegs - 2);
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 4u);  // a user segment counts 4
  // Its write-back can start: the sealed segment's written blocks.
  absl::MutexLock l(&media_->mu);
  ASSERT_EQ(media_->written_back.size(), 1u);
  EXPECT_EQ(media_->written_back[0].first, kDataOffset + uint64_t(first) * kBlocks * kBlockSize);
  EXPECT_EQ(media_->written_back[0].second, 50u * kBlockSize);
}

TEST_F(SegmentAllocatorTest, SegmentsAreTakenRoundRobin) {
  std::vector<uint32_t> order;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, kBlocks));
    order.push_back(alloc_.open(Slot::kCold));
    Fill(Slot::kCold);
  }
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2}));
  // Segment 0 comes back free: the next one is still after the cursor.
  segs().Load(0, SegmentState::kFree);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, kBlocks));
  EXPECT_EQ(alloc_.open(Slot::kCold), 3u);
}

TEST_F(SegmentAllocatorTest, TheCursorWrapsAround) {
  // Everything but segments 1 and 15 in use.
  for (uint32_t s = 0; s < kSegs; ++s)
    if (s != 1 && s != 15) segs().Load(s, SegmentState::kFull);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kRelocation, kBlocks));
  EXPECT_EQ(alloc_.open(Slot::kCold), 1u);
  Fill(Slot::kCold);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kRelocation, kBlocks));
  EXPECT_EQ(alloc_.open(Slot::kCold), 15u);
  Fill(Slot::kCold);
  segs().Load(0, SegmentState::kFree);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kRelocation, kBlocks));
  EXPECT_EQ(alloc_.open(Slot::kCold), 0u);
}

// Placement passive: the cleaner keeps 1 segment, freeing requests leave
// it that one, plain requests leave one more.
TEST_F(SegmentAllocatorTest, ClaimsOnTheLastFreeSegments) {
  SetFree(3);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain));
  EXPECT_EQ(segs().free_count(), 2u);
  // A plain request cannot open another: the open one stays open.
  const uint32_t cold = alloc_.open(Slot::kCold);
  Fill(Slot::kCold);
  EXPECT_FALSE(Ensure(Slot::kCold, Claim::kPlain));
  EXPECT_EQ(alloc_.open(Slot::kCold), cold);
  EXPECT_EQ(segs().at(cold).state, SegmentState::kOpen);
  EXPECT_FALSE(Ensure(Slot::kHot, Claim::kPlain));
  EXPECT_EQ(alloc_.open(Slot::kHot), UINT32_MAX);
  EXPECT_EQ(segs().free_count(), 2u);
  // A request that frees space may.
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kFreeing));
  EXPECT_NE(alloc_.open(Slot::kCold), cold);
  EXPECT_EQ(segs().at(cold).state, SegmentState::kFull);
  EXPECT_EQ(segs().free_count(), 1u);
  EXPECT_FALSE(Ensure(Slot::kHot, Claim::kFreeing));  // the cleaner's
  // The cleaner may take the last one.
  ASSERT_TRUE(Ensure(Slot::kGc, Claim::kRelocation));
  EXPECT_EQ(segs().free_count(), 0u);
  EXPECT_FALSE(Ensure(Slot::kHotGc, Claim::kRelocation));
  EXPECT_EQ(alloc_.open(Slot::kHotGc), UINT32_MAX);
}

// Placement active: the cleaner keeps 2 (one per relocation slot).
TEST_F(SegmentAllocatorTest, ClaimsWithPlacementActive) {
  placement_.set_active(true);
  SetFree(4);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain));  // 4 > 3
  EXPECT_FALSE(Ensure(Slot::kHot, Claim::kPlain));  // 3 left
  ASSERT_TRUE(Ensure(Slot::kHot, Claim::kFreeing));  // 3 > 2
  Fill(Slot::kHot);
  EXPECT_FALSE(Ensure(Slot::kHot, Claim::kFreeing));  // 2 left
  ASSERT_TRUE(Ensure(Slot::kGc, Claim::kRelocation));
  ASSERT_TRUE(Ensure(Slot::kHotGc, Claim::kRelocation));
  EXPECT_EQ(segs().free_count(), 0u);
}

TEST_F(SegmentAllocatorTest, ASegmentOpenedFromTheReserveIsOffLimitsToPlainRequests) {
  SetFree(2);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kFreeing));  // takes plain requests' reserve
  const uint32_t seg = alloc_.open(Slot::kCold);
  EXPECT_EQ(segs().free_count(), 1u);
  EXPECT_FALSE(alloc_.MayUseOpen(Slot::kCold, Claim::kPlain));
  EXPECT_TRUE(alloc_.MayUseOpen(Slot::kCold, Claim::kFreeing));
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kPlain), 0u);
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kFreeing), kBlocks);
  // Though it has room, a plain request gets none, and the segment stays
  // open for the requests that free.
  EXPECT_FALSE(Ensure(Slot::kCold, Claim::kPlain));
  EXPECT_EQ(alloc_.open(Slot::kCold), seg);
  EXPECT_EQ(segs().at(seg).state, SegmentState::kOpen);
  EXPECT_EQ(segs().free_count(), 1u);
  // The cleaner releases segments: the reserve is back, the segment is
  // anyone's, and stays so.
  SetFree(3);
  EXPECT_TRUE(alloc_.MayUseOpen(Slot::kCold, Claim::kPlain));
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kPlain), kBlocks);
  SetFree(1);
  EXPECT_TRUE(alloc_.MayUseOpen(Slot::kCold, Claim::kPlain));
  EXPECT_TRUE(Ensure(Slot::kCold, Claim::kPlain, 10));
  EXPECT_EQ(alloc_.open(Slot::kCold), seg);
}

TEST_F(SegmentAllocatorTest, AFreeingOpenWithPlentyFreeIsNotFromTheReserve) {
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kFreeing));
  EXPECT_TRUE(alloc_.MayUseOpen(Slot::kCold, Claim::kPlain));
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kPlain), kBlocks);
}

TEST_F(SegmentAllocatorTest, SealIfFullSealsWhenFewerThanTwoBlocksAreLeft) {
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain));
  ASSERT_TRUE(Ensure(Slot::kGc, Claim::kRelocation));
  const uint32_t cold = alloc_.open(Slot::kCold), gc = alloc_.open(Slot::kGc);
  absl::MutexLock l(&state_.map_mu);
  segs().at(cold).write_ptr = kBlocks - 2;
  alloc_.SealIfFullLocked(Slot::kCold, Stream::kUser, 9);
  EXPECT_EQ(segs().at(cold).state, SegmentState::kOpen);  // room for a one-block record
  EXPECT_EQ(alloc_.open(Slot::kCold), cold);
  segs().at(cold).write_ptr = kBlocks - 1;
  alloc_.SealIfFullLocked(Slot::kCold, Stream::kUser, 9);
  EXPECT_EQ(segs().at(cold).state, SegmentState::kFull);
  EXPECT_EQ(segs().at(cold).sealed_seq, 9u);
  EXPECT_EQ(alloc_.open(Slot::kCold), UINT32_MAX);
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 4u);
  segs().at(gc).write_ptr = kBlocks;
  alloc_.SealIfFullLocked(Slot::kGc, Stream::kRelocation, 11);
  EXPECT_EQ(segs().at(gc).state, SegmentState::kFull);
  EXPECT_EQ(segs().at(gc).sealed_seq, 11u);
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 5u);  // the cleaner's counts 1
}

TEST_F(SegmentAllocatorTest, SealedSinceCheckpointCountsUserSegmentsFourTimes) {
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, kBlocks));
    Fill(Slot::kCold);
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ensure(Slot::kGc, Claim::kRelocation, kBlocks));
    Fill(Slot::kGc);
  }
  // Sealed so far: 1 user (the second open sealed the first), 3 relocation.
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 1u * 4 + 3u * 1);
  alloc_.CheckpointTaken();
  EXPECT_EQ(alloc_.sealed_since_checkpoint(), 0u);
}

TEST_F(SegmentAllocatorTest, AdoptOpenSegmentsResumesOnePerStream) {
  auto open = [&](uint32_t s, Stream st, uint64_t max_seq, uint32_t wp) {
    segs().Load(s, SegmentState::kOpen);
    segs().at(s).stream = st;
    segs().at(s).max_seq = max_seq;
    segs().at(s).write_ptr = wp;
  };
  open(3, Stream::kUser, 10, 20);
  open(5, Stream::kUser, 12, 30);  // a second user one (was hot)
  open(7, Stream::kRelocation, 15, 5);
  open(9, Stream::kRelocation, 20, 6);
  alloc_.AdoptOpenSegments();
  EXPECT_EQ(alloc_.open(Slot::kCold), 3u);
  EXPECT_EQ(alloc_.open(Slot::kGc), 7u);
  EXPECT_EQ(alloc_.open(Slot::kHot), UINT32_MAX);
  EXPECT_EQ(alloc_.open(Slot::kHotGc), UINT32_MAX);
  EXPECT_EQ(segs().at(3).state, SegmentState::kOpen);
  EXPECT_EQ(segs().at(3).opened_seq, 10u);
  EXPECT_EQ(segs().at(5).state, SegmentState::kFull);
  EXPECT_EQ(segs().at(5).sealed_seq, 12u);
  EXPECT_EQ(segs().at(9).state, SegmentState::kFull);
  EXPECT_EQ(segs().at(9).sealed_seq, 20u);
  // Appending resumes at the write pointer.
  EXPECT_EQ(alloc_.Room(Slot::kCold, Claim::kPlain), kBlocks - 20);
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain, kBlocks - 20));
  EXPECT_EQ(alloc_.open(Slot::kCold), 3u);
}

TEST_F(SegmentAllocatorTest, SealHotSegmentsLeavesOnlyOneOpenPerStream) {
  ASSERT_TRUE(Ensure(Slot::kHot, Claim::kPlain));
  ASSERT_TRUE(Ensure(Slot::kCold, Claim::kPlain));
  ASSERT_TRUE(Ensure(Slot::kGc, Claim::kRelocation));
  ASSERT_TRUE(Ensure(Slot::kHotGc, Claim::kRelocation));
  const uint32_t hot = alloc_.open(Slot::kHot), hot_gc = alloc_.open(Slot::kHotGc);
  segs().at(hot).max_seq = 41;
  segs().at(hot_gc).max_seq = 42;
  alloc_.SealHotSegments();
  EXPECT_EQ(alloc_.open(Slot::kHot), UINT32_MAX);
  EXPECT_EQ(alloc_.open(Slot::kHotGc), UINT32_MAX);
  EXPECT_EQ(segs().at(hot).state, SegmentState::kFull);
  EXPECT_EQ(segs().at(hot).sealed_seq, 41u);
  EXPECT_EQ(segs().at(hot_gc).sealed_seq, 42u);
  EXPECT_EQ(segs().at(alloc_.open(Slot::kCold)).state, SegmentState::kOpen);
  EXPECT_EQ(segs().at(alloc_.open(Slot::kGc)).state, SegmentState::kOpen);
}

TEST(ClaimOfTest, ByStreamAndWhetherEveryRequestFrees) {
  Request frees, plain;
  frees.frees = true;
  EXPECT_EQ(ClaimOf({&frees}, Stream::kRelocation), Claim::kRelocation);
  EXPECT_EQ(ClaimOf({&plain}, Stream::kRelocation), Claim::kRelocation);
  EXPECT_EQ(ClaimOf({&frees, &frees}, Stream::kUser), Claim::kFreeing);
  EXPECT_EQ(ClaimOf({&frees, &plain}, Stream::kUser), Claim::kPlain);
  EXPECT_EQ(ClaimOf({&plain}, Stream::kUser), Claim::kPlain);
}

}  // namespace
}  // namespace ftl::commit
