#pragma once
// PoolImpl: the engine behind ftl::Pool (DESIGN.md §2-4).
//
// Threads and locks:
//  - One writer thread owns the append points and the sequence counter. It
//    group-commits queued requests into records, writes them, then applies
//    them to MapState under map_mu_ (exclusive). It is the only thread that
//    mutates MapState (checkpoint loading at open aside), so it reads MapState
//    without a lock.
//  - Readers look up MapState under map_mu_ shared, pin the segments they
//    read (seg_readers_), drop the lock and read the media.
//  - The cleaner thread (gc::Cleaner) reads victims and submits relocation
//    requests to the writer.
//  - The catalogue part of MapState (which trees exist and everything of a
//    VolumeMeta but its tree) changes only when the committer applies a
//    catalogue note; it then holds tree_meta_mu_ and map_mu_ exclusively, so
//    either one held shared is enough to read that part. Range operations
//    check their input under tree_meta_mu_ alone and so never wait for the
//    committer applying a batch under map_mu_.
// Lock order: queue_mu_ and map_mu_ are never held together; RangeLock is
// taken before either; tree_meta_mu_ before map_mu_.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/aligned_buffer.h"
#include "core/map_state.h"
#include "core/range_lock.h"
#include "ftl/pool.h"
#include "gc/cleaner.h"
#include "gc/placement.h"
#include "log/log_format.h"
#include "log/segment_reader.h"

namespace ftl::core {

class PoolImpl;

// Marks the current thread as committing records for its lifetime.
class CommitterScope {
 public:
  CommitterScope();
  ~CommitterScope();

 private:
  bool outer_;
};

// One operation of a request, before VBAs are chosen.
struct ReqOp {
  log::OpType type = log::OpType::kWrite;
  log::Op note;  // note ops (kTree .. kAttr); kTrim in a note request too
  uint32_t vol = 0;
  Bno lba = 0;
  Bno count = 0;
  const std::byte* data = nullptr;      // kWrite / kReloc: count blocks
  std::vector<uint32_t> csum;           // kWrite: per block
  std::vector<log::RelocBlock> reloc;   // kReloc
};

// A unit of group commit: all its ops land in one record (atomic).
struct Request {
  log::Stream stream = log::Stream::kUser;
  // The open segment it goes to (gc/placement.h). Relocations: chosen by
  // the cleaner; user requests: by the committer (ClassifyUserBatch).
  gc::Slot slot = gc::Slot::kCold;
  std::vector<ReqOp> ops;
  bool fua = false;
  // A part of a write larger than the atomic size: the writer may cut it at
  // a segment boundary (it was never atomic as a whole).
  bool splittable = false;
  // A metadata request: its ops are notes (plus the TRIMs of a move). The
  // committer validates them against the current state right before writing
  // (MapState::ValidateNote) and never mixes them with data writes in one
  // record (a write's VBA choice must see the notes before it).
  bool note = false;
  // A catalogue change (TREE, DROP, ROLLBACK, ATTR): committed alone.
  bool barrier = false;
  // It frees space or proves durability (a trim, punching write-zeroes,
  // snapshot delete, deactivate, rollback, a durability marker): it may
  // take the segment that other user requests leave free for it, so it
  // succeeds on a full pool (README "Full device"). Never batched with
  // requests that do not free.
  bool frees = false;
  // A durability marker (PoolImpl::ProveDurable): no ops; its record, once
  // synced, proves durable every record before it that a sync covered.
  // Queued apart from user requests (never blocked behind them).
  bool marker = false;
  std::function<void(absl::Status)> done;
  uint32_t data_blocks() const;
  size_t payload_bytes() const;
  // Batch class: 0 data, 1 range notes, 2 catalogue (alone).
  int batch_class() const { return note ? (barrier ? 2 : 1) : 0; }
};

// How the committer turns a batch into a record (PoolImpl::WriteBatch).
struct RecordPlan {
  bool joined = false;  // JOINED with the next record (log_format.h)
  bool sync = false;    // sync the media after writing it
  // Completions are left here instead of run (FUA then syncs only if
  // `sync`).
  std::vector<Request*>* acks = nullptr;
};

class VolumeImpl : public Volume {
 public:
  VolumeImpl(PoolImpl* pool, uint32_t id, std::string name, uint64_t size_blocks, bool ro)
      : pool_(pool), id_(id), name_(std::move(name)), size_blocks_(size_blocks), ro_(ro) {}
  // Set once the volume is removed: every request fails with Unavailable.
  void MarkGone() { gone_.store(true); }
  bool gone() const { return gone_.load(std::memory_order_relaxed); }
  // Whether some range is immutable (then writes consult the attributes).
  void SetHasImmutable(bool v) { has_immutable_.store(v); }
  const std::string& name() const override { return name_; }
  uint64_t size_bytes() const override { return size_blocks_ * kBlockSize; }
  bool read_only() const override { return ro_; }
  uint32_t id() const { return id_; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data, bool fua) override;
  void WriteAsync(uint64_t offset, std::span<const std::byte> data, bool fua,
                  Callback done) override;
  void WriteAsyncBatch(std::vector<AsyncWrite> writes) override;
  absl::Status Trim(uint64_t offset, uint64_t length, bool fua) override;
  absl::Status WriteZeroes(uint64_t offset, uint64_t length, bool fua, bool no_hole,
                           bool fast_only) override;
  absl::Status Flush() override;
  absl::StatusOr<std::vector<BlockExtent>> BlockStatus(uint64_t offset,
                                                       uint64_t length) override;
  VolumeStats Stats() const override;

