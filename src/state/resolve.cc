#include "state/resolve.h"

#include "absl/strings/str_cat.h"
#include "ftl/tree_ref.h"

namespace ftl::state {

absl::StatusOr<uint32_t> ResolveVolume(const MapState& map, const std::string& name) {
  if (name.empty()) {
    const VolumeMeta* v = map.volume(0);
    if (!v) return absl::NotFoundError("no primary volume");
    return v->id;
  }
  const VolumeMeta* v = map.FindVolume(name);
  if (!v) return absl::NotFoundError(absl::StrCat("no volume named '", name, "'"));
  return v->id;
}

absl::StatusOr<uint32_t> ResolveTree(const MapState& map, const std::string& ref,
                                     bool allow_snapshot) {
  // A plain name is looked up as it is (a primary volume formatted with a
  // name outside the catalogue rules stays reachable); a snapshot
  // reference goes through the one parser (include/ftl/tree_ref.h).
  if (ref.find('@') == std::string::npos) return ResolveVolume(map, ref);
  absl::StatusOr<TreeRef> parsed = TreeRef::Parse(ref);
  if (!parsed.ok()) return parsed.status();
  if (!allow_snapshot)
    return absl::InvalidArgumentError(
        absl::StrCat("'", ref, "' is a snapshot; snapshots cannot be changed"));
  absl::StatusOr<uint32_t> vid = ResolveVolume(map, parsed->volume);
  std::string vol_name = vid.ok() ? map.volume(*vid)->name : parsed->volume;
  const VolumeMeta* s = map.FindSnapshot(vol_name, parsed->snapshot);
  if (!s)
    return absl::NotFoundError(absl::StrCat("no snapshot '", parsed->snapshot, "' of volume '",
                                            vol_name, "'"));
  return s->id;
}

absl::Status CheckUserRange(const MapState& map, uint32_t vol, Bno lba, Bno count) {
  const VolumeMeta* v = map.volume(vol);
  if (!v || v->is_snapshot()) return absl::UnavailableError("the volume was removed");
  if (uint64_t(lba) + count > v->size_blocks)
    return absl::OutOfRangeError(absl::StrCat("blocks [", lba, ", +", count, ") are past the end of ",
                                              v->name, " (it was resized to ",
                                              v->size_blocks * log::kBlock, " bytes)"));
  return absl::OkStatus();
}

std::string SnapshotRef(const VolumeMeta& snapshot) {
  return absl::StrCat(snapshot.origin_name, "@", snapshot.name);
}

}  // namespace ftl::state
