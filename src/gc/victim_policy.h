#pragma once
// Victim choice for the segment cleaner: cost-benefit (LFS): a segment with
// live fraction u and age a (seqs since it was sealed) scores
// (1 - u) * a / (1 + u); the highest score wins, an empty segment at once.
// A segment may be cleaned only once both checkpoint slots cover its records
// (max_seq < gate_seq), so recovery from either checkpoint never needs a
// record the cleaner erased.

#include <cstdint>
#include <optional>
#include <vector>

namespace ftl::gc {

struct SegmentView {
  uint32_t seg = 0;
  uint32_t live = 0;
  uint64_t max_seq = 0;
  uint64_t sealed_seq = 0;
};

struct VictimInput {
  std::vector<SegmentView> full;  // segments in state "full"
  uint32_t segment_blocks = 0;
  uint64_t now_seq = 0;
  uint64_t gate_seq = 0;
};

struct VictimChoice {
  std::optional<uint32_t> seg;  // the victim, if any is eligible
  // The best-scoring segment was held back by the checkpoint gate: a
  // checkpoint would let the cleaner take it.
  bool gate_blocked = false;
  // Some full segment holds reclaimable (dead) blocks at all.
  bool reclaimable = false;
};

double CostBenefit(uint32_t live, uint32_t segment_blocks, uint64_t age);
VictimChoice PickVictim(const VictimInput& in);

}  // namespace ftl::gc
