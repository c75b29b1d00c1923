// ftld: the NBD daemon. See daemon_options.h for the command line.

#include <string>
#include <vector>

#include "nbd/daemon.h"

int main(int argc, char** argv) {
  return ftl::nbd::RunDaemon(std::vector<std::string>(argv + 1, argv + argc));
}
