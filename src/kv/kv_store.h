#pragma once
// KvStoreImpl: ftl::KvStore (include/ftl/kv.h) over one dataset — the
// public calls, argument checks, the store lock and group commit
// (docs/kv.md). It owns the BufferPool (pages and logs), the BTree over it
// and the Flusher that writes the buffer out.
//
// Thread safety: every public method is safe from any thread.
// Lock order: flush_mu_ (one synced flush written at a time), then mu_
// (the buffer and tree), then the Flusher's ticket lock (a leaf).
// Operations apply under mu_; a synced caller then waits for a flush that
// covers it: the first waiter plans one flush for every operation applied
// so far and writes it without mu_, so callers arriving meanwhile share
// the next one; the volume is synced after flush_mu_ is released, so the
// next flush is written while that sync runs (docs/kv.md, "Flushes").
// With KvOptions::background_flush, an unsynced write that fills the
// buffer plans its flush under mu_ and hands it to bg_thread_, which
// writes it without locks and completes it under mu_ (one such flight at
// a time; flights of any kind are written in plan order by the Flusher's
// tickets).

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "ftl/kv.h"
#include "ftl/pool.h"
#include "kv/btree.h"
#include "kv/buffer_pool.h"
#include "kv/flusher.h"

namespace ftl::kv {

class KvStoreImpl : public KvStore {
 public:
  // Opens the store laid on `volume` (pool/name: for large flushes).
  static absl::StatusOr<std::unique_ptr<KvStore>> OpenOn(Volume* volume, Pool* pool,
                                                         const std::string& name, bool read_only,
                                                         const KvOptions& opts);
  ~KvStoreImpl() override;

  absl::Status Put(std::string_view key, std::string_view value, const KvWriteOptions& w) override;
  absl::Status Insert(std::string_view key, std::string_view value, const KvWriteOptions& w) override;
  absl::Status Update(std::string_view key, std::string_view value, const KvWriteOptions& w) override;
  absl::Status Delete(std::string_view key, const KvWriteOptions& w) override;
  absl::Status Write(const KvWriteBatch& batch, const KvWriteOptions& w) override;
  absl::Status Modify(std::string_view key, ModifyFn fn, const KvWriteOptions& w) override;
  absl::StatusOr<std::string> Get(std::string_view key) override;
  absl::Status GetMany(std::span<const std::string_view> keys, GetManyFn fn) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Scan(std::string_view from,
                                                                       std::string_view to,
                                                                       size_t limit) override;
  std::unique_ptr<KvIterator> NewIterator() override;
  void Prefetch(std::span<const std::string_view> keys) override;
  absl::Status Flush() override;
  absl::Status Close() override;
  KvStats Stats() const override;
  const KvGeometry& geometry() const override { return layout_.geo; }
  bool read_only() const override { return read_only_; }

 private:
  KvStoreImpl(Volume* volume, Pool* pool, const std::string& name, const Layout& layout,
              bool read_only, const KvOptions& opts);
  // Checks, applies `batch` under mu_, flushes as the buffer needs, and
  // waits for durability if `sync`.
  absl::Status Apply(const KvWriteBatch& batch, bool sync);
  absl::Status ApplyLocked(const KvWriteBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the store takes changes: open, writable, not broken.
  absl::Status WritableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a change may be applied now: WritableLocked, and the pool not
  // full (a flush is tried first if it was).
  absl::Status AdmitLocked(bool frees) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the pages and the area for large values have room for `ops`
  // changes and `blob_blocks` blocks of large values.
  absl::Status RoomLocked(size_t ops, uint64_t blob_blocks) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a change: its sequence number (returned), differentials merged
  // as their budget says, the buffer written out (unsynced) if it is full.
  uint64_t AppliedLocked(bool sync, bool frees) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `frees`: written as a space-freeing write (a flush of deletes on a
  // full pool, docs/kv.md "Errors").
  absl::Status FlushLocked(bool frees = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The buffer is over its dirty limit after an unsynced change: plans a
  // flush for bg_thread_ (or waits for the one in flight if the buffer
  // has outgrown what one atomic write takes); without a background
  // thread, or on a full pool, flushes inline.
  void FlushFullLocked(bool frees) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (releasing mu_) until no background flush is in flight.
  void AwaitBackgroundLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // bg_thread_: writes and completes the plans handed to it until closed.
  void BackgroundFlushes();
  absl::Status SyncTo(uint64_t seq, bool frees = false);
  // Open: replays the differential log, reads the root, and in a writable
  // store of another mode than kPdl merges what the log held.
  absl::Status Start() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tracks whether the pool was full at the last flush.
  void NoteFlush(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Volume* volume_;
  Layout layout_;
  bool read_only_;
  absl::Mutex flush_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  BufferPool buf_ ABSL_GUARDED_BY(mu_);
  BTree tree_ ABSL_GUARDED_BY(mu_);
  Flusher flusher_;
  KvMode mode_;
  uint64_t diff_budget_ = 0;
  uint64_t dirty_limit_ = 0;  // blocks
  uint64_t op_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t durable_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Operations written to the volume by synced flushes (durable once the
  // sync after them returns: durable_seq_).
  uint64_t written_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // a change failed half-applied
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The last flush found the pool full: writes are refused, unapplied,
  // until what waits in the buffer can be written.
  bool full_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t synced_writes_ ABSL_GUARDED_BY(mu_) = 0;
  // Background flushes (KvOptions::background_flush): the plan handed
  // over, whether one is planned and not yet completed, and the stop flag.
  std::optional<FlushPlan> bg_plan_ ABSL_GUARDED_BY(mu_);
  bool bg_busy_ ABSL_GUARDED_BY(mu_) = false;
  bool bg_stop_ ABSL_GUARDED_BY(mu_) = false;
  // The background thread waits on this, not with mu_.Await: a thread
  // waiting on a mutex's condition sends every unlock of it down the slow
  // path that evaluates the condition (~3% of a pipelined INCR's time).
  absl::CondVar bg_cv_;
  std::thread bg_thread_;  // started by OpenOn, joined by Close
};

}  // namespace ftl::kv
