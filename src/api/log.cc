// include/ftl/log.h: the engine's loggers (src/util/logging.h), so that a
// program's loggers and the engine's share one registry and one level.

#include "ftl/log.h"

#include "util/logging.h"

namespace ftl {

std::shared_ptr<spdlog::logger> Logger(const std::string& module) {
  return util::Logger(module);
}

bool SetLogLevel(const std::string& level) { return util::SetLogLevel(level); }

}  // namespace ftl
