#include "gc/victim_policy.h"

namespace ftl::gc {

double CostBenefit(uint32_t live, uint32_t segment_blocks, uint64_t age) {
  double u = double(live) / double(segment_blocks);
  if (u >= 1.0) return -1;
  return (1.0 - u) * double(age + 1) / (1.0 + u);
}

VictimChoice PickVictim(const VictimInput& in) {
  VictimChoice out;
  double best = -1, best_blocked = -1;
  for (const SegmentView& s : in.full) {
    // Cleaning must free more than the relocation's own headers cost (one
    // header block per ~143 blocks, one more where a segment ends), and the
    // live blocks must fit one segment even then: the writers leave the
    // cleaner one free segment per relocation slot.
    if (s.live + s.live / 128 + 2 > in.segment_blocks) continue;
    out.reclaimable = true;
    uint64_t age = in.now_seq > s.sealed_seq ? in.now_seq - s.sealed_seq : 0;
    double score = s.live == 0 ? 1e300 : CostBenefit(s.live, in.segment_blocks, age);
    if (s.max_seq >= in.gate_seq) {
      if (score > best_blocked) best_blocked = score;
      continue;
    }
    if (score > best) {
      best = score;
      out.seg = s.seg;
    }
  }
  // Worth a checkpoint when the gate hides a clearly better victim or
  // there is no eligible one at all.
  out.gate_blocked = best_blocked > 0 && (!out.seg || best_blocked > 2 * best);
  return out;
}

}  // namespace ftl::gc
