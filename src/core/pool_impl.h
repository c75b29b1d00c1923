#pragma once
// PoolImpl: the engine behind ftl::Pool — a facade over the parts of an
// open pool (docs/architecture.md, "Layers"). It owns them, wires them
// together, runs open and close as named step lists, and forwards the
// public API to the part that does the work:
//
//   state::PoolState         the map and its locks, reader pins, counters
//   log::Durability          seq watermarks and media syncs
//   checkpoint::Checkpointer superblocks and checkpoint slots
//   recovery::Recovery       the map at open (checkpoint + replay)
//   commit::Committer        queues, group commit, the writer thread
//     SegmentAllocator, SlotClassifier, RecordWriter (its parts)
//   gc::Relocator + Cleaner  victim choice, relocation, segment release
//   scrub::Scrubber          scrub passes (src/scrub/scrubber.h)
//   snap::Catalogue          snapshots, datasets and range attributes
//   range::RangeOps          clone, move, merge
//   VolumeRegistry           the Volume objects (core/volume_impl.h)
//
// Thread safety: the public API is safe from any thread (each part states
// its own). Lock order across parts: range lock (core/range_lock.h) ->
// catalogue lock -> commit role -> committer queue lock; tree_meta_mu ->
// map_mu (state/pool_state.h); the volume registry's lock is a leaf.

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpointer.h"
#include "commit/committer.h"
#include "commit/record_writer.h"
#include "commit/segment_allocator.h"
#include "commit/slot_classifier.h"
#include "core/range_lock.h"
#include "core/volume_impl.h"
#include "core/volume_registry.h"
#include "ftl/pool.h"
#include "gc/cleaner.h"
#include "gc/placement.h"
#include "gc/relocator.h"
#include "log/durability.h"
#include "range/range_ops.h"
#include "scrub/scrubber.h"
#include "snap/catalogue.h"
#include "state/pool_state.h"

namespace ftl::core {

class PoolImpl : public Pool {
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
  std::vector<std::string> VolumeNames() const override { return volumes_.Names(); }
  Volume* GetVolume(const std::string& name) override { return volumes_.Get(name); }
  Volume* PrimaryVolume() override { return volumes_.Primary(); }
  absl::Status Checkpoint() override { return committer_.Checkpoint(); }
  absl::StatusOr<uint32_t> RunCleaner(uint32_t min_free_segments) override;
  void HaltCleaner() override { cleaner_->Halt(); }
  void ResumeCleaner() override { cleaner_->Resume(); }
  PoolStats Stats() const override;
  absl::StatusOr<CheckReport> Check(bool verify_data) override;  // consistency.cc
  std::string OpenReport() const override { return open_report_; }
  absl::Status StartScrub(const ScrubOptions& opts) override { return scrubber_->Start(opts); }
  void StopScrub() override { scrubber_->Stop(); }
  ScrubStatus GetScrubStatus() const override { return scrubber_->Status(); }
  absl::StatusOr<ScrubStatus> Scrub(const ScrubOptions& opts) override { return scrubber_->Run(opts); }

