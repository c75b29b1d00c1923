#pragma once
// Control commands for key-value datasets (issue 21):
//
//   {"cmd":"kv","action":"create|list|destroy|put|get|delete|scan|stats", ...}
//
// One command, the verb in "action" (the README's "Control protocol"
// section lists every field). The handlers check every argument before
// they touch a dataset, so a bad request changes nothing; they reach the
// stores through the daemon's KvRegistry (registry/kv_registry.h), which
// opens each store once and keeps it open. Keys and values travel as
// control/kv_wire.h says (UTF-8 text, else base64 in "*_b64").
//
// Limits on what one request makes the daemon hold: a key of at most
// kMaxKeyBytes and a value of at most kMaxValueBytes (include/ftl/kv.h;
// the request line itself is capped at kMaxControlLine), a scan reply of
// at most kMaxKvScanLimit entries and about kMaxKvScanBytes of keys and
// values (control_protocol.h), read through an iterator, never as a whole.
//
// Handlers run on the control thread, one at a time (control.h); the
// registry is safe from any thread regardless.

#include "control/control.h"
#include "control/control_commands.h"

namespace ftl::control {

// REQUIRES: ctx->kv set.
void RegisterKvCommands(ControlDispatcher* d, const DaemonContext* ctx);

}  // namespace ftl::control
