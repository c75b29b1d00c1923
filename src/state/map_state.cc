#include "state/map_state.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "map/range_clone.h"
#include "ftl/snapshot.h"

namespace ftl::state {

MapState::MapState(uint32_t segment_count, uint32_t segment_blocks)
    : segs_(segment_count, segment_blocks),
      vbas_(&segs_, Bno(std::min<uint64_t>(uint64_t(segment_count) * segment_blocks + 1024,
                                           kNoBlock - 1))),
      ctx_(&vbas_),
      csums_(size_t(segment_count) * segment_blocks, 0) {}

VolumeMeta* MapState::volume(uint32_t id) {
  auto it = volumes_.find(id);
  return it == volumes_.end() ? nullptr : it->second.get();
}
const VolumeMeta* MapState::volume(uint32_t id) const {
  auto it = volumes_.find(id);
  return it == volumes_.end() ? nullptr : it->second.get();
}

VolumeMeta* MapState::AddVolume(uint32_t id, const std::string& name, uint64_t size_blocks) {
  auto v = std::make_unique<VolumeMeta>(id, name, size_blocks, &ctx_);
  VolumeMeta* raw = v.get();
  volumes_[id] = std::move(v);
  next_tree_id_ = std::max(next_tree_id_, id + 1);
  return raw;
}

const VolumeMeta* MapState::FindVolume(const std::string& name) const {
  for (const auto& [id, v] : volumes_)
    if (!v->is_snapshot() && v->name == name) return v.get();
  return nullptr;
}

const VolumeMeta* MapState::FindSnapshot(const std::string& volume, const std::string& name) const {
  for (const auto& [id, v] : volumes_)
    if (v->is_snapshot() && v->origin_name == volume && v->name == name) return v.get();
  return nullptr;
}

uint32_t MapState::SnapshotCount(uint32_t id) const {
  uint32_t n = 0;
  for (const auto& [tid, v] : volumes_) n += v->is_snapshot() && v->origin == id ? 1 : 0;
  return n;
}

uint64_t MapState::mapped_blocks() const {
  uint64_t n = 0;
  for (const auto& [id, v] : volumes_) n += v->tree.mapped_blocks();
  return n;
}

namespace {
// Extents shorter than this do not get a mirror window of VBAs.
constexpr Bno kMirrorMinExtent = 16;
}  // namespace

const map::ExtentLookup* MapState::TakeLookup(uint32_t vol, const map::ExtentTree& tree, Bno lba) {
  if (vol != lookups_vol_ || tree.version() != lookups_version_) return nullptr;
  // PlanWrite is called in the order of LookupWrites' list, some calls
  // left out (refused requests): the next match is at or after the cursor.
  for (size_t k = lookups_next_; k < lookup_lbas_.size(); ++k) {
    if (lookup_lbas_[k] == lba) {
      lookups_next_ = k + 1;
      return &lookups_[k];
    }
  }
  return nullptr;
}

void MapState::PlanWrite(uint32_t vol, Bno lba, Bno n, std::vector<Bno>* out) {
  VolumeMeta* v = volume(vol);
  size_t base = out->size();
  out->resize(base + n, kNoBlock);
  Bno need = 0;
  // The extent holding the block looked at last, and its path's
  // exclusivity: the next blocks of a multi-block write that fall in the
  // same extent (one leaf, so one path) need no descent of their own.
  map::ExtentLookup found;
  bool valid = false;  // found holds block lba + i
  if (const map::ExtentLookup* hint = TakeLookup(vol, v->tree, lba)) {
    found = *hint;
    valid = true;
    planned_.push_back(int32_t(hint - lookups_.data()));
  } else {
    planned_.push_back(-1);
  }
  for (Bno i = 0; i < n; ++i) {
    const Bno b = lba + i;
    if (!valid) found.e = v->tree.LookupExtentExclusive(b, &found.exclusive);
    const map::Extent e = found.e;
    valid = e.len > 0 && b + 1 < e.end();
    if (e.len == 0) {
      ++need;
      continue;
    }
    const Bno cur = e.vba + (b - e.lba);
    if (found.exclusive && vbas_.Refs(cur) == 1) {
      if (n == 1) vbas_.Prefetch(cur);  // ApplyWrite re-points it after the media write
      (*out)[base + i] = cur;
      continue;
    }
    // A shared block: its new VBA mirrors the old one (vba_table.h), so
    // a run that clones or snapshots share stays one run as it is
    // rewritten. A window is reserved only inside a long extent (a
    // fragmented run has no order worth keeping).
    const Bno mirror = vbas_.AllocateMirror(cur, e.len >= kMirrorMinExtent);
    if (mirror != kNoBlock) {
      vbas_.Prefetch(mirror);  // ApplyWrite maps it after the media write
      (*out)[base + i] = mirror;
    } else {
      ++need;
    }
  }
  if (need == 0) return;
  std::vector<std::pair<Bno, Bno>>& runs = alloc_runs_;
  runs.clear();
  vbas_.Allocate(need, &runs);
  size_t r = 0;
  Bno used = 0;
  for (Bno i = 0; i < n; ++i) {
    if ((*out)[base + i] != kNoBlock) continue;
    (*out)[base + i] = runs[r].first + used;
    if (++used == runs[r].second) {
      ++r;
      used = 0;
    }
  }
}

void MapState::LookupWrites(uint32_t vol, const std::vector<Bno>& lbas) {
  lookups_vol_ = kNoTree;
  ctx_.ReapDeadLeaves();  // no lookup from before is used again
  const VolumeMeta* v = volume(vol);
  if (!v) return;
  lookup_lbas_ = lbas;
  lookups_.resize(lbas.size());
  v->tree.LookupExtents(lbas.data(), lbas.size(), lookups_.data());
  lookups_vol_ = vol;
  lookups_version_ = v->tree.version();
  lookups_shape_ = ctx_.shape;
  lookups_next_ = 0;
  // Then start loading the refcounts PlanWrite will read (PBAs are
  // loaded for ApplyRecord, which changes them).
  for (size_t k = 0; k < lbas.size(); ++k) {
    const map::Extent& e = lookups_[k].e;
    if (e.len > 0) vbas_.PrefetchRefs(e.vba + (lbas[k] - e.lba));
  }
}

void MapState::PrefetchForApply(const log::WriteOp& w, int32_t lookup) const {
  if (!w.vba.empty()) vbas_.Prefetch(w.vba[0]);
  if (lookup < 0 || size_t(lookup) >= lookups_.size()) return;
  const map::ExtentLookup& l = lookups_[size_t(lookup)];
  if (l.leaf) map::PrefetchNode(l.leaf);
  // The VBA mapped there before: a first write to a shared block drops a
  // reference on it (an overwrite in place reuses it: prefetched above).
  if (l.e.len > 0 && l.e.lba <= w.lba && w.lba < l.e.end()) {
    const Bno old = l.e.vba + (w.lba - l.e.lba);
    if (w.vba.empty() || old != w.vba[0]) vbas_.PrefetchRefs(old);
  }
}

void MapState::UnplanWrite(const std::vector<Bno>& planned) {
  planned_.clear();
  for (Bno v : planned) {
    if (v != kNoBlock && vbas_.InRange(v) && vbas_.Refs(v) == 0) {
      // Allocated but never referenced: give it back.
      vbas_.Incref(v, 1);
      vbas_.Decref(v, 1);
    }
  }
}

void MapState::ApplyRecord(const log::RecordHeader& h, Bno pba, ApplyMode mode) {
  uint32_t seg = segs_.SegmentOf(log::Pba(pba));
  log::SegmentInfo& si = segs_.at(seg);
  Bno data = pba + h.header_blocks;
  // The record PlanWrite planned last (the committer applies it right
  // after writing it): prefetch each write's path a few writes ahead.
  constexpr size_t kAhead = 3;
  std::vector<const log::WriteOp*>& writes = apply_writes_;
  writes.clear();
  if (!planned_.empty()) {
    for (const log::Op& op : h.ops)
      if (op.type == log::OpType::kWrite) writes.push_back(&op.write);
    if (writes.size() != planned_.size()) writes.clear();
    for (size_t k = 0; k < std::min(kAhead, writes.size()); ++k) PrefetchForApply(*writes[k], planned_[k]);
  }
  size_t next_write = 0;
  for (const log::Op& op : h.ops) {
    switch (op.type) {
      case log::OpType::kWrite:
        if (next_write + kAhead < writes.size())
          PrefetchForApply(*writes[next_write + kAhead], planned_[next_write + kAhead]);
        ApplyWrite(op.write, data, h.seq, mode, !writes.empty(),
                   next_write < writes.size() ? planned_[next_write] : -1);
        ++next_write;
        si.data_seq_sum += h.seq * op.write.vba.size();
        si.data_count += uint32_t(op.write.vba.size());
        break;
      case log::OpType::kTrim:
        if (VolumeMeta* v = volume(op.trim.vol); v && !v->is_snapshot()) {
          Bno end = Bno(std::min<uint64_t>(uint64_t(op.trim.lba) + op.trim.count, v->size_blocks));
          if (op.trim.lba < end) v->tree.Assign(op.trim.lba, end - op.trim.lba, kNoBlock);
        }
        break;
      case log::OpType::kReloc:
        ApplyReloc(op.reloc, data, mode);
        for (const log::RelocBlock& b : op.reloc.blocks) si.data_seq_sum += b.data_seq;
        si.data_count += uint32_t(op.reloc.blocks.size());
        break;
      default:
        ApplyNote(op, h.seq);
        break;
    }
    data += op.data_blocks();
  }
  planned_.clear();
  // This record's lookups are spent: the leaves dropped meanwhile can go.
  lookups_vol_ = kNoTree;
  ctx_.ReapDeadLeaves();
  Bno end_in_seg = pba + h.header_blocks + h.data_blocks - segs_.FirstBlock(seg).value();
  si.write_ptr = std::max(si.write_ptr, end_in_seg);
  si.max_seq = std::max(si.max_seq, h.seq);
}

const map::ExtentLookup* MapState::LookupForApply(const log::WriteOp& w, int32_t lookup) const {
  if (lookup < 0 || size_t(lookup) >= lookups_.size() || w.vol != lookups_vol_ ||
      lookup_lbas_[size_t(lookup)] != w.lba)
    return nullptr;
  return &lookups_[size_t(lookup)];
}

void MapState::ApplyWrite(const log::WriteOp& w, Bno first_pba, uint64_t seq, ApplyMode mode,
                          bool planned, int32_t lookup) {
  VolumeMeta* v = volume(w.vol);
  if (!v) return;
  Bno n = Bno(w.vba.size());
  // Group blocks into runs of consecutive VBAs; re-map a run only where the
  // tree does not already point at those VBAs.
  Bno i = 0;
  while (i < n) {
    Bno j = i + 1;
    while (j < n && w.vba[j] == w.vba[j - 1] + 1) ++j;
    Bno lba = w.lba + i;
    if (lba >= v->size_blocks) break;
    j = Bno(std::min<uint64_t>(j, v->size_blocks - w.lba));
    // An unreferenced VBA (a new one) is mapped nowhere: no lookup needed.
    bool same = vbas_.InRange(w.vba[i]) && vbas_.Refs(w.vba[i]) > 0;
    for (Bno k = i; k < j && same; ++k) same = v->tree.LookupOne(w.lba + k) == w.vba[k];
    if (!same) {
      // PlanWrite allocated a planned write's VBAs; replay claims them.
      if (!planned)
        for (Bno k = i; k < j; ++k) vbas_.Claim(w.vba[k]);
      // A single-block write (a first write to a shared block) edits the
      // leaf its planning lookup found, if the tree kept its shape since.
      const map::ExtentLookup* found = n == 1 ? LookupForApply(w, lookup) : nullptr;
      if (!found || !v->tree.AssignInLeaf(*found, lookups_shape_, lba, w.vba[i]))
        v->tree.Assign(lba, j - i, w.vba[i]);
    }
    for (Bno k = i; k < j; ++k) {
      Bno pba = first_pba + k;
      vbas_.SetPba(w.vba[k], pba);
      csums_[pba] = w.csum[k];
      if (mode == ApplyMode::kRebuild) {
        if (rebuild_dv_.size() <= w.vba[k]) rebuild_dv_.resize(size_t(w.vba[k]) + 1, 0);
        rebuild_dv_[w.vba[k]] = seq;
      }
    }
    i = j;
  }
}

void MapState::ApplyReloc(const log::RelocOp& r, Bno first_pba, ApplyMode mode) {
  for (size_t k = 0; k < r.blocks.size(); ++k) {
    const log::RelocBlock& b = r.blocks[k];
    Bno pba = first_pba + Bno(k);
    if (mode == ApplyMode::kNormal) {
      if (vbas_.CompareAndSetPba(b.vba, b.src_pba, pba)) csums_[pba] = b.csum;
      continue;
    }
    // Rebuild: the source record may be gone. The copy with the highest
    // data version wins; a VBA nobody maps yet gets its original identity.
    if (rebuild_dv_.size() <= b.vba) rebuild_dv_.resize(size_t(b.vba) + 1, 0);
    bool referenced = vbas_.InRange(b.vba) && vbas_.Refs(b.vba) > 0;
    if (!referenced) {
      VolumeMeta* v = volume(b.vol);
      if (!v || b.lba >= v->size_blocks) continue;
      Bno cur = v->tree.LookupOne(b.lba);
      if (cur != kNoBlock && cur < rebuild_dv_.size() && rebuild_dv_[cur] > b.data_seq) continue;
      vbas_.Claim(b.vba);
      v->tree.Assign(b.lba, 1, b.vba);
    } else if (rebuild_dv_[b.vba] > b.data_seq) {
      continue;
    }
    vbas_.SetPba(b.vba, pba);
    csums_[pba] = b.csum;
    rebuild_dv_[b.vba] = b.data_seq;
  }
}

void MapState::ApplyNote(const log::Op& op, uint64_t seq) {
  // Replay tolerates notes that no longer fit (ValidateNote ran before
  // they were written), so a note never stops recovery.
  switch (op.type) {
    case log::OpType::kTree: {
      VolumeMeta* src = volume(op.tree.src);
      if (!src || volume(op.tree.id)) return;
      VolumeMeta* t = AddVolume(op.tree.id, op.tree.name, src->size_blocks);
      t->tree = src->tree.Share();
      t->attrs = src->attrs;
      t->created_ns = op.tree.time_ns;
      t->seq = seq;
      t->origin = src->id;
      t->dataset = src->dataset;
      if (op.tree.kind == 1) {
        t->kind = TreeKind::kSnapshot;
        t->read_only = true;
        t->origin_name = src->name;
        t->parent = src->parent;
        src->parent = t->id;
      } else {
        t->kind = TreeKind::kVolume;
        t->read_only = op.tree.flags & 1;
        t->parent = src->id;
      }
      break;
    }
    case log::OpType::kDataset: {
      const log::DatasetOp& d = op.dataset;
      if (volume(d.id) || FindVolume(d.name) || d.blocks == 0 || d.blocks > log::kMaxDatasetBlocks ||
          d.kind > log::kMaxDatasetKind)
        return;
      VolumeMeta* t = AddVolume(d.id, d.name, d.blocks);
      t->kind = TreeKind::kVolume;
      t->dataset = DatasetKind(d.kind);
      t->read_only = d.flags & 1;
      t->created_ns = d.time_ns;
      t->seq = seq;
      break;
    }
    case log::OpType::kDrop: {
      auto it = volumes_.find(op.drop);
      if (it == volumes_.end()) return;
      uint32_t up = it->second->parent;
      for (auto& [id, v] : volumes_) {
        if (v->parent == op.drop) v->parent = up;
      }
      volumes_.erase(it);
      break;
    }
    case log::OpType::kRollback: {
      VolumeMeta* v = volume(op.rollback.vol);
      VolumeMeta* snap = volume(op.rollback.snap);
      if (!v || !snap || v->is_snapshot() || !snap->is_snapshot()) return;
      v->tree = snap->tree.Share();
      v->attrs = snap->attrs;
      v->parent = snap->id;
      // The volume reads as the snapshot again, its size too (a snapshot
      // keeps the size its volume had; sizes differ only after a RESIZE).
      v->size_blocks = snap->size_blocks;
      break;
    }
    case log::OpType::kResize: {
      const log::ResizeOp& r = op.resize;
      VolumeMeta* v = volume(r.vol);
      if (!v || v->is_snapshot() || r.blocks == 0 || r.blocks > log::kMaxDatasetBlocks) return;
      if (r.blocks < v->size_blocks) {
        // Nothing stays mapped (or attributed) past the end: a later grow
        // shows unmapped blocks there, and Check finds no extent out of
        // bounds.
        const Bno from = Bno(r.blocks), n = Bno(v->size_blocks - r.blocks);
        v->tree.Assign(from, n, kNoBlock);
        v->attrs.Apply(from, n, 0, 0xff);
      }
      v->size_blocks = r.blocks;
      break;
    }
    case log::OpType::kClone: {
      const log::CloneOp& c = op.clone;
      VolumeMeta* src = volume(c.src);
      VolumeMeta* dst = volume(c.dst);
      if (!src || !dst || dst->is_snapshot()) return;
      if (uint64_t(c.src_lba) + c.count > src->size_blocks ||
          uint64_t(c.dst_lba) + c.count > dst->size_blocks)
        return;
      map::CloneRange(src->tree, c.src_lba, &dst->tree, c.dst_lba, c.count, &vbas_);
      break;
    }
    case log::OpType::kAttr: {
      VolumeMeta* v = volume(op.attr.vol);
      if (!v || v->is_snapshot() || uint64_t(op.attr.lba) + op.attr.count > v->size_blocks) return;
      v->attrs.Apply(op.attr.lba, op.attr.count, op.attr.set, op.attr.clear);
      break;
    }
    default:
      break;
  }
}

absl::Status MapState::ValidateNote(const log::Op& op, const std::vector<uint32_t>& dropped) const {
  auto gone = [&](uint32_t id) {
    return std::find(dropped.begin(), dropped.end(), id) != dropped.end();
  };
  auto range_ok = [](const VolumeMeta* v, Bno lba, Bno count) {
    return uint64_t(lba) + count <= v->size_blocks;
  };
  auto writable = [&](const VolumeMeta* v, Bno lba, Bno count, const char* what) -> absl::Status {
    if (v->is_snapshot())
      return absl::InvalidArgumentError(absl::StrCat("snapshot ", v->origin_name, "@", v->name,
                                                     " cannot be ", what));
    if (v->read_only) return absl::PermissionDeniedError(absl::StrCat(v->name, " is read-only"));
    if (!range_ok(v, lba, count))
      return absl::OutOfRangeError(absl::StrFormat("range [%d, +%d) blocks is past the end of %s",
                                                   lba, count, v->name));
    if (v->attrs.Any(lba, count, log::kAttrImmutable))
      return absl::PermissionDeniedError(
          absl::StrFormat("range [%d, +%d) of %s is immutable", uint64_t(lba) * log::kBlock,
                          uint64_t(count) * log::kBlock, v->name));
    return absl::OkStatus();
  };
  switch (op.type) {
    case log::OpType::kTree: {
      const VolumeMeta* src = volume(op.tree.src);
      if (!src) return absl::NotFoundError("source tree is gone");
      std::string why;
      if (!ValidCatalogName(op.tree.name, &why))
        return absl::InvalidArgumentError(absl::StrCat("bad name '", op.tree.name, "': ", why));
      if (op.tree.kind == 1) {
        if (src->is_snapshot()) return absl::InvalidArgumentError("cannot snapshot a snapshot");
        if (FindSnapshot(src->name, op.tree.name))
          return absl::AlreadyExistsError(
              absl::StrCat("snapshot ", src->name, "@", op.tree.name, " already exists"));
      } else {
        if (!src->is_snapshot()) return absl::InvalidArgumentError("only snapshots are activated");
        if (FindVolume(op.tree.name))
          return absl::AlreadyExistsError(absl::StrCat("volume ", op.tree.name, " already exists"));
      }
      return absl::OkStatus();
    }
    case log::OpType::kDataset: {
      const log::DatasetOp& d = op.dataset;
      std::string why;
      if (!ValidCatalogName(d.name, &why))
        return absl::InvalidArgumentError(absl::StrCat("bad dataset name '", d.name, "': ", why));
      if (d.kind > log::kMaxDatasetKind)
        return absl::InvalidArgumentError(absl::StrCat("unknown dataset kind ", int(d.kind)));
      if (d.blocks == 0 || d.blocks > log::kMaxDatasetBlocks)
        return absl::InvalidArgumentError(absl::StrFormat(
            "dataset size %d blocks is not between 1 and %d", d.blocks, log::kMaxDatasetBlocks));
      if (volume(d.id) && !gone(d.id))
        return absl::InternalError(absl::StrCat("tree id ", d.id, " is in use"));
      if (const VolumeMeta* v = FindVolume(d.name); v && !gone(v->id))
        return absl::AlreadyExistsError(absl::StrCat("volume ", d.name, " already exists"));
      // Snapshots keep the name of the volume they were taken of after it
      // goes; a new tree of that name would take them over.
      for (const auto& [id, v] : volumes_) {
        if (v->is_snapshot() && v->origin_name == d.name && !gone(id))
          return absl::AlreadyExistsError(absl::StrCat(
              "snapshot ", v->origin_name, "@", v->name, " of a removed volume ", d.name,
              " still exists; delete it first"));
      }
      return absl::OkStatus();
    }
    case log::OpType::kDrop: {
      const VolumeMeta* v = volume(op.drop);
      if (!v || gone(op.drop)) return absl::NotFoundError("no such tree");
      if (v->id == 0) return absl::FailedPreconditionError("the primary volume cannot be removed");
      if (v->is_snapshot()) {
        for (const auto& [id, o] : volumes_) {
          if (!o->is_snapshot() && o->origin == v->id && !gone(o->id))
            return absl::FailedPreconditionError(absl::StrCat(
                "snapshot ", v->origin_name, "@", v->name, " is active as ", o->name));
        }
      }
      return absl::OkStatus();
    }
    case log::OpType::kRollback: {
      const VolumeMeta* v = volume(op.rollback.vol);
      const VolumeMeta* s = volume(op.rollback.snap);
      if (!v || v->is_snapshot()) return absl::NotFoundError("no such volume");
      if (!s || !s->is_snapshot()) return absl::NotFoundError("no such snapshot");
      if (s->origin != v->id)
        return absl::InvalidArgumentError(
            absl::StrCat("snapshot ", s->name, " was not taken of ", v->name));
      if (v->read_only) return absl::PermissionDeniedError(absl::StrCat(v->name, " is read-only"));
      return absl::OkStatus();
    }
    case log::OpType::kClone: {
      const log::CloneOp& c = op.clone;
      const VolumeMeta* src = volume(c.src);
      const VolumeMeta* dst = volume(c.dst);
      if (!src) return absl::NotFoundError("source volume or snapshot is gone");
      if (!dst) return absl::NotFoundError("destination volume is gone");
      if (!range_ok(src, c.src_lba, c.count))
        return absl::OutOfRangeError(absl::StrFormat(
            "source range [%d, +%d) is past the end of %s", uint64_t(c.src_lba) * log::kBlock,
            uint64_t(c.count) * log::kBlock, src->name));
      return writable(dst, c.dst_lba, c.count, "written");
    }
    case log::OpType::kResize: {
      const log::ResizeOp& r = op.resize;
      const VolumeMeta* v = volume(r.vol);
      if (!v || gone(r.vol) || v->is_snapshot()) return absl::NotFoundError("no such volume");
      if (v->dataset != DatasetKind::kBlock)
        return absl::FailedPreconditionError(absl::StrCat(
            v->name, " is a ", DatasetKindName(v->dataset),
            " dataset: only block volumes are resized (its store keeps its own layout)"));
      if (v->read_only) return absl::PermissionDeniedError(absl::StrCat(v->name, " is read-only"));
      if (r.blocks == 0 || r.blocks > log::kMaxDatasetBlocks)
        return absl::InvalidArgumentError(absl::StrFormat(
            "volume size %d blocks is not between 1 and %d", r.blocks, log::kMaxDatasetBlocks));
      if (r.blocks >= v->size_blocks || (r.flags & log::kResizeForce)) return absl::OkStatus();
      // A shrink that must not drop data: nothing mapped and nothing
      // immutable past the new end. Reads the tree (see the header).
      const Bno from = Bno(r.blocks), n = Bno(v->size_blocks - r.blocks);
      if (const map::Extent e = v->tree.FirstMapped(from, n); e.len > 0)
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s holds data past the new end %d (at byte %d): trim it first or resize with "
            "force, which discards it",
            v->name, uint64_t(r.blocks) * log::kBlock, uint64_t(e.lba) * log::kBlock));
      if (v->attrs.Any(from, n, log::kAttrImmutable))
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s has an immutable range past the new end %d: make it mutable first or resize "
            "with force",
            v->name, uint64_t(r.blocks) * log::kBlock));
      return absl::OkStatus();
    }
    case log::OpType::kTrim: {
      const VolumeMeta* v = volume(op.trim.vol);
      if (!v) return absl::NotFoundError("volume is gone");
      return writable(v, op.trim.lba, op.trim.count, "changed");
    }
    case log::OpType::kAttr: {
      const VolumeMeta* v = volume(op.attr.vol);
      if (!v || v->is_snapshot()) return absl::NotFoundError("no such volume");
      if (!range_ok(v, op.attr.lba, op.attr.count))
        return absl::OutOfRangeError(absl::StrCat("range is past the end of ", v->name));
      // Immutable and non-persistent exclude each other: a crash would
      // drop the "immutable" data of a scratch range. Clearing either is
      // always allowed (pools from before this rule may hold both).
      const uint8_t imm = log::kAttrImmutable, np = log::kAttrNonPersistent;
      for (auto [bit, other] : {std::pair{imm, np}, std::pair{np, imm}}) {
        if (!(op.attr.set & bit) || (op.attr.clear & other) ||
            !v->attrs.Any(op.attr.lba, op.attr.count, other))
          continue;
        bool to_immutable = bit == imm;
        return absl::FailedPreconditionError(absl::StrFormat(
            "range [%d, +%d) of %s is %s (in part): a range cannot be both immutable and "
            "non-persistent; make it %s first",
            uint64_t(op.attr.lba) * log::kBlock, uint64_t(op.attr.count) * log::kBlock, v->name,
            to_immutable ? "non-persistent" : "immutable",
            to_immutable ? "persistent" : "mutable"));
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError("not a note op");
  }
}

