#include "control/control_snapshot.h"

#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ftl/size.h"

namespace ftl::control {

using nbd::ConnectionInfo;
using nbd::Export;

namespace {

using Actions = std::map<std::string, std::function<absl::StatusOr<Json>(const Json&)>>;

// ---- argument helpers -------------------------------------------------

absl::StatusOr<std::string> OptStringArg(const Json& request, const std::string& key,
                                         const std::string& fallback = "") {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> BoolArg(const Json& request, const std::string& key) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be true or false"));
  }
  return it->get<bool>();
}

absl::Status Prefixed(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// Runs request["action"] from `actions`; the error for a missing or unknown
// action lists the valid ones.
absl::StatusOr<Json> RunAction(const std::string& cmd, const Actions& actions,
                               const Json& request) {
  std::vector<std::string> names;
  for (const auto& [name, fn] : actions) names.push_back(name);
  std::string valid = absl::StrJoin(names, ", ");
  auto it = request.find("action");
  if (it == request.end() || !it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", cmd, "\" needs \"action\" (a string: one of ", valid, ")"));
  }
  auto a = actions.find(it->get<std::string>());
  if (a == actions.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ", cmd, " action '",
                                                   it->get<std::string>(), "' (one of ",
                                                   valid, ")"));
  }
  return a->second(request);
}

// ---- names ------------------------------------------------------------

std::string PrimaryName(const DaemonContext& ctx) {
  Volume* p = ctx.pool->PrimaryVolume();
  return p != nullptr ? p->name() : "";
}

bool IsVolume(const DaemonContext& ctx, const std::string& name) {
  return ctx.pool->GetVolume(name) != nullptr;
}

// A volume named by the user: "" = the primary volume; a volume name; or an
// export name (the primary may be exported under --export NAME).
absl::StatusOr<std::string> ResolveVolume(const DaemonContext& ctx, const std::string& name) {
  if (name.empty()) return PrimaryName(ctx);
  if (IsVolume(ctx, name)) return name;
  if (std::optional<Export> e = ctx.exports->Find(name)) return e->volume->name();
  return absl::NotFoundError(absl::StrCat("no volume or export named '", name, "'"));
}

// The volume part of a snapshot reference: as ResolveVolume, but also a
// volume that is gone (deactivated) while snapshots taken of it remain.
absl::StatusOr<std::string> ResolveSnapshotVolume(const DaemonContext& ctx,
                                                  const std::string& name) {
  auto v = ResolveVolume(ctx, name);
  if (v.ok() || !absl::IsNotFound(v.status())) return v;
  for (const SnapshotInfo& s : ctx.pool->ListSnapshots("")) {
    if (s.volume == name) return name;
  }
  return v;
}

// A tree reference for range operations (include/ftl/range.h): "" (the
// primary volume), a volume or export name, "VOLUME@SNAPSHOT" or
// "@SNAPSHOT". Export names are translated to their volumes.
absl::StatusOr<std::string> ResolveTree(const DaemonContext& ctx, const std::string& ref) {
  if (ref.empty()) return ref;
  if (auto at = ref.find('@'); at != std::string::npos) {
    std::string vol = ref.substr(0, at);
    if (at + 1 == ref.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", ref, "': a snapshot reference is VOLUME@SNAPSHOT or @SNAPSHOT"));
    }
    if (vol.empty()) return ref;
    auto v = ResolveSnapshotVolume(ctx, vol);
    if (!v.ok()) return v.status();
    return absl::StrCat(*v, ref.substr(at));
  }
  return ResolveVolume(ctx, ref);
}

// "VOL@SNAP" for messages and replies.
std::string SnapRef(const std::string& volume, const std::string& snap) {
  return absl::StrCat(volume, "@", snap);
}

// ---- replies ----------------------------------------------------------

