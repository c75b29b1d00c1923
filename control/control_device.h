#pragma once
// The "device" and "scrub" commands (issue 22; README, "Devices and
// mirrors", "Scrub"):
//   {"cmd":"device","action":"list"}
//   {"cmd":"device","action":"offline","device":D}
//   {"cmd":"device","action":"online","device":D[,"path":P]}
//   {"cmd":"device","action":"replace","old":D,"new":PATH[,"force":true]}
//   {"cmd":"scrub","action":"start"[,"rate":R]} | "stop" | "status"
// D is a device's path, index or guid. The device verbs other than list
// answer FAILED_PRECONDITION on a pool on one device. Handlers run on the
// control thread (control.h); the mirror and the pool are thread-safe.

#include "control/control.h"
#include "control/control_commands.h"

namespace ftl::control {

void RegisterDeviceCommands(ControlDispatcher* d, const DaemonContext* ctx);

}  // namespace ftl::control
