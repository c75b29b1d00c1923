#include "commit/committer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "state/resolve.h"
#include "util/logging.h"

namespace ftl::commit {
namespace {

constexpr uint32_t kMaxBatchBlocks = 1024;
constexpr uint64_t kInlineCommitMaxBlocks = 64;

// Set on the thread that holds the commit role.
thread_local bool t_committing = false;

// Marks the current thread as committing records for its lifetime.
class RoleScope {
 public:
  RoleScope() : outer_(t_committing) { t_committing = true; }
  ~RoleScope() { t_committing = outer_; }

 private:
  bool outer_;
};

}  // namespace

bool InCommitRole() { return t_committing; }

void Committer::Configure(const CommitterOptions& o, std::function<void()> catalogue_changed) {
  opt_ = o;
  catalogue_changed_ = std::move(catalogue_changed);
}

void Committer::Start() {
  if (!opt_.read_only) writer_thread_ = std::thread([this] { WriterLoop(); });
}

void Committer::Stop() {
  {
    absl::MutexLock l(&queue_mu_);
    stop_ = true;
  }
  if (writer_thread_.joinable()) writer_thread_.join();
  checkpointer_->Join();
}

absl::Status Committer::failure() const {
  absl::MutexLock l(&queue_mu_);
  return failed_;
}

absl::Status Committer::SubmitNotes(std::vector<ReqOp> ops, bool barrier, bool frees) {
  // The caller waits anyway: it commits the note itself when nobody else is
  // committing (no hand-off to the writer thread).
  return SubmitAndWait(MakeNoteRequest(std::move(ops), barrier, frees), /*allow_inline=*/true);
}

absl::Status Committer::SubmitAndWait(Request* r, bool allow_inline) {
  absl::Notification n;
  absl::Status result;
  r->done = [&](absl::Status s) {
    result = s;
    n.Notify();
  };
  SubmitMany({r}, allow_inline);
  n.WaitForNotification();
  return result;
}

void Committer::SubmitMany(const std::vector<Request*>& rs, bool allow_inline) {
  absl::Status reject;
  {
    absl::ReleasableMutexLock l(&queue_mu_);
    if (opt_.read_only) {
      reject = absl::FailedPreconditionError("pool is open read-only");
    } else if (!failed_.ok()) {
      reject = failed_;
    } else if (stop_) {
      reject = absl::UnavailableError("pool is closing");
    } else {
      for (Request* r : rs)
        (r->marker ? marker_q_ : r->stream == log::Stream::kUser ? user_q_ : gc_q_).push_back(r);
      // Leader/follower group commit: if nobody is committing, this thread
      // commits the queue itself (no hand-off to the writer thread);
      // otherwise the committer picks these up before it stops.
      // Small submissions are committed inline (no hand-off); large ones
      // go to the writer thread so the caller can receive the next data
      // while they are written.
      uint64_t blocks = 0;
      for (Request* r : rs) blocks += r->data_blocks();
      bool drain = false;
      if (allow_inline && blocks <= kInlineCommitMaxBlocks && !committing_ && EligibleLocked()) {
        committing_ = true;
        drain = true;
      }
      l.Release();
      if (drain) {
        absl::MutexLock role(&commit_mu_);
        DrainQueue();
      }
      return;
    }
  }
  for (Request* r : rs) {
    r->done(reject);
    delete r;
  }
}

bool Committer::EligibleLocked() const {
  return !marker_q_.empty() || !gc_q_.empty() || (!user_q_.empty() && (!user_blocked_ || stop_));
}

bool Committer::TakeBatchLocked(std::vector<Request*>* batch, log::Stream* stream) {
  std::deque<Request*>* q = nullptr;
  bool one_slot = false;
  if (!marker_q_.empty()) {
    // Acknowledgements wait for these: first, and never behind a full pool.
    q = &marker_q_;
    *stream = log::Stream::kUser;
  } else if (!gc_q_.empty()) {
    q = &gc_q_;
    *stream = log::Stream::kRelocation;
    one_slot = true;
  } else if (!user_q_.empty() && (!user_blocked_ || stop_)) {
    q = &user_q_;
    *stream = log::Stream::kUser;
  } else {
    return false;
  }
  const uint32_t max_batch = std::min(kMaxBatchBlocks, opt_.segment_blocks - 1);
  uint32_t blocks = 0;
  size_t payload = 0;
  const int cls = q->front()->batch_class();
  const bool frees = q->front()->frees;
  const gc::Slot slot = q->front()->slot;
  while (!q->empty()) {
    Request* r = q->front();
    uint32_t b = r->data_blocks();
    size_t p = r->payload_bytes();
    // Data and notes never share a record, and a catalogue change goes alone.
    if (!batch->empty() && (r->batch_class() != cls || cls == 2 || r->frees != frees ||
                            blocks + b > max_batch ||
                            log::HeaderBlocksFor(payload + p) > log::kMaxHeaderBlocks ||
                            (one_slot && r->slot != slot)))
      break;
    batch->push_back(r);
    q->pop_front();
    blocks += b;
    payload += p;
  }
  return true;
}

void Committer::DrainQueue() {
  RoleScope scope;
  while (true) {
    std::vector<Request*> batch;
    log::Stream stream = log::Stream::kUser;
    {
      absl::MutexLock l(&queue_mu_);
      if (!TakeBatchLocked(&batch, &stream)) {
        committing_ = false;  // with the queue lock: nothing can be stranded
        return;
      }
    }
    if (stream == log::Stream::kRelocation) {
      CommitBatch(batch, stream, batch.front()->slot);
    } else if (batch.front()->batch_class() != 0) {
      CommitBatch(batch, stream, gc::Slot::kCold);  // notes: header blocks only
    } else {
      auto parts = classifier_->Classify(batch, writer_->next_seq());
      if (parts.empty()) CommitBatch(batch, stream, batch.front()->slot);
      else CommitJoined(parts, batch, stream);
    }
  }
}

void Committer::CommitJoined(std::vector<std::vector<Request*>>& parts, std::vector<Request*>& issued,
                            log::Stream stream) {
  std::optional<gc::Slot> unsplit;
  bool fua = false;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    for (const auto& part : parts) {
      for (const Request* r : part) {
        fua |= r->fua;
        for (const ReqOp& op : r->ops)
          if ((op.type() == log::OpType::kWrite || op.type() == log::OpType::kTrim) &&
              !state::CheckUserRange(*state_->map, op.vol(), op.lba(), op.count()).ok())
            unsplit = gc::Slot::kCold;
      }
    }
  }
  for (size_t i = 0; i < parts.size() && !unsplit; ++i) {
    const gc::Slot slot = parts[i].front()->slot;
    const uint32_t need = RecordBlocks(parts[i], parts[i].size());
    const uint32_t seg = segments_->open(slot);
    // A slot without an open segment may open one (no tail is wasted);
    // a part that does not fit the open one sends the batch there unsplit,
    // where CommitBatch fills the segment's tail.
    const Claim claim = ClaimOf(parts[i], stream);
    if (seg == UINT32_MAX && !segments_->EnsureRoom(slot, stream, need, claim, writer_->next_seq()))
      unsplit = slot;
    else if (segments_->Room(slot, claim) < need)
      unsplit = slot;
  }
  if (unsplit) {
    // In issue order: CommitBatch may write a prefix of the batch now and
    // queue the rest again.
    CommitBatch(issued, stream, *unsplit);
    return;
  }
  issued.clear();  // the parts own the requests from here
  std::vector<Request*> acks;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool joined = i + 1 < parts.size();
    absl::Status s = WriteBatch(parts[i], stream, parts[i].front()->slot, joined, fua && !joined, &acks);
    if (!s.ok()) {
      // The pool is read-only now; recovery drops the joined records that
      // reached the media without their partner.
      FailRequests(acks, s);
      for (size_t k = i + 1; k < parts.size(); ++k) FailRequests(parts[k], s);
      return;
    }
  }
  if (fua && durability_->proven() < durability_->last_written()) {
    ProveDurable(std::move(acks));
    return;
  }
  for (Request* r : acks) {
    r->done(absl::OkStatus());
    delete r;
  }
}

