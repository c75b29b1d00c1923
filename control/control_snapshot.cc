#include "control/control_snapshot.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "registry/kv_registry.h"

namespace ftl::control {

using nbd::ConnectionInfo;
using nbd::Export;

namespace {

// "VOL@SNAP" for messages and replies, also of a name the user gave that is
// no valid snapshot name ("VOL@" for ""): unlike TreeRef::ToString, it
// always holds the '@'.
std::string SnapRef(const std::string& volume, const std::string& snap) {
  return absl::StrCat(volume, "@", snap);
}

// Export names under which `volume` is served (the listed ones first).
std::vector<std::string> ExportsOf(const DaemonContext& ctx, const std::string& volume) {
  std::vector<std::string> listed, hidden;
  for (const Export& e : ctx.exports->List()) {
    if (e.volume->name() == volume) (e.listed ? listed : hidden).push_back(e.name);
  }
  listed.insert(listed.end(), hidden.begin(), hidden.end());
  return listed;
}

// Every activation of a snapshot: active_volumes lists the volumes
// activated from it, active_exports their export names (a volume without
// an export entry shows as itself); active_volume / active_export keep the
// first of each for clients of the one-activation replies.
Json SnapshotJson(const DaemonContext& ctx, const SnapshotInfo& s) {
  Json exports = Json::array();
  for (const std::string& v : s.active_volumes) {
    std::vector<std::string> ex = ExportsOf(ctx, v);
    if (ex.empty()) ex.push_back(v);
    for (std::string& e : ex) exports.push_back(std::move(e));
  }
  Json active = exports.empty() ? Json(nullptr) : exports.front();
  return Json{{"name", s.name},
              {"volume", s.volume},
              {"ref", SnapRef(s.volume, s.name)},
              {"created_unix_ns", s.created_unix_ns},
              {"seq", s.seq},
              {"parent", s.parent.empty() ? Json(nullptr) : Json(s.parent)},
              {"exclusive_bytes", s.exclusive_bytes},
              {"size_bytes", s.size_bytes},
              {"active_volume", s.active_as.empty() ? Json(nullptr) : Json(s.active_as)},
              {"active_export", active},
              {"active_volumes", s.active_volumes},
              {"active_exports", exports}};
}

// Removes every export of `volume`, then the volume. On failure the exports
// come back, so nothing changed.
absl::StatusOr<std::vector<std::string>> DeactivateVolume(const DaemonContext& ctx,
                                                          const std::string& volume) {
  if (volume == PrimaryName(ctx)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", volume,
                     "' is the primary volume; only volumes activated from snapshots can be "
                     "deactivated"));
  }
  std::vector<Export> removed;
  for (const Export& e : ctx.exports->List()) {
    if (e.volume->name() == volume && ctx.exports->Remove(e.name)) removed.push_back(e);
  }
  if (absl::Status s = ctx.pool->DeactivateVolume(volume); !s.ok()) {
    for (Export& e : removed) (void)ctx.exports->Add(std::move(e));
    return s;
  }
  std::vector<std::string> names;
  for (const Export& e : removed) names.push_back(e.name);
  return names;
}

// Key-value datasets keep writes in their store's buffer and read through
// it (registry/kv_registry.h): a snapshot of one flushes the store first, so
// it holds every acknowledged write; a rollback, and the deletion of a
// snapshot a store reads, close those stores first. No-ops for block
// volumes (no store is open under their names).
absl::Status WithKvFlushed(const DaemonContext& ctx, const std::string& volume,
                           const std::function<absl::Status()>& fn) {
  return ctx.kv != nullptr ? ctx.kv->WithFlushed(volume, fn) : fn();
}
absl::Status WithKvClosed(const DaemonContext& ctx, const std::string& ref,
                          const std::function<absl::Status()>& fn) {
  return ctx.kv != nullptr ? ctx.kv->WithClosed(ref, /*snapshots_too=*/false, fn) : fn();
}

// The "name" and optional "volume" arguments most snapshot actions take.
struct NamedSnapshotArgs {
  std::string name;
  std::string volume;  // "" = not given
};
absl::StatusOr<NamedSnapshotArgs> NameAndVolume(const Json& r) {
  auto name = StringArg(r, kArgName);
  if (!name.ok()) return name.status();
  auto volume = OptStringArg(r, kArgVolume);
  if (!volume.ok()) return volume.status();
  return NamedSnapshotArgs{*name, *volume};
}

absl::StatusOr<Json> SnapshotCreate(const DaemonContext& ctx, const Json& r) {
  auto args = NameAndVolume(r);
  if (!args.ok()) return args.status();
  const std::string* name = &args->name;
  const std::string* vol_arg = &args->volume;
  auto volume = ResolveVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  absl::StatusOr<SnapshotInfo> info = absl::UnknownError("not run");
  absl::Status s = WithKvFlushed(ctx, *volume, [&] {
    info = ctx.pool->CreateSnapshot(*volume, *name);
    return info.status();
  });
  if (!s.ok()) return s;
  return Json{{"snapshot", SnapshotJson(ctx, *info)}};
}

