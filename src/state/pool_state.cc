#include "state/pool_state.h"

namespace ftl::state {

void PoolState::InitPins(uint32_t segment_count) {
  pins_ = std::make_unique<std::atomic<uint32_t>[]>(segment_count);
}

void PoolState::LookupForRead(uint32_t vol, Bno lba, Bno n,
                              std::vector<std::pair<log::Pba, uint32_t>>* out,
                              std::vector<uint32_t>* pinned) {
  out->assign(n, {log::Pba(kNoBlock), 0});
  std::vector<map::Extent> ext;
  absl::ReaderMutexLock l(&map_mu);
  const VolumeMeta* v = map->volume(vol);
  if (!v) return;
  v->tree.Lookup(lba, n, &ext);
  uint32_t last_seg = UINT32_MAX;
  for (const map::Extent& e : ext) {
    for (Bno k = 0; k < e.len; ++k) {
      Bno pba = map->vbas().Get(e.vba + k).pba;
      if (pba == kNoBlock) continue;
      (*out)[e.lba - lba + k] = {log::Pba(pba), map->block_csum(pba)};
      uint32_t seg = map->segments().SegmentOf(log::Pba(pba));
      if (seg != last_seg) {
        pins_[seg].fetch_add(1);
        pinned->push_back(seg);
        last_seg = seg;
      }
    }
  }
}

void PoolState::Unpin(const std::vector<uint32_t>& pinned) {
  for (uint32_t seg : pinned) pins_[seg].fetch_sub(1);
}

std::vector<BlockExtent> PoolState::MappedExtents(uint32_t vol, Bno lba, Bno n) {
  std::vector<map::Extent> ext;
  {
    absl::ReaderMutexLock l(&map_mu);
    if (const VolumeMeta* v = map->volume(vol)) v->tree.Lookup(lba, n, &ext);
  }
  std::vector<BlockExtent> out;
  auto add = [&](Bno a, Bno len, bool alloc) {
    if (len == 0) return;
    if (!out.empty() && out.back().allocated == alloc &&
        out.back().offset + out.back().length == uint64_t(a) * kBlockSize) {
      out.back().length += uint64_t(len) * kBlockSize;
    } else {
      out.push_back({uint64_t(a) * kBlockSize, uint64_t(len) * kBlockSize, alloc});
    }
  };
  Bno at = lba;
  for (const map::Extent& e : ext) {
    add(at, e.lba - at, false);
    add(e.lba, e.len, true);
    at = e.end();
  }
  add(at, lba + n - at, false);
  return out;
}

uint64_t PoolState::MappedBlocks(uint32_t vol) {
  absl::ReaderMutexLock l(&map_mu);
  const VolumeMeta* v = map->volume(vol);
  return v ? v->tree.mapped_blocks() : 0;
}

bool PoolState::RangeImmutable(uint32_t vol, Bno lba, Bno n) {
  absl::ReaderMutexLock l(&map_mu);
  const VolumeMeta* v = map->volume(vol);
  return v && v->attrs.Any(lba, n, log::kAttrImmutable);
}

}  // namespace ftl::state
