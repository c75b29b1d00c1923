#include "log/segment_table.h"

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
      free_count_(segment_count) {}

void SegmentTable::SetValid(Bno pba) {
  uint64_t& w = bits_[pba / 64];
  uint64_t m = uint64_t(1) << (pba % 64);
  // Invariant: a block becomes valid only once between erasures.
  assert(!(w & m));
  w |= m;
  ++segs_[SegmentOf(pba)].live;
  ++live_total_;
}

void SegmentTable::ClearValid(Bno pba) {
  uint64_t& w = bits_[pba / 64];
  uint64_t m = uint64_t(1) << (pba % 64);
  assert(w & m);
  w &= ~m;
  --segs_[SegmentOf(pba)].live;
  --live_total_;
}

void SegmentTable::ResetSegment(uint32_t seg) {
  Bno first = FirstBlock(seg);
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

void SegmentTable::SetState(uint32_t seg, SegmentState st) {
  SegmentInfo& s = segs_[seg];
  if (s.state == SegmentState::kFree) --free_count_;
  if (st == SegmentState::kFree) ++free_count_;
  s.state = st;
}

}  // namespace ftl::log