void Committer::ProveDurable(std::vector<Request*> acked) {
  // Notes (catalogue and range changes) are proven before their answer;
  // user writes may leave the proof to a later record.
  const bool user_data = std::all_of(acked.begin(), acked.end(),
                                     [](const Request* r) { return r->batch_class() == 0; });
  if (opt_.proof_delay.count() > 0 && user_data) {
    for (Request* r : acked) {
      r->done(absl::OkStatus());
      delete r;
    }
    DeferProof();
    return;
  }
  Request* m = MakeMarker([acked = std::move(acked)](absl::Status s) {
    for (Request* r : acked) {
      r->done(s);
      delete r;
    }
  });
  absl::MutexLock l(&queue_mu_);
  marker_q_.push_back(m);  // the committer calling this drains it next
}

void Committer::CommitBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot) {
  // Keep the prefix that fits the open segment; if none does, move on to a
  // fresh segment.
  const Claim claim = ClaimOf(batch, stream);
  auto fitting = [&]() -> size_t {
    const uint32_t room = segments_->Room(slot, claim);
    size_t fit = batch.size();
    while (fit > 0 && RecordBlocks(batch, fit) > room) --fit;
    return fit;
  };
  size_t fit = fitting();
  if (const uint32_t room = segments_->Room(slot, claim); fit < batch.size() && room > 0) {
    // Fill the segment's tail with the head of a splittable request, in the
    // same record as the requests that fit.
    uint32_t data = 0;
    size_t payload = 0;
    for (size_t i = 0; i < fit; ++i) {
      data += batch[i]->data_blocks();
      payload += batch[i]->payload_bytes();
    }
    const log::Op& head = batch[fit]->ops[0].op;
    const bool reloc = head.type == log::OpType::kReloc;
    auto fits = [&](Bno n) {
      size_t p = payload + (reloc ? log::RelocPayloadBytes(std::span(head.reloc.blocks).first(n))
                                  : log::WritePayloadBytes(n));
      return data + n + log::HeaderBlocksFor(p) <= room &&
             log::HeaderBlocksFor(p) <= log::kMaxHeaderBlocks;
    };
    if (Request* tail = SplitToFit(batch[fit], fits, WriteCutBlocks(opt_.segment_blocks))) {
      batch.insert(batch.begin() + long(fit) + 1, tail);
      ++fit;
    }
  }
  if (fit == 0) {
    auto ensure = [&] {
      return segments_->EnsureRoom(slot, stream, RecordBlocks(batch, 1), claim, writer_->next_seq());
    };
    bool room = ensure();
    if (!room && stream == log::Stream::kRelocation && slot == gc::Slot::kHotGc) {
      // The writers' reserve holds one segment for the cleaner while
      // placement is passive; if placement turned active since, hot
      // relocations join the others rather than fail.
      slot = gc::Slot::kGc;
      for (Request* r : batch) r->slot = slot;
      fit = fitting();
      room = fit > 0 || ensure();
    }
    if (!room) {
      const bool reclaimable = host_ && gc::PickVictim(host_->Candidates()).reclaimable;
      bool closing;
      {
        absl::MutexLock l(&queue_mu_);
        closing = stop_;
      }
      const bool halted = !cleaner_ || !cleaner_->started() || cleaner_->state() == "halted";
      if (stream == log::Stream::kRelocation || !reclaimable || closing || halted) {
        FailRequests(batch, absl::ResourceExhaustedError(
                                halted ? "no free space on the device (cleaner halted)"
                                       : "no free space on the device"));
      } else {
        absl::MutexLock l(&queue_mu_);
        for (auto it = batch.rbegin(); it != batch.rend(); ++it) user_q_.push_front(*it);
        batch.clear();
        user_blocked_ = true;
      }
      if (cleaner_) cleaner_->Kick();
      return;
    }
    fit = fitting();
  }
  if (fit < batch.size()) {
    absl::MutexLock l(&queue_mu_);
    auto& q = stream == log::Stream::kUser ? user_q_ : gc_q_;
    for (size_t i = batch.size(); i > fit; --i) q.push_front(batch[i - 1]);
    batch.resize(fit);
  }
  (void)WriteBatch(batch, stream, slot);  // a failure has completed the batch
  batch.clear();
}

