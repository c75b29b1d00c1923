#include "control/control_kv.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "registry/kv_registry.h"
#include "control/kv_wire.h"
#include "ftl/kv.h"
#include "ftl/tree_ref.h"

namespace ftl::control {
namespace {

// The dataset a request names in "name": "NAME", or "NAME@SNAP" where
// `snapshot_ok` (reads). Returned in canonical form.
absl::StatusOr<TreeRef> DatasetRef(const Json& r, bool snapshot_ok) {
  auto name = StringArg(r, kArgName);
  if (!name.ok()) return name.status();
  auto ref = TreeRef::Parse(*name);
  if (!ref.ok()) return Prefixed(ref.status(), "\"name\": ");
  if (ref->volume.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"name\": '", *name, "' names no dataset (give NAME or NAME@SNAP)"));
  }
  if (ref->is_snapshot() && !snapshot_ok) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", *name, "' is a snapshot, which is read-only: write to ", ref->volume, " instead"));
  }
  return *ref;
}

// A dataset that must exist and be a key-value one (create excepted).
absl::StatusOr<DatasetInfo> KvDataset(const DaemonContext& ctx, const std::string& name) {
  auto info = KvRegistry::FindDataset(ctx.pool, name);
  if (!info.ok()) return info.status();
  if (info->kind != DatasetKind::kKv) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", name, "' is a block volume, not a key-value dataset (see ftlctl kv list)"));
  }
  return info;
}

absl::Status RefuseReadOnlyDaemon(const DaemonContext& ctx) {
  if (!ctx.read_only) return absl::OkStatus();
  return absl::PermissionDeniedError("ftld runs with --read-only: key-value datasets are read-only");
}

// The key of a request: present, 1..kMaxKeyBytes bytes.
absl::StatusOr<std::string> KeyArg(const Json& r) {
  auto key = GetBytes(r, kArgKey);
  if (!key.ok()) return key.status();
  if (!key->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("missing \"", kArgKey, "\" (or \"", kArgKey,
                                                   kBase64Suffix, "\")"));
  }
  if ((*key)->empty()) return absl::InvalidArgumentError("the key is empty (keys are 1 byte or more)");
  if ((*key)->size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the key is ", (*key)->size(),
                                                   " bytes; at most ", kMaxKeyBytes));
  }
  return std::move(**key);
}

// "sync": true unless given false.
absl::StatusOr<bool> SyncArg(const Json& r) {
  auto it = r.find(kArgSync);
  if (it == r.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", kArgSync, "\" must be true or false"));
  }
  return it->get<bool>();
}

Json KvStatsJson(const KvStats& s) {
  return Json{{"page_reads", s.page_reads},
              {"log_reads", s.log_reads},
              {"page_writes", s.page_writes},
              {"log_sector_writes", s.log_sector_writes},
              {"log_block_writes", s.log_block_writes},
              {"unit_merges", s.unit_merges},
              {"bombs", s.bombs},
              {"buffer_hits", s.buffer_hits},
              {"buffer_misses", s.buffer_misses},
              {"evictions", s.evictions},
              {"flushes", s.flushes},
              {"synced_writes", s.synced_writes},
              {"blob_writes", s.blob_writes},
              {"media_write_bytes", s.media_write_bytes},
              {"pages", s.pages},
              {"buffer_pages", s.buffer_pages},
              {"tree_height", s.tree_height}};
}

// One row of "kv list": the pool's view and the store's geometry (which
// opens the store: a store that cannot open shows its error instead).
Json DatasetJson(const DaemonContext& ctx, const DatasetInfo& d) {
  Json out = {{"name", d.name},
              {"kind", DatasetKindName(d.kind)},
              {"geometry", nullptr},
              {"size_bytes", d.size_bytes},
              {"mapped_bytes", d.mapped_bytes},
              {"snapshots", d.snapshots}};
  absl::Status s = ctx.kv->Use(d.name, [&](KvStore& store) {
    out["geometry"] = store.geometry().ToString();
    return absl::OkStatus();
  });
  if (!s.ok()) out["error"] = std::string(s.message());
  return out;
}