 private:
  absl::Status CheckRange(uint64_t offset, uint64_t length, bool is_write) const;
  // Gone, read-only and immutable-range checks of a change to the range.
  absl::Status CheckWritable(uint64_t offset, uint64_t length);
  // Builds the requests for whole-block writes of [first, first+n) from
  // `data`, split at the atomic size; `done` runs once all parts are
  // applied. The requests are appended to `out` for Pool::Submit.
  void MakeRequests(Bno first, Bno n, const std::byte* data, bool fua, Callback done,
                    std::vector<Request*>* out);

  PoolImpl* pool_;
  uint32_t id_;
  std::string name_;
  uint64_t size_blocks_;
  bool ro_;
  std::atomic<bool> gone_{false};
  std::atomic<bool> has_immutable_{false};
  mutable std::atomic<uint64_t> reads_{0}, writes_{0}, trims_{0}, zeroes_{0}, flushes_{0};
  mutable std::atomic<uint64_t> read_bytes_{0}, write_bytes_{0};
};

class PoolImpl : public Pool, public gc::CleanerHost {
 public:
  ~PoolImpl() override;

  static absl::StatusOr<std::unique_ptr<PoolImpl>> DoFormat(std::shared_ptr<Media> media,
                                                            const FormatOptions& f,
                                                            const OpenOptions& o);
  static absl::StatusOr<std::unique_ptr<PoolImpl>> DoOpen(std::shared_ptr<Media> media,
                                                          const OpenOptions& o);

  // Pool
  absl::Status Close() override;
  const Geometry& geometry() const override { return geo_; }
  std::vector<std::string> VolumeNames() const override;
  Volume* GetVolume(const std::string& name) override;
  Volume* PrimaryVolume() override;
  absl::Status Checkpoint() override;
  absl::StatusOr<uint32_t> RunCleaner(uint32_t min_free_segments) override;
  void HaltCleaner() override { cleaner_->Halt(); }
  void ResumeCleaner() override { cleaner_->Resume(); }
  PoolStats Stats() const override;
  absl::StatusOr<CheckReport> Check(bool verify_data) override;
  std::string OpenReport() const override { return open_report_; }

