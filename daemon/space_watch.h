#pragma once
// Pool-use warnings of ftld (docs/decisions.md, "Issue 22: datasets at
// will"): with thin provisioning the volumes may promise more than the pool
// holds, so the daemon logs a warning once when the pool's use
// (PoolStats::used_percent: live data against the capacity it offers
// volumes) crosses 80%, 90% or 95%, and a line when it falls back below.
//
//   SpaceWatch    the decision alone: fed use percentages, it says which
//                 crossings to log (pure, no clock, no threads).
//   SpaceMonitor  a thread that polls Pool::Stats() every interval, feeds a
//                 SpaceWatch and logs through the "nbd" logger (ftld's).
//
// Thread safety: SpaceWatch is not thread-safe (one owner); SpaceMonitor's
// methods are called by the thread that owns it, its own thread only reads
// the pool (Pool::Stats is safe from any thread).

#include <chrono>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ftl/pool.h"

namespace ftl::daemon {

class SpaceWatch {
 public:
  // `thresholds` in percent, ascending. A crossed threshold counts as
  // fallen back only once use is `hysteresis` points below it, so a pool
  // hovering at a threshold logs it once, not at every poll.
  explicit SpaceWatch(std::vector<double> thresholds = {80, 90, 95}, double hysteresis = 2);

  struct Crossing {
    bool rising = true;  // true: use reached `threshold`; false: fell back below it
    double threshold = 0;
  };
  // The crossings to log for use `percent`, in the order they happened:
  // each threshold newly reached (ascending), or each one left (descending),
  // so a jump past several between two polls still logs each one once.
  std::vector<Crossing> Update(double percent);
  // Thresholds currently reached (0 to thresholds().size()).
  size_t level() const { return level_; }
  const std::vector<double>& thresholds() const { return thresholds_; }

 private:
  std::vector<double> thresholds_;
  double hysteresis_;
  size_t level_ = 0;
};

class SpaceMonitor {
 public:
  // Starts polling `pool` at once and every `interval`. `pool` outlives
  // Stop().
  SpaceMonitor(Pool* pool, std::chrono::milliseconds interval);
  ~SpaceMonitor() { Stop(); }
  SpaceMonitor(const SpaceMonitor&) = delete;
  SpaceMonitor& operator=(const SpaceMonitor&) = delete;
  // Ends the thread (before the pool closes). Idempotent.
  void Stop();

 private:
  void Run();
  void Poll();
  void Log(const PoolStats& s, const SpaceWatch::Crossing& c, double overcommit);

  Pool* pool_;
  std::chrono::milliseconds interval_;
  SpaceWatch watch_;  // the monitor thread's only
  absl::Mutex mu_;    // a leaf: nothing else is taken under it
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ftl::daemon
