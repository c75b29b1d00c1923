#pragma once
// Resolving the names users give trees (include/ftl/range.h: tree
// references) against a MapState. REQUIRES of every function: the caller
// may read the catalogue part of the map (state/pool_state.h: map_mu or
// tree_meta_mu held, shared is enough).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "state/map_state.h"

namespace ftl::state {

// "" = the primary volume, else a volume by name (not a snapshot).
absl::StatusOr<uint32_t> ResolveVolume(const MapState& map, const std::string& name);
// A tree reference: a volume as above, or VOL@SNAP / @SNAP (a snapshot of
// that volume, "" = the primary) when allow_snapshot; else a snapshot
// reference is InvalidArgument (snapshots cannot be changed).
absl::StatusOr<uint32_t> ResolveTree(const MapState& map, const std::string& ref,
                                     bool allow_snapshot);
// A user write or trim of [lba, lba+count) of tree `vol` right before its
// record: Unavailable if the volume is gone (or a snapshot), OutOfRange if
// the range is past its current end (it shrank since the request was
// checked against the old size).
absl::Status CheckUserRange(const MapState& map, uint32_t vol, Bno lba, Bno count);
// "VOL@SNAP" of a snapshot.
std::string SnapshotRef(const VolumeMeta& snapshot);

}  // namespace ftl::state