absl::Status MapState::CheckRollbackKeepsImmutable(uint32_t vol, uint32_t snap) const {
  const VolumeMeta* v = volume(vol);
  const VolumeMeta* s = volume(snap);
  assert(v && s);
  // The mapping of [lba, lba+n) with adjacent extents joined, so that two
  // trees mapping the same VBAs compare equal however their leaves split.
  auto mapping = [](const map::ExtentTree& t, Bno lba, Bno n) {
    std::vector<map::Extent> pieces, out;
    t.Lookup(lba, n, &pieces);
    for (const map::Extent& e : pieces) {
      if (!out.empty() && out.back().end() == e.lba && out.back().vba + out.back().len == e.vba) {
        out.back().len += e.len;
      } else {
        out.push_back(e);
      }
    }
    return out;
  };
  const std::vector<map::AttrRange> snap_immutable = s->attrs.With(log::kAttrImmutable);
  for (const map::AttrRange& r : v->attrs.With(log::kAttrImmutable)) {
    const char* change = nullptr;
    uint64_t covered = 0;  // blocks of r immutable in the snapshot too
    for (const map::AttrRange& o : snap_immutable) {
      uint64_t a = std::max<uint64_t>(r.lba, o.lba);
      uint64_t b = std::min<uint64_t>(uint64_t(r.lba) + r.count, uint64_t(o.lba) + o.count);
      if (a < b) covered += b - a;
    }
    if (uint64_t(r.lba) + r.count > s->size_blocks ||
        mapping(v->tree, r.lba, r.count) != mapping(s->tree, r.lba, r.count)) {
      change = "change the content of";
    } else if (covered < r.count) {
      change = "drop the attribute of";
    }
    if (change != nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rolling %s back to %s@%s would %s its immutable range [%d, +%d) bytes: make the range "
          "mutable first or roll back with force",
          v->name, s->origin_name, s->name, change, uint64_t(r.lba) * log::kBlock,
          uint64_t(r.count) * log::kBlock));
    }
  }
  return absl::OkStatus();
}

uint64_t MapState::DropNonPersistent() {
  uint64_t dropped = 0;
  for (auto& [id, v] : volumes_) {
    if (v->is_snapshot()) continue;
    for (const map::AttrRange& r : v->attrs.With(log::kAttrNonPersistent)) {
      uint64_t before = v->tree.mapped_blocks();
      v->tree.Assign(r.lba, r.count, kNoBlock);
      dropped += before - v->tree.mapped_blocks();
    }
  }
  return dropped;
}

}  // namespace ftl::state