  // Snapshots and range operations (catalog.cc, range_ops.cc).
  absl::StatusOr<SnapshotInfo> CreateSnapshot(const std::string& volume,
                                              const std::string& name) override;
  std::vector<SnapshotInfo> ListSnapshots(const std::string& volume) override;
  absl::Status DeleteSnapshot(const std::string& volume, const std::string& name,
                              bool force) override;
  absl::StatusOr<Volume*> ActivateSnapshot(const std::string& volume, const std::string& snapshot,
                                           const std::string& new_volume, bool read_only) override;
  absl::Status DeactivateVolume(const std::string& name) override;
  absl::Status Rollback(const std::string& volume, const std::string& snapshot,
                        bool force) override;
  std::string VolumeOrigin(const std::string& volume) override;
  absl::Status ApplyRangeOps(const std::vector<RangeOp>& ops) override;
  void ApplyRangeOpsAsync(const std::vector<RangeOp>& ops,
                          std::function<void(absl::Status)> done) override;
  absl::StatusOr<MergeResult> Merge(const MergeRequest& req) override;
  absl::Status SetRangeAttr(const std::string& volume, uint64_t offset, uint64_t length,
                            RangeAttr attr) override;
  absl::StatusOr<std::vector<AttrExtent>> RangeAttrs(const std::string& volume) override;

  // gc::CleanerHost
  uint32_t FreeSegments() override;
  uint32_t SlackSegments() override;
  gc::VictimInput Candidates() override;
  absl::StatusOr<uint32_t> CleanSegment(uint32_t seg) override;
  absl::Status ReleaseCleaned() override;
  uint32_t DiscardIdle(uint32_t max) override;
  absl::Status CheckpointForCleaner() override { return Checkpoint(); }
  void CleanerFailed(const absl::Status& why) override;
  void SpaceAvailable() override;

  // Used by VolumeImpl.
  void Submit(Request* r);
  // Submits one request and waits for it; returns its status. With
  // allow_inline the caller may commit it itself (see SubmitMany).
  absl::Status SubmitAndWait(Request* r, bool allow_inline = false);
  // Queues several requests under one lock (they may share a record).
  // allow_inline: the calling thread may commit them itself (and run their
  // callbacks) when nobody else is committing; otherwise the writer thread
  // does.
  void SubmitMany(const std::vector<Request*>& rs, bool allow_inline = false);
  absl::Status SyncMedia();
  // What a FLUSH answers: syncs, then makes sure a durable record says so
  // (a durability marker if none does yet), so that recovery can tell
  // damage to an acknowledged record from a torn tail (log_format.h:
  // durable_seq). Not on a committing thread.
  absl::Status FlushDurable();
  // Looks up [lba, lba+n): per block its (pba, csum) or kNoBlock; pins the
  // segments read. REQUIRES: Unpin(pinned) after reading.
  void LookupForRead(uint32_t vol, Bno lba, Bno n, std::vector<std::pair<Bno, uint32_t>>* out,
                     std::vector<uint32_t>* pinned);
  void Unpin(const std::vector<uint32_t>& pinned);
  absl::Status ReadBlocks(Bno pba, Bno n, std::byte* out);
  uint64_t MediaOffset(Bno pba) const { return geo_.data_offset + uint64_t(pba) * kBlockSize; }
  RangeLock& range_lock() { return range_lock_; }
  Bno max_atomic_blocks() const { return Bno(geo_.max_atomic_bytes / kBlockSize); }
  std::vector<BlockExtent> MappedExtents(uint32_t vol, Bno lba, Bno n);
  uint64_t MappedBlocks(uint32_t vol);
  // True if any block of the range is immutable.
  bool RangeImmutable(uint32_t vol, Bno lba, Bno n);
  // ResourceExhausted when the metadata area (checkpoint slot) could not
  // keep 1/reserve_divisor of itself free for what a change may add; writes
  // pass 64, snapshots and range operations 16. May write a checkpoint to
  // replace its estimate with a measurement (never on a committing thread).
  absl::Status CheckMetadataRoom(uint32_t reserve_divisor);