absl::StatusOr<Json> KvCreate(const DaemonContext& ctx, const Json& r) {
  if (auto it = r.find(kArgName);
      it != r.end() && it->is_string() && it->get_ref<const std::string&>().find('@') != std::string::npos) {
    return absl::InvalidArgumentError(
        "\"name\": a dataset name has no '@' (NAME@SNAP names a snapshot: ftlctl snapshot create)");
  }
  auto ref = DatasetRef(r, /*snapshot_ok=*/false);
  if (!ref.ok()) return ref.status();
  auto geo_text = OptStringArg(r, kArgGeometry);
  if (!geo_text.ok()) return geo_text.status();
  auto geo = KvGeometry::Parse(*geo_text);
  if (!geo.ok()) return Prefixed(geo.status(), "\"geometry\": ");
  if (absl::Status s = geo->Validate(); !s.ok()) return Prefixed(s, "\"geometry\": ");
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  // The name must be free among exports too (the primary may be exported
  // under another name), so that a name means one thing.
  if (ctx.exports->Find(ref->volume)) {
    return absl::AlreadyExistsError(absl::StrCat("'", ref->volume, "' is an NBD export"));
  }
  if (absl::Status s = KvStore::Create(ctx.pool, ref->volume, *geo); !s.ok()) return s;
  auto info = KvDataset(ctx, ref->volume);
  if (!info.ok()) return info.status();
  return Json{{"dataset", DatasetJson(ctx, *info)}};
}

absl::StatusOr<Json> KvList(const DaemonContext& ctx, const Json&) {
  Json out = Json::array();
  for (const DatasetInfo& d : ctx.pool->ListDatasets()) {
    if (d.kind == DatasetKind::kKv) out.push_back(DatasetJson(ctx, d));
  }
  return Json{{"datasets", out}};
}

absl::StatusOr<Json> KvDestroy(const DaemonContext& ctx, const Json& r) {
  auto ref = DatasetRef(r, /*snapshot_ok=*/false);
  if (!ref.ok()) return ref.status();
  auto force = BoolArg(r, kArgForce);
  if (!force.ok()) return force.status();
  auto info = KvDataset(ctx, ref->volume);
  if (!info.ok()) return info.status();
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  // Refused before its store is closed, so a refusal changes nothing.
  if (info->snapshots > 0 && !*force) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", ref->volume, "' has ", info->snapshots,
                     " snapshot(s): delete them first or destroy with force"));
  }
  absl::Status s = ctx.kv->WithClosed(ref->volume, /*snapshots_too=*/true, [&] {
    return ctx.pool->DestroyDataset(ref->volume, *force);
  });
  if (!s.ok()) return s;
  return Json{{"destroyed", ref->volume},
              {"snapshots_deleted", *force ? info->snapshots : 0},
              {"freed_bytes", info->mapped_bytes}};
}

absl::StatusOr<Json> KvPut(const DaemonContext& ctx, const Json& r) {
  auto ref = DatasetRef(r, /*snapshot_ok=*/false);
  if (!ref.ok()) return ref.status();
  auto key = KeyArg(r);
  if (!key.ok()) return key.status();
  auto value = GetBytes(r, kArgValue);
  if (!value.ok()) return value.status();
  if (!value->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("missing \"", kArgValue, "\" (or \"",
                                                   kArgValue, kBase64Suffix, "\")"));
  }
  if ((*value)->size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the value is ", (*value)->size(),
                                                   " bytes; at most ", kMaxValueBytes));
  }
  auto sync = SyncArg(r);
  if (!sync.ok()) return sync.status();
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  absl::Status s = ctx.kv->Use(ref->volume, [&](KvStore& store) {
    return store.Put(*key, **value, KvWriteOptions{.sync = *sync});
  });
  if (!s.ok()) return s;
  return Json{{"name", ref->volume}, {"bytes", (*value)->size()}, {"synced", *sync}};
}

absl::StatusOr<Json> KvGet(const DaemonContext& ctx, const Json& r) {
  auto ref = DatasetRef(r, /*snapshot_ok=*/true);
  if (!ref.ok()) return ref.status();
  auto key = KeyArg(r);
  if (!key.ok()) return key.status();
  std::string value;
  absl::Status s = ctx.kv->Use(ref->ToString(), [&](KvStore& store) {
    auto v = store.Get(*key);
    if (!v.ok()) return v.status();
    value = std::move(*v);
    return absl::OkStatus();
  });
  if (absl::IsNotFound(s) && ctx.kv->IsOpen(ref->ToString())) {
    // The store is open, so the dataset exists: the key is what is missing.
    return absl::NotFoundError(absl::StrCat("no such key in ", ref->ToString()));
  }
  if (!s.ok()) return s;
  Json out = Json::object();
  PutBytes(out, kArgKey, *key);
  PutBytes(out, kArgValue, value);
  return out;
}

