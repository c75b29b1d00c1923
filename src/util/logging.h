#pragma once
// Named spdlog loggers, one per module ("media", "log", "map", "gc", "core",
// "nbd", "ctl"). All log to stderr; the level is set once for all of them.

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ftl::util {

std::shared_ptr<spdlog::logger> Logger(const std::string& module);
// Accepts spdlog level names: trace, debug, info, warn, error, critical, off.
bool SetLogLevel(const std::string& level);

}  // namespace ftl::util
