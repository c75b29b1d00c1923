#pragma once
// The control commands of the daemon: status, stats, exports, checkpoint,
// gc. Each is one handler; a later feature adds its own Register* function
// next to this one (e.g. RegisterSnapshotCommands for "snapshot").

#include <chrono>
#include <string>

#include "control/control.h"
#include "ftl/pool.h"
#include "nbd/exports.h"
#include "nbd/server.h"

namespace ftl::control {

// What the handlers may look at. Not owned; all outlive the dispatcher's use.
struct DaemonContext {
  Pool* pool = nullptr;
  nbd::Server* server = nullptr;
  nbd::ExportTable* exports = nullptr;
  std::string backing;        // as given on the command line
  std::string media;          // Media::Describe()
  std::string open_report;    // how the pool was opened/created
  std::string control_path;
  bool read_only = false;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

void RegisterCoreCommands(ControlDispatcher* d, const DaemonContext* ctx);

// Pieces of the replies, shared with later commands.
Json GeometryJson(const Geometry& g);
Json ExportsJson(const nbd::ExportTable& exports);
Json PoolStatsJson(const PoolStats& s);
Json VolumeStatsJson(const VolumeStats& s);

}  // namespace ftl::control
