#pragma once
// A tree reference names where data lives in a pool: a volume, or a
// snapshot of one (read-only). Its text form:
//
//   ""                  the primary volume
//   VOLUME              a volume
//   VOLUME@SNAPSHOT     a snapshot of VOLUME
//   @SNAPSHOT           a snapshot of the primary volume
//
// VOLUME and SNAPSHOT follow the name rules of include/ftl/snapshot.h (1-64
// characters of [A-Za-z0-9._-], not "." or ".."), so a reference holds at
// most one '@' and a snapshot name follows it. Range operations take tree
// references (include/ftl/range.h); ftld's control socket and ftlctl parse
// them with TreeRef::Parse and nothing else.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ftl {

struct TreeRef {
  std::string volume;    // "" = the primary volume
  std::string snapshot;  // "" = the volume itself

  bool is_snapshot() const { return !snapshot.empty(); }

  // The reference `text` names (grammar above); InvalidArgument quoting
  // `text` and saying what is wrong otherwise.
  static absl::StatusOr<TreeRef> Parse(std::string_view text);
  // The text form: Parse(r.ToString()) == r for every valid r.
  std::string ToString() const;

  friend bool operator==(const TreeRef&, const TreeRef&) = default;
};

}  // namespace ftl
