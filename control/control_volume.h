#pragma once
// Control commands for datasets at will (issue 22):
//
//   {"cmd":"volume","action":"create|resize|destroy|list", ...}
//
// One command, the verb in "action" (the README's "Control protocol"
// section lists every field). "volume" is the one dataset namespace: list
// shows block volumes and key-value datasets side by side with their kind,
// destroy takes either kind; create makes block volumes (key-value ones:
// "kv create"), resize takes block volumes only.
//
// The NBD side follows the catalogue at once: a created volume is exported
// under its name before the reply; destroy removes its exports first (so
// no new client opens them) and puts them back if the engine refuses;
// clients still connected then get ESHUTDOWN, as those of a deactivated
// snapshot do. A resize changes the Volume the exports point at; clients
// see the new size when they connect again (a connected client keeps the
// size it negotiated; past a shrunk end its writes get ENOSPC).
//
// Every argument is checked before anything changes, so a bad request
// changes nothing. Handlers run on the control thread, one at a time
// (control.h).

#include "control/control.h"
#include "control/control_commands.h"

namespace ftl::control {

// REQUIRES: ctx->kv set (destroy of a key-value dataset closes its store).
void RegisterVolumeCommands(ControlDispatcher* d, const DaemonContext* ctx);

}  // namespace ftl::control
