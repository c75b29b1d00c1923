#pragma once
// Flusher: writes the dirty state of a BufferPool to the dataset as one
// atomic step (docs/kv.md, "Flushes"), so that after a crash the store
// holds a prefix of its operations and no page is torn:
// - Plan() (under the store lock) gathers every block to write: log
//   blocks with new entries, pages to write whole (in kIplMerge mode their
//   whole erase units, every page rewritten), values kept outside pages,
//   and the root's allocation state as a log entry; it marks all of it
//   clean and in flight.
// - Write() (with or without the store lock) writes the plan: as one
//   Volume::WriteAtomic (WriteAtomicFreeing for a flush that frees space,
//   see KvStoreImpl) when it fits the pool's atomic size, else into
//   the dataset's non-persistent scratch area and then into place with
//   one batch of range moves (one note). Plans are written in the order
//   they were made (a ticket each); a plan made before an earlier plan's
//   failure was handed back is not written either (it would skip that
//   plan's changes).
// - Complete() (under the store lock) ends the flight: on success it
//   counts and trims freed values; on failure it marks everything dirty
//   again. The differential log (diff_log.h) plans its blocks and anchor
//   into the same write and trims the ring behind its new tail after it.
//
// Thread safety: Plan and Complete under the store lock; Write from any
// thread; the ticket state has its own leaf lock.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ftl/pool.h"
#include "kv/buffer_pool.h"

namespace ftl::kv {

struct FlushPlan {
  uint64_t ticket = 0;
  uint64_t op_seq = 0;    // operations up to this one are in it
  uint64_t healed = 0;    // failed plans handed back before it was made
  struct Piece {
    uint32_t lba = 0;
    std::vector<std::byte> bytes;  // whole blocks
  };
  std::vector<Piece> pieces;
  std::vector<uint32_t> frames;       // in flight
  std::vector<uint32_t> rewrites;     // were to be written whole
  std::vector<uint32_t> dirty_logs;   // had log entries
  std::vector<uint32_t> log_lbas;     // log blocks written (or skipped)
  std::vector<uint32_t> blob_lbas;
  uint64_t blob_blocks = 0;
  std::vector<BlobRef> trims;
  DiffLog::FlushPart dlog;
  KvStats add;  // counters to add once written
  uint64_t blocks() const;
};

class Flusher {
 public:
  // `pool` and `name` (may be null / ""): for flushes above the atomic size.
  Flusher(BufferPool* buf, Pool* pool, std::string name, uint64_t max_atomic_bytes)
      : buf_(buf), pool_(pool), name_(std::move(name)), max_atomic_blocks_(max_atomic_bytes / kBlock) {}

  absl::StatusOr<FlushPlan> Plan(uint64_t op_seq);
  // `frees`: the flush is part of freeing space (include/ftl/pool.h,
  // Volume::WriteAtomicFreeing).
  absl::Status Write(const FlushPlan& p, bool sync, bool frees = false);
  void Complete(FlushPlan& p, const absl::Status& s);
  uint64_t max_atomic_blocks() const { return max_atomic_blocks_; }

 private:
  absl::Status WriteScratch(const FlushPlan& p);

  BufferPool* buf_;
  Pool* pool_;
  std::string name_;
  uint64_t max_atomic_blocks_;
  uint64_t healed_ = 0;  // failed plans completed (store lock)

  absl::Mutex seq_mu_;
  absl::CondVar seq_cv_;
  uint64_t next_ticket_ ABSL_GUARDED_BY(seq_mu_) = 1;
  uint64_t done_ticket_ ABSL_GUARDED_BY(seq_mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(seq_mu_) = 0;
};

}  // namespace ftl::kv
