#pragma once
// Control commands for range operations (issue 5):
//
//   {"cmd":"range","action":"clone|move|batch|merge|attr|attrs", ...}
//
// The verb in "action" (the README's "Control protocol" section lists every
// field). Offsets and lengths are sizes (SizeArg); "from" and "to" are tree
// references, resolved to engine names before the engine sees them
// (ResolveTree), so an export name works wherever a volume name does.

#include "control/control.h"
#include "control/control_commands.h"

namespace ftl::control {

void RegisterRangeCommands(ControlDispatcher* d, const DaemonContext* ctx);

}  // namespace ftl::control
