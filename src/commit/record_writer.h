#pragma once
// RecordWriter: turns one batch of requests into one log record — checks
// each request against the current state (its volume still exists, its
// notes still apply), plans the VBAs of its writes, encodes the header,
// writes header and data with one media write into the slot's open
// segment (or, for a small record, its data there and its header into a
// sector of an earlier header block, the chain's first header written as
// its sector alone where the media writes one cheaply: log/log_format.h,
// "Sector chains"), applies the record to the map (MapState::ApplyRecord,
// the same function replay uses) and hands out record seqs
// (docs/architecture.md, "An NBD write").
//
// Thread safety: committer only (the commit role). Takes PoolState's
// tree_meta_mu (catalogue records) and map_mu exclusively to plan and
// apply; never holds them during media I/O.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "commit/request.h"
#include "commit/segment_allocator.h"
#include "ftl/media.h"
#include "log/durability.h"
#include "media/aligned_buffer.h"
#include "state/pool_state.h"

namespace ftl::commit {

class RecordWriter {
 public:
  RecordWriter(std::shared_ptr<Media> media, state::PoolState* state, SegmentAllocator* segments,
               log::Durability* durability)
      : media_(std::move(media)),
        sectors_(media_->writes_sectors()),
        lone_heads_(sectors_ && media_->writes_lone_sectors()),
        state_(state),
        segments_(segments),
        durability_(durability) {}
  void Configure(const log::Uuid& uuid, uint64_t data_offset, uint64_t next_seq) {
    uuid_ = uuid;
    data_offset_ = data_offset;
    next_seq_ = next_seq;
  }
  // Sector chains on media that write sectors (on by default). Before
  // the first Write.
  void set_sector_headers(bool on) {
    sectors_ = on && media_->writes_sectors();
    lone_heads_ = sectors_ && media_->writes_lone_sectors();
  }
  // The seq the next record gets.
  uint64_t next_seq() const { return next_seq_; }

  struct Written {
    uint64_t seq = 0;
    bool has_ops = false;  // not a marker
    bool synced = false;   // the media was synced after it
    bool catalog = false;  // it changed the catalogue (volumes, attributes)
  };
  // Writes the batch as one record into the slot's open segment (which
  // has room: SegmentAllocator::EnsureRoom) and applies it. Requests refused
  // at commit time are completed with their error and leave `batch`; the
  // rest stay there for the caller to complete. `joined`: JOINED with the
  // next record. Syncs after writing when `sync`, or when a request asked
  // for FUA and `sync_fua`. An empty result (batch empty, nothing written):
  // seq 0. A media error is returned; the batch is left to the caller.
  absl::StatusOr<Written> Write(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot,
                                bool joined, bool sync, bool sync_fua);

 private:
  uint64_t MediaOffset(log::Pba pba) const { return data_offset_ + uint64_t(pba.value()) * log::kBlock; }

  // A slot's chain of sector headers (log/log_format.h, "Sector chains"):
  // the header block of its first record and what the next may join.
  struct Chain {
    uint32_t seg = UINT32_MAX;  // none
    uint64_t first_seq = 0;
    uint64_t last_seq = 0;
    log::Pba header_pba{0};
    uint32_t next_sector = 0;
    uint32_t end = 0;  // the segment's write point after the chain
  };

  std::shared_ptr<Media> media_;
  bool sectors_;     // sector chains: on, and the media writes sectors
  bool lone_heads_;  // a chain's first header written as its sector alone
  state::PoolState* state_;
  SegmentAllocator* segments_;
  log::Durability* durability_;
  log::Uuid uuid_{};
  uint64_t data_offset_ = 0;
  uint64_t next_seq_ = 1;
  media::AlignedBuffer record_buf_;
  media::AlignedBuffer sector_buf_;  // a sector header
  std::array<Chain, gc::kSlotCount> chains_{};
  // The pieces of one record for Media::WriteGather (reused).
  std::vector<std::span<const std::byte>> gather_;
  // A batch's write LBAs, looked up at once (MapState::LookupWrites).
  std::vector<log::Bno> prefetch_lbas_;
};

}  // namespace ftl::commit
