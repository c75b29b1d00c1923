#pragma once
// Snapshot catalogue types of the public API (docs/architecture.md, "The map"). A snapshot is a
// frozen copy-on-write tree of a volume: creating one, and activating one as
// a new writable volume, share the tree root and cost O(1).
//
// Naming: volume (= export) and snapshot names are 1-64 characters of
// [A-Za-z0-9._-] and never contain '@'. A snapshot is unique per volume and
// is named elsewhere as "VOLUME@SNAPSHOT" (or "@SNAPSHOT" for the primary
// volume), so a name never means both a volume and a snapshot.

#include <cstdint>
#include <string>
#include <vector>

namespace ftl {

struct SnapshotInfo {
  std::string name;
  std::string volume;         // the volume it was taken of
  uint64_t created_unix_ns = 0;
  uint64_t seq = 0;           // sequence number of its note in the log
  std::string parent;         // lineage: "VOL@SNAP" it descends from, "" if none
  uint64_t exclusive_bytes = 0;  // bytes a delete would free
  uint64_t size_bytes = 0;
  std::string active_as;      // first volume activated from it, "" if none
  std::vector<std::string> active_volumes;  // every volume activated from it
};

// Validates a volume, export or snapshot name (rules above); the error says
// what is wrong.
bool ValidCatalogName(const std::string& name, std::string* why);

}  // namespace ftl
