#include "state/resolve.h"

#include "absl/strings/str_cat.h"

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
  size_t at = ref.find('@');
  if (at == std::string::npos) return ResolveVolume(map, ref);
  if (!allow_snapshot)
    return absl::InvalidArgumentError(
        absl::StrCat("'", ref, "' is a snapshot; snapshots cannot be changed"));
  std::string vol = ref.substr(0, at), snap = ref.substr(at + 1);
  absl::StatusOr<uint32_t> vid = ResolveVolume(map, vol);
  std::string vol_name = vid.ok() ? map.volume(*vid)->name : vol;
  const VolumeMeta* s = map.FindSnapshot(vol_name, snap);
  if (!s)
    return absl::NotFoundError(
        absl::StrCat("no snapshot '", snap, "' of volume '", vol_name, "'"));
  return s->id;
}

std::string SnapshotRef(const VolumeMeta& snapshot) {
  return absl::StrCat(snapshot.origin_name, "@", snapshot.name);
}

}  // namespace ftl::state

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