absl::StatusOr<Json> SnapshotList(const DaemonContext& ctx, const Json& r) {
  auto vol_arg = OptStringArg(r, kArgVolume);
  if (!vol_arg.ok()) return vol_arg.status();
  std::string volume;  // "" = every volume
  if (!vol_arg->empty()) {
    auto v = ResolveSnapshotVolume(ctx, *vol_arg);
    if (!v.ok()) return v.status();
    volume = *v;
  }
  Json out = Json::array();
  for (const SnapshotInfo& s : ctx.pool->ListSnapshots(volume)) {
    out.push_back(SnapshotJson(ctx, s));
  }
  return Json{{"snapshots", out}};
}

// Volumes activated from VOL@SNAP: the catalogue's active_as plus any
// volume whose origin says so.
std::vector<std::string> ActivatedFrom(const DaemonContext& ctx, const std::string& volume,
                                       const std::string& snap) {
  // From the volumes' origins: ListSnapshots would also compute every
  // snapshot's exclusive space (tens of ms with 100 snapshots).
  std::set<std::string> out;
  std::string ref = SnapRef(volume, snap);
  bool primary = volume == PrimaryName(ctx);
  for (const std::string& v : ctx.pool->VolumeNames()) {
    std::string origin = ctx.pool->VolumeOrigin(v);
    if (origin == ref || (primary && origin == "@" + snap)) out.insert(v);
  }
  return {out.begin(), out.end()};
}

absl::StatusOr<Json> SnapshotDelete(const DaemonContext& ctx, const Json& r) {
  auto args = NameAndVolume(r);
  if (!args.ok()) return args.status();
  const std::string* name = &args->name;
  const std::string* vol_arg = &args->volume;
  auto force = BoolArg(r, kArgForce);
  if (!force.ok()) return force.status();
  auto volume = ResolveSnapshotVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();

  Json deactivated = Json::array();
  std::vector<std::string> active = ActivatedFrom(ctx, *volume, *name);
  if (!active.empty() && !*force) {
    std::vector<std::string> shown;
    for (const std::string& v : active) {
      std::vector<std::string> ex = ExportsOf(ctx, v);
      shown.push_back(ex.empty() ? v : ex.front());
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot ", SnapRef(*volume, *name), " is active as export '",
        absl::StrJoin(shown, "', '"), "': deactivate it first or delete with force"));
  }
  // With force, the engine removes the activated volumes and the snapshot
  // in one note (all or nothing across a crash); their exports go first so
  // no new client opens them meanwhile, and come back if the engine refuses.
  std::vector<Export> removed;
  for (const std::string& v : active) {
    for (const Export& e : ctx.exports->List()) {
      if (e.volume->name() == v && ctx.exports->Remove(e.name)) removed.push_back(e);
    }
    deactivated.push_back(v);
  }
  if (absl::Status s = WithKvClosed(ctx, SnapRef(*volume, *name),
                                    [&] { return ctx.pool->DeleteSnapshot(*volume, *name, *force); });
      !s.ok()) {
    for (Export& e : removed) (void)ctx.exports->Add(std::move(e));
    return s;
  }
  return Json{{"deleted", SnapRef(*volume, *name)}, {"deactivated", deactivated}};
}

absl::StatusOr<Json> SnapshotActivate(const DaemonContext& ctx, const Json& r) {
  auto args = NameAndVolume(r);
  if (!args.ok()) return args.status();
  const std::string* name = &args->name;
  const std::string* vol_arg = &args->volume;
  auto export_name = OptStringArg(r, kArgExport);
  if (!export_name.ok()) return export_name.status();
  auto read_only = BoolArg(r, kArgReadOnly);
  if (!read_only.ok()) return read_only.status();
  auto volume = ResolveSnapshotVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  if (absl::Status s = RequireBlock(ctx, *volume, "snapshot activation (an NBD export) is");
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(s.message(), "; read its snapshots with ftlctl kv get ",
                                               *volume, "@", *name));
  }
  // The export and the new volume share the name (so a restart exports it
  // again under the same name). An export alias (the primary under
  // --export) must not be shadowed.
  if (!export_name->empty() && ctx.exports->Find(*export_name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("export '", *export_name, "' already exists"));
  }
  auto v = ctx.pool->ActivateSnapshot(*volume, *name, *export_name, *read_only);
  if (!v.ok()) return v.status();
  if ((*v)->kind() != DatasetKind::kBlock) {
    // A key-value dataset's snapshot: a new dataset, no export (nbd/exports.h).
    return Json{{"volume", (*v)->name()},
                {"kind", DatasetKindName((*v)->kind())},
                {"snapshot", SnapRef(*volume, *name)}};
  }
  Export e{.name = (*v)->name(),
           .description = absl::StrCat("ftld snapshot ", SnapRef(*volume, *name)),
           .volume = *v,
           .read_only = ctx.read_only,
           .listed = true};
  if (absl::Status s = ctx.exports->Add(e); !s.ok()) {
    absl::Status undo = ctx.pool->DeactivateVolume((*v)->name());
    return absl::Status(s.code(),
                        absl::StrCat(s.message(), " (choose another export name)",
                                     undo.ok() ? "" : absl::StrCat("; undo failed: ",
                                                                   undo.message())));
  }
  return Json{{"export", ExportJson(e)}, {"snapshot", SnapRef(*volume, *name)}};
}

