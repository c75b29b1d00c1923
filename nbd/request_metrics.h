#pragma once
// RequestMetrics: what the NBD server counts per export for `ftld --metrics`
// (metrics/, docs/decisions.md "Issue 24: activation and metrics"):
// requests, bytes and a latency histogram per command, and error replies
// by NBD errno. A connection resolves its ExportMetrics once, when it
// enters transmission, and then only does relaxed atomic adds on it: no
// lock on the request path.
//
// Latency is measured from the moment the request header was decoded to
// the moment its reply was queued (Connection::Retire), so it includes the
// engine's commit and, for FLUSH/FUA, the sync; not the time the reply
// then spends in the socket.
//
// Thread-safety: RequestMetrics::For and Snapshot lock mu_; everything on
// an ExportMetrics is lock-free. Entries are never removed (an export name
// that comes back, e.g. a snapshot activated again, continues its
// counters), so the pointers For returns live as long as the RequestMetrics.

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nbd/protocol.h"

namespace ftl::nbd {

// The commands a histogram is kept for (NBD_CMD_DISC has no reply).
enum class MetricOp : uint8_t {
  kRead, kWrite, kFlush, kTrim, kCache, kWriteZeroes, kBlockStatus, kOther
};
inline constexpr size_t kMetricOps = 8;
// "read", "write", "flush", "trim", "cache", "write_zeroes", "block_status", "other".
const char* MetricOpName(MetricOp op);
MetricOp MetricOpOf(uint16_t nbd_command);

// Upper bounds of the latency buckets, in nanoseconds (Prometheus `le`
// labels in seconds): 10 us .. 10 s, roughly 1-2.5-5 per decade. A last,
// implicit bucket is +Inf.
inline constexpr std::array<uint64_t, 18> kLatencyBucketsNs = {
    10'000,      25'000,      50'000,      100'000,       250'000,       500'000,
    1'000'000,   2'500'000,   5'000'000,   10'000'000,    25'000'000,    50'000'000,
    100'000'000, 250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000, 10'000'000'000};
inline constexpr size_t kLatencyBuckets = kLatencyBucketsNs.size() + 1;

// The NBD error values a reply can carry (nbd/errors.h), indexed.
inline constexpr std::array<uint32_t, 8> kMetricErrnos = {
    kEPerm, kEIo, kENoMem, kEInval, kENoSpc, kEOverflow, kENotSup, kEShutdown};
inline constexpr size_t kMetricErrnoSlots = kMetricErrnos.size() + 1;  // + "other"

// Counters of one command on one export. Relaxed atomics.
struct OpMetrics {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> bytes{0};  // READ and WRITE payload bytes of successful requests
  std::atomic<uint64_t> latency_sum_ns{0};
  std::array<std::atomic<uint64_t>, kLatencyBuckets> latency{};  // not cumulative
};

class ExportMetrics {
 public:
  ExportMetrics(std::string export_name, std::string volume)
      : export_name_(std::move(export_name)), volume_(std::move(volume)) {}

  // A request answered after `latency_ns`; `bytes` counted when it succeeded.
  void Record(MetricOp op, uint64_t latency_ns, bool ok, uint64_t bytes);
  // An error reply with NBD error value `nbd_errno`.
  void RecordError(uint32_t nbd_errno);

  const std::string& export_name() const { return export_name_; }
  const std::string& volume() const { return volume_; }
  const OpMetrics& op(MetricOp o) const { return ops_[size_t(o)]; }
  // Error replies by kMetricErrnos index; the last slot counts any other value.
  uint64_t errors_by_errno(size_t slot) const {
    return errnos_[slot].load(std::memory_order_relaxed);
  }
  std::atomic<uint64_t> connections_total{0};

 private:
  const std::string export_name_;
  const std::string volume_;
  std::array<OpMetrics, kMetricOps> ops_;
  std::array<std::atomic<uint64_t>, kMetricErrnoSlots> errnos_{};
};

class RequestMetrics {
 public:
  // The counters of `export_name` served by `volume` (created on first use).
  ExportMetrics* For(std::string_view export_name, std::string_view volume);
  // Every entry, in (export, volume) order.
  std::vector<const ExportMetrics*> All() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<ExportMetrics>, std::less<>>
      entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::nbd
