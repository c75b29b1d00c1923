// ftld: the NBD daemon. See daemon_options.h for the command line.

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/daemon.h"

int main(int argc, char** argv) {
  // Debian's abseil checks every Mutex for lock-order cycles, which costs a
  // global lock per Mutex destroyed on the request path; ftld's lock order
  // is documented and tested instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return ftl::daemon::RunDaemon(std::vector<std::string>(argv + 1, argv + argc));
}
