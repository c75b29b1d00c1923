#pragma once
// Control commands for snapshots (issue 4):
//
//   {"cmd":"snapshot","action":"create|list|delete|activate|deactivate|rollback", ...}
//
// One command per noun, the verb in "action" (the README's "Control
// protocol" section lists every field). Activation adds an NBD export at
// once; deactivation removes it before the volume goes away, so a new
// client can never open a dead export (connected ones get ESHUTDOWN).
// Handlers run on the control thread, one at a time (control.h), so the
// check-then-act sequences below (e.g. rollback's "no client connected")
// never race with each other; they may race with NBD clients connecting,
// which is the documented behaviour of --force-less rollback (best effort).

#include "control/control.h"
#include "control/control_commands.h"

namespace ftl::control {

void RegisterSnapshotCommands(ControlDispatcher* d, const DaemonContext* ctx);

}  // namespace ftl::control
