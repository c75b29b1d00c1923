#include "daemon/space_watch.h"

#include "ftl/log.h"
#include "ftl/size.h"

namespace ftl::daemon {

SpaceWatch::SpaceWatch(std::vector<double> thresholds, double hysteresis)
    : thresholds_(std::move(thresholds)), hysteresis_(hysteresis) {}

std::optional<SpaceWatch::Crossing> SpaceWatch::Update(double percent) {
  size_t reached = 0;
  while (reached < thresholds_.size() && percent >= thresholds_[reached]) ++reached;
  if (reached > level_) {
    level_ = reached;
    return Crossing{true, thresholds_[reached - 1]};
  }
  // Thresholds still held: those at most `hysteresis` points above use.
  size_t held = 0;
  while (held < level_ && percent >= thresholds_[held] - hysteresis_) ++held;
  if (held < level_) {
    level_ = held;
    return Crossing{false, thresholds_[held]};
  }
  return std::nullopt;
}

SpaceMonitor::SpaceMonitor(Pool* pool, std::chrono::milliseconds interval)
    : pool_(pool), interval_(interval) {
  thread_ = std::thread([this] { Run(); });
}

void SpaceMonitor::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SpaceMonitor::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    Poll();
    l.lock();
    cv_.wait_for(l, interval_, [this] { return stop_; });
  }
}

void SpaceMonitor::Poll() {
  const PoolStats s = pool_->Stats();
  std::optional<SpaceWatch::Crossing> c = watch_.Update(s.used_percent);
  if (!c) return;
  const double overcommit =
      s.logical_bytes ? double(s.provisioned_bytes) / double(s.logical_bytes) : 0;
  if (c->rising) {
    Logger("nbd")->warn(
        "pool use {:.1f}% crossed {:.0f}%: {} live of {} capacity, {} free; volumes provisioned "
        "{} ({:.2f}x the capacity). Writes answer ENOSPC once the pool is full: trim, delete "
        "snapshots, shrink or destroy volumes (ftlctl volume list)",
        s.used_percent, c->threshold, FormatSize(s.live_bytes), FormatSize(s.logical_bytes),
        FormatSize(s.free_bytes), FormatSize(s.provisioned_bytes), overcommit);
  } else {
    Logger("nbd")->info("pool use {:.1f}% is back below {:.0f}% ({} live of {} capacity)",
                        s.used_percent, c->threshold, FormatSize(s.live_bytes),
                        FormatSize(s.logical_bytes));
  }
}

}  // namespace ftl::daemon
