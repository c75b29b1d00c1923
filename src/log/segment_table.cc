#include "log/segment_table.h"

#include <cstdio>
#include <cstdlib>

#include <cassert>

namespace ftl::log {

const char* SegmentStateName(SegmentState s) {
  switch (s) {
    case SegmentState::kFree: return "free";
    case SegmentState::kOpen: return "open";
    case SegmentState::kFull: return "full";
    case SegmentState::kCleaning: return "cleaning";
  }
  return "?";
}

SegmentTable::SegmentTable(uint32_t segment_count, uint32_t segment_blocks)
    : segment_blocks_(segment_blocks),
      segs_(segment_count),
      bits_((uint64_t(segment_count) * segment_blocks + 63) / 64),
      free_count_(segment_count) {
  state_counts_[size_t(SegmentState::kFree)] = segment_count;
}

void SegmentTable::SetValid(Bno pba) {
  uint64_t& w = bits_[pba / 64];
  uint64_t m = uint64_t(1) << (pba % 64);
  // Invariant: a block becomes valid only once between erasures.
  assert(!(w & m));
  w |= m;
  ++segs_[SegmentOf(Pba(pba))].live;
  ++live_total_;
}

void SegmentTable::ClearValid(Bno pba) {
  uint64_t& w = bits_[pba / 64];
  uint64_t m = uint64_t(1) << (pba % 64);
  assert(w & m);
  w &= ~m;
  --segs_[SegmentOf(Pba(pba))].live;
  --live_total_;
}

void SegmentTable::ResetSegment(uint32_t seg) {
  Bno first = FirstBlock(seg).value();
  for (Bno b = first; b < first + segment_blocks_; ++b) {
    if (IsValid(b)) ClearValid(b);
  }
  SegmentInfo& s = segs_[seg];
  s.write_ptr = 0;
  s.max_seq = 0;
  s.sealed_seq = 0;
  s.hot = false;
  s.opened_seq = 0;
  s.data_seq_sum = 0;
  s.data_count = 0;
}

void SegmentTable::Move(uint32_t seg, std::initializer_list<SegmentState> from, SegmentState to) {
  SegmentInfo& s = segs_[seg];
  bool legal = false;
  for (SegmentState f : from) legal |= s.state == f;
  if (!legal) {
    // A bug in the caller: the state machine is the contract (segment_table.h).
    std::fprintf(stderr, "segment %u: illegal transition %s -> %s\n", seg, SegmentStateName(s.state),
                 SegmentStateName(to));
    std::abort();
  }
  Load(seg, to);
}

void SegmentTable::Load(uint32_t seg, SegmentState st) {
  SegmentInfo& s = segs_[seg];
  if (s.state == SegmentState::kFree) --free_count_;
  if (st == SegmentState::kFree) ++free_count_;
  --state_counts_[size_t(s.state)];
  ++state_counts_[size_t(st)];
  s.state = st;
}

void SegmentTable::Open(uint32_t seg, Stream stream, bool hot, uint64_t next_seq) {
  Move(seg, {SegmentState::kFree}, SegmentState::kOpen);
  SegmentInfo& info = segs_[seg];
  info.stream = stream;
  info.discarded = false;
  info.write_ptr = 0;
  info.max_seq = 0;
  info.sealed_seq = 0;
  info.hot = hot;
  info.opened_seq = next_seq;
  info.data_seq_sum = 0;
  info.data_count = 0;
}

void SegmentTable::Seal(uint32_t seg, uint64_t sealed_seq) {
  Move(seg, {SegmentState::kOpen}, SegmentState::kFull);
  segs_[seg].sealed_seq = sealed_seq;
}

void SegmentTable::BeginCleaning(uint32_t seg) {
  Move(seg, {SegmentState::kFull}, SegmentState::kCleaning);
}

void SegmentTable::AbortCleaning(uint32_t seg) {
  Move(seg, {SegmentState::kCleaning}, SegmentState::kFull);
}

void SegmentTable::Release(uint32_t seg) {
  Move(seg, {SegmentState::kCleaning}, SegmentState::kFree);
  ResetSegment(seg);
}

void SegmentTable::BeginDiscard(uint32_t seg) {
  Move(seg, {SegmentState::kFree}, SegmentState::kCleaning);
}

void SegmentTable::EndDiscard(uint32_t seg) {
  Move(seg, {SegmentState::kCleaning}, SegmentState::kFree);
  segs_[seg].discarded = true;
}

void SegmentTable::MarkReplayed(uint32_t seg) {
  Move(seg, {SegmentState::kFree, SegmentState::kOpen}, SegmentState::kFull);
}

}  // namespace ftl::log
