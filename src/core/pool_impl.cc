// The pool facade: construction and wiring of the parts, open and close as
// named steps whose durations are logged, statistics.

#include "core/pool_impl.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "media/aligned_buffer.h"
#include "recovery/recovery.h"
#include "state/resolve.h"
#include "util/logging.h"

namespace ftl::core {
namespace {

// Runs named steps in order, logging each one's duration; stops at the
// first failure.
struct Step {
  const char* name;
  std::function<absl::Status()> run;
};
absl::Status RunSteps(const char* what, const std::vector<Step>& steps) {
  auto log = util::Logger("core");
  auto total = std::chrono::steady_clock::now();
  for (const Step& s : steps) {
    auto t0 = std::chrono::steady_clock::now();
    absl::Status st = s.run();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      log->error("{}: step '{}' failed after {:.2f} ms: {}", what, s.name, ms, st.ToString());
      return st;
    }
    log->debug("{}: step '{}' took {:.2f} ms", what, s.name, ms);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - total).count();
  log->info("{} done in {:.2f} ms", what, ms);
  return absl::OkStatus();
}

}  // namespace

PoolImpl::PoolImpl(std::shared_ptr<Media> media)
    : media_(std::move(media)),
      durability_(media_),
      checkpointer_(media_, &durability_, &state_),
      segments_(media_, &state_, &placement_),
      classifier_(&state_, &placement_),
      writer_(media_, &state_, &segments_, &durability_),
      committer_(&state_, &durability_, &checkpointer_, &segments_, &classifier_, &writer_),
      relocator_(media_, &state_, &durability_, &checkpointer_, &placement_),
      catalogue_(&state_, &committer_, [this](uint32_t d) { return CheckMetadataRoom(d); }),
      ranges_(&state_, &committer_, [this](uint32_t d) { return CheckMetadataRoom(d); }) {
  relocator_.set_sink(&committer_);
  volume_ctx_.committer = &committer_;
  volume_ctx_.state = &state_;
  volume_ctx_.media = media_.get();
  volume_ctx_.geo = &geo_;
  volume_ctx_.range_lock = &range_lock_;
  volume_ctx_.metadata_room = [this](uint32_t d) { return CheckMetadataRoom(d); };
}

absl::StatusOr<std::unique_ptr<PoolImpl>> PoolImpl::DoFormat(std::shared_ptr<Media> media,
                                                             const FormatOptions& f,
                                                             const OpenOptions& o) {
  if (absl::Status s = checkpoint::FormatMedia(*media, f, o.discard); !s.ok()) return s;
  return DoOpen(std::move(media), o);
}

absl::StatusOr<std::unique_ptr<PoolImpl>> PoolImpl::DoOpen(std::shared_ptr<Media> media,
                                                           const OpenOptions& o) {
  std::unique_ptr<PoolImpl> p(new PoolImpl(std::move(media)));
  PoolImpl* pool = p.get();
  pool->read_only_ = o.read_only;
  pool->accept_loss_ = o.accept_loss;
  pool->writer_.set_sector_headers(o.sector_headers);
  absl::Status st = RunSteps("open", {
      {"read superblock", [&] { return pool->ReadSuperblock(); }},
      {"load checkpoint / recover", [&] { return pool->Recover(); }},
      {"write recovered checkpoints", [&] { return pool->WriteRecoveredCheckpoints(); }},
      {"mark dirty", [&] { return pool->MarkDirty(); }},
      {"start threads",
       [&] {
         pool->StartThreads(o);
         return absl::OkStatus();
       }},
  });
  if (!st.ok()) return st;
  pool->state_.counters.NoteCheckpoint();  // the state now matches the media
  return p;
}

