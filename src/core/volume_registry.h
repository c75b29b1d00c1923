#pragma once
// VolumeRegistry: the Volume objects of an open pool, by tree id. They
// follow the catalogue (Sync): new volumes appear, removed ones are marked
// gone and kept (never freed while the pool lives, so Volume pointers a
// client holds stay valid).
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
  };
  // Makes the objects match `live` (sorted by id).
  void Sync(const VolumeContext* ctx, const std::vector<Live>& live);
  std::vector<std::string> Names() const;
  Volume* Get(const std::string& name);
  Volume* Primary();

 private:
  mutable absl::Mutex mu_;
  std::map<uint32_t, std::unique_ptr<VolumeImpl>> volumes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<VolumeImpl>> graveyard_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::core
