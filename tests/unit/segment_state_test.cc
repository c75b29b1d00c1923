// log::SegmentTable on its own: the segment state machine (docs/
// architecture.md, "Segments"). Every legal transition keeps free_count
// right and sets the fields it names; every illegal one aborts.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "log/segment_table.h"

namespace ftl::log {
namespace {

constexpr uint32_t kSegs = 8;
constexpr uint32_t kBlocks = 64;

using S = SegmentState;

// Brings segment `seg` of a fresh table into state `s` by legal steps.
void Reach(SegmentTable& t, uint32_t seg, S s) {
  if (s == S::kFree) return;
  t.Open(seg, Stream::kUser, false, 10);
  if (s == S::kOpen) return;
  t.Seal(seg, 20);
  if (s == S::kFull) return;
  t.BeginCleaning(seg);
}

TEST(SegmentTable, StartsAllFree) {
  SegmentTable t(kSegs, kBlocks);
  EXPECT_EQ(t.count(), kSegs);
  EXPECT_EQ(t.segment_blocks(), kBlocks);
  EXPECT_EQ(t.free_count(), kSegs);
  EXPECT_EQ(t.live_blocks(), 0u);
  for (uint32_t s = 0; s < kSegs; ++s) {
    EXPECT_EQ(t.at(s).state, S::kFree);
    EXPECT_EQ(t.at(s).live, 0u);
    EXPECT_FALSE(t.at(s).discarded);
  }
}

TEST(SegmentTable, AddressesOfSegments) {
  SegmentTable t(kSegs, kBlocks);
  EXPECT_EQ(t.FirstBlock(0), Pba(0));
  EXPECT_EQ(t.FirstBlock(3), Pba(3 * kBlocks));
  EXPECT_EQ(t.SegmentOf(Pba(0)), 0u);
  EXPECT_EQ(t.SegmentOf(Pba(kBlocks - 1)), 0u);
  EXPECT_EQ(t.SegmentOf(Pba(kBlocks)), 1u);
  EXPECT_EQ(t.SegmentOf(t.FirstBlock(7) + (kBlocks - 1)), 7u);
}

TEST(SegmentTable, StateNames) {
  EXPECT_STREQ(SegmentStateName(S::kFree), "free");
  EXPECT_STREQ(SegmentStateName(S::kOpen), "open");
  EXPECT_STREQ(SegmentStateName(S::kFull), "full");
  EXPECT_STREQ(SegmentStateName(S::kCleaning), "cleaning");
}

TEST(SegmentTable, OpenResetsTheSegmentAndTakesItFromTheFreeCount) {
  SegmentTable t(kSegs, kBlocks);
  // Leftovers of an earlier life in every field Open must reset.
  SegmentInfo& si = t.at(2);
  si.write_ptr = 33;
  si.max_seq = 44;
  si.sealed_seq = 55;
  si.discarded = true;
  si.data_seq_sum = 66;
  si.data_count = 77;
  si.opened_seq = 88;
  si.stream = Stream::kUser;
  t.Open(2, Stream::kRelocation, /*hot=*/true, /*next_seq=*/123);
  EXPECT_EQ(t.free_count(), kSegs - 1);
  EXPECT_EQ(si.state, S::kOpen);
  EXPECT_EQ(si.stream, Stream::kRelocation);
  EXPECT_TRUE(si.hot);
  EXPECT_EQ(si.opened_seq, 123u);
  EXPECT_EQ(si.write_ptr, 0u);
  EXPECT_EQ(si.max_seq, 0u);
  EXPECT_EQ(si.sealed_seq, 0u);
  EXPECT_FALSE(si.discarded);
  EXPECT_EQ(si.data_seq_sum, 0u);
  EXPECT_EQ(si.data_count, 0u);
  // The others are untouched.
  EXPECT_EQ(t.at(1).state, S::kFree);
  EXPECT_EQ(t.at(3).state, S::kFree);
  t.Open(3, Stream::kUser, /*hot=*/false, 124);
  EXPECT_EQ(t.free_count(), kSegs - 2);
  EXPECT_FALSE(t.at(3).hot);
  EXPECT_EQ(t.at(3).stream, Stream::kUser);
}

TEST(SegmentTable, SealDatesTheSegmentAndKeepsItsContent) {
  SegmentTable t(kSegs, kBlocks);
  t.Open(1, Stream::kUser, false, 5);
  t.at(1).write_ptr = 40;
  t.at(1).max_seq = 9;
  t.Seal(1, 12);
  EXPECT_EQ(t.at(1).state, S::kFull);
  EXPECT_EQ(t.at(1).sealed_seq, 12u);
  EXPECT_EQ(t.at(1).write_ptr, 40u);
  EXPECT_EQ(t.at(1).max_seq, 9u);
  EXPECT_EQ(t.at(1).opened_seq, 5u);
  EXPECT_EQ(t.free_count(), kSegs - 1);
}

TEST(SegmentTable, CleaningCanBeAbortedBackToFull) {
  SegmentTable t(kSegs, kBlocks);
  Reach(t, 4, S::kFull);
  t.SetValid(t.FirstBlock(4).value() + 3);
  t.BeginCleaning(4);
  EXPECT_EQ(t.at(4).state, S::kCleaning);
  EXPECT_EQ(t.free_count(), kSegs - 1);
  t.AbortCleaning(4);
  EXPECT_EQ(t.at(4).state, S::kFull);
  EXPECT_EQ(t.free_count(), kSegs - 1);
  // Nothing was forgotten.
  EXPECT_EQ(t.at(4).sealed_seq, 20u);
  EXPECT_EQ(t.at(4).live, 1u);
  EXPECT_TRUE(t.IsValid(t.FirstBlock(4).value() + 3));
}

TEST(SegmentTable, ReleaseForgetsValidityAndFreesTheSegment) {
  SegmentTable t(kSegs, kBlocks);
  Reach(t, 2, S::kFull);
  Reach(t, 3, S::kFull);
  const Bno b2 = t.FirstBlock(2).value(), b3 = t.FirstBlock(3).value();
  for (Bno k : {0u, 1u, 63u}) t.SetValid(b2 + k);
  t.SetValid(b3 + 5);
  t.at(2).write_ptr = 64;
  t.at(2).max_seq = 30;
  t.at(2).hot = true;
  t.at(2).data_seq_sum = 90;
  t.at(2).data_count = 3;
  EXPECT_EQ(t.at(2).live, 3u);
  EXPECT_EQ(t.live_blocks(), 4u);
  t.BeginCleaning(2);
  t.Release(2);
  const SegmentInfo& si = t.at(2);
  EXPECT_EQ(si.state, S::kFree);
  EXPECT_EQ(t.free_count(), kSegs - 1);  // segment 3 is still full
  EXPECT_EQ(si.live, 0u);
  for (Bno k = 0; k < kBlocks; ++k) EXPECT_FALSE(t.IsValid(b2 + k)) << k;
  EXPECT_EQ(si.write_ptr, 0u);
  EXPECT_EQ(si.max_seq, 0u);
  EXPECT_EQ(si.sealed_seq, 0u);
  EXPECT_FALSE(si.hot);
  EXPECT_EQ(si.opened_seq, 0u);
  EXPECT_EQ(si.data_seq_sum, 0u);
  EXPECT_EQ(si.data_count, 0u);
  // Only that segment's blocks were forgotten.
  EXPECT_EQ(t.live_blocks(), 1u);
  EXPECT_TRUE(t.IsValid(b3 + 5));
  EXPECT_EQ(t.at(3).live, 1u);
  // A released segment opens again.
  t.Open(2, Stream::kUser, false, 31);
  EXPECT_EQ(t.at(2).state, S::kOpen);
  EXPECT_EQ(t.free_count(), kSegs - 2);
}

TEST(SegmentTable, DiscardTakesTheSegmentAwayAndReturnsItDiscarded) {
  SegmentTable t(kSegs, kBlocks);
  t.BeginDiscard(6);
  EXPECT_EQ(t.at(6).state, S::kCleaning);
  EXPECT_EQ(t.free_count(), kSegs - 1);  // not free while it is discarded
  EXPECT_FALSE(t.at(6).discarded);
  t.EndDiscard(6);
  EXPECT_EQ(t.at(6).state, S::kFree);
  EXPECT_EQ(t.free_count(), kSegs);
  EXPECT_TRUE(t.at(6).discarded);
  // Opening it clears the mark (it holds data again).
  t.Open(6, Stream::kUser, false, 1);
  EXPECT_FALSE(t.at(6).discarded);
}

TEST(SegmentTable, MarkReplayedFromFreeOrOpen) {
  SegmentTable t(kSegs, kBlocks);
  t.MarkReplayed(0);
  EXPECT_EQ(t.at(0).state, S::kFull);
  EXPECT_EQ(t.free_count(), kSegs - 1);
  t.Open(1, Stream::kUser, false, 1);
  EXPECT_EQ(t.free_count(), kSegs - 2);
  t.MarkReplayed(1);
  EXPECT_EQ(t.at(1).state, S::kFull);
  EXPECT_EQ(t.free_count(), kSegs - 2);
}

TEST(SegmentTable, LoadSetsAnyStateAndKeepsTheFreeCount) {
  SegmentTable t(kSegs, kBlocks);
  t.Load(0, S::kFull);
  t.Load(1, S::kOpen);
  t.Load(2, S::kCleaning);
  EXPECT_EQ(t.free_count(), kSegs - 3);
  t.Load(3, S::kFree);  // free -> free
  EXPECT_EQ(t.free_count(), kSegs - 3);
  t.Load(0, S::kCleaning);  // full -> cleaning
  EXPECT_EQ(t.free_count(), kSegs - 3);
  t.Load(1, S::kFree);
  t.Load(2, S::kFree);
  EXPECT_EQ(t.free_count(), kSegs - 1);
  EXPECT_EQ(t.at(0).state, S::kCleaning);
  EXPECT_EQ(t.at(1).state, S::kFree);
}

TEST(SegmentTable, ValidityCountsLiveBlocksPerSegmentAndInTotal) {
  SegmentTable t(kSegs, kBlocks);
  const Bno a = t.FirstBlock(1).value() + 7, b = t.FirstBlock(1).value() + 63,
            c = t.FirstBlock(5).value();
  t.SetValid(a);
  t.SetValid(b);
  t.SetValid(c);
  EXPECT_EQ(t.at(1).live, 2u);
  EXPECT_EQ(t.at(5).live, 1u);
  EXPECT_EQ(t.live_blocks(), 3u);
  EXPECT_TRUE(t.IsValid(a));
  EXPECT_FALSE(t.IsValid(a + 1));
  t.ClearValid(a);
  EXPECT_FALSE(t.IsValid(a));
  EXPECT_EQ(t.at(1).live, 1u);
  EXPECT_EQ(t.live_blocks(), 2u);
  t.ResetSegment(5);
  EXPECT_EQ(t.at(5).live, 0u);
  EXPECT_EQ(t.live_blocks(), 1u);
}

// A full cycle through every state, twice, over all segments: free_count
// always equals the number of segments in state free.
TEST(SegmentTable, FreeCountFollowsEveryTransition) {
  SegmentTable t(kSegs, kBlocks);
  auto check = [&](const char* after) {
    uint32_t n = 0;
    for (uint32_t s = 0; s < kSegs; ++s) n += t.at(s).state == S::kFree;
    ASSERT_EQ(t.free_count(), n) << after;
  };
  for (int round = 0; round < 2; ++round) {
    for (uint32_t s = 0; s < kSegs; ++s) {
      t.Open(s, Stream::kUser, s % 2, round);
      check("Open");
    }
    for (uint32_t s = 0; s < kSegs; ++s) {
      t.Seal(s, 1);
      check("Seal");
    }
    for (uint32_t s = 0; s < kSegs; ++s) {
      t.BeginCleaning(s);
      check("BeginCleaning");
      if (s % 3 == 0) {
        t.AbortCleaning(s);
        check("AbortCleaning");
        t.BeginCleaning(s);
      }
      t.Release(s);
      check("Release");
    }
    for (uint32_t s = 0; s < kSegs; s += 2) {
      t.BeginDiscard(s);
      check("BeginDiscard");
      t.EndDiscard(s);
      check("EndDiscard");
    }
  }
  EXPECT_EQ(t.free_count(), kSegs);
}

// ---- Illegal transitions abort (a bug in the caller).

struct Transition {
  const char* name;
  std::function<void(SegmentTable&, uint32_t)> run;
  std::vector<S> legal_from;
};

std::vector<Transition> AllTransitions() {
  return {
      {"Open", [](SegmentTable& t, uint32_t s) { t.Open(s, Stream::kUser, false, 1); }, {S::kFree}},
      {"Seal", [](SegmentTable& t, uint32_t s) { t.Seal(s, 1); }, {S::kOpen}},
      {"BeginCleaning", [](SegmentTable& t, uint32_t s) { t.BeginCleaning(s); }, {S::kFull}},
      {"AbortCleaning", [](SegmentTable& t, uint32_t s) { t.AbortCleaning(s); }, {S::kCleaning}},
      {"Release", [](SegmentTable& t, uint32_t s) { t.Release(s); }, {S::kCleaning}},
      {"BeginDiscard", [](SegmentTable& t, uint32_t s) { t.BeginDiscard(s); }, {S::kFree}},
      {"EndDiscard", [](SegmentTable& t, uint32_t s) { t.EndDiscard(s); }, {S::kCleaning}},
      {"MarkReplayed", [](SegmentTable& t, uint32_t s) { t.MarkReplayed(s); }, {S::kFree, S::kOpen}},
  };
}

TEST(SegmentTableDeathTest, NamedIllegalTransitionsAbort) {
  // The cases the contract names first.
  EXPECT_DEATH(
      {
        SegmentTable t(kSegs, kBlocks);
        t.Seal(3, 1);
      },
      "segment 3: illegal transition free -> full");
  EXPECT_DEATH(
      {
        SegmentTable t(kSegs, kBlocks);
        Reach(t, 2, S::kFull);
        t.Release(2);
      },
      "segment 2: illegal transition full -> ");
  EXPECT_DEATH(
      {
        SegmentTable t(kSegs, kBlocks);
        Reach(t, 1, S::kOpen);
        t.Open(1, Stream::kUser, false, 1);
      },
      "segment 1: illegal transition open -> open");
  EXPECT_DEATH(
      {
        SegmentTable t(kSegs, kBlocks);
        t.EndDiscard(0);
      },
      "segment 0: illegal transition free -> free");
  EXPECT_DEATH(
      {
        SegmentTable t(kSegs, kBlocks);
        Reach(t, 4, S::kCleaning);
        t.MarkReplayed(4);
      },
      "segment 4: illegal transition cleaning -> full");
}

// Every (state, transition) pair: legal ones succeed, the rest abort.
TEST(SegmentTableDeathTest, EveryTransitionFromEveryState) {
  int legal = 0, illegal = 0;
  for (S from : {S::kFree, S::kOpen, S::kFull, S::kCleaning}) {
    for (const Transition& tr : AllTransitions()) {
      const bool ok = std::find(tr.legal_from.begin(), tr.legal_from.end(), from) !=
                      tr.legal_from.end();
      const std::string what = std::string(tr.name) + " from " + SegmentStateName(from);
      if (ok) {
        ++legal;
        SegmentTable t(kSegs, kBlocks);
        Reach(t, 5, from);
        tr.run(t, 5);
        uint32_t n = 0;
        for (uint32_t s = 0; s < kSegs; ++s) n += t.at(s).state == S::kFree;
        EXPECT_EQ(t.free_count(), n) << what;
      } else {
        ++illegal;
        EXPECT_DEATH(
            {
              SegmentTable t(kSegs, kBlocks);
              Reach(t, 5, from);
              tr.run(t, 5);
            },
            std::string("segment 5: illegal transition ") + SegmentStateName(from))
            << what;
      }
    }
  }
  EXPECT_EQ(legal, 9);  // the arrows of the diagram
  EXPECT_EQ(illegal, 4 * 8 - 9);
}

}  // namespace
}  // namespace ftl::log
