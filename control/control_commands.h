#pragma once
// The control commands of the daemon: status, stats, exports, checkpoint,
// gc. Each is one handler; a later feature adds its own Register* function
// next to this one (e.g. RegisterSnapshotCommands for "snapshot").

#include <chrono>
#include <string>
#include <vector>

#include "control/control.h"
#include "ftl/media.h"
#include "ftl/mirror.h"
#include "ftl/pool.h"
#include "nbd/exports.h"
#include "nbd/server.h"

namespace ftl::control {

}  // namespace ftl::control
namespace ftl::registry {
class KvRegistry;
}  // namespace ftl::registry
namespace ftl::control {

using registry::KvRegistry;

// What the handlers may look at. Not owned; all outlive the dispatcher's use.
struct DaemonContext {
  Pool* pool = nullptr;
  nbd::Server* server = nullptr;
  nbd::ExportTable* exports = nullptr;
  KvRegistry* kv = nullptr;   // the open key-value stores (registry/kv_registry.h)
  MirrorMedia* mirror = nullptr;  // the pool's media if it is a mirror (control/control_device.h)
  std::string backing;        // as given on the command line
  std::string media;          // Media::Describe()
  std::string open_report;    // how the pool was opened/created
  std::string control_path;
  bool read_only = false;
  DirectIo direct_io = DirectIo::kOff;  // how mirror devices brought online or in are opened
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

void RegisterCoreCommands(ControlDispatcher* d, const DaemonContext* ctx);

// Names as users give them, resolved to engine names (shared by the
// snapshot and range commands).
// The primary volume's name ("" if the pool has none).
std::string PrimaryName(const DaemonContext& ctx);
// A volume: "" = the primary volume; a volume name; or an export name (the
// primary may be exported under --export NAME).
absl::StatusOr<std::string> ResolveVolume(const DaemonContext& ctx, const std::string& name);
// The volume part of a snapshot reference: as ResolveVolume, but also a
// volume that is gone (deactivated) while snapshots taken of it remain.
absl::StatusOr<std::string> ResolveSnapshotVolume(const DaemonContext& ctx,
                                                  const std::string& name);
// A tree reference for range operations (include/ftl/tree_ref.h): "" (the
// primary volume), a volume or export name, "VOLUME@SNAPSHOT" or
// "@SNAPSHOT", parsed by TreeRef::Parse. Export names are translated to
// their volumes (VOLUME may be one too); a plain export name need not
// follow the name rules.
absl::StatusOr<std::string> ResolveTree(const DaemonContext& ctx, const std::string& ref);

// Export names under which `volume` (an engine name) is served, the listed
// ones first.
std::vector<std::string> ExportsOf(const DaemonContext& ctx, const std::string& volume);
// Connected clients in transmission on an export of `volume` (including
// the "" alias of the primary).
std::vector<nbd::ConnectionInfo> ClientsOf(const DaemonContext& ctx, const std::string& volume);

// OK if `volume` (an engine name, as the functions above return) is no
// key-value dataset; FailedPrecondition naming `what` (a block-only verb,
// e.g. "range operations") otherwise.
absl::Status RequireBlock(const DaemonContext& ctx, const std::string& volume,
                          const std::string& what);

// Pieces of the replies, shared with later commands.
Json GeometryJson(const Geometry& g);
Json ExportJson(const nbd::Export& e);
Json ExportsJson(const nbd::ExportTable& exports);
Json PoolStatsJson(const PoolStats& s);
// Thin provisioning (docs/decisions.md, "Issue 22: datasets at will"):
// provisioned / logical bytes (0 without capacity), and status's "space"
// object {logical_bytes, provisioned_bytes, overcommit, live_bytes,
// used_percent, free_bytes}.
double Overcommit(const PoolStats& s);
Json SpaceJson(const PoolStats& s);
Json VolumeStatsJson(const VolumeStats& s);
// The devices of the pool (control/control_device.cc): the mirror's, or
// the one BACKING; and a scrub's status.
Json DevicesJson(const DaemonContext& ctx);
Json ScrubJson(const ScrubStatus& s);

}  // namespace ftl::control
