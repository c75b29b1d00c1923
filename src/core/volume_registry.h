#pragma once
// VolumeRegistry: the Volume objects of an open pool, by tree id. They
// follow the catalogue (Sync): new volumes appear, removed ones are marked
// gone and kept (never freed while the pool lives, so Volume pointers a
// client holds stay valid). Read-only views of snapshots
// (Pool::SnapshotVolume) are kept apart, made on demand and marked gone
// with their snapshot (SyncSnapshots); Names() and Get() never show them,
// so they are never exported over NBD.
//
// Thread safety: all methods are safe from any thread; mu_ is a leaf lock
// (nothing else is taken while holding it).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/volume_impl.h"

namespace ftl::core {

class VolumeRegistry {
 public:
  struct Live {
    uint32_t id;
    std::string name;
    uint64_t size_blocks;
    bool read_only;
    bool immutable;  // some range is immutable
    DatasetKind kind = DatasetKind::kBlock;
  };
  // Makes the objects match `live` (sorted by id).
  void Sync(const VolumeContext* ctx, const std::vector<Live>& live);
  std::vector<std::string> Names() const;
  Volume* Get(const std::string& name);
  Volume* Primary();
  // The read-only view of snapshot tree `id`, made on first use with
  // `ref` ("VOL@SNAP") as its name. REQUIRES: the snapshot exists when
  // called, and stays until a later SyncSnapshots without it.
  Volume* Snapshot(const VolumeContext* ctx, uint32_t id, const std::string& ref,
                   uint64_t size_blocks, DatasetKind kind);
  // Marks gone the snapshot views whose tree is not in `live` (ids).
  void SyncSnapshots(const std::vector<uint32_t>& live);

 private:
  mutable absl::Mutex mu_;
  std::map<uint32_t, std::unique_ptr<VolumeImpl>> volumes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<VolumeImpl>> graveyard_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::unique_ptr<VolumeImpl>> snapshots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::core