void Committer::MaybeAutoCheckpoint() {
  // Checkpoints keep recovery short and let the cleaner take older
  // segments (gc/victim_policy.h: the gate). The allocator counts a
  // segment sealed by user writes as 4, by the cleaner as 1
  // (docs/decisions.md: checkpoints stay a small share of user writes).
  const uint64_t next_seq = writer_->next_seq();
  const bool due = opt_.checkpoint_interval.count() > 0 && next_seq != checkpointer_->last_seq() &&
                   std::chrono::steady_clock::now() - checkpointer_->last_time() >=
                       opt_.checkpoint_interval;
  if (opt_.auto_checkpoint &&
      (due || segments_->sealed_since_checkpoint() >=
                  4 * std::max<uint32_t>(4, opt_.segment_count / 8))) {
    segments_->CheckpointTaken();
    if (absl::Status s = checkpointer_->StartAsync(next_seq); !s.ok())
      util::Logger("core")->error("checkpoint failed: {}", s.ToString());
  }
}

absl::Status Committer::CheckpointNow() {
  segments_->CheckpointTaken();
  return checkpointer_->Checkpoint(writer_->next_seq());
}

void Committer::WriterLoop() {
  RoleScope scope;
  auto log = util::Logger("core");
  while (true) {
    std::vector<std::function<void(absl::Status)>> ckpt;
    bool drain = false, stopping = false;
    {
      absl::MutexLock l(&queue_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return stop_ || !ckpt_waiters_.empty() || (!committing_ && EligibleLocked());
      };
      queue_mu_.AwaitWithTimeout(absl::Condition(&ready),
                                 std::min(absl::Milliseconds(100), proof_due_ - absl::Now()));
      ckpt.swap(ckpt_waiters_);
      if (!committing_ && EligibleLocked()) {
        committing_ = true;
        drain = true;
      }
      stopping = stop_;
    }
    absl::MutexLock role(&commit_mu_);
    if (!ckpt.empty()) {
      absl::Status s = CheckpointNow();
      if (!s.ok()) log->error("checkpoint failed: {}", s.ToString());
      for (auto& cb : ckpt) cb(s);
    }
    if (drain) DrainQueue();
    MaybeAutoCheckpoint();
    MaybeProve();
    if (stopping) {
      absl::MutexLock l(&queue_mu_);
      if (!committing_ && gc_q_.empty() && user_q_.empty() && marker_q_.empty() &&
          ckpt_waiters_.empty())
        break;
    }
  }
}

