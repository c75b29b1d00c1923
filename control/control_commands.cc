#include "control/control_commands.h"

#include <unistd.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "ftl/tree_ref.h"

namespace ftl::control {

using nbd::ConnectionInfo;
using nbd::Export;
using nbd::ExportTable;
using nbd::Server;
using nbd::ServerCounters;
using nbd::ServerOptions;

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double SecondsSince(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::system_clock::now() - t).count();
}

Json ClientsJson(const Server& server) {
  Json out = Json::array();
  for (const ConnectionInfo& c : server.Connections()) {
    out.push_back({{"id", c.id},
                   {"peer", c.peer},
                   {"export", c.transmitting ? Json(c.export_name) : Json(nullptr)},
                   {"connected_s", SecondsSince(c.connected_at)},
                   {"requests", c.requests},
                   {"inflight", c.inflight},
                   {"read_bytes", c.read_bytes},
                   {"write_bytes", c.write_bytes}});
  }
  return out;
}

Json ListenJson(const Server& server) {
  Json out = Json::object();
  const ServerOptions& o = server.options();
  if (!o.bind.empty()) out["tcp"] = absl::StrCat(o.bind, ":", server.tcp_port());
  if (!o.unix_path.empty()) out["unix"] = o.unix_path;
  if (!o.listen_fds.empty()) {  // socket activation: every listener is inherited
    out["inherited"] = server.ListenerNames();
  }
  return out;
}

absl::StatusOr<Json> Status(const DaemonContext& ctx) {
  return Json{{"pid", ::getpid()},
              {"uptime_s", SecondsSince(ctx.started)},
              {"backing", ctx.backing},
              {"media", ctx.media},
              {"open_report", ctx.open_report},
              {"read_only", ctx.read_only},
              {"control", ctx.control_path},
              {"listen", ListenJson(*ctx.server)},
              {"geometry", GeometryJson(ctx.pool->geometry())},
              {"devices", {{"vdev", ctx.mirror ? "mirror" : "single"},
                           {"state", ctx.mirror ? ctx.mirror->State() : "ONLINE"}}},
              {"space", SpaceJson(ctx.pool->Stats())},
              {"exports", ExportsJson(*ctx.exports)},
              {"clients", ClientsJson(*ctx.server)}};
}

absl::StatusOr<Json> Stats(const DaemonContext& ctx) {
  Json volumes = Json::array();
  for (const std::string& name : ctx.pool->VolumeNames()) {
    if (Volume* v = ctx.pool->GetVolume(name)) {
      Json j = VolumeStatsJson(v->Stats());
      j["kind"] = DatasetKindName(v->kind());
      volumes.push_back(std::move(j));
    }
  }
  const ServerCounters& c = ctx.server->counters();
  Json nbd = {{"connections_total", c.connections_total.load()},
              {"connections_active", c.connections_active.load()},
              {"protocol_errors", c.protocol_errors.load()},
              {"requests", c.requests.load()},
              {"request_errors", c.request_errors.load()},
              {"read_bytes", c.read_bytes.load()},
              {"write_bytes", c.write_bytes.load()}};
  return Json{{"uptime_s", SecondsSince(ctx.started)},
              {"pool", PoolStatsJson(ctx.pool->Stats())},
              {"volumes", volumes},
              {"devices", DevicesJson(ctx)},
              {"scrub", ScrubJson(ctx.pool->GetScrubStatus())},
              {"nbd", nbd}};
}

absl::StatusOr<Json> Checkpoint(const DaemonContext& ctx) {
  auto start = std::chrono::steady_clock::now();
  if (absl::Status s = ctx.pool->Checkpoint(); !s.ok()) return s;
  PoolStats st = ctx.pool->Stats();
  return Json{{"duration_s", SecondsSince(start)},
              {"checkpoint_count", st.checkpoint_count},
              {"checkpoint_bytes", st.checkpoint_bytes}};
}

