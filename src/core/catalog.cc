// Snapshot catalogue (DESIGN.md §3): create, list, delete, activate,
// deactivate, rollback. Each change is one note committed alone and synced;
// the committer validates it against the current state right before
// writing it (MapState::ValidateNote), so a name check and its note cannot
// race.

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/pool_impl.h"
#include "snap/exclusive_space.h"

namespace ftl::core {
namespace {

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

ReqOp NoteOp(log::Op op) {
  ReqOp r;
  r.type = op.type;
  r.note = std::move(op);
  return r;
}

}  // namespace

Request* PoolImpl::MakeNoteRequest(std::vector<ReqOp> ops, bool barrier, bool frees) {
  auto* r = new Request;
  r->ops = std::move(ops);
  r->note = true;
  r->barrier = barrier;
  r->frees = frees;
  r->fua = true;  // durable when acknowledged
  return r;
}

absl::Status PoolImpl::SubmitNotes(std::vector<ReqOp> ops, bool barrier, bool frees) {
  // The caller waits anyway: it commits the note itself when nobody else is
  // committing (no hand-off to the writer thread).
  return SubmitAndWait(MakeNoteRequest(std::move(ops), barrier, frees), /*allow_inline=*/true);
}

absl::StatusOr<uint32_t> PoolImpl::ResolveVolumeLocked(const std::string& name) const {
  if (name.empty()) {
    const VolumeMeta* v = state_->volume(0);
    if (!v) return absl::NotFoundError("no primary volume");
    return v->id;
  }
  const VolumeMeta* v = state_->FindVolume(name);
  if (!v) return absl::NotFoundError(absl::StrCat("no volume named '", name, "'"));
  return v->id;
}

absl::StatusOr<uint32_t> PoolImpl::ResolveTreeLocked(const std::string& ref,
                                                     bool allow_snapshot) const {
  size_t at = ref.find('@');
  if (at == std::string::npos) return ResolveVolumeLocked(ref);
  if (!allow_snapshot)
    return absl::InvalidArgumentError(
        absl::StrCat("'", ref, "' is a snapshot; snapshots cannot be changed"));
  std::string vol = ref.substr(0, at), snap = ref.substr(at + 1);
  absl::StatusOr<uint32_t> vid = ResolveVolumeLocked(vol);
  std::string vol_name = vid.ok() ? state_->volume(*vid)->name : vol;
  const VolumeMeta* s = state_->FindSnapshot(vol_name, snap);
  if (!s) return absl::NotFoundError(absl::StrCat("no snapshot '", snap, "' of volume '",
                                                  vol_name, "'"));
  return s->id;
}

SnapshotInfo PoolImpl::SnapshotInfoLocked(const VolumeMeta& s) const {
  SnapshotInfo info;
  info.name = s.name;
  info.volume = s.origin_name;
  info.created_unix_ns = s.created_ns;
  info.seq = s.seq;
  info.size_bytes = s.size_blocks * kBlockSize;
  if (const VolumeMeta* p = state_->volume(s.parent); p && p->is_snapshot())
    info.parent = absl::StrCat(p->origin_name, "@", p->name);
  info.exclusive_bytes = snap::ExclusiveBlocks(s.tree, state_->vbas()) * kBlockSize;
  for (const auto& [id, v] : state_->volumes()) {
    if (!v->is_snapshot() && v->origin == s.id) info.active_volumes.push_back(v->name);
  }
  if (!info.active_volumes.empty()) info.active_as = info.active_volumes.front();
  return info;
}

absl::StatusOr<SnapshotInfo> PoolImpl::CreateSnapshot(const std::string& volume,
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
    absl::ReaderMutexLock l(&map_mu_);
    absl::StatusOr<uint32_t> vid = ResolveVolumeLocked(volume);
    if (!vid.ok()) return vid.status();
    op.tree.src = *vid;
    vol_name = state_->volume(*vid)->name;
    op.tree.id = state_->next_tree_id();
    if (absl::Status s = state_->ValidateNote(op); !s.ok()) return s;
  }
  if (absl::Status s = CheckMetadataRoom(16);
      !s.ok())
    return s;
  if (absl::Status s = SubmitNotes({NoteOp(op)}, true); !s.ok()) return s;
  absl::ReaderMutexLock l(&map_mu_);
  const VolumeMeta* s = state_->FindSnapshot(vol_name, name);
  if (!s) return absl::InternalError("snapshot vanished after its note");
  return SnapshotInfoLocked(*s);
}

std::vector<SnapshotInfo> PoolImpl::ListSnapshots(const std::string& volume) {
  std::vector<SnapshotInfo> out;
  absl::ReaderMutexLock l(&map_mu_);
  for (const auto& [id, v] : state_->volumes()) {
    if (!v->is_snapshot()) continue;
    if (!volume.empty() && v->origin_name != volume) continue;
    out.push_back(SnapshotInfoLocked(*v));
  }
  std::sort(out.begin(), out.end(),
            [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.seq < b.seq; });
  return out;
}

