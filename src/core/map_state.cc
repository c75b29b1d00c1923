#include "core/map_state.h"

#include <cassert>

namespace ftl::core {

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
  return raw;
}

uint64_t MapState::mapped_blocks() const {
  uint64_t n = 0;
  for (const auto& [id, v] : volumes_) n += v->tree.mapped_blocks();
  return n;
}

void MapState::PlanWrite(uint32_t vol, Bno lba, Bno n, std::vector<Bno>* out) {
  VolumeMeta* v = volume(vol);
  size_t base = out->size();
  out->resize(base + n, kNoBlock);
  Bno need = 0;
  for (Bno i = 0; i < n; ++i) {
    Bno cur = v->tree.LookupOne(lba + i);
    if (cur != kNoBlock && vbas_.Get(cur).refs == 1 && v->tree.Exclusive(lba + i)) {
      (*out)[base + i] = cur;
    } else {
      ++need;
    }
  }
  if (need == 0) return;
  std::vector<std::pair<Bno, Bno>> runs;
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

void MapState::UnplanWrite(const std::vector<Bno>& planned) {
  for (Bno v : planned) {
    if (v != kNoBlock && vbas_.InRange(v) && vbas_.Get(v).refs == 0) {
      // Allocated but never referenced: give it back.
      vbas_.Incref(v, 1);
      vbas_.Decref(v, 1);
    }
  }
}

void MapState::ApplyRecord(const log::RecordHeader& h, Bno pba, ApplyMode mode) {
  uint32_t seg = segs_.SegmentOf(pba);
  log::SegmentInfo& si = segs_.at(seg);
  Bno data = pba + h.header_blocks;
  for (const log::Op& op : h.ops) {
    switch (op.type) {
      case log::OpType::kWrite:
        ApplyWrite(op.write, data, h.seq, mode);
        break;
      case log::OpType::kTrim:
        if (VolumeMeta* v = volume(op.trim.vol)) {
          Bno end = Bno(std::min<uint64_t>(uint64_t(op.trim.lba) + op.trim.count, v->size_blocks));
          if (op.trim.lba < end) v->tree.Assign(op.trim.lba, end - op.trim.lba, kNoBlock);
        }
        break;
      case log::OpType::kReloc:
        ApplyReloc(op.reloc, data, mode);
        break;
    }
    data += op.data_blocks();
  }
  Bno end_in_seg = pba + h.header_blocks + h.data_blocks - segs_.FirstBlock(seg);
  si.write_ptr = std::max(si.write_ptr, end_in_seg);
  si.max_seq = std::max(si.max_seq, h.seq);
}

void MapState::ApplyWrite(const log::WriteOp& w, Bno first_pba, uint64_t seq, ApplyMode mode) {
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
    bool same = true;
    for (Bno k = i; k < j && same; ++k) same = v->tree.LookupOne(w.lba + k) == w.vba[k];
    if (!same) {
      for (Bno k = i; k < j; ++k) vbas_.Claim(w.vba[k]);
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
    bool referenced = vbas_.InRange(b.vba) && vbas_.Get(b.vba).refs > 0;
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

}  // namespace ftl::core