  absl::StatusOr<SnapshotInfo> CreateSnapshot(const std::string& volume,
                                              const std::string& name) override {
    return catalogue_.CreateSnapshot(volume, name);
  }
  std::vector<SnapshotInfo> ListSnapshots(const std::string& volume) override {
    return catalogue_.ListSnapshots(volume);
  }
  absl::Status DeleteSnapshot(const std::string& volume, const std::string& name,
                              bool force) override {
    return catalogue_.DeleteSnapshot(volume, name, force);
  }
  absl::StatusOr<Volume*> ActivateSnapshot(const std::string& volume, const std::string& snapshot,
                                           const std::string& new_volume, bool read_only) override;
  absl::Status DeactivateVolume(const std::string& name) override {
    return catalogue_.DeactivateVolume(name);
  }
  absl::Status Rollback(const std::string& volume, const std::string& snapshot,
                        bool force) override {
    return catalogue_.Rollback(volume, snapshot, force);
  }
  std::string VolumeOrigin(const std::string& volume) override {
    return catalogue_.VolumeOrigin(volume);
  }
  absl::StatusOr<Volume*> SnapshotVolume(const std::string& volume,
                                         const std::string& snapshot) override;
  absl::StatusOr<Volume*> CreateDataset(const std::string& name, DatasetKind kind,
                                        uint64_t size_bytes) override;
  absl::Status DestroyDataset(const std::string& name, bool force) override {
    return catalogue_.DestroyDataset(name, force);
  }
  absl::Status ResizeDataset(const std::string& name, uint64_t size_bytes, bool force) override {
    return catalogue_.ResizeDataset(name, size_bytes, force);
  }
  std::vector<DatasetInfo> ListDatasets() override { return catalogue_.ListDatasets(read_only_); }
  absl::Status ApplyRangeOps(const std::vector<RangeOp>& ops) override { return ranges_.Apply(ops); }
  void ApplyRangeOpsAsync(const std::vector<RangeOp>& ops,
                          std::function<void(absl::Status)> done) override {
    ranges_.ApplyAsync(ops, std::move(done));
  }
  absl::StatusOr<MergeResult> Merge(const MergeRequest& req) override { return ranges_.Merge(req); }
  absl::Status SetRangeAttr(const std::string& volume, uint64_t offset, uint64_t length,
                            RangeAttr attr) override {
    return catalogue_.SetRangeAttr(volume, offset, length, attr);
  }
  absl::StatusOr<std::vector<AttrExtent>> RangeAttrs(const std::string& volume) override {
    return catalogue_.RangeAttrs(volume);
  }

 private:
  explicit PoolImpl(std::shared_ptr<Media> media);
  // Open steps.
  absl::Status ReadSuperblock();
  absl::Status Recover();
  absl::Status WriteRecoveredCheckpoints();
  absl::Status MarkDirty();
  void StartThreads(const OpenOptions& o);
  void StopThreads();
  // Makes the volume objects match the catalogue (after open and after a
  // record that changed it); refreshes the metadata-room estimate.
  void RefreshVolumes();
  // ResourceExhausted when the metadata area (checkpoint slot) could not
  // keep 1/reserve_divisor of itself free for what a change may add; writes
  // pass 64, snapshots and range operations 16. May write a checkpoint to
  // replace its estimate with a measurement (never in the commit role).
  absl::Status CheckMetadataRoom(uint32_t reserve_divisor);
  uint64_t MediaOffset(log::Pba pba) const { return geo_.data_offset + uint64_t(pba.value()) * kBlockSize; }

  std::shared_ptr<Media> media_;
  Geometry geo_;
  state::PoolState state_;
  log::Durability durability_;
  checkpoint::Checkpointer checkpointer_;
  gc::Placement placement_;  // guarded by state_.map_mu (gc/placement.h)
  commit::SegmentAllocator segments_;
  commit::SlotClassifier classifier_;
  commit::RecordWriter writer_;
  commit::Committer committer_;
  gc::Relocator relocator_;
  std::unique_ptr<gc::Cleaner> cleaner_;
  std::unique_ptr<scrub::Scrubber> scrubber_;  // made in StartThreads
  snap::Catalogue catalogue_;
  range::RangeOps ranges_;
  RangeLock range_lock_;
  VolumeContext volume_ctx_;
  VolumeRegistry volumes_;

  bool closed_ = false;
  bool read_only_ = false;
  bool accept_loss_ = false;  // OpenOptions::accept_loss
  bool recovered_needs_checkpoints_ = false;
  // Set during open only.
  std::string open_report_;
  std::vector<std::string> losses_;    // what recovery found lost
  std::vector<std::string> degraded_;  // redundancy found gone
};

}  // namespace ftl::core
