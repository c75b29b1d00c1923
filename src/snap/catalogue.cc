#include "snap/catalogue.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "snap/exclusive_space.h"
#include "state/resolve.h"

namespace ftl::snap {
namespace {

using commit::ReqOp;
using log::Bno;

uint64_t NowNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

absl::Status CheckName(const std::string& what, const std::string& name) {
  std::string why;
  if (!ValidCatalogName(name, &why))
    return absl::InvalidArgumentError(absl::StrCat("bad ", what, " name '", name, "': ", why));
  return absl::OkStatus();
}

ReqOp NoteOp(log::Op op) { return ReqOp::Note(std::move(op)); }

absl::Status CheckAligned(const char* what, uint64_t v) {
  if (v % kBlockSize != 0)
    return absl::InvalidArgumentError(absl::StrFormat("%s %d is not a multiple of 4096", what, v));
  if (v / kBlockSize > log::kNoBlock - 1)
    return absl::InvalidArgumentError(absl::StrFormat("%s %d is too large", what, v));
  return absl::OkStatus();
}

}  // namespace

SnapshotInfo Catalogue::SnapshotInfoLocked(const state::VolumeMeta& s) const {
  SnapshotInfo info;
  info.name = s.name;
  info.volume = s.origin_name;
  info.created_unix_ns = s.created_ns;
  info.seq = s.seq;
  info.size_bytes = s.size_blocks * kBlockSize;
  if (const state::VolumeMeta* p = state_->map->volume(s.parent); p && p->is_snapshot())
    info.parent = state::SnapshotRef(*p);
  info.exclusive_bytes = snap::ExclusiveBlocks(s.tree, state_->map->vbas()) * kBlockSize;
  for (const auto& [id, v] : state_->map->volumes()) {
    if (!v->is_snapshot() && v->origin == s.id) info.active_volumes.push_back(v->name);
  }
  if (!info.active_volumes.empty()) info.active_as = info.active_volumes.front();
  return info;
}

absl::StatusOr<SnapshotInfo> Catalogue::CreateSnapshot(const std::string& volume,
                                                      const std::string& name) {
  if (absl::Status s = CheckName("snapshot", name); !s.ok()) return s;
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kTree;
  op.tree.kind = 1;
  op.tree.flags = 1;
  op.tree.name = name;
  op.tree.time_ns = NowNs();
  std::string vol_name;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> vid = state::ResolveVolume(*state_->map, volume);
    if (!vid.ok()) return vid.status();
    op.tree.src = *vid;
    vol_name = state_->map->volume(*vid)->name;
    op.tree.id = state_->map->next_tree_id();
    if (absl::Status s = state_->map->ValidateNote(op); !s.ok()) return s;
  }
  if (absl::Status s = metadata_room_(16);
      !s.ok())
    return s;
  if (absl::Status s = committer_->SubmitNotes({NoteOp(op)}, true); !s.ok()) return s;
  absl::ReaderMutexLock l(&state_->map_mu);
  const state::VolumeMeta* s = state_->map->FindSnapshot(vol_name, name);
  if (!s) return absl::InternalError("snapshot vanished after its note");
  return SnapshotInfoLocked(*s);
}

std::vector<SnapshotInfo> Catalogue::ListSnapshots(const std::string& volume) {
  std::vector<SnapshotInfo> out;
  absl::ReaderMutexLock l(&state_->map_mu);
  for (const auto& [id, v] : state_->map->volumes()) {
    if (!v->is_snapshot()) continue;
    if (!volume.empty() && v->origin_name != volume) continue;
    out.push_back(SnapshotInfoLocked(*v));
  }
  std::sort(out.begin(), out.end(),
            [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.seq < b.seq; });
  return out;
}