Json ExportJson(const Export& e) {
  return Json{{"name", e.name},
              {"volume", e.volume->name()},
              {"size_bytes", e.volume->size_bytes()},
              {"read_only", e.effective_read_only()},
              {"description", e.description}};
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

Json AttrsJson(const std::vector<AttrExtent>& attrs) {
  Json out = Json::array();
  for (const AttrExtent& a : attrs) {
    out.push_back({{"offset", a.offset},
                   {"length", a.length},
                   {"immutable", a.immutable},
                   {"non_persistent", a.non_persistent}});
  }
  return out;
}

// ---- snapshot actions -------------------------------------------------

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

// The "name" and optional "volume" arguments most snapshot actions take.
struct NamedSnapshotArgs {
  std::string name;
  std::string volume;  // "" = not given
};
absl::StatusOr<NamedSnapshotArgs> NameAndVolume(const Json& r) {
  auto name = StringArg(r, "name");
  if (!name.ok()) return name.status();
  auto volume = OptStringArg(r, "volume");
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
  auto info = ctx.pool->CreateSnapshot(*volume, *name);
  if (!info.ok()) return info.status();
  return Json{{"snapshot", SnapshotJson(ctx, *info)}};
}

absl::StatusOr<Json> SnapshotList(const DaemonContext& ctx, const Json& r) {
  auto vol_arg = OptStringArg(r, "volume");
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
  auto force = BoolArg(r, "force");
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
  if (absl::Status s = ctx.pool->DeleteSnapshot(*volume, *name, *force); !s.ok()) {
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
  auto export_name = OptStringArg(r, "export");
  if (!export_name.ok()) return export_name.status();
  auto read_only = BoolArg(r, "read_only");
  if (!read_only.ok()) return read_only.status();
  auto volume = ResolveSnapshotVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  // The export and the new volume share the name (so a restart exports it
  // again under the same name). An export alias (the primary under
  // --export) must not be shadowed.
  if (!export_name->empty() && ctx.exports->Find(*export_name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("export '", *export_name, "' already exists"));
  }
  auto v = ctx.pool->ActivateSnapshot(*volume, *name, *export_name, *read_only);
  if (!v.ok()) return v.status();
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
  auto export_name = StringArg(r, "export");
  if (!export_name.ok()) return export_name.status();
  std::string volume;
  if (std::optional<Export> e = ctx.exports->Find(*export_name)) {
    volume = e->volume->name();
  } else if (IsVolume(ctx, *export_name)) {
    volume = *export_name;  // a volume without an export entry
  } else {
    return absl::NotFoundError(absl::StrCat("no export named '", *export_name, "'"));
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
  auto force = BoolArg(r, "force");
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
  if (absl::Status s = ctx.pool->Rollback(*volume, *name, *force); !s.ok()) return s;
  return Json{{"volume", *volume},
              {"snapshot", SnapRef(*volume, *name)},
              {"clients_connected", clients.size()}};
}

// ---- range actions ----------------------------------------------------

using SizeFields = std::initializer_list<std::pair<const char*, uint64_t*>>;
using TreeFields = std::initializer_list<std::pair<const char*, std::string*>>;

// Reads three size fields and the optional "from"/"to" tree references
// (resolved to engine names) of a range request.
absl::Status ReadRangeFields(const DaemonContext& ctx, const Json& j, const SizeFields& sizes,
                             std::string* from, std::string* to) {
  for (auto [key, field] : sizes) {
    auto v = SizeArg(j, key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  for (auto [key, field] : TreeFields{{"from", from}, {"to", to}}) {
    auto s = OptStringArg(j, key);
    if (!s.ok()) return s.status();
    auto t = ResolveTree(ctx, *s);
    if (!t.ok()) return Prefixed(t.status(), absl::StrCat("\"", key, "\": "));
    *field = *t;
  }
  return absl::OkStatus();
}

absl::StatusOr<RangeOp> ParseRangeOp(const DaemonContext& ctx, const Json& j,
                                     std::optional<RangeOp::Kind> kind) {
  if (!j.is_object()) return absl::InvalidArgumentError("an operation must be a JSON object");
  RangeOp op;
  if (kind) {
    op.kind = *kind;
  } else {
    auto name = StringArg(j, "op");
    if (!name.ok()) return name.status();
    if (*name == "clone") {
      op.kind = RangeOp::Kind::kClone;
    } else if (*name == "move") {
      op.kind = RangeOp::Kind::kMove;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown \"op\" '", *name, "' (clone or move)"));
    }
  }
  if (absl::Status st = ReadRangeFields(ctx, j, {{"src", &op.src}, {"dst", &op.dst}, {"len", &op.len}},
                                         &op.from, &op.to);
      !st.ok())
    return st;
  return op;
}

absl::StatusOr<Json> RangeSingle(const DaemonContext& ctx, const Json& r, RangeOp::Kind kind) {
  auto op = ParseRangeOp(ctx, r, kind);
  if (!op.ok()) return op.status();
  if (absl::Status s = ctx.pool->ApplyRangeOps({*op}); !s.ok()) return s;
  return Json{{"ops", 1}};
}

absl::StatusOr<Json> RangeBatch(const DaemonContext& ctx, const Json& r) {
  auto it = r.find("ops");
  if (it == r.end() || !it->is_array()) {
    return absl::InvalidArgumentError("\"ops\" must be an array of operations");
  }
  if (it->empty()) return absl::InvalidArgumentError("\"ops\" is empty");
  std::vector<RangeOp> ops;
  for (size_t i = 0; i < it->size(); ++i) {
    auto op = ParseRangeOp(ctx, (*it)[i], std::nullopt);
    if (!op.ok()) return Prefixed(op.status(), absl::StrCat("ops[", i, "]: "));
    ops.push_back(*op);
  }
  if (absl::Status s = ctx.pool->ApplyRangeOps(ops); !s.ok()) return s;
  return Json{{"ops", ops.size()}};
}

absl::StatusOr<Json> RangeMerge(const DaemonContext& ctx, const Json& r) {
  MergeRequest req;
  if (absl::Status st =
          ReadRangeFields(ctx, r, {{"base", &req.base}, {"dst", &req.dst}, {"len", &req.len}},
                          &req.from, &req.to);
      !st.ok())
    return st;
  auto sources = r.find("sources");
  if (sources == r.end() || !sources->is_array() || sources->empty()) {
    return absl::InvalidArgumentError("\"sources\" must be a non-empty array of offsets");
  }
  for (size_t i = 0; i < sources->size(); ++i) {
    Json one = Json::object();
    one["source"] = (*sources)[i];
    auto v = SizeArg(one, "source");
    if (!v.ok()) return Prefixed(v.status(), absl::StrCat("sources[", i, "]: "));
    req.sources.push_back(*v);
  }
  auto policy = OptStringArg(r, "policy", "fail");
  if (!policy.ok()) return policy.status();
  if (*policy == "fail") {
    req.policy = MergePolicy::kFail;
  } else if (*policy == "first") {
    req.policy = MergePolicy::kFirst;
  } else if (*policy == "last") {
    req.policy = MergePolicy::kLast;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown \"policy\" '", *policy, "' (fail, first or last)"));
  }
  auto res = ctx.pool->Merge(req);
  if (!res.ok()) return res.status();
  Json taken = Json::array();
  for (size_t i = 0; i < res->taken.size(); ++i) {
    taken.push_back({{"source", i < req.sources.size() ? req.sources[i] : 0},
                     {"blocks", res->taken[i]}});
  }
  return Json{{"applied", res->applied},
              {"policy", *policy},
              {"blocks", res->blocks},
              {"unchanged", res->unchanged},
              {"taken", taken},
              {"conflicts", res->conflicts}};
}

absl::StatusOr<Json> RangeAttrsReply(const DaemonContext& ctx, const std::string& volume) {
  auto attrs = ctx.pool->RangeAttrs(volume);
  if (!attrs.ok()) return attrs.status();
  return Json{{"volume", volume}, {"attrs", AttrsJson(*attrs)}};
}

absl::StatusOr<Json> RangeSetAttr(const DaemonContext& ctx, const Json& r) {
  auto vol_arg = OptStringArg(r, "volume");
  if (!vol_arg.ok()) return vol_arg.status();
  auto volume = ResolveVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  auto offset = SizeArg(r, "offset");
  if (!offset.ok()) return offset.status();
  auto length = SizeArg(r, "length");
  if (!length.ok()) return length.status();
  auto name = StringArg(r, "attr");
  if (!name.ok()) return name.status();
  ftl::RangeAttr attr;
  if (*name == "immutable") {
    attr = ftl::RangeAttr::kImmutable;
  } else if (*name == "mutable") {
    attr = ftl::RangeAttr::kMutable;
  } else if (*name == "persistent") {
    attr = ftl::RangeAttr::kPersistent;
  } else if (*name == "non-persistent" || *name == "non_persistent") {
    attr = ftl::RangeAttr::kNonPersistent;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown \"attr\" '", *name, "' (immutable, mutable, persistent or non-persistent)"));
  }
  if (absl::Status s = ctx.pool->SetRangeAttr(*volume, *offset, *length, attr); !s.ok()) {
    return s;
  }
  return RangeAttrsReply(ctx, *volume);
}

