#include "resp/databases.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "ftl/kv.h"
#include "ftl/log.h"
#include "ftl/sched_hint.h"
#include "ftl/tree_ref.h"
#include "resp/resp_protocol.h"

namespace ftl::resp {

Database::Database(std::string ref, bool numbered, bool read_only, registry::KvRegistry* kv,
                   asio::any_io_executor workers, asio::any_io_executor io,
                   CommitCounters* counters)
    : ref_(std::move(ref)),
      numbered_(numbered),
      read_only_(read_only),
      kv_(kv),
      workers_(std::move(workers)),
      io_(std::move(io)),
      counters_(counters) {}

uint64_t Database::NoteWrite() {
  return applied_.fetch_add(1, std::memory_order_acq_rel) + 1;
}

uint64_t Database::durable() const {
  absl::MutexLock l(&mu_);
  return durable_;
}

void Database::WhenDurable(uint64_t seq, DurableCallback done) {
  {
    absl::MutexLock l(&mu_);
    if (durable_ < seq) {
      waiters_.push_back(Waiter{seq, std::move(done)});
      StartFlushLocked();
      return;
    }
  }
  done(absl::OkStatus());
}

void Database::RequestFlush() {
  absl::MutexLock l(&mu_);
  if (durable_ >= applied()) return;
  flush_wanted_ = true;
  StartFlushLocked();
}

void Database::StartFlushLocked() {
  if (flushing_) return;  // the running loop sees the new waiter
  flushing_ = true;
  asio::post(workers_, [self = shared_from_this()] { self->RunFlushes(); });
}

bool Database::CohortBack() const { return waiters_.size() >= last_released_; }

void Database::RunFlushes() {
  // This thread sleeps in each flush's sync and every waiter waits for it
  // to wake (see the header); once per worker thread.
  static thread_local bool short_slice = RequestShortSlice(std::chrono::microseconds(100));
  (void)short_slice;
  for (;;) {
    uint64_t target;
    {
      absl::MutexLock l(&mu_);
      if (waiters_.empty() && !flush_wanted_) {
        flushing_ = false;
        return;
      }
      // After a slow flush, gather the cohort it answered (see the header).
      if (waiters_.size() < last_released_ && last_flush_ >= kGatherAfterFlush) {
        mu_.AwaitWithTimeout(absl::Condition(this, &Database::CohortBack),
                             std::min(kMaxGatherDelay, last_flush_ / 2));
      }
      flush_wanted_ = false;
      // Every write counted here has returned from the store, so the flush
      // below covers it (KvStore::Flush: "every write acknowledged before
      // the call is durable").
      target = applied();
    }
    absl::Time start = absl::Now();
    absl::Status s = kv_->Use(ref_, [](KvStore& store) { return store.Flush(); });
    absl::Duration took = absl::Now() - start;
    if (absl::IsNotFound(s) && numbered_) s = absl::OkStatus();  // never written: nothing to flush
    counters_->flushes.fetch_add(1, std::memory_order_relaxed);
    if (!s.ok()) {
      counters_->flush_errors.fetch_add(1, std::memory_order_relaxed);
      Logger("resp")->warn("flushing key-value store {} failed: {}", ref_, s.ToString());
    }
    std::vector<Waiter> ready;
    {
      absl::MutexLock l(&mu_);
      if (s.ok() && target > durable_) {
        counters_->flushed_writes.fetch_add(target - durable_, std::memory_order_relaxed);
        durable_ = target;
      }
      auto covered = [&](const Waiter& w) { return w.seq <= target; };
      auto it = std::stable_partition(waiters_.begin(), waiters_.end(),
                                      [&](const Waiter& w) { return !covered(w); });
      std::move(it, waiters_.end(), std::back_inserter(ready));
      waiters_.erase(it, waiters_.end());
      last_released_ = ready.size();
      last_flush_ = took;
    }
    // Answered from the io threads, in one post: this loop goes on to the
    // next flush without waiting for them.
    if (!ready.empty()) {
      asio::post(io_, [ready = std::move(ready), s]() mutable {
        for (Waiter& w : ready) w.done(s);
      });
    }
  }
}

Databases::Databases(registry::KvRegistry* kv, asio::any_io_executor workers,
                     asio::any_io_executor io, uint32_t numbered)
    : kv_(kv), workers_(std::move(workers)), io_(std::move(io)), numbered_(numbered) {}

std::shared_ptr<Database> Databases::Get(const std::string& ref, bool numbered, bool read_only) {
  absl::MutexLock l(&mu_);
  auto& db = dbs_[ref];
  if (!db) db = std::make_shared<Database>(ref, numbered, read_only, kv_, workers_, io_, &counters_);
  return db;
}

absl::StatusOr<std::shared_ptr<Database>> Databases::Resolve(std::string_view name) {
  std::string_view base = name, snap;
  if (size_t at = name.find('@'); at != std::string_view::npos) {
    base = name.substr(0, at);
    snap = name.substr(at + 1);
  }
  std::string_view digits = base;
  if (!digits.empty() && digits[0] == '-') digits.remove_prefix(1);
  bool numeric = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  std::string ref;
  bool numbered = false;
  if (numeric) {
    int64_t n = 0;
    if (!ParseInt64(base, &n) || n < 0 || n >= int64_t(numbered_)) {
      return absl::OutOfRangeError("ERR DB index is out of range");
    }
    ref = absl::StrCat("db", n);
    numbered = true;
  } else {
    ref = std::string(base);
  }
  if (!snap.empty() || name.find('@') != std::string_view::npos) absl::StrAppend(&ref, "@", std::string(snap));
  auto tree = TreeRef::Parse(ref);
  if (!tree.ok() || tree->volume.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ERR invalid database '", std::string(name),
        "': give a number, a key-value dataset's NAME, or NAME@SNAPSHOT"));
  }
  if (numbered && !tree->is_snapshot()) return Get(ref, true, false);
  // A named dataset or a snapshot must exist and be a key-value one; this
  // opens its store (kept open by the registry).
  absl::Status s = kv_->Use(ref, [](KvStore&) { return absl::OkStatus(); });
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("ERR cannot select '", std::string(name), "': ", s.message()));
  }
  return Get(ref, numbered, tree->is_snapshot());
}

std::vector<std::shared_ptr<Database>> Databases::All() const {
  absl::MutexLock l(&mu_);
  std::vector<std::shared_ptr<Database>> out;
  for (const auto& [ref, db] : dbs_) out.push_back(db);
  return out;
}

absl::Status Databases::CreateNumbered(const Database& db) {
  absl::MutexLock l(&create_mu_);
  if (registry::KvRegistry::FindDataset(kv_->pool(), db.ref()).ok()) return absl::OkStatus();
  absl::Status s = KvStore::Create(kv_->pool(), db.ref());
  if (absl::IsAlreadyExists(s)) return absl::OkStatus();  // made meanwhile (ftlctl kv create)
  if (s.ok()) Logger("resp")->info("created key-value dataset {} for database {}", db.ref(),
                                   db.ref().substr(2));
  return s;
}

}  // namespace ftl::resp
