#include "registry/kv_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "ftl/log.h"
#include "ftl/tree_ref.h"

namespace ftl::registry {

KvRegistry::KvRegistry(Pool* pool, const KvOptions& options) : pool_(pool), options_(options) {}

KvRegistry::~KvRegistry() { (void)CloseAll(); }

absl::StatusOr<DatasetInfo> KvRegistry::FindDataset(Pool* pool, const std::string& name) {
  for (DatasetInfo& d : pool->ListDatasets()) {
    if (d.name == name) return std::move(d);
  }
  return absl::NotFoundError(absl::StrCat("no dataset named '", name, "'"));
}

absl::StatusOr<KvStore*> KvRegistry::Get(const std::string& ref) {
  absl::MutexLock l(&mu_);
  if (auto it = stores_.find(ref); it != stores_.end()) return it->second.get();
  // First use: the dataset must exist and hold a key-value store.
  auto tree = TreeRef::Parse(ref);
  if (!tree.ok()) return tree.status();
  auto info = FindDataset(pool_, tree->volume);
  if (!info.ok()) return info.status();
  if (info->kind != DatasetKind::kKv) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", tree->volume, "' is a ",
                     info->kind == DatasetKind::kBlock ? "block volume" : DatasetKindName(info->kind),
                     ", not a key-value dataset"));
  }
  KvOptions o = options_;
  if (tree->is_snapshot()) o.read_only = true;
  auto store = KvStore::Open(pool_, ref, o);
  if (!store.ok()) return store.status();
  Logger("kv")->info("opened key-value store {}{}", ref, o.read_only ? " (read-only)" : "");
  KvStore* raw = store->get();
  stores_[ref] = std::move(*store);
  return raw;
}

absl::Status KvRegistry::Use(const std::string& ref,
                             const std::function<absl::Status(KvStore&)>& fn) {
  absl::ReaderMutexLock l(&lifecycle_);
  auto store = Get(ref);
  if (!store.ok()) return store.status();
  return fn(**store);
}

absl::Status KvRegistry::WithFlushed(const std::string& name,
                                     const std::function<absl::Status()>& fn) {
  absl::MutexLock l(&lifecycle_);
  KvStore* store = nullptr;
  {
    absl::MutexLock m(&mu_);
    if (auto it = stores_.find(name); it != stores_.end()) store = it->second.get();
  }
  if (store != nullptr) {
    if (absl::Status s = store->Flush(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("flushing key-value store ", name, ": ",
                                                 s.message()));
    }
  }
  return fn();
}

absl::Status KvRegistry::CloseLocked(const std::string& ref, bool snapshots_too) {
  std::vector<std::pair<std::string, std::unique_ptr<KvStore>>> closing;
  {
    absl::MutexLock m(&mu_);
    std::string prefix = ref + "@";
    for (auto it = stores_.begin(); it != stores_.end();) {
      if (it->first == ref || (snapshots_too && it->first.starts_with(prefix))) {
        closing.emplace_back(it->first, std::move(it->second));
        it = stores_.erase(it);
      } else {
        ++it;
      }
    }
  }
  absl::Status first;
  for (auto& [name, store] : closing) {
    absl::Status s = store->Close();
    if (!s.ok()) {
      Logger("kv")->error("closing key-value store {}: {}", name, s.ToString());
      if (first.ok()) first = s;
    } else {
      Logger("kv")->info("closed key-value store {}", name);
    }
  }
  return first;
}

absl::Status KvRegistry::WithClosed(const std::string& ref, bool snapshots_too,
                                    const std::function<absl::Status()>& fn) {
  absl::MutexLock l(&lifecycle_);
  (void)CloseLocked(ref, snapshots_too);  // logged; the store goes either way
  return fn();
}

absl::Status KvRegistry::CloseAll() {
  absl::MutexLock l(&lifecycle_);
  std::vector<std::string> refs;
  {
    absl::MutexLock m(&mu_);
    for (const auto& [ref, store] : stores_) refs.push_back(ref);
  }
  absl::Status first;
  for (const std::string& ref : refs) {
    absl::Status s = CloseLocked(ref, /*snapshots_too=*/false);
    if (first.ok()) first = s;
  }
  return first;
}

bool KvRegistry::IsOpen(const std::string& ref) const {
  absl::MutexLock m(&mu_);
  return stores_.count(ref) > 0;
}

}  // namespace ftl::registry