absl::StatusOr<Json> KvDelete(const DaemonContext& ctx, const Json& r) {
  auto ref = DatasetRef(r, /*snapshot_ok=*/false);
  if (!ref.ok()) return ref.status();
  auto key = KeyArg(r);
  if (!key.ok()) return key.status();
  auto sync = SyncArg(r);
  if (!sync.ok()) return sync.status();
  if (absl::Status s = RefuseReadOnlyDaemon(ctx); !s.ok()) return s;
  absl::Status s = ctx.kv->Use(ref->volume, [&](KvStore& store) {
    return store.Delete(*key, KvWriteOptions{.sync = *sync});
  });
  if (absl::IsNotFound(s) && ctx.kv->IsOpen(ref->volume)) {
    return absl::NotFoundError(absl::StrCat("no such key in ", ref->volume));
  }
  if (!s.ok()) return s;
  return Json{{"name", ref->volume}, {"deleted", true}, {"synced", *sync}};
}

absl::StatusOr<Json> KvScan(const DaemonContext& ctx, const Json& r) {
  auto ref = DatasetRef(r, /*snapshot_ok=*/true);
  if (!ref.ok()) return ref.status();
  auto from = GetBytes(r, kArgFrom);
  if (!from.ok()) return from.status();
  auto to = GetBytes(r, kArgTo);
  if (!to.ok()) return to.status();
  auto limit = U64Arg(r, kArgLimit, kMaxKvScanLimit);
  if (!limit.ok()) return limit.status();
  if (*limit == 0) return absl::InvalidArgumentError("\"limit\" must be at least 1");
  size_t cap = std::min<uint64_t>(*limit, kMaxKvScanLimit);
  std::string lo = from->value_or(""), hi = to->value_or("");
  Json entries = Json::array();
  bool more = false;
  std::string next;
  absl::Status s = ctx.kv->Use(ref->ToString(), [&](KvStore& store) {
    std::unique_ptr<KvIterator> it = store.NewIterator();
    if (lo.empty()) {
      it->SeekToFirst();
    } else {
      it->Seek(lo);
    }
    size_t bytes = 0;
    for (; it->Valid(); it->Next()) {
      if (!hi.empty() && it->key() >= hi) break;
      if (entries.size() >= cap || bytes >= kMaxKvScanBytes) {
        more = true;
        next = it->key();
        break;
      }
      Json e = Json::object();
      PutBytes(e, kArgKey, it->key());
      PutBytes(e, kArgValue, it->value());
      bytes += it->key().size() + it->value().size();
      entries.push_back(std::move(e));
    }
    return it->status();
  });
  if (!s.ok()) return s;
  Json out = {{"name", ref->ToString()}, {"count", entries.size()}, {"more", more}};
  if (more) PutBytes(out, "next", next);
  out["entries"] = std::move(entries);
  return out;
}

absl::StatusOr<Json> KvStatsReply(const DaemonContext& ctx, const Json& r) {
  auto ref = DatasetRef(r, /*snapshot_ok=*/true);
  if (!ref.ok()) return ref.status();
  auto info = KvDataset(ctx, ref->volume);
  if (!info.ok()) return info.status();
  Json out;
  absl::Status s = ctx.kv->Use(ref->ToString(), [&](KvStore& store) {
    out = {{"name", ref->ToString()},
           {"geometry", store.geometry().ToString()},
           {"read_only", store.read_only()},
           {"size_bytes", info->size_bytes},
           {"mapped_bytes", info->mapped_bytes},
           {"snapshots", info->snapshots},
           {"stats", KvStatsJson(store.Stats())}};
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace

void RegisterKvCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  auto actions = std::make_shared<Actions>();
  (*actions)[kActionCreate] = [ctx](const Json& r) { return KvCreate(*ctx, r); };
  (*actions)[kActionList] = [ctx](const Json& r) { return KvList(*ctx, r); };
  (*actions)[kActionDestroy] = [ctx](const Json& r) { return KvDestroy(*ctx, r); };
  (*actions)[kActionPut] = [ctx](const Json& r) { return KvPut(*ctx, r); };
  (*actions)[kActionGet] = [ctx](const Json& r) { return KvGet(*ctx, r); };
  (*actions)[kActionDelete] = [ctx](const Json& r) { return KvDelete(*ctx, r); };
  (*actions)[kActionScan] = [ctx](const Json& r) { return KvScan(*ctx, r); };
  (*actions)[kActionStats] = [ctx](const Json& r) { return KvStatsReply(*ctx, r); };
  d->Register(kCmdKv,
              "key-value datasets: action = create|list|destroy|put|get|delete|scan|stats",
              [actions](const Json& r) { return RunAction(kCmdKv, *actions, r); });
}

}  // namespace ftl::control
