#include "log/durability.h"

#include <algorithm>

namespace ftl::log {

void Durability::Raise(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load();
  while (cur < v && !a.compare_exchange_weak(cur, v)) {
  }
}

void Durability::Reset(uint64_t next_seq) {
  last_written_ = next_seq - 1;
  durable_ = next_seq - 1;
  proven_ = next_seq - 1;
}

void Durability::NoteWritten(uint64_t seq, uint64_t claim, bool joined, bool has_ops) {
  // A sync names what it covers by last_written (durable_seq in later
  // records). It must never name the first of a joined pair alone: replay
  // would then see a durable record whose partner is missing and refuse
  // to open. The partner's write moves it past both.
  if (!joined) last_written_ = seq;
  last_claim_ = claim;
  if (has_ops) last_content_ = seq;
}

absl::Status Durability::SyncRecords() {
  // Callers that find a sync covering what was written when they called
  // (completed, or in flight) share it (several flushes, one media sync).
  const uint64_t wanted = last_written_.load();
  std::shared_ptr<Flight> shared;
  {
    absl::MutexLock l(&sync_mu_);
    const uint64_t claim = last_claim_.load();
    if (durable_.load() >= wanted && proven_.load() >= claim) return absl::OkStatus();
    for (const auto& f : flights_)
      if (f->covered >= wanted && f->claim >= claim) shared = f;
    if (shared) sync_mu_.Await(absl::Condition(&shared->done));
  }
  if (shared && shared->status.ok()) return absl::OkStatus();
  return Sync();  // none, or it failed: a sync of its own says why
}

absl::Status Durability::Sync() {
  auto f = std::make_shared<Flight>();
  {
    absl::MutexLock l(&sync_mu_);
    // The claim is read first: it belongs to a record at or before `covered`.
    f->claim = last_claim_.load();
    f->covered = last_written_.load();
    flights_.push_back(f);
  }
  // Without the lock: syncs started by other threads meanwhile run at the
  // same time (each covers what was written before it started).
  absl::Status s = media_->Sync();
  if (s.ok()) {
    Raise(durable_, f->covered);
    Raise(proven_, f->claim);
  }
  absl::MutexLock l(&sync_mu_);
  f->status = s;
  f->done = true;
  flights_.erase(std::find(flights_.begin(), flights_.end(), f));
  return s;
}

void Durability::CheckpointDurable(uint64_t next_seq, uint64_t covered) {
  Raise(durable_, covered);
  Raise(proven_, next_seq - 1);  // replay never reads records the checkpoint covers
}

bool Durability::NeedsProof() const {
  return proven_.load() < std::min(durable_.load(), last_content_.load());
}

}  // namespace ftl::log
