#pragma once
// The engine's named loggers (spdlog), for programs built on it. The engine
// logs as "media", "log", "map", "gc", "core"; ftld adds "nbd" and "ctl".
// Every logger writes to stderr, and one level applies to all of them.

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ftl {

// The logger named `module`, created on first use at the current level.
std::shared_ptr<spdlog::logger> Logger(const std::string& module);
// Sets the level of every logger, present and future. Accepts spdlog's
// names: trace, debug, info, warn, error, critical, off; false for others.
bool SetLogLevel(const std::string& level);

}  // namespace ftl
