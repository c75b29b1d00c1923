#pragma once
// ftlctl's "device" and "scrub" verbs (README, "Devices and mirrors",
// "Scrub"): build {"cmd":"device"|"scrub","action":...} requests
// (control/control_protocol.h, control/control_device.h), send them
// through the caller's round trip and print the replies:
//
//   device list                          scrub start [--rate R] [--wait]
//   device offline DEVICE                scrub stop
//   device online DEVICE [--path P]      scrub status
//   device replace OLD NEW [--force] [--wait]
//
// --wait polls until the resilver or scrub is done, printing progress.
// Owns nothing; single-threaded like the rest of ftlctl.

#include <string>
#include <vector>

#include "tools/ftlctl_kv.h"  // RoundtripFn

namespace ftl::ctl {

// `args` are the words after the command word (`cmd` is "device" or
// "scrub"). Exit status as RunKv: 0 ok (scrub status --wait: 3 if the
// scrub found damage it could not repair), 1 the daemon answered an
// error, 2 usage or connection problems.
int RunDevice(const std::string& cmd, const std::vector<std::string>& args, bool json,
              const RoundtripFn& roundtrip);

extern const char* const kDeviceUsage;

}  // namespace ftl::ctl
