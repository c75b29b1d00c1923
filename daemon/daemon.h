#pragma once
// The ftld daemon as named start-up and shutdown steps:
//   start:    logging -> backing (open/format) -> exports -> NBD listeners ->
//             control socket (with the key-value store registry) ->
//             Redis-protocol listener (--kv-port/--kv-unix) -> serve
//   shutdown: (SIGINT/SIGTERM) stop accepting (and close RESP clients) ->
//             finish in-flight NBD requests ->
//             stop io -> close the key-value stores (flushing them) ->
//             Pool::Close (checkpoint, mark clean) -> exit 0;
//             a second signal -> _exit at once (recovery replays).

#include <vector>
#include <string>

#include "absl/status/status.h"
#include "daemon/daemon_options.h"
#include "ftl/pool.h"
#include "nbd/exports.h"

namespace ftl::daemon {

// Runs ftld; returns the process exit code. Errors are printed as one line
// "ftld: error: ..." on stderr.
int RunDaemon(const std::vector<std::string>& args);

// The exports of a pool: the primary volume under its export name
// (--export, default its volume name) and as "", the default export; every
// other block volume under its own name (key-value datasets are not
// exported). All are listed by NBD_OPT_LIST.
absl::Status FillExports(Pool& pool, const DaemonOptions& o, nbd::ExportTable* exports);

}  // namespace ftl::daemon
