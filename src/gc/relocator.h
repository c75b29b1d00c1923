#pragma once
// Relocator: the cleaner's hands on an open pool (gc::CleanerHost). It
// lists victim candidates, reads a victim segment, finds its live blocks
// (the VBA table still points at them), and hands them to the log writer
// as RELOC records, each to the placement slot placement chooses; a
// cleaned segment is released (free) once a sync makes everything that
// killed its blocks durable and no reader pins it. Relocation only changes
// the VBA table, by compare-and-set from the old PBA: a copy that lost its
// race to a user overwrite is simply dead (docs/architecture.md, "Cleaning").
//
// Thread safety: called from the cleaner thread (and RunCleaner's caller,
// which the cleaner serialises). Takes PoolState::map_mu; never holds it
// while submitting or waiting.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpointer.h"
#include "ftl/media.h"
#include "gc/cleaner.h"
#include "gc/placement.h"
#include "log/durability.h"
#include "state/pool_state.h"

namespace ftl::gc {

// Where relocations go, and what the relocator tells the writers
// (implemented by commit::Committer).
class RelocationSink {
 public:
  virtual ~RelocationSink() = default;
  // Writes the relocation of `blocks` (their data at `data`, one block
  // each, valid until `done`) into `slot`; `done` runs once applied.
  virtual void SubmitRelocation(Slot slot, std::vector<log::RelocBlock> blocks,
                                const std::byte* data, std::function<void(absl::Status)> done) = 0;
  // Segments were freed: writers blocked on a full pool retry.
  virtual void SpaceFreed() = 0;
  // The cleaner cannot free space: writers blocked on a full pool fail.
  virtual void FailBlocked(const absl::Status& why) = 0;
  // A checkpoint, durable when it returns (lets the gate move).
  virtual absl::Status Checkpoint() = 0;
};

struct RelocatorConfig {
  uint64_t data_offset = 0;  // byte offset of segment 0 on the media
  uint32_t segment_blocks = 0;
  bool discard = true;  // discard idle free segments (OpenOptions::discard)
};

class Relocator : public CleanerHost {
 public:
  // `placement` is guarded by state->map_mu (state/pool_state.h).
  Relocator(std::shared_ptr<Media> media, state::PoolState* state, log::Durability* durability,
            checkpoint::Checkpointer* checkpointer, Placement* placement)
      : media_(std::move(media)),
        state_(state),
        durability_(durability),
        checkpointer_(checkpointer),
        placement_(placement) {}
  void Configure(const RelocatorConfig& c) { cfg_ = c; }
  void set_sink(RelocationSink* sink) { sink_ = sink; }

  // CleanerHost
  uint32_t FreeSegments() override;
  uint32_t SlackSegments() override;
  VictimInput Candidates() override;
  absl::StatusOr<uint32_t> CleanSegment(uint32_t seg) override;
  absl::Status ReleaseCleaned() override;
  uint32_t DiscardIdle(uint32_t max) override;
  absl::Status CheckpointForCleaner() override { return sink_->Checkpoint(); }
  void CleanerFailed(const absl::Status& why) override { sink_->FailBlocked(why); }
  void SpaceAvailable() override { sink_->SpaceFreed(); }

 private:
  uint64_t MediaOffset(log::Pba pba) const { return cfg_.data_offset + uint64_t(pba.value()) * log::kBlock; }

  std::shared_ptr<Media> media_;
  state::PoolState* state_;
  log::Durability* durability_;
  checkpoint::Checkpointer* checkpointer_;
  Placement* placement_;
  RelocationSink* sink_ = nullptr;
  RelocatorConfig cfg_;
  std::vector<uint32_t> cleaned_unreleased_;  // cleaner thread only
};

}  // namespace ftl::gc
