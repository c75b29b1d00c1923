#include "ftl/tree_ref.h"

#include "absl/strings/str_cat.h"

namespace ftl {
namespace {

// The name rule of include/ftl/snapshot.h. The engine checks it with
// ValidCatalogName (src/core/catalog.cc); tree_ref_test holds the two to
// the same answers until the engine calls this parser.
bool ValidName(std::string_view name, std::string* why) {
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

}  // namespace

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
  if (!ref.volume.empty() && !ValidName(ref.volume, &why)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", quoted, "': bad volume name '", ref.volume, "': ", why));
  }
  if (ref.is_snapshot() && !ValidName(ref.snapshot, &why)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", quoted, "': bad snapshot name '", ref.snapshot, "': ", why));
  }
  return ref;
}

std::string TreeRef::ToString() const {
  return is_snapshot() ? absl::StrCat(volume, "@", snapshot) : volume;
}

}  // namespace ftl
