#pragma once
// The ftld daemon as named start-up and shutdown steps:
//   start:    logging -> backing (open/format) -> exports -> NBD listeners ->
//             control socket -> serve
//   shutdown: (SIGINT/SIGTERM) stop accepting -> finish in-flight requests ->
//             stop io -> Pool::Close (checkpoint, mark clean) -> exit 0;
//             a second signal -> _exit at once (recovery replays).

#include <vector>
#include <string>

#include "nbd/daemon_options.h"

namespace ftl::nbd {

// Runs ftld; returns the process exit code. Errors are printed as one line
// "ftld: error: ..." on stderr.
int RunDaemon(const std::vector<std::string>& args);

}  // namespace ftl::nbd