absl::Status PoolImpl::ReadSuperblock() {
  if (absl::Status s = checkpointer_.ReadSuperblock(&degraded_); !s.ok()) return s;
  const log::Superblock& sb = checkpointer_.superblock();
  geo_.block_size = sb.block_size;
  geo_.media_bytes = sb.media_bytes;
  geo_.segment_blocks = sb.segment_blocks;
  geo_.segment_count = sb.segment_count;
  geo_.data_offset = sb.data_offset;
  geo_.checkpoint_slot_blocks = sb.ckpt_slot_blocks;
  geo_.logical_blocks = sb.logical_blocks;
  geo_.max_atomic_bytes =
      std::min<uint64_t>(uint64_t(sb.segment_blocks) * kBlockSize / 4, 8u << 20);
  geo_.format_version = sb.format_version;
  geo_.uuid = log::UuidToString(sb.uuid);
  state_.InitPins(sb.segment_count);
  segments_.Configure(sb.data_offset, sb.segment_blocks);
  return absl::OkStatus();
}

absl::Status PoolImpl::Recover() {
  const log::Superblock& sb = checkpointer_.superblock();
  absl::StatusOr<recovery::Recovered> r = recovery::Recovery(media_, sb, accept_loss_).Run();
  if (!r.ok()) return r.status();
  state_.map = std::move(r->map);
  open_report_ = std::move(r->report);
  losses_ = std::move(r->losses);
  degraded_.insert(degraded_.end(), r->degraded.begin(), r->degraded.end());
  if (r->clean) segments_.AdoptOpenSegments();
  durability_.Reset(r->next_seq);
  writer_.Configure(sb.uuid, sb.data_offset, r->next_seq);
  recovered_needs_checkpoints_ = r->needs_checkpoints;
  return absl::OkStatus();
}

absl::Status PoolImpl::WriteRecoveredCheckpoints() {
  if (read_only_ || !recovered_needs_checkpoints_) return absl::OkStatus();
  // Both slots get the recovered state, so neither can later replay
  // records past the point where this recovery stopped.
  for (int i = 0; i < 2; ++i)
    if (absl::Status s = checkpointer_.Checkpoint(writer_.next_seq()); !s.ok()) return s;
  return absl::OkStatus();
}

absl::Status PoolImpl::MarkDirty() {
  if (read_only_) return absl::OkStatus();
  if (absl::Status s = checkpointer_.MarkDirty(); !s.ok()) return s;
  geo_.format_version = log::kFormatVersion;
  return absl::OkStatus();
}

void PoolImpl::StartThreads(const OpenOptions& o) {
  placement_.set_active(o.placement == OpenOptions::Placement::kOn);
  classifier_.Configure(o.placement, geo_.logical_blocks, geo_.segment_blocks);
  relocator_.Configure({geo_.data_offset, geo_.segment_blocks, o.discard});
  RefreshVolumes();
  checkpointer_.Started(writer_.next_seq());
  commit::CommitterOptions co;
  co.read_only = read_only_;
  co.checkpoint_interval = o.checkpoint_interval;
  co.auto_checkpoint = o.auto_checkpoint;
  co.segment_blocks = geo_.segment_blocks;
  co.segment_count = geo_.segment_count;
  co.proof_delay = o.proof_delay;
  committer_.Configure(co, [this] { RefreshVolumes(); });
  committer_.Start();
  gc::CleanerOptions cl;
  // A small fixed reserve, whatever the pool's size: every free segment
  // kept idle is space the cleaner cannot use to let victims age
  // (docs/decisions.md has the measurements). Users block at
  // kGcReserveSegments free until the cleaner catches up.
  cl.critical = commit::kGcReserveSegments + 1;
  cl.low_watermark = cl.critical + 1;
  cl.high_watermark = cl.low_watermark + 1;
  cl.max_segments_per_second = 0;
  cleaner_ = std::make_unique<gc::Cleaner>(&relocator_, cl);
  committer_.AttachCleaner(cleaner_.get(), &relocator_);
  if (o.start_cleaner && !read_only_) cleaner_->Start();
  scrubber_ = std::make_unique<scrub::Scrubber>(&state_, media_, &checkpointer_, geo_.data_offset,
                                                geo_.segment_blocks, checkpointer_.superblock().uuid);
}