absl::StatusOr<Json> SnapshotDeactivate(const DaemonContext& ctx, const Json& r) {
  auto export_name = StringArg(r, kArgExport);
  if (!export_name.ok()) return export_name.status();
  std::string volume;
  if (std::optional<Export> e = ctx.exports->Find(*export_name)) {
    volume = e->volume->name();
  } else if (ctx.pool->GetVolume(*export_name) != nullptr) {
    volume = *export_name;  // a volume without an export entry
  } else {
    return absl::NotFoundError(absl::StrCat("no export named '", *export_name, "'"));
  }
  if (absl::Status s = RequireBlock(ctx, volume, "deactivation is"); !s.ok()) {
    return s;
  }
  auto removed = DeactivateVolume(ctx, volume);
  if (!removed.ok()) return removed.status();
  return Json{{"deactivated", *export_name}, {"volume", volume}, {"exports_removed", *removed}};
}

// Connected clients in transmission on an export of `volume` (including
// the "" alias of the primary).
std::vector<ConnectionInfo> ClientsOf(const DaemonContext& ctx, const std::string& volume) {
  std::vector<ConnectionInfo> out;
  for (const ConnectionInfo& c : ctx.server->Connections()) {
    if (!c.transmitting) continue;
    std::optional<Export> e = ctx.exports->Find(c.export_name);
    if (e && e->volume->name() == volume) out.push_back(c);
  }
  return out;
}

absl::StatusOr<Json> SnapshotRollback(const DaemonContext& ctx, const Json& r) {
  auto args = NameAndVolume(r);
  if (!args.ok()) return args.status();
  const std::string* name = &args->name;
  const std::string* vol_arg = &args->volume;
  auto force = BoolArg(r, kArgForce);
  if (!force.ok()) return force.status();
  auto volume = ResolveVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  // A missing snapshot is NOT_FOUND before anything asks the operator to
  // disconnect clients. RangeAttrs resolves the reference cheaply
  // (ListSnapshots would compute every snapshot's exclusive space).
  if (auto snap = ctx.pool->RangeAttrs(SnapRef(*volume, *name)); !snap.ok()) {
    return snap.status();
  }
  // One "force" overrides both refusals: clients connected (checked here)
  // and immutable ranges the rollback would change (checked by the engine).
  std::vector<ConnectionInfo> clients = ClientsOf(ctx, *volume);
  if (!clients.empty() && !*force) {
    std::vector<std::string> who;
    for (const ConnectionInfo& c : clients) {
      who.push_back(absl::StrCat(c.peer, " on '", c.export_name, "'"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        clients.size(), " client(s) connected to volume ", *volume, " (",
        absl::StrJoin(who, ", "), "): disconnect them first or roll back with force"));
  }
  if (absl::Status s = WithKvClosed(ctx, *volume,
                                    [&] { return ctx.pool->Rollback(*volume, *name, *force); });
      !s.ok()) {
    return s;
  }
  return Json{{"volume", *volume},
              {"snapshot", SnapRef(*volume, *name)},
              {"clients_connected", clients.size()}};
}

}  // namespace

void RegisterSnapshotCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  auto actions = std::make_shared<Actions>();
  (*actions)[kActionCreate] = [ctx](const Json& r) { return SnapshotCreate(*ctx, r); };
  (*actions)[kActionList] = [ctx](const Json& r) { return SnapshotList(*ctx, r); };
  (*actions)[kActionDelete] = [ctx](const Json& r) { return SnapshotDelete(*ctx, r); };
  (*actions)[kActionActivate] = [ctx](const Json& r) { return SnapshotActivate(*ctx, r); };
  (*actions)[kActionDeactivate] = [ctx](const Json& r) { return SnapshotDeactivate(*ctx, r); };
  (*actions)[kActionRollback] = [ctx](const Json& r) { return SnapshotRollback(*ctx, r); };
  d->Register(kCmdSnapshot,
              "snapshots: action = create|list|delete|activate|deactivate|rollback",
              [actions](const Json& r) { return RunAction(kCmdSnapshot, *actions, r); });
}

}  // namespace ftl::control
