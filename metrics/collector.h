#pragma once
// The metrics ftld exposes (`ftld --metrics`; the list with their meaning
// is in the README, "Metrics"): read from the pool (Pool::Stats, each
// volume's Stats, ListSnapshots), the NBD server's counters and the
// per-export request counters (nbd/request_metrics.h), rendered in the
// Prometheus text format (metrics/exposition.h). Nothing is counted twice:
// these are the counters `ftlctl stats` shows, under Prometheus names.
//
// Thread-safety: Collect may run on any thread, concurrently with I/O and
// control commands (everything it reads is thread-safe; Volume objects live
// as long as the pool). A scrape walks each snapshot's exclusive nodes
// (as `ftlctl snapshot list` does), so it runs on a worker thread, not an
// io thread (metrics/metrics_server.h).

#include <chrono>
#include <string>

#include "ftl/pool.h"
#include "nbd/request_metrics.h"
#include "nbd/server.h"

namespace ftl::metrics {

struct Sources {
  Pool* pool = nullptr;
  const nbd::Server* server = nullptr;           // may be null
  const nbd::RequestMetrics* requests = nullptr;  // may be null
  std::chrono::system_clock::time_point started;
  std::string version;
};

// The whole exposition, one scrape.
std::string Collect(const Sources& s);

}  // namespace ftl::metrics