 private:
  explicit PoolImpl(std::shared_ptr<Media> media) : media_(std::move(media)) {}
  void SetGeometry(const log::Superblock& sb);
  absl::Status WriteSuperblock();
  // Open steps.
  absl::Status ReadSuperblock();
  absl::Status LoadCheckpointOrRebuild();
  absl::Status RollForward(uint64_t from_seq);
  absl::Status RebuildFromLog();
  void DropScratch();
  void StartThreads(const OpenOptions& o);
  // Makes the VolumeImpl objects match the volumes in MapState: new ones
  // appear, removed ones are marked gone (never freed while the pool lives,
  // so Volume pointers stay valid), attribute flags refresh.
  void RefreshVolumes();
  // Submits a metadata request of `ops` and waits: durable when it returns.
  // `frees`: the note frees space (Request::frees).
  absl::Status SubmitNotes(std::vector<ReqOp> ops, bool barrier, bool frees = false);
  Request* MakeNoteRequest(std::vector<ReqOp> ops, bool barrier, bool frees = false);
  // Resolves a tree reference (range.h): "" primary, a volume, VOL@SNAP or
  // @SNAP. REQUIRES: map_mu_ or tree_meta_mu_ held (shared is enough; see
  // the class comment; the annotation cannot say "either").
  absl::StatusOr<uint32_t> ResolveTreeLocked(const std::string& ref, bool allow_snapshot) const;
  absl::StatusOr<uint32_t> ResolveVolumeLocked(const std::string& name) const;
  // Turns range ops into note ops (a move = clone + trims of the source
  // outside the destination), checking each against the current state.
  absl::StatusOr<std::vector<ReqOp>> BuildRangeOps(const std::vector<RangeOp>& ops);
  SnapshotInfo SnapshotInfoLocked(const VolumeMeta& s) const ABSL_SHARED_LOCKS_REQUIRED(map_mu_);
  void StopThreads();

  // Writer thread and group commit. Exactly one thread commits at a time
  // (commit_mu_); `committing_` (under queue_mu_) says one is draining the
  // queue, so submitters either become that committer or leave their
  // requests to it.
  void WriterLoop();
  bool EligibleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Takes the next batch: relocations first (one slot per batch), then
  // user requests.
  bool TakeBatchLocked(std::vector<Request*>* batch, log::Stream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // REQUIRES: commit_mu_ held and committing_ set by this thread.
  void DrainQueue();
  // Sets the slot of each user data request by the age of the blocks it
  // replaces (gc::Placement). Returns the batch's parts per slot, each in
  // issue order, if it spans several slots, else nothing (the batch, left
  // as it is, goes to its one slot). Overlapping requests, and the parts
  // of one large write, always share a slot (they must keep their order;
  // CommitJoined makes the parts one atomic unit). While placement is
  // passive nothing is looked up. Feeds separation_ (placement auto).
  std::vector<std::vector<Request*>> ClassifyUserBatch(std::vector<Request*>& batch);
  // Every kMeterWindowSegments of user writes: asks separation_ whether
  // separation pays and (placement auto) switches placement_ on or off.
  void EndMeterWindowIfDue();
  void CommitBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot);
  void MaybeAutoCheckpoint();
  // Writes the batch as one record into the slot's open segment and
  // applies it; completes the requests (or leaves them in plan.acks).
  // Returns the media error that made the pool read-only, if any (the
  // batch's requests have failed then).
  absl::Status WriteBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot,
                          const RecordPlan& plan = {});
  // The parts of one user batch in different slots, written as JOINED
  // records with consecutive seqs and completed together after the last,
  // so a crash keeps all of the batch or none (README, crash semantics).
  // If a part does not fit whole in its slot's open segment, or a request
  // would be refused, the batch goes to CommitBatch unsplit instead, as
  // `issued` (the same requests in issue order).
  void CommitJoined(std::vector<std::vector<Request*>>& parts, std::vector<Request*>& issued,
                    log::Stream stream);
  // Blocks of a record holding the first n requests of b.
  static uint32_t RecordBlocks(const std::vector<Request*>& b, size_t n);
  // User writes and trims may go to `vol` (it exists, not a snapshot).
  bool WritableLocked(uint32_t vol) const ABSL_SHARED_LOCKS_REQUIRED(map_mu_);
  // Who may take the last free segments: the cleaner's relocations every
  // one; requests that free space leave the cleaner its reserve; all other
  // requests also leave one segment for those that free (README "Full
  // device": so trims, snapshot deletes and the cleaner never find the
  // pool too full to free it).
  enum class Claim { kRelocation, kFreeing, kPlain };
  static Claim ClaimOf(const std::vector<Request*>& batch, log::Stream stream);
  // Free segments that must remain after `claim` opens one.
  uint32_t MinFreeToOpen(Claim claim) const;
  // Whether `claim` may write into the slot's open segment: a plain request
  // may not use the segment opened from the reserve of freeing requests
  // while the reserve is not restored.
  bool MayUseOpen(gc::Slot slot, Claim claim);
  // Makes sure the slot's open segment has `blocks` free for `claim`; false
  // if no segment can be had now (then the open segment stays open).
  bool EnsureRoom(gc::Slot slot, log::Stream stream, uint32_t blocks, Claim claim);
  // Open segments after a clean open: each takes the slot of its stream;
  // a second one of a stream is sealed.
  void AdoptOpenSegments();
  // At close: seals the hot slots' segments, so a clean pool has at most
  // one open segment per stream, as before slots existed (older versions
  // open it, and AdoptOpenSegments has a slot for each).
  void SealHotSegments();
  // Checkpoints run in the commit role (writer thread, or after it stopped).
  // DoCheckpoint = encode + write + sync, done when it returns.
  absl::Status DoCheckpoint();
  // Automatic checkpoints: encoded in the commit role, written and synced by
  // ckpt_io_thread_ while commits go on; the next checkpoint (and
  // StopThreads) joins it first.
  void StartAutoCheckpoint();
  void JoinCheckpointIo();
  absl::Status EncodeCheckpointNow();     // into ckpt_io_ / ckpt_pending_
  absl::Status WriteEncodedCheckpoint();  // slot write, sync, superblock
  struct PendingCheckpoint {
    uint64_t next_seq = 0;
    uint64_t bytes = 0;
    uint64_t checksum = 0;
    size_t padded = 0;
    uint64_t covered = 0;  // last record written before the encode
  };
  // Buffers kept between checkpoints (no page faults on map-sized memory).
  std::vector<std::byte> ckpt_buf_;
  AlignedBuffer ckpt_io_;
  PendingCheckpoint ckpt_pending_;
  std::thread ckpt_io_thread_;
  void FailRequests(std::vector<Request*>& batch, const absl::Status& s);
  // Cuts a splittable single-write request to the largest head of n blocks
  // for which fits(n) holds; returns the tail (nullptr if it cannot be cut).
  static Request* SplitToFit(Request* r, const std::function<bool(Bno)>& fits);

