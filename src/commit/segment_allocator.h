#pragma once
// SegmentAllocator: the open segment of each placement slot (gc/
// placement.h) and who may open the last free segments (docs/
// architecture.md, "Segments"). Segment states change only through
// log::SegmentTable's state machine; this class makes the changes the
// writer needs (open, seal) and decides when.
//
// Claims on free segments:
//  - the cleaner's relocations may take the last free segment;
//  - requests that free space (Request::frees) leave the cleaner its
//    reserve;
//  - all other requests also leave one segment for those that free
//    (README "Full device": trims, snapshot deletes and the cleaner never
//    find the pool too full to free it). A segment opened from that
//    reserve stays off-limits to plain requests until the reserve is back.
//
// Thread safety: committer only (the commit role, commit/committer.h).
// Takes PoolState::map_mu exclusively to change segment states, shared to
// read the free count.

#include <cstdint>
#include <memory>
#include <vector>

#include "commit/request.h"
#include "ftl/media.h"
#include "gc/placement.h"
#include "state/pool_state.h"

namespace ftl::commit {

// Segments the cleaner keeps for itself (and format leaves out of the
// logical capacity).
inline constexpr uint32_t kGcReserveSegments = 2;
// Segments that requests which do not free space leave to those that do,
// on top of the cleaner's.
inline constexpr uint32_t kFreeingReserveSegments = 1;

enum class Claim { kRelocation, kFreeing, kPlain };
Claim ClaimOf(const std::vector<Request*>& batch, log::Stream stream);

class SegmentAllocator {
 public:
  SegmentAllocator(std::shared_ptr<Media> media, state::PoolState* state,
                   const gc::Placement* placement)
      : media_(std::move(media)), state_(state), placement_(placement) {}
  void Configure(uint64_t data_offset, uint32_t segment_blocks) {
    data_offset_ = data_offset;
    segment_blocks_ = segment_blocks;
  }

  // The slot's open segment, or UINT32_MAX.
  uint32_t open(gc::Slot slot) const { return open_[int(slot)]; }
  // Blocks left in the slot's open segment that `claim` may use (0 if none).
  uint32_t Room(gc::Slot slot, Claim claim);
  // Whether `claim` may write into the slot's open segment.
  bool MayUseOpen(gc::Slot slot, Claim claim);
  // Makes sure the slot's open segment has `blocks` free for `claim`,
  // sealing it and opening another if needed (`next_seq`: the next record's
  // seq); false if no segment can be had now (the open one stays open).
  bool EnsureRoom(gc::Slot slot, log::Stream stream, uint32_t blocks, Claim claim,
                  uint64_t next_seq);
  // After record `seq` was applied to the slot's segment: seals it if it
  // cannot hold another record. REQUIRES: map_mu held exclusively.
  void SealIfFullLocked(gc::Slot slot, log::Stream stream, uint64_t seq);

  // Clean open: the open segments resume, each in the slot of its stream;
  // a second one of a stream is sealed. Before the threads start.
  void AdoptOpenSegments();
  // Close: seals the hot slots' segments, so a clean pool has at most one
  // open segment per stream (older versions open it, and AdoptOpenSegments
  // has a slot for each). In the commit role, after the writer stopped.
  void SealHotSegments();

  // Segments sealed since the last checkpoint, in quarters: 4 per segment
  // sealed by user writes, 1 per segment sealed by the cleaner.
  uint32_t sealed_since_checkpoint() const { return sealed_since_ckpt_; }
  void CheckpointTaken() { sealed_since_ckpt_ = 0; }

 private:
  // Free segments that must remain after `claim` opens one.
  uint32_t MinFreeToOpen(Claim claim) const;
  uint64_t MediaOffset(log::Pba pba) const { return data_offset_ + uint64_t(pba.value()) * log::kBlock; }

  std::shared_ptr<Media> media_;
  state::PoolState* state_;
  const gc::Placement* placement_;  // guarded by state_->map_mu
  uint64_t data_offset_ = 0;
  uint32_t segment_blocks_ = 0;
  uint32_t open_[gc::kSlotCount] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
  // The slot's open segment was taken from the freeing requests' reserve.
  bool from_reserve_[gc::kSlotCount] = {false, false, false, false};
  uint32_t cursor_ = 0;
  uint32_t sealed_since_ckpt_ = 0;
};

}  // namespace ftl::commit