absl::Status Committer::WriteBatch(std::vector<Request*>& batch, log::Stream stream,
                                   gc::Slot slot, bool joined, bool sync,
                                   std::vector<Request*>* acks) {
  absl::StatusOr<RecordWriter::Written> w =
      writer_->Write(batch, stream, slot, joined, sync, /*sync_fua=*/acks == nullptr);
  if (!w.ok()) {
    // The pool stops taking writes (like a device that went read-only).
    absl::Status failed = absl::DataLossError(absl::StrCat(
        "media write failed, pool is read-only until reopened: ", w.status().message()));
    util::Logger("core")->error("{}", std::string(failed.message()));
    {
      absl::MutexLock l(&queue_mu_);
      failed_ = failed;
    }
    FailRequests(batch, failed);
    return failed;
  }
  if (batch.empty()) return absl::OkStatus();  // all refused
  if (w->catalog && catalogue_changed_) catalogue_changed_();  // volumes or attributes changed
  if (acks) {
    acks->insert(acks->end(), batch.begin(), batch.end());
    batch.clear();
    return absl::OkStatus();
  }
  if (w->synced && w->has_ops && durability_->proven() < w->seq) {
    // Durable, but only a later durable record can tell recovery so.
    ProveDurable(std::move(batch));
    batch.clear();
    return absl::OkStatus();
  }
  for (Request* r : batch) {
    r->done(absl::OkStatus());
    delete r;
  }
  batch.clear();
  return absl::OkStatus();
}

