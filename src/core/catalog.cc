// Snapshot catalogue: create, list, delete, activate, deactivate, rollback.
#include "core/pool_impl.h"

namespace ftl::core {
namespace {
absl::Status NotYet() { return absl::UnimplementedError("not implemented yet"); }
}  // namespace

absl::StatusOr<SnapshotInfo> PoolImpl::CreateSnapshot(const std::string&, const std::string&) {
  return NotYet();
}
std::vector<SnapshotInfo> PoolImpl::ListSnapshots(const std::string&) { return {}; }
absl::Status PoolImpl::DeleteSnapshot(const std::string&, const std::string&) { return NotYet(); }
absl::StatusOr<Volume*> PoolImpl::ActivateSnapshot(const std::string&, const std::string&,
                                                   const std::string&, bool) {
  return NotYet();
}
absl::Status PoolImpl::DeactivateVolume(const std::string&) { return NotYet(); }
absl::Status PoolImpl::Rollback(const std::string&, const std::string&) { return NotYet(); }
std::string PoolImpl::VolumeOrigin(const std::string&) { return ""; }
absl::Status PoolImpl::ApplyRangeOps(const std::vector<RangeOp>&) { return NotYet(); }
void PoolImpl::ApplyRangeOpsAsync(const std::vector<RangeOp>&,
                                  std::function<void(absl::Status)> done) {
  done(NotYet());
}
absl::StatusOr<MergeResult> PoolImpl::Merge(const MergeRequest&) { return NotYet(); }
absl::Status PoolImpl::SetRangeAttr(const std::string&, uint64_t, uint64_t, RangeAttr) {
  return NotYet();
}
absl::StatusOr<std::vector<AttrExtent>> PoolImpl::RangeAttrs(const std::string&) {
  return NotYet();
}

}  // namespace ftl::core

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