absl::Status Catalogue::DeleteSnapshot(const std::string& volume, const std::string& name,
                                      bool force) {
  absl::MutexLock cat(&catalog_mu_);
  std::vector<ReqOp> ops;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> id = state::ResolveTree(*state_->map, absl::StrCat(volume, "@", name), true);
    if (!id.ok()) return id.status();
    std::vector<uint32_t> dropped;
    if (force) {
      // Volumes activated from it go first, in the same note.
      for (const auto& [vid, v] : state_->map->volumes()) {
        if (v->is_snapshot() || v->origin != *id) continue;
        log::Op drop;
        drop.type = log::OpType::kDrop;
        drop.drop = vid;
        ops.push_back(NoteOp(drop));
        dropped.push_back(vid);
      }
    }
    log::Op op;
    op.type = log::OpType::kDrop;
    op.drop = *id;
    if (absl::Status s = state_->map->ValidateNote(op, dropped); !s.ok()) return s;
    ops.push_back(NoteOp(op));
  }
  return committer_->SubmitNotes(std::move(ops), true, /*frees=*/true);
}

absl::StatusOr<std::string> Catalogue::ActivateSnapshot(const std::string& volume,
                                                   const std::string& snapshot,
                                                   const std::string& new_volume,
                                                   bool read_only) {
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kTree;
  op.tree.kind = 0;
  op.tree.flags = read_only ? 1 : 0;
  op.tree.time_ns = NowNs();
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> id = state::ResolveTree(*state_->map, absl::StrCat(volume, "@", snapshot), true);
    if (!id.ok()) return id.status();
    const state::VolumeMeta* s = state_->map->volume(*id);
    op.tree.src = *id;
    op.tree.name = new_volume.empty() ? absl::StrCat(s->origin_name, "-", s->name) : new_volume;
    op.tree.id = state_->map->next_tree_id();
    if (absl::Status st = CheckName("volume", op.tree.name); !st.ok()) return st;
    if (absl::Status st = state_->map->ValidateNote(op); !st.ok()) return st;
  }
  if (absl::Status s = metadata_room_(16);
      !s.ok())
    return s;
  if (absl::Status s = committer_->SubmitNotes({NoteOp(op)}, true); !s.ok()) return s;
  return op.tree.name;
}

absl::Status Catalogue::DeactivateVolume(const std::string& name) {
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kDrop;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    const state::VolumeMeta* v = state_->map->FindVolume(name);
    if (!v) return absl::NotFoundError(absl::StrCat("no volume named '", name, "'"));
    op.drop = v->id;
    if (absl::Status s = state_->map->ValidateNote(op); !s.ok()) return s;
  }
  return committer_->SubmitNotes({NoteOp(op)}, true, /*frees=*/true);
}

absl::Status Catalogue::Rollback(const std::string& volume, const std::string& snapshot,
                                bool force) {
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kRollback;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> vid = state::ResolveVolume(*state_->map, volume);
    if (!vid.ok()) return vid.status();
    absl::StatusOr<uint32_t> sid =
        state::ResolveTree(*state_->map, absl::StrCat(state_->map->volume(*vid)->name, "@", snapshot), true);
    if (!sid.ok()) return sid.status();
    op.rollback = {*vid, *sid};
    if (absl::Status s = state_->map->ValidateNote(op); !s.ok()) return s;
    // Immutable ranges change only by writes (refused), clones into them
    // (refused), attribute notes (serialised with this by catalog_mu_) and
    // rollbacks (idem), so the check holds until the note is written.
    if (!force) {
      if (absl::Status s = state_->map->CheckRollbackKeepsImmutable(*vid, *sid); !s.ok()) return s;
    }
  }
  return committer_->SubmitNotes({NoteOp(op)}, true, /*frees=*/true);
}

std::string Catalogue::VolumeOrigin(const std::string& volume) {
  absl::ReaderMutexLock l(&state_->map_mu);
  const state::VolumeMeta* v = state_->map->FindVolume(volume);
  if (!v || v->origin == state::kNoTree) return "";
  const state::VolumeMeta* s = state_->map->volume(v->origin);
  if (!s) return "";
  return state::SnapshotRef(*s);
}