absl::StatusOr<Json> Gc(const DaemonContext& ctx, const Json& request) {
  PoolStats before = ctx.pool->Stats();
  // Default: as many free segments as the live data allows (it needs its
  // segments plus the two open ones), so the target is reachable.
  const Geometry& g = ctx.pool->geometry();
  uint64_t seg_bytes = std::max<uint64_t>(1, uint64_t(g.segment_blocks) * g.block_size);
  uint64_t needed = (before.live_bytes + seg_bytes - 1) / seg_bytes + 2;
  uint64_t reachable = before.segments_total > needed ? before.segments_total - needed : 0;
  auto min_free = U64Arg(request, kArgMinFreeSegments, reachable);
  if (!min_free.ok()) return min_free.status();
  auto start = std::chrono::steady_clock::now();
  auto cleaned = ctx.pool->RunCleaner(uint32_t(std::min<uint64_t>(*min_free, UINT32_MAX)));
  if (!cleaned.ok()) return cleaned.status();
  PoolStats after = ctx.pool->Stats();
  return Json{{"duration_s", SecondsSince(start)},
              {"segments_cleaned", *cleaned},
              {"segments_free_before", before.segments_free},
              {"segments_free", after.segments_free},
              {"free_bytes", after.free_bytes},
              {"cleaner_state", after.cleaner_state}};
}

}  // namespace

std::string PrimaryName(const DaemonContext& ctx) {
  Volume* p = ctx.pool->PrimaryVolume();
  return p != nullptr ? p->name() : "";
}

absl::StatusOr<std::string> ResolveVolume(const DaemonContext& ctx, const std::string& name) {
  if (name.empty()) return PrimaryName(ctx);
  if (ctx.pool->GetVolume(name) != nullptr) return name;
  if (std::optional<Export> e = ctx.exports->Find(name)) return e->volume->name();
  // Datasets that are no volume of the pool's (key-value ones, if the
  // engine keeps them apart) are named as they are.
  for (const DatasetInfo& d : ctx.pool->ListDatasets()) {
    if (d.name == name) return name;
  }
  return absl::NotFoundError(absl::StrCat("no volume or export named '", name, "'"));
}

absl::StatusOr<std::string> ResolveSnapshotVolume(const DaemonContext& ctx,
                                                  const std::string& name) {
  auto v = ResolveVolume(ctx, name);
  if (v.ok() || !absl::IsNotFound(v.status())) return v;
  for (const SnapshotInfo& s : ctx.pool->ListSnapshots("")) {
    if (s.volume == name) return name;
  }
  return v;
}

absl::StatusOr<std::string> ResolveTree(const DaemonContext& ctx, const std::string& ref) {
  absl::StatusOr<TreeRef> tree = TreeRef::Parse(ref);
  if (!tree.ok()) {
    // Export names are any NBD name (ftld --export): a plain name that is
    // no valid volume name may still be one.
    if (ref.find('@') == std::string::npos) return ResolveVolume(ctx, ref);
    return tree.status();
  }
  if (!tree->is_snapshot()) return ref.empty() ? ref : ResolveVolume(ctx, ref);
  if (tree->volume.empty()) return ref;  // "@SNAP": the engine finds the primary
  auto v = ResolveSnapshotVolume(ctx, tree->volume);
  if (!v.ok()) return v.status();
  tree->volume = *v;
  return tree->ToString();
}

std::vector<std::string> ExportsOf(const DaemonContext& ctx, const std::string& volume) {
  std::vector<std::string> listed, hidden;
  for (const Export& e : ctx.exports->List()) {
    if (e.volume->name() == volume) (e.listed ? listed : hidden).push_back(e.name);
  }
  listed.insert(listed.end(), hidden.begin(), hidden.end());
  return listed;
}

std::vector<ConnectionInfo> ClientsOf(const DaemonContext& ctx, const std::string& volume) {
  std::vector<ConnectionInfo> out;
  for (const ConnectionInfo& c : ctx.server->Connections()) {
    if (!c.transmitting) continue;
    std::optional<Export> e = ctx.exports->Find(c.export_name);
    if (e && e->volume->name() == volume) out.push_back(c);
  }
  return out;
}

absl::Status RequireBlock(const DaemonContext& ctx, const std::string& volume,
                          const std::string& what) {
  if (volume.empty()) return absl::OkStatus();  // the primary volume
  DatasetKind kind = DatasetKind::kBlock;
  if (Volume* v = ctx.pool->GetVolume(volume)) {
    kind = v->kind();
  } else {
    for (const DatasetInfo& d : ctx.pool->ListDatasets()) {
      if (d.name == volume) kind = d.kind;
    }
  }
  if (kind == DatasetKind::kBlock) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("'", volume, "' is a key-value dataset: ", what,
                   " only for block volumes (key-value datasets: ftlctl kv)"));
}