void Committer::DeferProof() {
  absl::MutexLock l(&queue_mu_);
  if (proof_due_ == absl::InfiniteFuture())
    proof_due_ = absl::Now() + absl::FromChrono(opt_.proof_delay);
}

void Committer::MaybeProve() {
  {
    absl::MutexLock l(&queue_mu_);
    if (proof_due_ > absl::Now()) return;
    proof_due_ = absl::InfiniteFuture();
  }
  // A record written since proved it (its durable_seq, once synced), or
  // nothing new became durable: no marker.
  if (!durability_->NeedsProof()) return;
  SubmitMany({MakeMarker([](absl::Status s) {
    if (!s.ok()) util::Logger("core")->warn("deferred durability marker failed: {}", s.ToString());
  })});
}

absl::Status Committer::FlushDurable() {
  if (absl::Status s = durability_->SyncRecords(); !s.ok()) return s;
  // Records with ops up to what is durable now need a durable record that
  // says so; a marker is one (nothing else is written for it).
  if (!durability_->NeedsProof()) return absl::OkStatus();
  if (opt_.proof_delay.count() > 0) {
    DeferProof();
    return absl::OkStatus();
  }
  absl::Notification done;
  absl::Status result;
  SubmitMany({MakeMarker([&](absl::Status s) {
               result = s;
               done.Notify();
             })},
             /*allow_inline=*/true);
  done.WaitForNotification();
  return result;
}

absl::Status Committer::Checkpoint() {
  if (opt_.read_only) return absl::FailedPreconditionError("pool is open read-only");
  absl::Notification done;
  absl::Status result;
  {
    absl::MutexLock l(&queue_mu_);
    if (stop_) return absl::FailedPreconditionError("pool is closed");
    ckpt_waiters_.push_back([&](absl::Status s) {
      result = s;
      done.Notify();
    });
  }
  done.WaitForNotification();
  return result;
}

void Committer::SubmitRelocation(gc::Slot slot, std::vector<log::RelocBlock> blocks,
                                 const std::byte* data, std::function<void(absl::Status)> done) {
  auto* r = new Request;
  r->stream = log::Stream::kRelocation;
  r->slot = slot;
  r->splittable = true;  // each block's relocation stands alone
  r->ops.push_back(ReqOp::Reloc(std::move(blocks), data));
  r->done = std::move(done);
  Submit(r);
}

void Committer::SpaceFreed() {
  absl::MutexLock l(&queue_mu_);
  user_blocked_ = false;  // the writer retries; it blocks again if still full
}

void Committer::FailBlocked(const absl::Status& why) {
  std::deque<Request*> failed;
  {
    absl::MutexLock l(&queue_mu_);
    if (!user_blocked_) return;
    failed.swap(user_q_);
    user_blocked_ = false;
  }
  absl::Status s = absl::IsResourceExhausted(why)
                       ? why
                       : absl::ResourceExhaustedError(absl::StrCat(
                             "no free space and the cleaner failed: ", why.message()));
  for (Request* r : failed) {
    r->done(s);
    delete r;
  }
}

}  // namespace ftl::commit
