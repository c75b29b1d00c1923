#pragma once
// ftlctl's "kv" verbs: key-value datasets of a running ftld (README,
// "Key-value datasets"). Builds {"cmd":"kv","action":...} requests
// (control/control_protocol.h, keys and values as control/kv_wire.h says),
// sends them through the caller's round trip and prints the replies:
//
//   kv create NAME [--geometry G]        kv list
//   kv destroy NAME [--force]            kv stats NAME[@SNAP]
//   kv put NAME KEY [VALUE] [--value-file F|-] [--no-sync]
//   kv get NAME[@SNAP] KEY               (the raw value on stdout)
//   kv del NAME KEY [--no-sync]
//   kv scan NAME[@SNAP] [--from K] [--to K] [--limit N]
//   --hex: KEY, VALUE, --from and --to are hex digits; get and scan print hex.
//
// Owns nothing; single-threaded like the rest of ftlctl.

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/ftlctl_args.h"

namespace ftl::ctl {

// `args` are the words after "kv". Returns ftlctl's exit status: 0 ok, 1
// the daemon answered an error (printed as "ftlctl: kv ACTION: ..."), 2
// usage or connection problems. With `json` it prints the daemon's reply
// line (a scan that took several requests: one object of the same shape
// holding every entry). `print_object` prints a reply object for humans.
int RunKv(const std::vector<std::string>& args, bool json, const RoundtripFn& roundtrip,
          const std::function<void(const nlohmann::json&)>& print_object);

// The usage lines of the kv verbs, for ftlctl's help.
extern const char* const kKvUsage;

}  // namespace ftl::ctl