absl::Status Catalogue::CreateDataset(const std::string& name, DatasetKind kind,
                                     uint64_t size_bytes) {
  if (absl::Status s = CheckName("dataset", name); !s.ok()) return s;
  if (kind != DatasetKind::kBlock && kind != DatasetKind::kKv)
    return absl::InvalidArgumentError(absl::StrCat("unknown dataset kind ", int(kind)));
  if (size_bytes == 0 || size_bytes % kBlockSize != 0 ||
      size_bytes / kBlockSize > log::kMaxDatasetBlocks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset size %d is not a non-zero multiple of 4096 of at most %d bytes", size_bytes,
        log::kMaxDatasetBlocks * kBlockSize));
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kDataset;
  op.dataset.kind = uint8_t(kind);
  op.dataset.blocks = size_bytes / kBlockSize;
  op.dataset.time_ns = NowNs();
  op.dataset.name = name;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    op.dataset.id = state_->map->next_tree_id();
    if (absl::Status s = state_->map->ValidateNote(op); !s.ok()) return s;
  }
  if (absl::Status s = metadata_room_(16); !s.ok()) return s;
  return committer_->SubmitNotes({NoteOp(op)}, true);
}

absl::Status Catalogue::DestroyDataset(const std::string& name, bool force) {
  absl::MutexLock cat(&catalog_mu_);
  std::vector<ReqOp> ops;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    const state::MapState& map = *state_->map;
    const state::VolumeMeta* v = map.FindVolume(name);
    if (!v) return absl::NotFoundError(absl::StrCat("no dataset named '", name, "'"));
    if (v->id == 0)
      return absl::FailedPreconditionError(
          absl::StrCat(name, " is the primary volume; it cannot be destroyed"));
    // Snapshots of it are created and deleted under catalog_mu_ only, so
    // this list holds until the note is written.
    std::vector<uint32_t> dropped;
    for (const auto& [id, s] : map.volumes()) {
      if (!s->is_snapshot() || s->origin != v->id) continue;
      if (!force)
        return absl::FailedPreconditionError(absl::StrCat(
            name, " has snapshots (", state::SnapshotRef(*s),
            " ...): delete them first or destroy with force"));
      for (const auto& [aid, a] : map.volumes()) {
        if (!a->is_snapshot() && a->origin == id)
          return absl::FailedPreconditionError(absl::StrCat(
              "snapshot ", state::SnapshotRef(*s), " of ", name, " is active as volume ",
              a->name, ": deactivate it first"));
      }
      log::Op drop;
      drop.type = log::OpType::kDrop;
      drop.drop = id;
      if (absl::Status st = map.ValidateNote(drop, dropped); !st.ok()) return st;
      ops.push_back(NoteOp(drop));
      dropped.push_back(id);
    }
    log::Op op;
    op.type = log::OpType::kDrop;
    op.drop = v->id;
    if (absl::Status st = map.ValidateNote(op, dropped); !st.ok()) return st;
    ops.push_back(NoteOp(op));
  }
  return committer_->SubmitNotes(std::move(ops), true, /*frees=*/true);
}

