#pragma once
// Recovery: builds the in-memory map of a pool being opened from its
// newest usable checkpoint and the log records after it, or from the log
// alone when no checkpoint is usable (docs/architecture.md, "Open and
// recovery"). It decides which records were acknowledged: a torn tail that
// no durable record vouches for is dropped; damage to a record a later
// durable record vouches for refuses the open, or with accept_loss is
// fenced off (its blocks answer EIO) and reported.
//
// Thread safety: none needed; it runs once, at open, before any other
// thread of the pool exists. It only reads the media.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ftl/media.h"
#include "log/log_format.h"
#include "log/segment_reader.h"
#include "state/map_state.h"

namespace ftl::recovery {

struct Recovered {
  std::unique_ptr<state::MapState> map;
  uint64_t next_seq = 0;  // the first seq the pool may hand out
  // Opened from the newest checkpoint of a cleanly closed pool: nothing was
  // replayed, the open segments resume (commit/segment_allocator.h).
  bool clean = false;
  // The recovered state must be written into both checkpoint slots before
  // the pool takes writes (so neither slot can replay past this point).
  bool needs_checkpoints = false;
  std::string report;
  // What recovery found lost (accept_loss) or damaged, one line each; and
  // redundancy found gone (a damaged checkpoint slot).
  std::vector<std::string> losses;
  std::vector<std::string> degraded;
};

class Recovery {
 public:
  Recovery(std::shared_ptr<Media> media, const log::Superblock& sb, bool accept_loss)
      : media_(std::move(media)), sb_(sb), accept_loss_(accept_loss) {}

  absl::StatusOr<Recovered> Run();

 private:
  struct FoundRecord {
    log::ParsedRecord rec;
    uint32_t seg;
  };
  uint64_t MediaOffset(log::Pba pba) const { return sb_.data_offset + uint64_t(pba.value()) * log::kBlock; }
  // Replays the records from `from_seq` on into out_.map.
  absl::Status RollForward(uint64_t from_seq);
  // A map from every record in the log (no checkpoint).
  absl::Status RebuildFromLog();
  // Non-persistent ranges lose their content in a crash (include/ftl/range.h).
  void DropScratch();
  // accept_loss: record `seq` is lost. If `claim` (its damaged header as it
  // reads) names user writes, those blocks are mapped to its data with
  // checksums that cannot match, so they read as EIO.
  void AcceptLostRecord(uint64_t seq, const log::ParsedRecord* claim, uint32_t seg);

  std::shared_ptr<Media> media_;
  const log::Superblock& sb_;
  bool accept_loss_;
  Recovered out_;
};

}  // namespace ftl::recovery
