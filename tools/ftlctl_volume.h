#pragma once
// ftlctl's "volume" verbs: the datasets of a running ftld, created,
// resized and destroyed at will (README, "Volumes"). Builds
// {"cmd":"volume","action":...} requests (control/control_protocol.h),
// sends them through the caller's round trip and prints the replies:
//
//   volume create NAME SIZE              volume list
//   volume resize NAME SIZE [--force]    volume destroy NAME [--force]
//
// SIZE in bytes or with a K/M/G/T suffix (binary units, a multiple of
// 4 KiB). Owns nothing; single-threaded like the rest of ftlctl.

#include <string>
#include <vector>

#include "tools/ftlctl_args.h"

namespace ftl::ctl {

// `args` are the words after "volume". Returns ftlctl's exit status: 0 ok,
// 1 the daemon answered an error (printed as "ftlctl: volume ACTION: ..."),
// 2 usage or connection problems. With `json` it prints the reply line.
int RunVolume(const std::vector<std::string>& args, bool json, const RoundtripFn& roundtrip);

// The usage lines of the volume verbs, for ftlctl's help.
extern const char* const kVolumeUsage;

}  // namespace ftl::ctl
