#pragma once
// Exposition: writes the Prometheus text exposition format, version 0.0.4
// (what `GET /metrics` answers; metrics/metrics_server.h). One family at a
// time: Family() writes its # HELP and # TYPE lines, then its samples
// follow. Label values are escaped (backslash, double quote, newline) as
// the format requires; names are the caller's constants.
// Not thread-safe: one per scrape.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ftl::metrics {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// `v` with \ " and newline escaped for a label value.
std::string EscapeLabelValue(std::string_view v);

class Exposition {
 public:
  // type: "counter", "gauge" or "histogram". A counter's name ends in
  // "_total" (Prometheus naming conventions).
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const Labels& labels, double value);
  void Sample(std::string_view name, const Labels& labels, uint64_t value);
  // A family of one sample without labels.
  template <typename T>
  void Single(std::string_view name, std::string_view type, std::string_view help, T value) {
    Family(name, type, help);
    Sample(name, {}, value);
  }
  // A histogram's samples: NAME_bucket{...,le="..."} cumulative over
  // `counts` (per bucket, not cumulative; the last one is +Inf), whose upper
  // bounds are `bounds_ns` (nanoseconds, written as seconds), then NAME_sum
  // (seconds) and NAME_count.
  void Histogram(std::string_view name, const Labels& labels, std::span<const uint64_t> counts,
                 std::span<const uint64_t> bounds_ns, double sum_seconds);

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Line(std::string_view name, const Labels& labels, std::string_view value,
            const std::pair<std::string_view, std::string>* extra = nullptr);
  std::string out_;
};

}  // namespace ftl::metrics