  std::shared_ptr<Media> media_;
  Geometry geo_;
  log::Superblock sb_;  // writer thread / open / close only
  std::string open_report_;

  mutable absl::Mutex map_mu_;
  std::unique_ptr<MapState> state_;  // guarded by map_mu_ (see class comment)
  // The committer's scratch list of a batch's write LBAs (LookupWrites).
  std::vector<Bno> prefetch_lbas_ ABSL_GUARDED_BY(map_mu_);
  // Hot/cold placement: read under map_mu_ shared, updated under map_mu_
  // exclusive (by the cleaner when it takes a hot victim, by the committer
  // when it switches separation on or off).
  gc::Placement placement_;
  // Guards the catalogue part of *state_ together with map_mu_ (class
  // comment): written with both held exclusively, read with either.
  mutable absl::Mutex tree_meta_mu_;
  std::unique_ptr<std::atomic<uint32_t>[]> seg_readers_;

  // Volume objects by tree id; removed volumes stay (marked gone). vols_mu_
  // is a leaf lock: nothing else is taken while holding it.
  mutable absl::Mutex vols_mu_;
  std::map<uint32_t, std::unique_ptr<VolumeImpl>> volumes_ ABSL_GUARDED_BY(vols_mu_);
  std::vector<std::unique_ptr<VolumeImpl>> graveyard_ ABSL_GUARDED_BY(vols_mu_);
  // Serialises catalogue calls (create/delete/activate/...), so their
  // name checks and the notes they write do not interleave.
  absl::Mutex catalog_mu_;
  RangeLock range_lock_;
  // Map size at the last checkpoint, for CheckMetadataRoom's estimate.
  std::atomic<uint64_t> last_ckpt_size_{0};
  std::atomic<uint64_t> last_ckpt_leaves_{0}, last_ckpt_inners_{0};
  std::atomic<uint64_t> leaves_now_{0}, inners_now_{0};