Json GeometryJson(const Geometry& g) {
  return Json{{"block_size", g.block_size},
              {"media_bytes", g.media_bytes},
              {"segment_bytes", uint64_t(g.segment_blocks) * g.block_size},
              {"segment_count", g.segment_count},
              {"data_offset", g.data_offset},
              {"logical_bytes", g.logical_blocks * g.block_size},
              {"max_atomic_bytes", g.max_atomic_bytes},
              {"format_version", g.format_version},
              {"uuid", g.uuid}};
}

Json ExportJson(const Export& e) {
  return Json{{"name", e.name},
              {"volume", e.volume->name()},
              {"size_bytes", e.volume->size_bytes()},
              {"read_only", e.effective_read_only()},
              {"description", e.description}};
}

Json ExportsJson(const ExportTable& exports) {
  Json out = Json::array();
  for (const Export& e : exports.List()) out.push_back(ExportJson(e));
  return out;
}

Json PoolStatsJson(const PoolStats& s) {
  return Json{{"user_write_bytes", s.user_write_bytes},
              {"media_write_bytes", s.media_write_bytes},
              {"write_amplification", s.write_amplification},
              {"gc_relocated_bytes", s.gc_relocated_bytes},
              {"user_hot_write_bytes", s.user_hot_write_bytes},
              {"gc_hot_relocated_bytes", s.gc_hot_relocated_bytes},
              {"hot_lifespan_seqs", s.hot_lifespan_seqs},
              {"gc_segments_cleaned", s.gc_segments_cleaned},
              {"checkpoint_count", s.checkpoint_count},
              {"checkpoint_bytes", s.checkpoint_bytes},
              {"segments_total", s.segments_total},
              {"segments_free", s.segments_free},
              {"segments_open", s.segments_open},
              {"segments_full", s.segments_full},
              {"segments_cleaning", s.segments_cleaning},
              {"free_bytes", s.free_bytes},
              {"live_bytes", s.live_bytes},
              {"map_memory_bytes", s.map_memory_bytes},
              {"mapped_blocks", s.mapped_blocks},
              {"next_seq", s.next_seq},
              {"snapshots", s.snapshots},
              {"metadata_bytes", s.metadata_bytes},
              {"metadata_capacity_bytes", s.metadata_capacity},
              {"cleaner_state", s.cleaner_state},
              {"proof_pending", s.proof_pending},
              {"provisioned_bytes", s.provisioned_bytes},
              {"logical_bytes", s.logical_bytes},
              {"overcommit", Overcommit(s)},
              {"used_percent", s.used_percent}};
}

double Overcommit(const PoolStats& s) {
  return s.logical_bytes ? double(s.provisioned_bytes) / double(s.logical_bytes) : 0;
}

Json SpaceJson(const PoolStats& s) {
  return Json{{"logical_bytes", s.logical_bytes},
              {"provisioned_bytes", s.provisioned_bytes},
              {"overcommit", Overcommit(s)},
              {"live_bytes", s.live_bytes},
              {"used_percent", s.used_percent},
              {"free_bytes", s.free_bytes}};
}

Json VolumeStatsJson(const VolumeStats& s) {
  return Json{{"name", s.name},
              {"id", s.id},
              {"size_bytes", s.size_bytes},
              {"mapped_bytes", s.mapped_bytes},
              {"reads", s.reads},
              {"writes", s.writes},
              {"trims", s.trims},
              {"zeroes", s.zeroes},
              {"flushes", s.flushes},
              {"read_bytes", s.read_bytes},
              {"write_bytes", s.write_bytes}};
}

void RegisterCoreCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  d->Register(kCmdStatus, "uptime, backing, geometry, exports, clients",
              [ctx](const Json&) { return Status(*ctx); });
  d->Register(kCmdStats, "I/O counts and bytes, write amplification, cleaner, space, memory",
              [ctx](const Json&) { return Stats(*ctx); });
  d->Register(kCmdExports, "the NBD export names and their volumes",
              [ctx](const Json&) -> absl::StatusOr<Json> {
                return Json{{"exports", ExportsJson(*ctx->exports)}};
              });
  d->Register(kCmdCheckpoint, "write a checkpoint now",
              [ctx](const Json&) { return Checkpoint(*ctx); });
  d->Register(kCmdGc, "run the cleaner now [min_free_segments]",
              [ctx](const Json& r) { return Gc(*ctx, r); });
}

}  // namespace ftl::control
