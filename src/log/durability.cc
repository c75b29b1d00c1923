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
  // Callers that queue behind a sync already covering what was written
  // when they called share it (several flushes, one media sync).
  const uint64_t wanted = last_written_.load();
  {
    absl::MutexLock l(&sync_mu_);
    if (durable_.load() >= wanted && proven_.load() >= last_claim_.load()) return absl::OkStatus();
  }
  return Sync();
}

absl::Status Durability::Sync() {
  absl::MutexLock l(&sync_mu_);
  // The claim is read first: it belongs to a record at or before `covered`.
  const uint64_t claim = last_claim_.load();
  const uint64_t covered = last_written_.load();
  if (absl::Status s = media_->Sync(); !s.ok()) return s;
  Raise(durable_, covered);
  Raise(proven_, claim);
  return absl::OkStatus();
}

void Durability::CheckpointDurable(uint64_t next_seq, uint64_t covered) {
  Raise(durable_, covered);
  Raise(proven_, next_seq - 1);  // replay never reads records the checkpoint covers
}

bool Durability::NeedsProof() const {
  return proven_.load() < std::min(durable_.load(), last_content_.load());
}

}  // namespace ftl::log
