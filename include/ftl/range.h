#pragma once
// Range operation types of the public API: clone, move, merge, attributes
// (docs/architecture.md, "The map"). Offsets and lengths are bytes, multiples of 4096.
//
// A tree reference names where a range lives: "" = the primary volume, a
// volume (or activated export) name, or a snapshot as "VOLUME@SNAPSHOT" /
// "@SNAPSHOT" (sources only: snapshots are never written). Grammar and
// parser: tree_ref.h.

#include <cstdint>
#include <string>
#include <vector>

namespace ftl {

struct RangeOp {
  enum class Kind { kClone, kMove };
  Kind kind = Kind::kClone;
  std::string from;  // source tree ("" = primary volume)
  std::string to;    // destination volume ("" = primary volume)
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t len = 0;
};

enum class MergePolicy { kFail, kFirst, kLast };

struct MergeRequest {
  std::string from;  // tree of base and sources ("" = primary)
  std::string to;    // destination volume ("" = primary)
  uint64_t base = 0;
  uint64_t dst = 0;
  uint64_t len = 0;
  std::vector<uint64_t> sources;  // offsets in `from`, in policy order
  MergePolicy policy = MergePolicy::kFail;
};

struct MergeResult {
  uint64_t blocks = 0;                  // blocks in the range
  std::vector<uint64_t> taken;          // per source: blocks taken from it
  uint64_t unchanged = 0;               // blocks taken from base
  std::vector<uint64_t> conflicts;      // byte offsets relative to the range start
  bool applied = false;                 // false: policy kFail hit conflicts
};

// Range attributes. Immutable ranges refuse writes, trims and being the
// target of range operations (PermissionDenied). Non-persistent ranges are
// scratch space: crash recovery drops their content (a clean restart keeps it).
enum class RangeAttr { kImmutable, kMutable, kPersistent, kNonPersistent };

struct AttrExtent {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool immutable = false;
  bool non_persistent = false;
};

}  // namespace ftl
