#pragma once
// SlotClassifier: chooses the placement slot (hot or cold open segment,
// gc/placement.h) of each user write in a batch, by the age of the blocks
// it replaces, and meters whether hot/cold separation pays (placement
// auto: switches it on or off every kMeterWindowSegments of user writes).
//
// Thread safety: committer only. Reads the map under PoolState::map_mu
// shared; switches placement under map_mu exclusively (the cleaner reads
// placement under it).

#include <cstdint>
#include <vector>

#include "commit/request.h"
#include "ftl/pool.h"
#include "gc/placement.h"
#include "state/pool_state.h"

namespace ftl::commit {

class SlotClassifier {
 public:
  SlotClassifier(state::PoolState* state, gc::Placement* placement)
      : state_(state), placement_(placement) {}
  // Before the writer starts.
  void Configure(OpenOptions::Placement mode, uint64_t logical_blocks, uint32_t segment_blocks);

  // Sets the slot of each user data request. Returns the batch's parts per
  // slot, each in issue order, if it spans several slots, else nothing (the
  // batch, left as it is, goes to its one slot). Overlapping requests, and
  // the parts of one large write, always share a slot (they must keep their
  // order; the committer makes the parts one atomic unit). While placement
  // is passive nothing is looked up. `next_seq`: the next record's seq.
  std::vector<std::vector<Request*>> Classify(std::vector<Request*>& batch, uint64_t next_seq);

 private:
  void EndMeterWindowIfDue();

  state::PoolState* state_;
  gc::Placement* placement_;  // guarded by state_->map_mu
  OpenOptions::Placement mode_ = OpenOptions::Placement::kAuto;
  uint32_t segment_blocks_ = 0;
  gc::SampledSeparation separation_{0};
  uint64_t user_clock_ = 0;  // user blocks written (separation_'s time)
  uint64_t window_blocks_ = 0;
};

}  // namespace ftl::commit
