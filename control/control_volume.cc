#include "control/control_volume.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "registry/kv_registry.h"
#include "ftl/log.h"
#include "ftl/size.h"
#include "ftl/snapshot.h"

namespace ftl::control {

using nbd::ConnectionInfo;
using nbd::Export;

namespace {

absl::Status RefuseReadOnlyDaemon(const DaemonContext& ctx) {
  if (!ctx.read_only) return absl::OkStatus();
  return absl::PermissionDeniedError("ftld runs with --read-only: datasets cannot be changed");
}

absl::StatusOr<DatasetInfo> FindDataset(const DaemonContext& ctx, const std::string& name) {
  for (DatasetInfo& d : ctx.pool->ListDatasets()) {
    if (d.name == name) return std::move(d);
  }
  return absl::NotFoundError(absl::StrCat("no volume or dataset named '", name, "'"));
}

// Transmitting clients connected to one of `exports` (names).
std::vector<ConnectionInfo> ClientsOn(const DaemonContext& ctx,
                                      const std::set<std::string>& exports) {
  std::vector<ConnectionInfo> out;
  for (const ConnectionInfo& c : ctx.server->Connections()) {
    if (c.transmitting && exports.count(c.export_name) > 0) out.push_back(c);
  }
  return out;
}

std::string Who(const std::vector<ConnectionInfo>& clients) {
  std::vector<std::string> who;
  for (const ConnectionInfo& c : clients) who.push_back(absl::StrCat(c.peer, " on '", c.export_name, "'"));
  return absl::StrJoin(who, ", ");
}

Json VolumeJson(const DaemonContext& ctx, const DatasetInfo& d, const std::string& primary) {
  std::vector<std::string> exports = ExportsOf(ctx, d.name);
  return Json{{"name", d.name},
              {"kind", DatasetKindName(d.kind)},
              {"size_bytes", d.size_bytes},
              {"mapped_bytes", d.mapped_bytes},
              {"read_only", d.read_only || ctx.read_only},
              {"primary", d.name == primary},
              {"origin", d.origin.empty() ? Json(nullptr) : Json(d.origin)},
              {"snapshots", d.snapshots},
              {"exports", exports},
              {"clients", ClientsOf(ctx, d.name).size()}};
}

absl::StatusOr<Json> VolumeCreate(const DaemonContext& ctx, const Json& r) {
  auto name = StringArg(r, kArgName);
  if (!name.ok()) return name.status();
  std::string why;
  if (name->find('@') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"name\": '", *name, "': a volume name has no '@' (NAME@SNAP names a snapshot: "
        "ftlctl snapshot create)"));
  }
  if (!ValidCatalogName(*name, &why)) {
    return absl::InvalidArgumentError(absl::StrCat("bad volume name '", *name, "': ", why));
  }
  auto size = SizeArg(r, kArgSize);
  if (!size.ok()) return size.status();
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  if (auto taken = FindDataset(ctx, *name); taken.ok()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "'", *name, "' exists already (a ",
        taken->kind == DatasetKind::kBlock ? "block volume" : "key-value dataset", ")"));
  }
  // A name means one thing: no export (the primary may be exported under
  // another name) may carry it either.
  if (ctx.exports->Find(*name)) {
    return absl::AlreadyExistsError(absl::StrCat("'", *name, "' is an NBD export already"));
  }
  auto v = ctx.pool->CreateDataset(*name, DatasetKind::kBlock, *size);
  if (!v.ok()) return v.status();
  Export e{.name = *name,
           .description = absl::StrCat("ftld volume ", *name),
           .volume = *v,
           .read_only = ctx.read_only,
           .listed = true};
  if (absl::Status s = ctx.exports->Add(e); !s.ok()) {
    absl::Status undo = ctx.pool->DestroyDataset(*name, false);
    return absl::Status(s.code(), absl::StrCat(s.message(), undo.ok() ? "" : absl::StrCat(
                                                   "; removing the volume again failed: ",
                                                   undo.message())));
  }
  Logger("ctl")->info("created volume {} ({}), exported as '{}'", *name, FormatSize(*size), *name);
  auto info = FindDataset(ctx, *name);
  if (!info.ok()) return info.status();
  return Json{{"volume", VolumeJson(ctx, *info, PrimaryName(ctx))}};
}

