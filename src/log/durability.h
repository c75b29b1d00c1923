#pragma once
// Durability: what the log has written, what a media sync has made
// durable, and what recovery could prove durable (docs/architecture.md,
// "Durability"). It owns the sequence watermarks and the media sync.
//
//   last_written  newest record written (never the first of a JOINED pair
//                 alone: its partner moves it past both)
//   durable       newest record a completed sync covers (a record's
//                 durable_seq field carries it to recovery)
//   proven        newest record recovery can prove durable: a durable
//                 record's durable_seq, or a checkpoint, covers it
//   last_content  newest record with ops (markers have none and need no
//                 proof)
//
// A FLUSH or FUA is answered once everything it covers is durable. If a
// sync made records durable that no durable record names yet, the
// committer writes a one-block marker record (log_format.h: durable_seq):
// before the answer with OpenOptions::proof_delay zero, otherwise within
// that delay unless a later record proves them first (docs/decisions.md,
// "Deferred durability proof").
//
// Thread safety: the watermarks are atomics, readable from any thread; the
// committer alone calls NoteWritten. Sync and SyncRecords may be called
// from any thread, and concurrently: media syncs overlap (a device takes
// several cache flushes at once, docs/decisions.md "Syncs overlap");
// sync_mu_ (a leaf lock) guards only the list of syncs in flight.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ftl/media.h"

namespace ftl::log {

class Durability {
 public:
  explicit Durability(std::shared_ptr<Media> media) : media_(std::move(media)) {}

  // At open: every record before `next_seq` is durable and proven (the
  // checkpoints recovery writes, or a clean close, cover them).
  void Reset(uint64_t next_seq);
  // The committer wrote record `seq` claiming `claim` as its durable_seq.
  // `joined`: the first of a JOINED pair (not yet complete). `has_ops`:
  // not a marker.
  void NoteWritten(uint64_t seq, uint64_t claim, bool joined, bool has_ops);
  // Syncs the media; then everything written before it is durable and the
  // claim of the newest record written is proven.
  absl::Status Sync() ABSL_LOCKS_EXCLUDED(sync_mu_);
  // Sync for what concerns only records (a FLUSH): a call that finds every
  // record written before it durable and proven (a sync that started later
  // completed meanwhile), or a sync in flight that will make them so,
  // shares that sync instead of making another.
  // Writes outside records (checkpoints, superblocks) must use Sync.
  absl::Status SyncRecords() ABSL_LOCKS_EXCLUDED(sync_mu_);
  // A checkpoint covering records before `next_seq` is durable; `covered`
  // was the newest record written when it was encoded.
  void CheckpointDurable(uint64_t next_seq, uint64_t covered);
  // Whether a marker must follow to prove the durable records.
  bool NeedsProof() const;

  uint64_t last_written() const { return last_written_.load(); }
  uint64_t durable() const { return durable_.load(); }
  uint64_t proven() const { return proven_.load(); }
  uint64_t last_content() const { return last_content_.load(); }

 private:
  // A media sync in flight: what it will make durable and prove.
  struct Flight {
    uint64_t covered = 0;
    uint64_t claim = 0;
    bool done = false;
    absl::Status status;
  };
  static void Raise(std::atomic<uint64_t>& a, uint64_t v);

  std::shared_ptr<Media> media_;
  absl::Mutex sync_mu_;
  std::vector<std::shared_ptr<Flight>> flights_ ABSL_GUARDED_BY(sync_mu_);
  std::atomic<uint64_t> last_written_{0};
  std::atomic<uint64_t> durable_{0};
  std::atomic<uint64_t> proven_{0};
  std::atomic<uint64_t> last_content_{0};
  // durable_seq of the newest record written: what a sync proves.
  std::atomic<uint64_t> last_claim_{0};
};

}  // namespace ftl::log
