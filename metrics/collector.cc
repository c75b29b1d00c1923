#include "metrics/collector.h"

#include <array>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "metrics/exposition.h"
#include "nbd/errors.h"

namespace ftl::metrics {
namespace {

using nbd::ExportMetrics;
using nbd::kLatencyBuckets;
using nbd::kLatencyBucketsNs;
using nbd::kMetricOps;
using nbd::MetricOp;

double Seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

const char* KindName(DatasetKind k) { return k == DatasetKind::kKv ? "kv" : "block"; }

// A histogram read out of atomics (or summed over several).
struct Hist {
  std::array<uint64_t, kLatencyBuckets> counts{};
  uint64_t sum_ns = 0;
  uint64_t total() const {
    uint64_t t = 0;
    for (uint64_t c : counts) t += c;
    return t;
  }
  void Add(const nbd::OpMetrics& m) {
    for (size_t i = 0; i < kLatencyBuckets; ++i)
      counts[i] += m.latency[i].load(std::memory_order_relaxed);
    sum_ns += m.latency_sum_ns.load(std::memory_order_relaxed);
  }
};

void PoolMetrics(Exposition& e, Pool& pool, const PoolStats& st) {
  const Geometry& g = pool.geometry();
  e.Single("ftld_pool_media_size_bytes", "gauge", "Size of the backing file or device.",
           g.media_bytes);
  e.Single("ftld_pool_segment_size_bytes", "gauge", "Size of one segment.",
           uint64_t(g.segment_blocks) * g.block_size);
  e.Family("ftld_pool_segments", "gauge", "Segments by state (free, open, full, cleaning).");
  e.Sample("ftld_pool_segments", {{"state", "free"}}, uint64_t(st.segments_free));
  e.Sample("ftld_pool_segments", {{"state", "open"}}, uint64_t(st.segments_open));
  e.Sample("ftld_pool_segments", {{"state", "full"}}, uint64_t(st.segments_full));
  e.Sample("ftld_pool_segments", {{"state", "cleaning"}}, uint64_t(st.segments_cleaning));
  e.Single("ftld_pool_free_bytes", "gauge", "Bytes in free segments.", st.free_bytes);
  e.Single("ftld_pool_live_bytes", "gauge", "Physical bytes holding live data.", st.live_bytes);
  e.Single("ftld_pool_user_written_bytes_total", "counter",
           "Data bytes written for clients (before write amplification).", st.user_write_bytes);
  e.Single("ftld_pool_media_written_bytes_total", "counter",
           "Every byte written to the backing: data, record headers, relocations, checkpoints.",
           st.media_write_bytes);
  e.Single("ftld_pool_write_amplification", "gauge",
           "Media bytes written per user byte since the pool was opened.", st.write_amplification);
  e.Single("ftld_pool_map_memory_bytes", "gauge", "Memory of the volume trees and VBA table.",
           st.map_memory_bytes);
  e.Single("ftld_pool_metadata_bytes", "gauge", "Size of the last checkpoint.", st.metadata_bytes);
  e.Single("ftld_pool_metadata_capacity_bytes", "gauge", "Size of a checkpoint slot.",
           st.metadata_capacity);
  e.Single("ftld_pool_proof_pending", "gauge",
           "1 while durable records wait for their durability proof (--proof-delay).",
           uint64_t(st.proof_pending ? 1 : 0));

  e.Single("ftld_cleaner_segments_cleaned_total", "counter", "Segments the cleaner freed.",
           st.gc_segments_cleaned);
  e.Single("ftld_cleaner_relocated_bytes_total", "counter",
           "Live bytes the cleaner copied out of victim segments.", st.gc_relocated_bytes);
  e.Family("ftld_cleaner_state", "gauge", "1 for the cleaner's current state.");
  for (const char* state : {"idle", "running", "halted", "stopped"}) {
    e.Sample("ftld_cleaner_state", {{"state", state}}, uint64_t(st.cleaner_state == state ? 1 : 0));
  }

  e.Single("ftld_checkpoints_total", "counter", "Checkpoints written since the pool was opened.",
           st.checkpoint_count);
  e.Single("ftld_checkpoint_written_bytes_total", "counter", "Bytes of checkpoints written.",
           st.checkpoint_bytes);
  e.Family("ftld_checkpoint_age_seconds", "gauge",
           "Seconds since the newest checkpoint was written (or the pool opened).");
  auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  double age = st.last_checkpoint_unix_ns > 0 && now_ns > st.last_checkpoint_unix_ns
                   ? double(now_ns - st.last_checkpoint_unix_ns) / 1e9
                   : 0.0;
  e.Sample("ftld_checkpoint_age_seconds", {}, age);
}

void SnapshotMetrics(Exposition& e, Pool& pool, const PoolStats& st) {
  e.Single("ftld_snapshots", "gauge", "Snapshots in the pool.", uint64_t(st.snapshots));
  e.Family("ftld_snapshot_exclusive_bytes", "gauge",
           "Bytes only this snapshot holds: what deleting it would free.");
  for (const SnapshotInfo& s : pool.ListSnapshots("")) {
    e.Sample("ftld_snapshot_exclusive_bytes", {{"volume", s.volume}, {"snapshot", s.name}},
             s.exclusive_bytes);
  }
}

void VolumeMetrics(Exposition& e, Pool& pool) {
  std::vector<std::pair<VolumeStats, DatasetKind>> vols;
  for (const std::string& name : pool.VolumeNames()) {
    if (Volume* v = pool.GetVolume(name)) vols.emplace_back(v->Stats(), v->kind());
  }
  e.Family("ftld_volume_size_bytes", "gauge", "Size of a volume (its address space).");
  for (const auto& [v, kind] : vols)
    e.Sample("ftld_volume_size_bytes", {{"volume", v.name}, {"kind", KindName(kind)}},
             v.size_bytes);
  e.Family("ftld_volume_mapped_bytes", "gauge", "Bytes of a volume that are mapped (written).");
  for (const auto& [v, kind] : vols)
    e.Sample("ftld_volume_mapped_bytes", {{"volume", v.name}, {"kind", KindName(kind)}},
             v.mapped_bytes);
  e.Family("ftld_volume_ops_total", "counter",
           "Operations on a volume by kind, from every path (NBD, control socket).");
  for (const auto& [v, kind] : vols) {
    const std::pair<const char*, uint64_t> ops[] = {{"read", v.reads},
                                                    {"write", v.writes},
                                                    {"trim", v.trims},
                                                    {"write_zeroes", v.zeroes},
                                                    {"flush", v.flushes}};
    for (const auto& [op, n] : ops)
      e.Sample("ftld_volume_ops_total", {{"volume", v.name}, {"op", op}}, n);
  }
  e.Family("ftld_volume_read_bytes_total", "counter", "Bytes read from a volume.");
  for (const auto& [v, kind] : vols)
    e.Sample("ftld_volume_read_bytes_total", {{"volume", v.name}}, v.read_bytes);
  e.Family("ftld_volume_written_bytes_total", "counter", "Bytes written to a volume.");
  for (const auto& [v, kind] : vols)
    e.Sample("ftld_volume_written_bytes_total", {{"volume", v.name}}, v.write_bytes);
}

void NbdMetrics(Exposition& e, const nbd::Server* server, const nbd::RequestMetrics* requests) {
  if (server != nullptr) {
    const nbd::ServerCounters& c = server->counters();
    e.Single("ftld_nbd_connections", "gauge", "NBD clients connected now.",
             c.connections_active.load());
    e.Single("ftld_nbd_connections_total", "counter", "NBD clients accepted.",
             c.connections_total.load());
    e.Single("ftld_nbd_protocol_errors_total", "counter",
             "NBD connections closed for a protocol violation.", c.protocol_errors.load());
  }
  if (requests == nullptr) return;
  const std::vector<const ExportMetrics*> all = requests->All();
  auto labels = [](const ExportMetrics* m) {
    return Labels{{"export", m->export_name()}, {"volume", m->volume()}};
  };
  e.Family("ftld_nbd_export_connections_total", "counter",
           "NBD clients that opened an export (entered transmission).");
  for (const ExportMetrics* m : all)
    e.Sample("ftld_nbd_export_connections_total", labels(m), m->connections_total.load());
  e.Family("ftld_nbd_requests_total", "counter", "NBD requests answered, by export and command.");
  for (const ExportMetrics* m : all) {
    for (size_t o = 0; o < kMetricOps; ++o) {
      uint64_t n = m->op(MetricOp(o)).requests.load(std::memory_order_relaxed);
      if (n == 0) continue;
      Labels l = labels(m);
      l.emplace_back("op", nbd::MetricOpName(MetricOp(o)));
      e.Sample("ftld_nbd_requests_total", l, n);
    }
  }
  e.Family("ftld_nbd_read_bytes_total", "counter", "Bytes NBD clients read, by export.");
  for (const ExportMetrics* m : all)
    e.Sample("ftld_nbd_read_bytes_total", labels(m), m->op(MetricOp::kRead).bytes.load());
  e.Family("ftld_nbd_written_bytes_total", "counter", "Bytes NBD clients wrote, by export.");
  for (const ExportMetrics* m : all)
    e.Sample("ftld_nbd_written_bytes_total", labels(m), m->op(MetricOp::kWrite).bytes.load());
  e.Family("ftld_nbd_request_errors_total", "counter",
           "NBD error replies, by export and NBD errno.");
  for (const ExportMetrics* m : all) {
    for (size_t i = 0; i < nbd::kMetricErrnoSlots; ++i) {
      uint64_t n = m->errors_by_errno(i);
      if (n == 0) continue;
      Labels l = labels(m);
      l.emplace_back("errno", i < nbd::kMetricErrnos.size()
                                  ? nbd::NbdErrorName(nbd::kMetricErrnos[i])
                                  : "other");
      e.Sample("ftld_nbd_request_errors_total", l, n);
    }
  }
  e.Family("ftld_nbd_request_duration_seconds", "histogram",
           "NBD request latency, from decoding the request to queueing its reply.");
  // Summed per volume as well: the "" export and the primary volume's name
  // both serve the primary volume.
  std::map<std::string, std::array<Hist, kMetricOps>> per_volume;
  for (const ExportMetrics* m : all) {
    for (size_t o = 0; o < kMetricOps; ++o) {
      Hist h;
      h.Add(m->op(MetricOp(o)));
      if (h.total() == 0) continue;
      Hist& v = per_volume[m->volume()][o];
      for (size_t i = 0; i < kLatencyBuckets; ++i) v.counts[i] += h.counts[i];
      v.sum_ns += h.sum_ns;
      Labels l = labels(m);
      l.emplace_back("op", nbd::MetricOpName(MetricOp(o)));
      e.Histogram("ftld_nbd_request_duration_seconds", l, h.counts, kLatencyBucketsNs,
                  double(h.sum_ns) / 1e9);
    }
  }
  e.Family("ftld_volume_request_duration_seconds", "histogram",
           "NBD request latency per volume (all exports of the volume).");
  for (const auto& [volume, hists] : per_volume) {
    for (size_t o = 0; o < kMetricOps; ++o) {
      if (hists[o].total() == 0) continue;
      e.Histogram("ftld_volume_request_duration_seconds",
                  {{"volume", volume}, {"op", nbd::MetricOpName(MetricOp(o))}}, hists[o].counts,
                  kLatencyBucketsNs, double(hists[o].sum_ns) / 1e9);
    }
  }
}

}  // namespace

std::string Collect(const Sources& s) {
  Exposition e;
  e.Family("ftld_build_info", "gauge", "Always 1; the version as a label.");
  e.Sample("ftld_build_info", {{"version", s.version}}, uint64_t(1));
  e.Single("ftld_start_time_seconds", "gauge", "Unix time when ftld started.",
           Seconds(s.started.time_since_epoch()));
  if (s.pool != nullptr) {
    const PoolStats st = s.pool->Stats();
    PoolMetrics(e, *s.pool, st);
    SnapshotMetrics(e, *s.pool, st);
    VolumeMetrics(e, *s.pool);
  }
  NbdMetrics(e, s.server, s.requests);
  return e.Take();
}

}  // namespace ftl::metrics
