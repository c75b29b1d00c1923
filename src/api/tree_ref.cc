#include "ftl/tree_ref.h"

#include "ftl/snapshot.h"

#include "absl/strings/str_cat.h"

namespace ftl {
// The name rule of include/ftl/snapshot.h, for the engine and the tools
// alike.
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

absl::StatusOr<TreeRef> TreeRef::Parse(std::string_view text) {
  // Debian's abseil has its own string_view type.
  absl::string_view quoted(text.data(), text.size());
  TreeRef ref;
  size_t at = text.find('@');
  if (at == std::string_view::npos) {
    ref.volume = std::string(text);
  } else {
    if (text.find('@', at + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", quoted, "': a tree reference holds at most one '@' (VOLUME@SNAPSHOT)"));
    }
    if (at + 1 == text.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", quoted, "': a snapshot reference is VOLUME@SNAPSHOT or @SNAPSHOT"));
    }
    ref.volume = std::string(text.substr(0, at));
    ref.snapshot = std::string(text.substr(at + 1));
  }
  std::string why;
  if (!ref.volume.empty() && !ValidCatalogName(ref.volume, &why)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", quoted, "': bad volume name '", ref.volume, "': ", why));
  }
  if (ref.is_snapshot() && !ValidCatalogName(ref.snapshot, &why)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", quoted, "': bad snapshot name '", ref.snapshot, "': ", why));
  }
  return ref;
}

std::string TreeRef::ToString() const {
  return is_snapshot() ? absl::StrCat(volume, "@", snapshot) : volume;
}

}  // namespace ftl