  // Writer queue.
  mutable absl::Mutex queue_mu_;
  std::deque<Request*> user_q_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Request*> gc_q_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Request*> marker_q_ ABSL_GUARDED_BY(queue_mu_);
  std::vector<std::function<void(absl::Status)>> ckpt_waiters_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool user_blocked_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool committing_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(queue_mu_);
  std::thread writer_;
  std::chrono::milliseconds ckpt_interval_{0};
  bool auto_checkpoint_ = true;

  // Committer state: guarded by commit_mu_ (held by the writer thread or an
  // inline committer). Lock order: commit_mu_ before queue_mu_ / map_mu_.
  absl::Mutex commit_mu_;
  uint32_t open_seg_[gc::kSlotCount] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
  // The slot's open segment was taken from the freeing requests' reserve.
  bool open_from_reserve_[gc::kSlotCount] = {false, false, false, false};
  uint32_t open_cursor_ = 0;
  AlignedBuffer record_buf_;
  // The committer's pieces of one record for Media::WriteGather (reused).
  std::vector<std::span<const std::byte>> gather_;
  uint64_t next_seq_ = 1;
  // Sealed segments since the last checkpoint, in quarters: 4 per segment
  // sealed by user writes, 1 per segment sealed by the cleaner.
  uint32_t sealed_since_ckpt_ = 0;
  // OpenOptions::placement; kOn keeps placement_ active, kOff never splits.
  OpenOptions::Placement placement_mode_ = OpenOptions::Placement::kAuto;
  bool discard_ = true;  // OpenOptions::discard
  // Placement bookkeeping of the committer (ClassifyUserBatch).
  gc::SampledSeparation separation_;
  uint64_t user_clock_ = 0;  // user blocks written (separation_'s time)
  uint64_t window_blocks_ = 0;
  std::chrono::steady_clock::time_point last_ckpt_;
  uint64_t last_ckpt_seq_ = 0;

  std::atomic<uint64_t> last_written_seq_{0};
  // Steady-clock time of the last read or record (idle detection).
  std::atomic<int64_t> last_io_ns_{0};
  void NoteIo() {
    last_io_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count(),
                      std::memory_order_relaxed);
  }
  std::atomic<uint64_t> durable_seq_{0};
  // Recovery can prove every record up to proven_seq_ durable: a durable
  // record's durable_seq (or a checkpoint) covers it. Records without ops
  // (markers) need no proof; last_content_seq_ is the newest record with
  // ops, last_written_claim_ the durable_seq of the newest record written.
  std::atomic<uint64_t> proven_seq_{0};
  std::atomic<uint64_t> last_content_seq_{0};
  std::atomic<uint64_t> last_written_claim_{0};
  // Hands `acked` (written and synced) to a durability marker: they are
  // completed once the marker's record is durable. Committer only.
  void ProveDurable(std::vector<Request*> acked);
  // A durability marker request; `done` gets OK also when there was no room
  // for it (the proof is missing, with a warning; the data is durable).
  static Request* MakeMarker(std::function<void(absl::Status)> done);
  void RaiseProven(uint64_t seq);
  std::atomic<uint64_t> gate_seq_{0};
  absl::Mutex sync_mu_;  // serialises SyncMedia

  std::unique_ptr<gc::Cleaner> cleaner_;
  std::vector<uint32_t> cleaned_unreleased_;  // cleaner thread only
  bool closed_ = false;
  bool read_only_ = false;
  bool accept_loss_ = false;  // OpenOptions::accept_loss
  // What recovery found lost (accept_loss) or damaged, one line each by
  // volume and LBA; and redundancy found gone at open. Set during open only.
  std::vector<std::string> losses_;
  std::vector<std::string> degraded_;
  // Recovery with accept_loss: record `seq` is lost. If `claim` (its
  // damaged header as it reads) names user writes, those blocks are mapped
  // to its data with checksums that cannot match, so they read as EIO.
  void AcceptLostRecord(uint64_t seq, const log::ParsedRecord* claim, uint32_t seg);

  // Counters.
  std::atomic<uint64_t> user_bytes_{0}, media_bytes_{0}, reloc_bytes_{0};
  std::atomic<uint64_t> user_hot_bytes_{0}, reloc_hot_bytes_{0};
  std::atomic<uint64_t> ckpt_count_{0}, ckpt_bytes_{0};
  friend class VolumeImpl;
};

}  // namespace ftl::core