absl::Status PoolImpl::DeleteSnapshot(const std::string& volume, const std::string& name,
                                      bool force) {
  absl::MutexLock cat(&catalog_mu_);
  std::vector<ReqOp> ops;
  {
    absl::ReaderMutexLock l(&map_mu_);
    absl::StatusOr<uint32_t> id = ResolveTreeLocked(absl::StrCat(volume, "@", name), true);
    if (!id.ok()) return id.status();
    std::vector<uint32_t> dropped;
    if (force) {
      // Volumes activated from it go first, in the same note.
      for (const auto& [vid, v] : state_->volumes()) {
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
    if (absl::Status s = state_->ValidateNote(op, dropped); !s.ok()) return s;
    ops.push_back(NoteOp(op));
  }
  return SubmitNotes(std::move(ops), true, /*frees=*/true);
}

absl::StatusOr<Volume*> PoolImpl::ActivateSnapshot(const std::string& volume,
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
    absl::ReaderMutexLock l(&map_mu_);
    absl::StatusOr<uint32_t> id = ResolveTreeLocked(absl::StrCat(volume, "@", snapshot), true);
    if (!id.ok()) return id.status();
    const VolumeMeta* s = state_->volume(*id);
    op.tree.src = *id;
    op.tree.name = new_volume.empty() ? absl::StrCat(s->origin_name, "-", s->name) : new_volume;
    op.tree.id = state_->next_tree_id();
    if (absl::Status st = CheckName("volume", op.tree.name); !st.ok()) return st;
    if (absl::Status st = state_->ValidateNote(op); !st.ok()) return st;
  }
  if (absl::Status s = CheckMetadataRoom(16);
      !s.ok())
    return s;
  if (absl::Status s = SubmitNotes({NoteOp(op)}, true); !s.ok()) return s;
  Volume* v = GetVolume(op.tree.name);
  if (!v) return absl::InternalError("activated volume missing after its note");
  return v;
}

absl::Status PoolImpl::DeactivateVolume(const std::string& name) {
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kDrop;
  {
    absl::ReaderMutexLock l(&map_mu_);
    const VolumeMeta* v = state_->FindVolume(name);
    if (!v) return absl::NotFoundError(absl::StrCat("no volume named '", name, "'"));
    op.drop = v->id;
    if (absl::Status s = state_->ValidateNote(op); !s.ok()) return s;
  }
  return SubmitNotes({NoteOp(op)}, true, /*frees=*/true);
}

absl::Status PoolImpl::Rollback(const std::string& volume, const std::string& snapshot,
                                bool force) {
  absl::MutexLock cat(&catalog_mu_);
  log::Op op;
  op.type = log::OpType::kRollback;
  {
    absl::ReaderMutexLock l(&map_mu_);
    absl::StatusOr<uint32_t> vid = ResolveVolumeLocked(volume);
    if (!vid.ok()) return vid.status();
    absl::StatusOr<uint32_t> sid =
        ResolveTreeLocked(absl::StrCat(state_->volume(*vid)->name, "@", snapshot), true);
    if (!sid.ok()) return sid.status();
    op.rollback = {*vid, *sid};
    if (absl::Status s = state_->ValidateNote(op); !s.ok()) return s;
    // Immutable ranges change only by writes (refused), clones into them
    // (refused), attribute notes (serialised with this by catalog_mu_) and
    // rollbacks (idem), so the check holds until the note is written.
    if (!force) {
      if (absl::Status s = state_->CheckRollbackKeepsImmutable(*vid, *sid); !s.ok()) return s;
    }
  }
  return SubmitNotes({NoteOp(op)}, true, /*frees=*/true);
}

std::string PoolImpl::VolumeOrigin(const std::string& volume) {
  absl::ReaderMutexLock l(&map_mu_);
  const VolumeMeta* v = state_->FindVolume(volume);
  if (!v || v->origin == kNoTree) return "";
  const VolumeMeta* s = state_->volume(v->origin);
  if (!s) return "";
  return absl::StrCat(s->origin_name, "@", s->name);
}

}  // namespace ftl::core

namespace ftl {
bool ValidCatalogName(const std::string& name, std::string* why) {
  if (name.empty() || name.size() > 64) {
    *why = "names are 1 to 64 characters";
    return false;
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      *why = "names may contain only letters, digits, '.', '_' and '-'";
      return false;
    }
  }
  if (name == "." || name == "..") {
    *why = "'.' and '..' are not names";
    return false;
  }
  return true;
}
}  // namespace ftl
