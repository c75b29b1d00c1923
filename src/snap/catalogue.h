#pragma once
// Catalogue: the snapshot catalogue, datasets and range attributes —
// create, list, delete, activate, deactivate and roll back snapshots;
// create, list, resize and destroy datasets (docs/architecture.md, "Datasets");
// set and list the attributes of a volume's ranges (docs/architecture.md, "A snapshot
// create"). Each change is one note (commit/request.h) committed alone and
// synced; the committer validates it against the current state right
// before writing it (MapState::ValidateNote), so a name check and its note
// cannot race.
//
// Thread safety: all methods are safe from any thread. catalog_mu_
// serialises changes (their name checks and notes do not interleave, and
// a rollback's immutable-range check holds until its note is written);
// lock order: catalog_mu_, then PoolState's locks (shared, to check). Never
// called in the commit role.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "commit/committer.h"
#include "ftl/range.h"
#include "ftl/snapshot.h"
#include "state/pool_state.h"

namespace ftl::snap {

class Catalogue {
 public:
  // `metadata_room(divisor)`: ResourceExhausted when the metadata area has
  // no room for what a change may add (core/pool_impl.h).
  Catalogue(state::PoolState* state, commit::Committer* committer,
            std::function<absl::Status(uint32_t)> metadata_room)
      : state_(state), committer_(committer), metadata_room_(std::move(metadata_room)) {}

  absl::StatusOr<SnapshotInfo> CreateSnapshot(const std::string& volume, const std::string& name);
  std::vector<SnapshotInfo> ListSnapshots(const std::string& volume);
  absl::Status DeleteSnapshot(const std::string& volume, const std::string& name, bool force);
  // Returns the new volume's name.
  absl::StatusOr<std::string> ActivateSnapshot(const std::string& volume,
                                               const std::string& snapshot,
                                               const std::string& new_volume, bool read_only);
  absl::Status DeactivateVolume(const std::string& name);
  absl::Status Rollback(const std::string& volume, const std::string& snapshot, bool force);
  std::string VolumeOrigin(const std::string& volume);
  // A new empty tree (one DATASET note). InvalidArgument (name, kind,
  // size), AlreadyExists, ResourceExhausted (metadata area).
  absl::Status CreateDataset(const std::string& name, DatasetKind kind, uint64_t size_bytes);
  // Drops volume `name` (one note; with force its snapshots first, in the
  // same note). NotFound, FailedPrecondition (primary; snapshots without
  // force; with force, a snapshot of it activated as a volume).
  absl::Status DestroyDataset(const std::string& name, bool force);
  // Sets block volume `name`'s size (one RESIZE note). A shrink is refused
  // while data or an immutable range lies past the new end, unless force
  // (then they are dropped with the note). InvalidArgument (size),
  // NotFound, FailedPrecondition (a key-value dataset; data past the end),
  // PermissionDenied (read-only), ResourceExhausted (metadata area, or a
  // full pool for a grow). The same size is no change and writes nothing.
  absl::Status ResizeDataset(const std::string& name, uint64_t size_bytes, bool force);
  // Every volume-kind tree, by name; read_only adds `pool_read_only`.
  std::vector<DatasetInfo> ListDatasets(bool pool_read_only);
  absl::Status SetRangeAttr(const std::string& volume, uint64_t offset, uint64_t length,
                            RangeAttr attr);
  absl::StatusOr<std::vector<AttrExtent>> RangeAttrs(const std::string& volume);

 private:
  SnapshotInfo SnapshotInfoLocked(const state::VolumeMeta& s) const
      ABSL_SHARED_LOCKS_REQUIRED(state_->map_mu);

  state::PoolState* state_;
  commit::Committer* committer_;
  std::function<absl::Status(uint32_t)> metadata_room_;
  absl::Mutex catalog_mu_ ABSL_ACQUIRED_BEFORE(state_->tree_meta_mu);
};

}  // namespace ftl::snap
