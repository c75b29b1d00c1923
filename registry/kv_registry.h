#pragma once
// KvRegistry: the daemon's open key-value stores (include/ftl/kv.h). One
// store per key-value dataset ("NAME"), opened on first use and kept open
// until the daemon stops; one read-only store per snapshot of one
// ("NAME@SNAP"), opened when a read names it and dropped when the snapshot
// is deleted (WithClosed).
//
// Owns: every KvStore it opened, and closes each (flushing what it holds)
// before the dataset under it changes: destroy, rollback, snapshot delete
// (WithClosed), and at shutdown (CloseAll). Does not own the Pool, which
// must outlive CloseAll(); the daemon calls it after the control and RESP
// servers have stopped and before Pool::Close().
//
// Users: the control socket (control/control_kv.cc, control_snapshot.cc)
// and the Redis-protocol server (resp/). It lives in a folder of its own
// below both, so that the two servers share one store per dataset without
// including each other (docs/architecture.md, "Layers").
//
// Thread safety: every method is safe from any thread. Two locks:
//   lifecycle_  held shared while a caller's function runs on a store (Use),
//               exclusively while stores are flushed or closed and the
//               dataset changes under them (WithFlushed, WithClosed,
//               CloseAll): no store is closed while a call runs on it, and
//               none is reopened before the change is done;
//   mu_         the map of open stores.
// Lock order: lifecycle_ before mu_. The functions passed in run under
// lifecycle_ (not mu_) and must not call the registry.

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ftl/kv.h"
#include "ftl/pool.h"

namespace ftl::registry {

class KvRegistry {
 public:
  // `options` apply to every store (snapshot stores are read-only anyway).
  KvRegistry(Pool* pool, const KvOptions& options);
  ~KvRegistry();  // CloseAll()
  KvRegistry(const KvRegistry&) = delete;
  KvRegistry& operator=(const KvRegistry&) = delete;

  // Runs `fn` on the store of `ref` ("NAME" or "NAME@SNAP", as validated by
  // the caller), opening it first if needed. NotFound if there is no
  // dataset NAME, FailedPrecondition if it is no key-value dataset, or the
  // error of opening it; else what `fn` returns.
  absl::Status Use(const std::string& ref, const std::function<absl::Status(KvStore&)>& fn)
      ABSL_LOCKS_EXCLUDED(lifecycle_, mu_);

  // Flushes the open store of dataset `name` (if any) and runs `fn` before
  // any other call can write to it: a snapshot taken in `fn` holds every
  // write acknowledged before. A failed flush is returned, `fn` not run.
  absl::Status WithFlushed(const std::string& name, const std::function<absl::Status()>& fn)
      ABSL_LOCKS_EXCLUDED(lifecycle_, mu_);

  // Closes the store of `ref` (with `snapshots_too`, also every "ref@SNAP"
  // store), then runs `fn` (e.g. the destroy, rollback or snapshot delete)
  // before any of them can reopen. A store that fails to close is logged
  // and dropped all the same; `fn`'s status is returned.
  absl::Status WithClosed(const std::string& ref, bool snapshots_too,
                          const std::function<absl::Status()>& fn)
      ABSL_LOCKS_EXCLUDED(lifecycle_, mu_);

  // Closes every store; the first error is returned (each is logged).
  absl::Status CloseAll() ABSL_LOCKS_EXCLUDED(lifecycle_, mu_);

  // Whether `ref`'s store is open now.
  bool IsOpen(const std::string& ref) const ABSL_LOCKS_EXCLUDED(mu_);

  // The pool the stores live in (for listing and creating datasets).
  Pool* pool() const { return pool_; }

  // The dataset `name` as the pool lists it; NotFound if there is none.
  static absl::StatusOr<DatasetInfo> FindDataset(Pool* pool, const std::string& name);

 private:
  // The store of `ref`, opened if needed.
  absl::StatusOr<KvStore*> Get(const std::string& ref) ABSL_SHARED_LOCKS_REQUIRED(lifecycle_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Closes and forgets `ref`'s store (and its snapshots'), logging errors.
  absl::Status CloseLocked(const std::string& ref, bool snapshots_too)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_) ABSL_LOCKS_EXCLUDED(mu_);

  Pool* const pool_;
  const KvOptions options_;
  mutable absl::Mutex lifecycle_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<KvStore>> stores_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::registry
