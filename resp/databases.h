#pragma once
// The databases the Redis-protocol server serves, and their group commit.
//
// A database is a key-value dataset of the pool (include/ftl/kv.h), by
// number or by name (README, "Redis protocol"):
//   SELECT n        (0 <= n < databases) the dataset "db<n>", created on
//                   its first write (reads of a missing one see it empty,
//                   as Redis's sixteen databases always exist);
//   SELECT NAME     a key-value dataset made with `ftlctl kv create NAME`;
//   SELECT n@SNAP, SELECT NAME@SNAP   a snapshot of one, read-only.
// The stores themselves are the daemon's, shared with the control socket
// through registry::KvRegistry (one KvStore per dataset in the process).
//
// Group commit (docs/decisions.md, "Issue 23"): a command applies its
// writes to the store unsynced, under the database's exec lock, and counts
// them (NoteWrite). A client that must not be answered before its writes
// (and the writes it read) are durable asks WhenDurable(seq): one flush at
// a time runs per database on the worker pool, each covering every write
// applied before it started (KvStore::Flush), so the writes of all clients
// that arrive during one flush share the next. The loop answers a flush's
// waiters with one post to the io threads (they resume each connection),
// so the next flush starts at once, and its thread asks for a short
// scheduler slice (ftl/sched_hint.h), so it runs as soon as the sync
// returns. Only after a slow flush (at least kGatherAfterFlush, as a sync
// that also writes the file system's metadata) does the loop wait briefly
// (at most half the last flush's time, at most kMaxGatherDelay) until as
// many clients wait as the last flush released: those clients were just
// answered and are about to send their next writes, so one cohort shares
// each flush instead of two alternating; after a fast flush that wait cost
// more than it gathered (docs/decisions.md, "The next flush waits for the
// last cohort only after a slow flush"). With
// --kv-fsync everysec the server asks for a flush once a second instead
// (RequestFlush).
//
// Thread safety: every method is safe from any thread. Locks, in order:
//   the registry's lifecycle lock (KvRegistry::Use)
//   Database::exec_mu()  serialises commands on one database (so INCR,
//                        APPEND, SET GET, MULTI/EXEC are atomic against
//                        every other client of the database);
//   the store's own locks (src/kv/kv_store.h);
//   Database::mu_        commit state (a leaf; callbacks run without it);
//   Databases::mu_       the table (a leaf).
// A flush runs under the registry's lifecycle lock and the store's locks,
// never under exec_mu: writers go on while a flush is written.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "registry/kv_registry.h"
#include "resp/asio.h"

namespace ftl::resp {

// Counters of the group commit, for INFO. Relaxed atomics.
struct CommitCounters {
  std::atomic<uint64_t> flushes{0};        // KvStore::Flush calls
  std::atomic<uint64_t> flush_errors{0};
  std::atomic<uint64_t> flushed_writes{0};  // writes made durable by them
};

inline constexpr absl::Duration kMaxGatherDelay = absl::Microseconds(1000);
inline constexpr absl::Duration kGatherAfterFlush = absl::Microseconds(1000);

class Database : public std::enable_shared_from_this<Database> {
 public:
  using DurableCallback = std::function<void(absl::Status)>;

  // Flushes run on `workers`; their waiters are answered on `io`.
  Database(std::string ref, bool numbered, bool read_only, registry::KvRegistry* kv,
           asio::any_io_executor workers, asio::any_io_executor io, CommitCounters* counters);

  // "db0", "users" or "users@monday": the registry's name of the store.
  const std::string& ref() const { return ref_; }
  // A numbered database ("db<n>"): created on its first write.
  bool numbered() const { return numbered_; }
  // A snapshot: writes are refused with -READONLY.
  bool read_only() const { return read_only_; }

  absl::Mutex& exec_mu() ABSL_LOCK_RETURNED(exec_mu_) { return exec_mu_; }

  // After a command applied writes to the store (under exec_mu): returns
  // the sequence number that covers them.
  uint64_t NoteWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(exec_mu_);
  // Writes applied so far (the sequence a reader of the current state must
  // wait for, so that no reply shows what a crash could still take back).
  uint64_t applied() const { return applied_.load(std::memory_order_acquire); }
  uint64_t durable() const ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `done` once every write up to `seq` is durable, with OK, or with
  // the error of the flush that should have made it so. At once (on the
  // calling thread) if it is durable already; else from an io thread.
  void WhenDurable(uint64_t seq, DurableCallback done) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts a flush if any write is not durable yet (the everysec timer).
  void RequestFlush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    uint64_t seq;
    DurableCallback done;
  };
  void StartFlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CohortBack() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On a worker: flushes until no waiter is left.
  void RunFlushes() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string ref_;
  const bool numbered_;
  const bool read_only_;
  registry::KvRegistry* const kv_;
  asio::any_io_executor workers_;
  asio::any_io_executor io_;
  CommitCounters* const counters_;

  absl::Mutex exec_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::atomic<uint64_t> applied_{0};  // written under exec_mu_
  mutable absl::Mutex mu_;
  uint64_t durable_ ABSL_GUARDED_BY(mu_) = 0;
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  size_t last_released_ ABSL_GUARDED_BY(mu_) = 0;    // waiters the last flush answered
  absl::Duration last_flush_ ABSL_GUARDED_BY(mu_);  // how long it took
  bool flush_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

// The table of databases: resolves what SELECT names, keeps one Database
// per store for the life of the server.
class Databases {
 public:
  Databases(registry::KvRegistry* kv, asio::any_io_executor workers, asio::any_io_executor io,
            uint32_t numbered);

  // The database `name` (as SELECT takes it). Errors are Redis error
  // texts: "ERR DB index is out of range", "ERR no key-value dataset ...".
  // Named datasets and snapshots must exist (their store is opened).
  absl::StatusOr<std::shared_ptr<Database>> Resolve(std::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  // Every database resolved so far.
  std::vector<std::shared_ptr<Database>> All() const ABSL_LOCKS_EXCLUDED(mu_);

  // Creates the dataset of a numbered database (a no-op if it exists).
  absl::Status CreateNumbered(const Database& db);

  registry::KvRegistry* registry() const { return kv_; }
  uint32_t numbered() const { return numbered_; }
  CommitCounters& counters() { return counters_; }

 private:
  std::shared_ptr<Database> Get(const std::string& ref, bool numbered, bool read_only)
      ABSL_LOCKS_EXCLUDED(mu_);

  registry::KvRegistry* const kv_;
  asio::any_io_executor workers_;
  asio::any_io_executor io_;
  const uint32_t numbered_;
  CommitCounters counters_;
  absl::Mutex create_mu_;  // one CreateNumbered at a time
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Database>> dbs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::resp
