#include "nbd/request_metrics.h"

#include "nbd/protocol.h"

namespace ftl::nbd {

const char* MetricOpName(MetricOp op) {
  switch (op) {
    case MetricOp::kRead: return "read";
    case MetricOp::kWrite: return "write";
    case MetricOp::kFlush: return "flush";
    case MetricOp::kTrim: return "trim";
    case MetricOp::kCache: return "cache";
    case MetricOp::kWriteZeroes: return "write_zeroes";
    case MetricOp::kBlockStatus: return "block_status";
    case MetricOp::kOther: return "other";
  }
  return "other";
}

MetricOp MetricOpOf(uint16_t nbd_command) {
  switch (nbd_command) {
    case kCmdRead: return MetricOp::kRead;
    case kCmdWrite: return MetricOp::kWrite;
    case kCmdFlush: return MetricOp::kFlush;
    case kCmdTrim: return MetricOp::kTrim;
    case kCmdCache: return MetricOp::kCache;
    case kCmdWriteZeroes: return MetricOp::kWriteZeroes;
    case kCmdBlockStatus: return MetricOp::kBlockStatus;
    default: return MetricOp::kOther;
  }
}

void ExportMetrics::Record(MetricOp op, uint64_t latency_ns, bool ok, uint64_t bytes) {
  OpMetrics& m = ops_[size_t(op)];
  m.requests.fetch_add(1, std::memory_order_relaxed);
  if (ok) {
    if (bytes != 0) m.bytes.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    m.errors.fetch_add(1, std::memory_order_relaxed);
  }
  m.latency_sum_ns.fetch_add(latency_ns, std::memory_order_relaxed);
  size_t b = 0;
  while (b < kLatencyBucketsNs.size() && latency_ns > kLatencyBucketsNs[b]) ++b;
  m.latency[b].fetch_add(1, std::memory_order_relaxed);
}

void ExportMetrics::RecordError(uint32_t nbd_errno) {
  size_t slot = kMetricErrnos.size();
  for (size_t i = 0; i < kMetricErrnos.size(); ++i) {
    if (kMetricErrnos[i] == nbd_errno) slot = i;
  }
  errnos_[slot].fetch_add(1, std::memory_order_relaxed);
}

ExportMetrics* RequestMetrics::For(std::string_view export_name, std::string_view volume) {
  absl::MutexLock l(&mu_);
  auto key = std::make_pair(std::string(export_name), std::string(volume));
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_
             .emplace(key, std::make_unique<ExportMetrics>(key.first, key.second))
             .first;
  }
  return it->second.get();
}

std::vector<const ExportMetrics*> RequestMetrics::All() const {
  absl::MutexLock l(&mu_);
  std::vector<const ExportMetrics*> out;
  for (const auto& [key, m] : entries_) out.push_back(m.get());
  return out;
}

}  // namespace ftl::nbd
