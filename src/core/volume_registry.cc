#include "core/volume_registry.h"

#include <algorithm>

namespace ftl::core {

void VolumeRegistry::Sync(const VolumeContext* ctx, const std::vector<Live>& live) {
  absl::MutexLock l(&mu_);
  size_t k = 0;
  for (auto& [id, v] : volumes_) {
    while (k < live.size() && live[k].id < id) ++k;
    if (k == live.size() || live[k].id != id) v->MarkGone();
  }
  for (const Live& lv : live) {
    auto it = volumes_.find(lv.id);
    if (it == volumes_.end() || it->second->gone()) {
      // A reused id (after a drop) gets a fresh object; the old one stays.
      if (it != volumes_.end()) graveyard_.push_back(std::move(it->second));
      auto v = std::make_unique<VolumeImpl>(ctx, lv.id, lv.name, lv.size_blocks, lv.read_only,
                                            lv.kind);
      it = volumes_.insert_or_assign(lv.id, std::move(v)).first;
    }
    it->second->SetHasImmutable(lv.immutable);
    it->second->SetSizeBlocks(lv.size_blocks);
  }
}

std::vector<std::string> VolumeRegistry::Names() const {
  std::vector<std::string> out;
  absl::MutexLock l(&mu_);
  for (const auto& [id, v] : volumes_)
    if (!v->gone()) out.push_back(v->name());
  return out;
}

Volume* VolumeRegistry::Get(const std::string& name) {
  absl::MutexLock l(&mu_);
  for (auto& [id, v] : volumes_)
    if (!v->gone() && v->name() == name) return v.get();
  return nullptr;
}

Volume* VolumeRegistry::Primary() {
  absl::MutexLock l(&mu_);
  auto it = volumes_.find(0);
  return it == volumes_.end() ? nullptr : it->second.get();
}

Volume* VolumeRegistry::Snapshot(const VolumeContext* ctx, uint32_t id, const std::string& ref,
                                 uint64_t size_blocks, DatasetKind kind) {
  absl::MutexLock l(&mu_);
  auto it = snapshots_.find(id);
  if (it != snapshots_.end() && !it->second->gone()) return it->second.get();
  if (it != snapshots_.end()) graveyard_.push_back(std::move(it->second));
  auto v = std::make_unique<VolumeImpl>(ctx, id, ref, size_blocks, /*ro=*/true, kind);
  Volume* out = v.get();
  snapshots_.insert_or_assign(id, std::move(v));
  return out;
}

void VolumeRegistry::SyncSnapshots(const std::vector<uint32_t>& live) {
  absl::MutexLock l(&mu_);
  for (auto& [id, v] : snapshots_) {
    if (std::find(live.begin(), live.end(), id) == live.end()) v->MarkGone();
  }
}

}  // namespace ftl::core