absl::Status Catalogue::ResizeDataset(const std::string& name, uint64_t size_bytes, bool force) {
  if (size_bytes == 0 || size_bytes % kBlockSize != 0 ||
      size_bytes / kBlockSize > log::kMaxDatasetBlocks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "volume size %d is not a non-zero multiple of 4096 of at most %d bytes", size_bytes,
        log::kMaxDatasetBlocks * kBlockSize));
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kResize;
  op.resize.blocks = size_bytes / kBlockSize;
  op.resize.flags = force ? log::kResizeForce : 0;
  bool shrink = false;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> vid = state::ResolveVolume(*state_->map, name);  // "" = primary
    if (!vid.ok()) return vid.status();
    const state::VolumeMeta* v = state_->map->volume(*vid);
    op.resize.vol = v->id;
    // Checked here and again by the committer right before the note (a
    // write past the new end may land in between: then the note is refused
    // unless forced, never written over data it was told to keep).
    if (absl::Status s = state_->map->ValidateNote(op); !s.ok()) return s;
    if (op.resize.blocks == v->size_blocks) return absl::OkStatus();
    shrink = op.resize.blocks < v->size_blocks;
  }
  // A grow adds only a note (metadata room as for a new dataset); a shrink
  // frees what lies past the end, so it may use the room kept for freeing
  // requests and works on a full pool.
  if (!shrink) {
    if (absl::Status s = metadata_room_(16); !s.ok()) return s;
  }
  return committer_->SubmitNotes({NoteOp(op)}, true, /*frees=*/shrink);
}

std::vector<DatasetInfo> Catalogue::ListDatasets(bool pool_read_only) {
  std::vector<DatasetInfo> out;
  absl::ReaderMutexLock l(&state_->map_mu);
  const state::MapState& map = *state_->map;
  for (const auto& [id, v] : map.volumes()) {
    if (v->is_snapshot()) continue;
    DatasetInfo d;
    d.name = v->name;
    d.kind = v->dataset;
    d.size_bytes = v->size_blocks * kBlockSize;
    d.mapped_bytes = v->tree.mapped_blocks() * kBlockSize;
    d.read_only = pool_read_only || v->read_only;
    if (const state::VolumeMeta* o = map.volume(v->origin); o && o->is_snapshot())
      d.origin = state::SnapshotRef(*o);
    d.snapshots = map.SnapshotCount(id);
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(),
            [](const DatasetInfo& a, const DatasetInfo& b) { return a.name < b.name; });
  return out;
}

absl::Status Catalogue::SetRangeAttr(const std::string& volume, uint64_t offset, uint64_t length,
                                    RangeAttr attr) {
  if (absl::Status s = CheckAligned("offset", offset); !s.ok()) return s;
  if (absl::Status s = CheckAligned("length", length); !s.ok()) return s;
  if (length == 0) return absl::InvalidArgumentError("length is zero");
  // Serialised with rollbacks, whose immutable-range check must not see an
  // attribute change slip in before their note (Rollback).
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kAttr;
  op.attr.lba = Bno(offset / kBlockSize);
  op.attr.count = Bno(length / kBlockSize);
  switch (attr) {
    case RangeAttr::kImmutable: op.attr.set = log::kAttrImmutable; break;
    case RangeAttr::kMutable: op.attr.clear = log::kAttrImmutable; break;
    case RangeAttr::kNonPersistent: op.attr.set = log::kAttrNonPersistent; break;
    case RangeAttr::kPersistent: op.attr.clear = log::kAttrNonPersistent; break;
  }
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> vid = state::ResolveTree(*state_->map, volume, false);
    if (!vid.ok()) return vid.status();
    op.attr.vol = *vid;
    if (absl::Status s = state_->map->ValidateNote(op); !s.ok()) return s;
  }
  return committer_->SubmitNotes({NoteOp(op)}, true);
}

absl::StatusOr<std::vector<AttrExtent>> Catalogue::RangeAttrs(const std::string& volume) {
  absl::ReaderMutexLock l(&state_->map_mu);
  absl::StatusOr<uint32_t> vid = state::ResolveTree(*state_->map, volume, true);
  if (!vid.ok()) return vid.status();
  std::vector<AttrExtent> out;
  for (const map::AttrRange& a : state_->map->volume(*vid)->attrs.All()) {
    out.push_back({uint64_t(a.lba) * kBlockSize, uint64_t(a.count) * kBlockSize,
                   (a.bits & log::kAttrImmutable) != 0, (a.bits & log::kAttrNonPersistent) != 0});
  }
  return out;
}

}  // namespace ftl::snap

