#include "util/logging.h"

#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ftl::util {
namespace {
std::mutex mu;
spdlog::level::level_enum current_level = spdlog::level::info;
}  // namespace

std::shared_ptr<spdlog::logger> Logger(const std::string& module) {
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = spdlog::get(module)) return existing;
  auto logger = spdlog::stderr_color_mt(module);
  logger->set_level(current_level);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  return logger;
}

bool SetLogLevel(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") return false;
  std::lock_guard<std::mutex> lock(mu);
  current_level = lvl;
  spdlog::set_level(lvl);
  spdlog::apply_all([&](std::shared_ptr<spdlog::logger> l) { l->set_level(lvl); });
  return true;
}

}  // namespace ftl::util