void PoolImpl::StopThreads() {
  if (scrubber_) scrubber_->Stop();
  if (cleaner_) cleaner_->Stop();
  committer_.Stop();
}

PoolImpl::~PoolImpl() {
  // Without Close() this is a crash as far as the media is concerned: the
  // queued requests are written, nothing else.
  StopThreads();
}

absl::Status PoolImpl::Close() {
  if (closed_) return absl::FailedPreconditionError("pool already closed");
  closed_ = true;
  if (read_only_) return absl::OkStatus();
  return RunSteps("close", {
      {"stop cleaner and writer",
       [&] {
         StopThreads();
         return committer_.failure();
       }},
      {"checkpoint",
       [&] {
         return committer_.WithCommitRole([&] {
           segments_.SealHotSegments();
           segments_.CheckpointTaken();
           return checkpointer_.Checkpoint(writer_.next_seq());
         });
       }},
      {"mark clean", [&] { return checkpointer_.MarkClean(); }},
  });
}

void PoolImpl::RefreshVolumes() {
  std::vector<VolumeRegistry::Live> live;
  std::vector<uint32_t> snapshots;
  {
    absl::ReaderMutexLock l(&state_.map_mu);
    for (const auto& [id, v] : state_.map->volumes()) {
      if (v->is_snapshot()) {
        snapshots.push_back(id);
        continue;
      }
      live.push_back({id, v->name, v->size_blocks, read_only_ || v->read_only,
                      (v->attrs.union_bits() & log::kAttrImmutable) != 0, v->dataset});
    }
    checkpointer_.NoteMapSize(state_.map->tree_context()->leaves,
                              state_.map->tree_context()->inners);
  }
  volumes_.Sync(&volume_ctx_, live);
  volumes_.SyncSnapshots(snapshots);
}

absl::Status PoolImpl::CheckMetadataRoom(uint32_t reserve_divisor) {
  std::function<absl::Status()> measure;
  if (!read_only_ && !commit::InCommitRole()) measure = [this] { return committer_.Checkpoint(); };
  return checkpointer_.CheckRoom(reserve_divisor, measure);
}

absl::StatusOr<Volume*> PoolImpl::ActivateSnapshot(const std::string& volume,
                                                   const std::string& snapshot,
                                                   const std::string& new_volume,
                                                   bool read_only) {
  absl::StatusOr<std::string> name =
      catalogue_.ActivateSnapshot(volume, snapshot, new_volume, read_only);
  if (!name.ok()) return name.status();
  Volume* v = GetVolume(*name);
  if (!v) return absl::InternalError("activated volume missing after its note");
  return v;
}

absl::StatusOr<Volume*> PoolImpl::SnapshotVolume(const std::string& volume,
                                                 const std::string& snapshot) {
  // Made under map_mu shared: a snapshot deleted after this check is
  // dropped by a record applied later, and the refresh after that record
  // marks the view gone (RefreshVolumes).
  absl::ReaderMutexLock l(&state_.map_mu);
  absl::StatusOr<uint32_t> id =
      state::ResolveTree(*state_.map, absl::StrCat(volume, "@", snapshot), true);
  if (!id.ok()) return id.status();
  const state::VolumeMeta* s = state_.map->volume(*id);
  return volumes_.Snapshot(&volume_ctx_, *id, state::SnapshotRef(*s), s->size_blocks, s->dataset);
}

absl::StatusOr<Volume*> PoolImpl::CreateDataset(const std::string& name, DatasetKind kind,
                                                uint64_t size_bytes) {
  if (absl::Status s = catalogue_.CreateDataset(name, kind, size_bytes); !s.ok()) return s;
  Volume* v = GetVolume(name);
  if (!v) return absl::InternalError("dataset missing after its note");
  return v;
}

absl::StatusOr<uint32_t> PoolImpl::RunCleaner(uint32_t min_free_segments) {
  if (read_only_) return absl::FailedPreconditionError("pool is open read-only");
  return cleaner_->RunUntil(min_free_segments);
}