absl::StatusOr<Json> RangeAttrList(const DaemonContext& ctx, const Json& r) {
  auto vol_arg = OptStringArg(r, "volume");
  if (!vol_arg.ok()) return vol_arg.status();
  auto volume = ResolveVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  return RangeAttrsReply(ctx, *volume);
}

}  // namespace

absl::StatusOr<uint64_t> SizeArg(const Json& request, const std::string& key,
                                 std::optional<uint64_t> fallback) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  }
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_string()) {
    auto v = ParseSize(it->get<std::string>());
    if (!v.ok()) return Prefixed(v.status(), absl::StrCat("\"", key, "\": "));
    return *v;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", key, "\" must be a non-negative integer or a size string like \"64K\", \"8M\""));
}

void RegisterSnapshotCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  auto actions = std::make_shared<Actions>();
  (*actions)["create"] = [ctx](const Json& r) { return SnapshotCreate(*ctx, r); };
  (*actions)["list"] = [ctx](const Json& r) { return SnapshotList(*ctx, r); };
  (*actions)["delete"] = [ctx](const Json& r) { return SnapshotDelete(*ctx, r); };
  (*actions)["activate"] = [ctx](const Json& r) { return SnapshotActivate(*ctx, r); };
  (*actions)["deactivate"] = [ctx](const Json& r) { return SnapshotDeactivate(*ctx, r); };
  (*actions)["rollback"] = [ctx](const Json& r) { return SnapshotRollback(*ctx, r); };
  d->Register("snapshot",
              "snapshots: action = create|list|delete|activate|deactivate|rollback",
              [actions](const Json& r) { return RunAction("snapshot", *actions, r); });
}

void RegisterRangeCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  auto actions = std::make_shared<Actions>();
  (*actions)["clone"] = [ctx](const Json& r) {
    return RangeSingle(*ctx, r, RangeOp::Kind::kClone);
  };
  (*actions)["move"] = [ctx](const Json& r) {
    return RangeSingle(*ctx, r, RangeOp::Kind::kMove);
  };
  (*actions)["batch"] = [ctx](const Json& r) { return RangeBatch(*ctx, r); };
  (*actions)["merge"] = [ctx](const Json& r) { return RangeMerge(*ctx, r); };
  (*actions)["attr"] = [ctx](const Json& r) { return RangeSetAttr(*ctx, r); };
  (*actions)["attrs"] = [ctx](const Json& r) { return RangeAttrList(*ctx, r); };
  d->Register("range", "range operations: action = clone|move|batch|merge|attr|attrs",
              [actions](const Json& r) { return RunAction("range", *actions, r); });
}

}  // namespace ftl::control
