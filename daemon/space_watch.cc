#include "daemon/space_watch.h"

#include "absl/time/time.h"
#include "ftl/log.h"
#include "ftl/size.h"

namespace ftl::daemon {

SpaceWatch::SpaceWatch(std::vector<double> thresholds, double hysteresis)
    : thresholds_(std::move(thresholds)), hysteresis_(hysteresis) {}

std::vector<SpaceWatch::Crossing> SpaceWatch::Update(double percent) {
  std::vector<Crossing> out;
  while (level_ < thresholds_.size() && percent >= thresholds_[level_]) {
    out.push_back({true, thresholds_[level_]});
    ++level_;
  }
  if (!out.empty()) return out;
  // A threshold is left once use is `hysteresis` points below it.
  while (level_ > 0 && percent < thresholds_[level_ - 1] - hysteresis_) {
    --level_;
    out.push_back({false, thresholds_[level_]});
  }
  return out;
}

SpaceMonitor::SpaceMonitor(Pool* pool, std::chrono::milliseconds interval)
    : pool_(pool), interval_(interval) {
  thread_ = std::thread([this] { Run(); });
}

void SpaceMonitor::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SpaceMonitor::Run() {
  for (;;) {
    Poll();
    absl::MutexLock l(&mu_);
    // Wakes early when Stop() sets stop_.
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::FromChrono(interval_))) return;
  }
}

void SpaceMonitor::Poll() {
  const PoolStats s = pool_->Stats();
  const double overcommit =
      s.logical_bytes ? double(s.provisioned_bytes) / double(s.logical_bytes) : 0;
  for (const SpaceWatch::Crossing& x : watch_.Update(s.used_percent)) Log(s, x, overcommit);
}

void SpaceMonitor::Log(const PoolStats& s, const SpaceWatch::Crossing& c, double overcommit) {
  if (c.rising) {
    Logger("nbd")->warn(
        "pool use {:.1f}% crossed {:.0f}%: {} live of {} capacity, {} free; volumes provisioned "
        "{} ({:.2f}x the capacity). Writes answer ENOSPC once the pool is full: trim, delete "
        "snapshots, shrink or destroy volumes (ftlctl volume list)",
        s.used_percent, c.threshold, FormatSize(s.live_bytes), FormatSize(s.logical_bytes),
        FormatSize(s.free_bytes), FormatSize(s.provisioned_bytes), overcommit);
  } else {
    Logger("nbd")->info("pool use {:.1f}% is back below {:.0f}% ({} live of {} capacity)",
                        s.used_percent, c.threshold, FormatSize(s.live_bytes),
                        FormatSize(s.logical_bytes));
  }
}

}  // namespace ftl::daemon