PoolStats PoolImpl::Stats() const {
  PoolStats s;
  const state::PoolCounters& c = state_.counters;
  s.user_write_bytes = c.user_bytes;
  s.media_write_bytes = c.media_bytes;
  s.write_amplification = s.user_write_bytes ? double(s.media_write_bytes) / double(s.user_write_bytes) : 0;
  s.gc_relocated_bytes = c.reloc_bytes;
  s.user_hot_write_bytes = c.user_hot_bytes;
  s.gc_hot_relocated_bytes = c.reloc_hot_bytes;
  s.gc_segments_cleaned = cleaner_ ? cleaner_->segments_cleaned() : 0;
  s.checkpoint_count = c.ckpt_count;
  s.checkpoint_bytes = c.ckpt_bytes;
  s.last_checkpoint_unix_ns = c.ckpt_last_unix_ns.load(std::memory_order_relaxed);
  {
    absl::ReaderMutexLock l(&state_.map_mu);
    const auto& segs = state_.map->segments();
    s.segments_total = segs.count();
    s.segments_free = segs.free_count();
    s.segments_open = segs.count_in(log::SegmentState::kOpen);
    s.segments_full = segs.count_in(log::SegmentState::kFull);
    s.segments_cleaning = segs.count_in(log::SegmentState::kCleaning);
    s.free_bytes = uint64_t(segs.free_count()) * geo_.segment_blocks * kBlockSize;
    s.live_bytes = segs.live_blocks() * kBlockSize;
    s.map_memory_bytes = state_.map->memory_bytes();
    s.map_vba_table_bytes = state_.map->vba_table_memory_bytes();
    s.hot_lifespan_seqs = placement_.hot_lifespan();
    s.mapped_blocks = state_.map->mapped_blocks();
  }
  s.logical_bytes = geo_.logical_blocks * kBlockSize;
  s.used_percent = s.logical_bytes ? 100.0 * double(s.live_bytes) / double(s.logical_bytes) : 0;
  s.next_seq = durability_.last_written() + 1;
  {
    absl::ReaderMutexLock l(&state_.map_mu);
    for (const auto& [id, v] : state_.map->volumes()) {
      s.snapshots += v->is_snapshot() ? 1 : 0;
      if (!v->is_snapshot() && v->dataset == DatasetKind::kBlock)
        s.provisioned_bytes += v->size_blocks * kBlockSize;
    }
  }
  s.metadata_bytes = checkpointer_.last_size();
  s.metadata_capacity = checkpointer_.capacity();
  s.cleaner_state = cleaner_ ? cleaner_->state() : "stopped";
  s.proof_pending = durability_.NeedsProof();
  return s;
}

}  // namespace ftl::core

namespace ftl {

// ---------------------------------------------------------------- Pool API

absl::StatusOr<std::unique_ptr<Pool>> Pool::Format(std::shared_ptr<Media> media,
                                                   const FormatOptions& f,
                                                   const OpenOptions& o) {
  auto p = core::PoolImpl::DoFormat(std::move(media), f, o);
  if (!p.ok()) return p.status();
  return std::unique_ptr<Pool>(std::move(*p));
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::Open(std::shared_ptr<Media> media,
                                                 const OpenOptions& o) {
  auto p = core::PoolImpl::DoOpen(std::move(media), o);
  if (!p.ok()) return p.status();
  return std::unique_ptr<Pool>(std::move(*p));
}

bool Pool::LooksFormatted(Media& media) {
  if (media.size() < 2 * kBlockSize) return false;
  media::AlignedBuffer buf(2 * kBlockSize);
  if (!media.Read(0, buf.span()).ok()) return false;
  for (int i = 0; i < 2; ++i) {
    auto sb = log::DecodeSuperblock(buf.span().subspan(i * kBlockSize, kBlockSize));
    if (sb.ok() || !absl::IsNotFound(sb.status())) return true;
  }
  return false;
}

}  // namespace ftl
