#pragma once
// Control commands for snapshots (issue 4) and range operations (issue 5):
//
//   {"cmd":"snapshot","action":"create|list|delete|activate|deactivate|rollback", ...}
//   {"cmd":"range","action":"clone|move|batch|merge|attr|attrs", ...}
//
// One command per noun, the verb in "action" (the README's "Control
// protocol" section lists every field). Snapshot activation adds an NBD
// export at once; deactivation removes it before the volume goes away, so
// a new client can never open a dead export (connected ones get ESHUTDOWN).
// Handlers run on the control thread, one at a time (control.h), so the
// check-then-act sequences below (e.g. rollback's "no client connected")
// never race with each other; they may race with NBD clients connecting,
// which is the documented behaviour of --force-less rollback (best effort).

#include "control/control.h"
#include "control/control_commands.h"

namespace ftl::control {

void RegisterSnapshotCommands(ControlDispatcher* d, const DaemonContext* ctx);
void RegisterRangeCommands(ControlDispatcher* d, const DaemonContext* ctx);

// A size argument: a non-negative JSON integer (bytes) or a string with an
// optional K/M/G/T suffix (binary units, ftl/size.h). Errors name `key`.
absl::StatusOr<uint64_t> SizeArg(const Json& request, const std::string& key,
                                 std::optional<uint64_t> fallback = std::nullopt);

}  // namespace ftl::control
