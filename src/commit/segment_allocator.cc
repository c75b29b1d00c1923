#include "commit/segment_allocator.h"

namespace ftl::commit {

Claim ClaimOf(const std::vector<Request*>& batch, log::Stream stream) {
  if (stream == log::Stream::kRelocation) return Claim::kRelocation;
  for (const Request* r : batch)
    if (!r->frees) return Claim::kPlain;
  return Claim::kFreeing;
}

uint32_t SegmentAllocator::MinFreeToOpen(Claim claim) const {
  if (claim == Claim::kRelocation) return 0;
  // Users leave free segments to the cleaner: one for each relocation
  // slot in use (a victim's live blocks fit the rest of a slot's open
  // segment and one more).
  const uint32_t cleaner = placement_->active() ? kGcReserveSegments : 1;
  return claim == Claim::kFreeing ? cleaner : cleaner + kFreeingReserveSegments;
}

bool SegmentAllocator::MayUseOpen(gc::Slot slot, Claim claim) {
  if (claim != Claim::kPlain || !from_reserve_[int(slot)]) return true;
  absl::ReaderMutexLock l(&state_->map_mu);
  if (state_->map->segments().free_count() <= MinFreeToOpen(Claim::kPlain)) return false;
  from_reserve_[int(slot)] = false;  // the reserve is back
  return true;
}

uint32_t SegmentAllocator::Room(gc::Slot slot, Claim claim) {
  const uint32_t seg = open_[int(slot)];
  if (seg == UINT32_MAX || !MayUseOpen(slot, claim)) return 0;
  return segment_blocks_ - state_->map->segments().at(seg).write_ptr;
}

bool SegmentAllocator::EnsureRoom(gc::Slot slot, log::Stream stream, uint32_t blocks, Claim claim,
                                  uint64_t next_seq) {
  const int si = int(slot);
  auto& segs = state_->map->segments();
  if (open_[si] != UINT32_MAX && MayUseOpen(slot, claim)) {
    if (segment_blocks_ - segs.at(open_[si]).write_ptr >= blocks) return true;
  }
  uint32_t opened = UINT32_MAX;
  uint32_t sealed = UINT32_MAX;
  log::Bno sealed_blocks = 0;
  {
    absl::MutexLock l(&state_->map_mu);
    // No segment for this claim: the open one stays open (its rest may
    // serve a smaller request, or one that may use the reserve).
    const uint32_t min_free = MinFreeToOpen(claim);
    if (segs.free_count() <= min_free) return false;
    if (open_[si] != UINT32_MAX) {
      // Seal: the rest of the segment stays unused.
      sealed = open_[si];
      sealed_blocks = segs.at(sealed).write_ptr;
      segs.Seal(sealed, next_seq - 1);
      open_[si] = UINT32_MAX;
      sealed_since_ckpt_ += stream == log::Stream::kUser ? 4 : 1;
    }
    // Round-robin from a cursor spreads writes over the device.
    for (uint32_t k = 0; k < segs.count(); ++k) {
      uint32_t s = (cursor_ + k) % segs.count();
      if (segs.at(s).state != log::SegmentState::kFree) continue;
      segs.Open(s, stream, gc::IsHot(slot), next_seq);
      open_[si] = s;
      from_reserve_[si] =
          claim == Claim::kFreeing && segs.free_count() < MinFreeToOpen(Claim::kPlain);
      cursor_ = s + 1;
      opened = s;
      break;
    }
  }
  // A sealed segment is complete: its write-back can start now instead of
  // all at the next sync (a cleaned segment's release, a checkpoint, a
  // client's flush). Only the committer writes, and it is this thread, so
  // every record in it has been written.
  if (sealed != UINT32_MAX && sealed_blocks > 0)
    media_->StartWriteback(MediaOffset(segs.FirstBlock(sealed)), uint64_t(sealed_blocks) * kBlockSize);
  if (opened == UINT32_MAX) return false;
  // Only the committer writes into an open segment, and it is this thread.
  media_->Prepare(MediaOffset(segs.FirstBlock(opened)), uint64_t(segment_blocks_) * kBlockSize);
  return true;
}

void SegmentAllocator::SealIfFullLocked(gc::Slot slot, log::Stream stream, uint64_t seq) {
  const uint32_t seg = open_[int(slot)];
  auto& segs = state_->map->segments();
  if (segment_blocks_ - segs.at(seg).write_ptr >= 2) return;
  segs.Seal(seg, seq);
  open_[int(slot)] = UINT32_MAX;
  sealed_since_ckpt_ += stream == log::Stream::kUser ? 4 : 1;
}

void SegmentAllocator::AdoptOpenSegments() {
  // Resume appending to the segments that were open. The media keep only
  // the stream (user / relocation), not the slot: a user segment resumes
  // as the cold slot, a relocation segment as the relocation slot, and a
  // second open segment of either (a hot one) is sealed.
  auto& segs = state_->map->segments();
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto& si = segs.at(s);
    if (si.state != log::SegmentState::kOpen) continue;
    gc::Slot slot = si.stream == log::Stream::kUser ? gc::Slot::kCold : gc::Slot::kGc;
    if (open_[int(slot)] == UINT32_MAX) {
      open_[int(slot)] = s;
      si.opened_seq = si.max_seq;
    } else {
      segs.Seal(s, si.max_seq);
    }
  }
}

void SegmentAllocator::SealHotSegments() {
  absl::MutexLock l(&state_->map_mu);
  for (gc::Slot slot : {gc::Slot::kHot, gc::Slot::kHotGc}) {
    uint32_t& seg = open_[int(slot)];
    if (seg == UINT32_MAX) continue;
    state_->map->segments().Seal(seg, state_->map->segments().at(seg).max_seq);
    seg = UINT32_MAX;
  }
}

}  // namespace ftl::commit
