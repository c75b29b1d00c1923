#pragma once
// Committer: the log writer's front — the queues of submitted requests,
// group commit of them into records, the writer thread, durability
// markers, and the commit role (docs/architecture.md, "An NBD write").
//
// Group commit: whoever finds nobody committing may take the commit role
// and drain the queues itself (leader/follower; small submissions only),
// otherwise the writer thread does. Exactly one thread holds the role
// (commit_mu_); it is the only thread that changes the map, writes
// records, opens or seals segments and encodes checkpoints. A batch is
// written by RecordWriter into the open segment SegmentAllocator provides
// for the slot SlotClassifier chose; batches that span slots are written as
// JOINED records and completed together after the last.
//
// Thread safety and lock order: commit_mu_ (the commit role) before
// queue_mu_ and before PoolState's locks; queue_mu_ and PoolState::map_mu
// are never held together. Submit*, FlushDurable, Checkpoint and the
// RelocationSink calls are safe from any thread, but FlushDurable and
// Checkpoint must not be called in the commit role (InCommitRole()).

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/checkpointer.h"
#include "commit/record_writer.h"
#include "commit/request.h"
#include "commit/segment_allocator.h"
#include "commit/slot_classifier.h"
#include "gc/cleaner.h"
#include "gc/relocator.h"
#include "log/durability.h"
#include "state/pool_state.h"

namespace ftl::commit {

// Whether the calling thread holds the commit role (it must not wait for a
// checkpoint: the writer thread would wait for it in turn).
bool InCommitRole();

struct CommitterOptions {
  bool read_only = false;
  std::chrono::milliseconds checkpoint_interval{0};
  bool auto_checkpoint = true;
  uint32_t segment_blocks = 0;
  uint32_t segment_count = 0;
  // OpenOptions::proof_delay: how long the durability marker proving an
  // acknowledged flush or FUA write may wait for a later record to
  // prove it instead (zero: written and synced before the answer).
  std::chrono::milliseconds proof_delay{0};
};

class Committer : public gc::RelocationSink {
 public:
  Committer(state::PoolState* state, log::Durability* durability,
            checkpoint::Checkpointer* checkpointer, SegmentAllocator* segments,
            SlotClassifier* classifier, RecordWriter* writer)
      : state_(state),
        durability_(durability),
        checkpointer_(checkpointer),
        segments_(segments),
        classifier_(classifier),
        writer_(writer) {}
  ~Committer() override { Stop(); }

  // Before Start. `catalogue_changed` runs (in the commit role) after a
  // record that changed volumes or attributes. `cleaner` and `host` tell
  // whether a full pool can be cleaned and wake the cleaner.
  void Configure(const CommitterOptions& o, std::function<void()> catalogue_changed);
  void AttachCleaner(gc::Cleaner* cleaner, gc::CleanerHost* host) {
    cleaner_ = cleaner;
    host_ = host;
  }
  // Starts the writer thread (not for a read-only pool).
  void Start();
  // Writes what is queued, then stops the writer thread; later submissions
  // fail with Unavailable. Joins a running checkpoint.
  void Stop();
  // The media error that made the pool read-only, if any.
  absl::Status failure() const;

  // Queues requests (they may share a record). allow_inline: the calling
  // thread may commit them itself (and run their callbacks) when nobody
  // else is committing; otherwise the writer thread does.
  void SubmitMany(const std::vector<Request*>& rs, bool allow_inline = false);
  void Submit(Request* r) { SubmitMany({r}); }
  // Submits one request and waits; returns its status.
  absl::Status SubmitAndWait(Request* r, bool allow_inline = false);
  // Submits note ops (one record) and waits: durable when it returns.
  absl::Status SubmitNotes(std::vector<ReqOp> ops, bool barrier, bool frees = false);
  // What a FLUSH answers: syncs, then makes sure a durable record says so
  // (a durability marker if none does yet), so that recovery can tell
  // damage to an acknowledged record from a torn tail: before it returns,
  // or with a proof_delay within that delay (DeferProof).
  absl::Status FlushDurable();
  // A checkpoint by the writer thread; durable when it returns
  // (also gc::RelocationSink's).
  absl::Status Checkpoint() override;
  // In the commit role, when no writer thread runs (close).
  template <typename F>
  auto WithCommitRole(F f) {
    absl::MutexLock role(&commit_mu_);
    return f();
  }

  // gc::RelocationSink
  void SubmitRelocation(gc::Slot slot, std::vector<log::RelocBlock> blocks, const std::byte* data,
                        std::function<void(absl::Status)> done) override;
  void SpaceFreed() override;
  void FailBlocked(const absl::Status& why) override;

 private:
  void WriterLoop();
  bool EligibleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Takes the next batch: markers first, then relocations (one slot per
  // batch), then user requests.
  bool TakeBatchLocked(std::vector<Request*>* batch, log::Stream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // REQUIRES: the commit role, and committing_ set by this thread.
  void DrainQueue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Writes the prefix of the batch that fits the slot's open segment (or
  // a fresh one) and queues the rest again; on a full pool blocks user
  // requests until the cleaner frees space, or fails them.
  void CommitBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // The parts of one user batch in different slots, written as JOINED
  // records with consecutive seqs and completed together after the last,
  // so a crash keeps all of the batch or none (README, crash semantics).
  // If a part does not fit whole in its slot's open segment, or a request
  // would be refused, the batch goes to CommitBatch unsplit instead, as
  // `issued` (the same requests in issue order).
  void CommitJoined(std::vector<std::vector<Request*>>& parts, std::vector<Request*>& issued,
                    log::Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // One record of the batch; completes its requests, or leaves them in
  // `acks` when given (then FUA syncs only if `sync`). Returns the media
  // error that made the pool read-only, if any (the batch has failed).
  absl::Status WriteBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot,
                          bool joined = false, bool sync = false,
                          std::vector<Request*>* acks = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Hands `acked` (written and synced) to a durability marker: they are
  // completed once the marker's record is durable. With a proof_delay
  // user writes are completed at once and the proof deferred.
  void ProveDurable(std::vector<Request*> acked);
  // Asks for a marker within proof_delay unless a later durable record
  // proves what is durable now first (the writer thread checks).
  void DeferProof();
  // The writer thread: queues the deferred marker once it is due and
  // still needed.
  void MaybeProve();
  void MaybeAutoCheckpoint() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  absl::Status CheckpointNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);

  state::PoolState* state_;
  log::Durability* durability_;
  checkpoint::Checkpointer* checkpointer_;
  SegmentAllocator* segments_;
  SlotClassifier* classifier_;
  RecordWriter* writer_;
  gc::Cleaner* cleaner_ = nullptr;
  gc::CleanerHost* host_ = nullptr;
  CommitterOptions opt_;
  std::function<void()> catalogue_changed_;

  // The commit role.
  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(queue_mu_);

  mutable absl::Mutex queue_mu_;
  std::deque<Request*> user_q_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Request*> gc_q_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Request*> marker_q_ ABSL_GUARDED_BY(queue_mu_);
  std::vector<std::function<void(absl::Status)>> ckpt_waiters_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool user_blocked_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool committing_ ABSL_GUARDED_BY(queue_mu_) = false;
  // When a deferred durability marker is due (InfiniteFuture: none asked).
  absl::Time proof_due_ ABSL_GUARDED_BY(queue_mu_) = absl::InfiniteFuture();
  absl::Status failed_ ABSL_GUARDED_BY(queue_mu_);
  std::thread writer_thread_;
};

}  // namespace ftl::commit