absl::StatusOr<Json> VolumeResize(const DaemonContext& ctx, const Json& r) {
  auto name = StringArg(r, kArgName);
  if (!name.ok()) return name.status();
  auto size = SizeArg(r, kArgSize);
  if (!size.ok()) return size.status();
  auto force = BoolArg(r, kArgForce);
  if (!force.ok()) return force.status();
  auto volume = ResolveVolume(ctx, *name);
  if (!volume.ok()) return volume.status();
  if (absl::Status s = RequireBlock(ctx, *volume, "resize is"); !s.ok()) return s;
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  Volume* v = ctx.pool->GetVolume(*volume);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("no volume named '", *volume, "'"));
  const uint64_t before = v->size_bytes();
  if (absl::Status s = ctx.pool->ResizeDataset(*volume, *size, *force); !s.ok()) return s;
  if (*size != before) {
    Logger("ctl")->info("resized volume {} from {} to {}{}", *volume, FormatSize(before),
                        FormatSize(*size), *size < before && *force ? " (forced)" : "");
  }
  return Json{{"volume", *volume},
              {"size_bytes", v->size_bytes()},
              {"previous_size_bytes", before},
              {"clients_connected", ClientsOf(ctx, *volume).size()}};
}

absl::StatusOr<Json> VolumeDestroy(const DaemonContext& ctx, const Json& r) {
  auto name = StringArg(r, kArgName);
  if (!name.ok()) return name.status();
  auto force = BoolArg(r, kArgForce);
  if (!force.ok()) return force.status();
  auto volume = ResolveVolume(ctx, *name);
  if (!volume.ok()) return volume.status();
  if (*volume == PrimaryName(ctx)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", *volume, "' is the primary volume; it cannot be destroyed"));
  }
  auto info = FindDataset(ctx, *volume);
  if (!info.ok()) return info.status();
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  if (info->snapshots > 0 && !*force) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", *volume, "' has ", info->snapshots,
                     " snapshot(s): delete them first or destroy with force"));
  }
  Json removed_names = Json::array();
  size_t disconnected = 0;
  if (info->kind == DatasetKind::kBlock) {
    // Exports go first, so that no client opens one meanwhile; they come
    // back if anything refuses.
    std::vector<Export> removed;
    std::set<std::string> names;
    for (const Export& e : ctx.exports->List()) {
      if (e.volume->name() == *volume && ctx.exports->Remove(e.name)) {
        removed.push_back(e);
        names.insert(e.name);
      }
    }
    auto restore = [&] {
      for (Export& e : removed) (void)ctx.exports->Add(std::move(e));
    };
    std::vector<ConnectionInfo> clients = ClientsOn(ctx, names);
    if (!clients.empty() && !*force) {
      restore();
      return absl::FailedPreconditionError(absl::StrCat(
          clients.size(), " client(s) connected to volume ", *volume, " (", Who(clients),
          "): disconnect them first or destroy with force (they get ESHUTDOWN)"));
    }
    if (absl::Status s = ctx.pool->DestroyDataset(*volume, *force); !s.ok()) {
      restore();
      return s;
    }
    for (const std::string& n : names) removed_names.push_back(n);
    disconnected = clients.size();
  } else {
    // A key-value dataset: its stores (and its snapshots') close first.
    absl::Status s = ctx.kv->WithClosed(*volume, /*snapshots_too=*/true, [&] {
      return ctx.pool->DestroyDataset(*volume, *force);
    });
    if (!s.ok()) return s;
  }
  Logger("ctl")->info("destroyed {} {}{}",
                      info->kind == DatasetKind::kBlock ? "volume" : "key-value dataset", *volume,
                      disconnected > 0 ? absl::StrCat(" (", disconnected,
                                                      " client(s) get ESHUTDOWN)")
                                       : std::string());
  return Json{{"destroyed", *volume},
              {"kind", DatasetKindName(info->kind)},
              {"snapshots_deleted", *force ? info->snapshots : 0},
              {"exports_removed", removed_names},
              {"clients_disconnected", disconnected},
              {"freed_bytes", info->mapped_bytes}};
}

absl::StatusOr<Json> VolumeList(const DaemonContext& ctx, const Json&) {
  const std::string primary = PrimaryName(ctx);
  Json out = Json::array();
  for (const DatasetInfo& d : ctx.pool->ListDatasets()) out.push_back(VolumeJson(ctx, d, primary));
  PoolStats st = ctx.pool->Stats();
  return Json{{"volumes", out},
              {"provisioned_bytes", st.provisioned_bytes},
              {"logical_bytes", st.logical_bytes},
              {"overcommit", Overcommit(st)},
              {"used_percent", st.used_percent}};
}

}  // namespace

void RegisterVolumeCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  auto actions = std::make_shared<Actions>();
  (*actions)[kActionCreate] = [ctx](const Json& r) { return VolumeCreate(*ctx, r); };
  (*actions)[kActionResize] = [ctx](const Json& r) { return VolumeResize(*ctx, r); };
  (*actions)[kActionDestroy] = [ctx](const Json& r) { return VolumeDestroy(*ctx, r); };
  (*actions)[kActionList] = [ctx](const Json& r) { return VolumeList(*ctx, r); };
  d->Register(kCmdVolume,
              "datasets (volumes and key-value stores): action = create|resize|destroy|list",
              [actions](const Json& r) { return RunAction(kCmdVolume, *actions, r); });
}

}  // namespace ftl::control
