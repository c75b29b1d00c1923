// The writer thread: group commit of queued requests into records, segment
// allocation for the placement slots (hot / cold user writes, relocations,
// hot relocations; gc/placement.h), periodic checkpoints.

#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/aligned_buffer.h"
#include "core/pool_impl.h"
#include "util/logging.h"

namespace ftl::core {
namespace {
constexpr uint32_t kGcReserveSegments = 2;
// Segments that requests which do not free space leave to those that do
// (PoolImpl::Claim), on top of the cleaner's.
constexpr uint32_t kFreeingReserveSegments = 1;
constexpr uint32_t kMaxBatchBlocks = 1024;
constexpr uint64_t kInlineCommitMaxBlocks = 64;
// Whether hot/cold separation pays is judged every this many segments of
// user writes (gc::SeparationMeter).
constexpr uint64_t kMeterWindowSegments = 16;
}  // namespace

void PoolImpl::Submit(Request* r) { SubmitMany({r}); }

absl::Status PoolImpl::SubmitAndWait(Request* r, bool allow_inline) {
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

void PoolImpl::SubmitMany(const std::vector<Request*>& rs, bool allow_inline) {
  absl::Status reject;
  {
    absl::ReleasableMutexLock l(&queue_mu_);
    if (read_only_) {
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

Request* PoolImpl::SplitToFit(Request* r, const std::function<bool(Bno)>& fits) {
  if (!r->splittable || r->ops.size() != 1) return nullptr;
  ReqOp& op = r->ops[0];
  if (op.type == log::OpType::kTrim) return nullptr;
  Bno head = 0;
  for (Bno n = op.count - 1; n > 0; --n) {
    if (fits(n)) {
      head = n;
      break;
    }
  }
  if (head == 0) return nullptr;
  auto* tail = new Request;
  tail->stream = r->stream;
  tail->slot = r->slot;
  tail->fua = r->fua;
  tail->splittable = true;
  ReqOp t;
  t.type = op.type;
  t.vol = op.vol;
  t.lba = op.lba + head;
  t.count = op.count - head;
  t.data = op.data + size_t(head) * kBlockSize;
  if (op.type == log::OpType::kWrite) {
    t.csum.assign(op.csum.begin() + head, op.csum.end());
    op.csum.resize(head);
  } else {
    t.reloc.assign(op.reloc.begin() + head, op.reloc.end());
    op.reloc.resize(head);
  }
  tail->ops.push_back(std::move(t));
  op.count = head;
  // Both parts report to the original callback once.
  struct Both {
    std::function<void(absl::Status)> done;
    absl::Mutex mu;
    int left = 2;
    absl::Status first;
  };
  auto both = std::make_shared<Both>();
  both->done = std::move(r->done);
  auto finish = [both](absl::Status s) {
    {
      absl::MutexLock l(&both->mu);
      if (!s.ok() && both->first.ok()) both->first = s;
      if (--both->left > 0) return;
    }
    both->done(both->first);
  };
  r->done = finish;
  tail->done = finish;
  return tail;
}

void PoolImpl::FailRequests(std::vector<Request*>& batch, const absl::Status& s) {
  for (Request* r : batch) {
    r->done(s);
    delete r;
  }
  batch.clear();
}

PoolImpl::Claim PoolImpl::ClaimOf(const std::vector<Request*>& batch, log::Stream stream) {
  if (stream == log::Stream::kRelocation) return Claim::kRelocation;
  for (const Request* r : batch)
    if (!r->frees) return Claim::kPlain;
  return Claim::kFreeing;
}

uint32_t PoolImpl::MinFreeToOpen(Claim claim) const {
  if (claim == Claim::kRelocation) return 0;
  // Users leave free segments to the cleaner: one for each relocation
  // slot in use (a victim's live blocks fit the rest of a slot's open
  // segment and one more).
  const uint32_t cleaner = placement_.active() ? kGcReserveSegments : 1;
  return claim == Claim::kFreeing ? cleaner : cleaner + kFreeingReserveSegments;
}

bool PoolImpl::MayUseOpen(gc::Slot slot, Claim claim) {
  if (claim != Claim::kPlain || !open_from_reserve_[int(slot)]) return true;
  absl::ReaderMutexLock l(&map_mu_);
  if (state_->segments().free_count() <= MinFreeToOpen(Claim::kPlain)) return false;
  open_from_reserve_[int(slot)] = false;  // the reserve is back
  return true;
}

bool PoolImpl::EnsureRoom(gc::Slot slot, log::Stream stream, uint32_t blocks, Claim claim) {
  int si = int(slot);
  auto& segs = state_->segments();
  if (open_seg_[si] != UINT32_MAX && MayUseOpen(slot, claim)) {
    const auto& info = segs.at(open_seg_[si]);
    if (geo_.segment_blocks - info.write_ptr >= blocks) return true;
  }
  uint32_t opened = UINT32_MAX;
  uint32_t sealed = UINT32_MAX;
  Bno sealed_blocks = 0;
  {
    absl::MutexLock l(&map_mu_);
    // No segment for this claim: the open one stays open (its rest may
    // serve a smaller request, or one that may use the reserve).
    const uint32_t min_free = MinFreeToOpen(claim);
    if (segs.free_count() <= min_free) return false;
    if (open_seg_[si] != UINT32_MAX) {
      // Seal: the rest of the segment stays unused.
      uint32_t s = open_seg_[si];
      sealed = s;
      sealed_blocks = segs.at(s).write_ptr;
      segs.SetState(s, log::SegmentState::kFull);
      segs.at(s).sealed_seq = next_seq_ - 1;
      open_seg_[si] = UINT32_MAX;
      sealed_since_ckpt_ += stream == log::Stream::kUser ? 4 : 1;
    }
    // Round-robin from a cursor spreads writes over the device.
    for (uint32_t k = 0; k < segs.count(); ++k) {
      uint32_t s = (open_cursor_ + k) % segs.count();
      if (segs.at(s).state != log::SegmentState::kFree) continue;
      segs.SetState(s, log::SegmentState::kOpen);
      auto& info = segs.at(s);
      info.stream = stream;
      info.discarded = false;
      info.write_ptr = 0;
      info.max_seq = 0;
      info.sealed_seq = 0;
      info.hot = gc::IsHot(slot);
      info.opened_seq = next_seq_;
      info.data_seq_sum = 0;
      info.data_count = 0;
      open_seg_[si] = s;
      open_from_reserve_[si] =
          claim == Claim::kFreeing && segs.free_count() < MinFreeToOpen(Claim::kPlain);
      open_cursor_ = s + 1;
      opened = s;
      break;
    }
  }
  // A sealed segment is complete: its write-back can start now instead of
  // all at the next sync (a cleaned segment's release, a checkpoint, a
  // client's flush). Only the committer writes, and it is this thread, so
  // every record in it has been written.
  if (sealed != UINT32_MAX && sealed_blocks > 0)
    media_->StartWriteback(MediaOffset(segs.FirstBlock(sealed)), uint64_t(sealed_blocks) * kBlockSize);
  if (opened == UINT32_MAX) return false;
  // Only the committer writes into an open segment, and it is this thread.
  media_->Prepare(MediaOffset(segs.FirstBlock(opened)), uint64_t(geo_.segment_blocks) * kBlockSize);
  return true;
}

bool PoolImpl::EligibleLocked() const {
  return !marker_q_.empty() || !gc_q_.empty() || (!user_q_.empty() && (!user_blocked_ || stop_));
}

bool PoolImpl::TakeBatchLocked(std::vector<Request*>* batch, log::Stream* stream) {
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
  const uint32_t max_batch = std::min(kMaxBatchBlocks, geo_.segment_blocks - 1);
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

void PoolImpl::DrainQueue() {
  CommitterScope scope;
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
      auto parts = ClassifyUserBatch(batch);
      if (parts.empty()) CommitBatch(batch, stream, batch.front()->slot);
      else CommitJoined(parts, batch, stream);
    }
  }
}

std::vector<std::vector<Request*>> PoolImpl::ClassifyUserBatch(std::vector<Request*>& batch) {
  struct Range {
    uint32_t vol;
    Bno lo, hi;
    size_t req;
  };
  if (placement_mode_ == OpenOptions::Placement::kAuto) {
    // The meter sees every written block (it keeps a sample of them).
    for (const Request* r : batch)
      for (const ReqOp& op : r->ops) {
        if (op.type != log::OpType::kWrite) continue;
        for (Bno k = 0; k < op.count; ++k) separation_.NoteWrite(op.vol, op.lba + k, user_clock_ + k);
        user_clock_ += op.count;
      }
  }
  if (!placement_.active()) {
    // Off, or passive: everything is cold, and the committer spends no
    // lookup on the batch.
    for (Request* r : batch) {
      r->slot = gc::Slot::kCold;
      window_blocks_ += r->data_blocks();
    }
    EndMeterWindowIfDue();
    return {};
  }
  std::vector<Range> ranges;
  {
    absl::ReaderMutexLock l(&map_mu_);
    const auto& segs = state_->segments();
    const auto& vbas = state_->vbas();
    for (size_t i = 0; i < batch.size(); ++i) {
      Request* r = batch[i];
      r->slot = gc::Slot::kCold;
      bool classified = false;
      for (const ReqOp& op : r->ops) {
        if (op.type != log::OpType::kWrite && op.type != log::OpType::kTrim) continue;
        ranges.push_back({op.vol, op.lba, op.lba + op.count, i});
        if (classified || op.type != log::OpType::kWrite) continue;
        classified = true;
        // The request is dated by the version its first block replaces.
        std::optional<gc::OldVersion> old;
        const VolumeMeta* v = state_->volume(op.vol);
        Bno vba = v && op.lba < v->size_blocks ? v->tree.LookupOne(op.lba) : kNoBlock;
        const map::VbaTable::Entry e =
            vba != kNoBlock && vbas.InRange(vba) ? vbas.Get(vba) : map::VbaTable::Entry{};
        if (e.refs > 0 && e.pba != kNoBlock) {
          const auto& si = segs.at(segs.SegmentOf(e.pba));
          old = gc::OldVersion{si.mean_data_seq(), si.hot};
        }
        r->slot = placement_.ForUserWrite(old, next_seq_);
      }
      window_blocks_ += r->data_blocks();
    }
  }
  EndMeterWindowIfDue();
  // The parts of a write larger than the atomic size must reach the log in
  // order (a crash keeps a prefix of its blocks): a part continuing the
  // previous request takes its slot.
  for (size_t i = 1; i < batch.size(); ++i) {
    const Request* a = batch[i - 1];
    Request* r = batch[i];
    if (a->splittable && r->splittable && !a->ops.empty() && !r->ops.empty() &&
        a->ops[0].vol == r->ops[0].vol && a->ops[0].lba + a->ops[0].count == r->ops[0].lba)
      r->slot = a->slot;
  }
  // Records of different slots may reach the log in either order, so
  // requests that overlap must share one: if any do not, the whole batch
  // takes the first request's slot.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.vol, a.lo) < std::tie(b.vol, b.lo);
  });
  bool mixed = false;
  for (size_t i = 1; i < ranges.size() && !mixed; ++i) {
    Bno hi = ranges[i - 1].hi;
    for (size_t k = i; k < ranges.size() && ranges[k].vol == ranges[i - 1].vol &&
                       ranges[k].lo < hi && !mixed;
         ++k)
      mixed = batch[ranges[k].req]->slot != batch[ranges[i - 1].req]->slot;
  }
  if (mixed)
    for (Request* r : batch) r->slot = batch.front()->slot;
  const gc::Slot first = batch.front()->slot;
  if (std::all_of(batch.begin(), batch.end(), [&](const Request* r) { return r->slot == first; }))
    return {};
  std::vector<std::vector<Request*>> parts(gc::kSlotCount);
  for (Request* r : batch) parts[int(r->slot)].push_back(r);
  std::erase_if(parts, [](const auto& p) { return p.empty(); });
  return parts;
}

void PoolImpl::EndMeterWindowIfDue() {
  if (window_blocks_ < kMeterWindowSegments * uint64_t(geo_.segment_blocks)) return;
  window_blocks_ = 0;
  if (placement_mode_ != OpenOptions::Placement::kAuto) return;
  if (auto pays = separation_.EndWindow()) {
    absl::MutexLock l(&map_mu_);  // the cleaner reads placement_ under it
    placement_.set_active(*pays);
  }
}

uint32_t PoolImpl::RecordBlocks(const std::vector<Request*>& b, size_t n) {
  uint32_t blocks = 0;
  size_t payload = 0;
  for (size_t i = 0; i < n; ++i) {
    blocks += b[i]->data_blocks();
    payload += b[i]->payload_bytes();
  }
  return blocks + log::HeaderBlocksFor(payload);
}

bool PoolImpl::WritableLocked(uint32_t vol) const {
  const VolumeMeta* v = state_->volume(vol);
  return v && !v->is_snapshot();
}

void PoolImpl::CommitJoined(std::vector<std::vector<Request*>>& parts, std::vector<Request*>& issued,
                            log::Stream stream) {
  std::optional<gc::Slot> unsplit;
  bool fua = false;
  {
    absl::ReaderMutexLock l(&map_mu_);
    for (const auto& part : parts) {
      for (const Request* r : part) {
        fua |= r->fua;
        for (const ReqOp& op : r->ops)
          if ((op.type == log::OpType::kWrite || op.type == log::OpType::kTrim) && !WritableLocked(op.vol))
            unsplit = gc::Slot::kCold;
      }
    }
  }
  for (size_t i = 0; i < parts.size() && !unsplit; ++i) {
    const gc::Slot slot = parts[i].front()->slot;
    const uint32_t need = RecordBlocks(parts[i], parts[i].size());
    uint32_t& seg = open_seg_[int(slot)];
    // A slot without an open segment may open one (no tail is wasted);
    // a part that does not fit the open one sends the batch there unsplit,
    // where CommitBatch fills the segment's tail.
    const Claim claim = ClaimOf(parts[i], stream);
    if (seg == UINT32_MAX && !EnsureRoom(slot, stream, need, claim)) unsplit = slot;
    else if (seg == UINT32_MAX || !MayUseOpen(slot, claim) ||
             geo_.segment_blocks - state_->segments().at(seg).write_ptr < need)
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
    RecordPlan plan;
    plan.joined = i + 1 < parts.size();
    plan.sync = fua && !plan.joined;
    plan.acks = &acks;
    absl::Status s = WriteBatch(parts[i], stream, parts[i].front()->slot, plan);
    if (!s.ok()) {
      // The pool is read-only now; recovery drops the joined records that
      // reached the media without their partner.
      FailRequests(acks, s);
      for (size_t k = i + 1; k < parts.size(); ++k) FailRequests(parts[k], s);
      return;
    }
  }
  if (fua && proven_seq_.load() < last_written_seq_.load()) {
    ProveDurable(std::move(acks));
    return;
  }
  for (Request* r : acks) {
    r->done(absl::OkStatus());
    delete r;
  }
}

Request* PoolImpl::MakeMarker(std::function<void(absl::Status)> done) {
  auto* m = new Request;
  m->note = true;
  m->frees = true;
  m->fua = true;
  m->marker = true;
  m->done = [done = std::move(done)](absl::Status s) {
    // What it proves is durable already; without room for the marker only
    // the proof is missing (recovery would take damage for a torn tail).
    if (absl::IsResourceExhausted(s)) {
      util::Logger("core")->warn("no room for a durability marker: {}", s.ToString());
      s = absl::OkStatus();
    }
    done(s);
  };
  return m;
}

void PoolImpl::ProveDurable(std::vector<Request*> acked) {
  Request* m = MakeMarker([acked = std::move(acked)](absl::Status s) {
    for (Request* r : acked) {
      r->done(s);
      delete r;
    }
  });
  absl::MutexLock l(&queue_mu_);
  marker_q_.push_back(m);  // the committer calling this drains it next
}

void PoolImpl::CommitBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot) {
    // Keep the prefix that fits the open segment; if none does, move on
    // to a fresh segment.
    auto need = RecordBlocks;
    int si = int(slot);
    const Claim claim = ClaimOf(batch, stream);
    auto fitting = [&]() -> size_t {
      if (open_seg_[si] == UINT32_MAX || !MayUseOpen(gc::Slot(si), claim)) return 0;
      uint32_t room = geo_.segment_blocks - state_->segments().at(open_seg_[si]).write_ptr;
      size_t fit = batch.size();
      while (fit > 0 && need(batch, fit) > room) --fit;
      return fit;
    };
    size_t fit = fitting();
    if (fit < batch.size() && open_seg_[si] != UINT32_MAX && MayUseOpen(slot, claim)) {
      // Fill the segment's tail with the head of a splittable request,
      // in the same record as the requests that fit.
      uint32_t room = geo_.segment_blocks - state_->segments().at(open_seg_[si]).write_ptr;
      uint32_t data = 0;
      size_t payload = 0;
      for (size_t i = 0; i < fit; ++i) {
        data += batch[i]->data_blocks();
        payload += batch[i]->payload_bytes();
      }
      const ReqOp& head = batch[fit]->ops[0];
      const bool reloc = head.type == log::OpType::kReloc;
      auto fits = [&](Bno n) {
        size_t p = payload + (reloc ? log::RelocPayloadBytes(std::span(head.reloc).first(n))
                                    : 13 + 8 * size_t(n));
        return data + n + log::HeaderBlocksFor(p) <= room &&
               log::HeaderBlocksFor(p) <= log::kMaxHeaderBlocks;
      };
      if (Request* tail = SplitToFit(batch[fit], fits)) {
        batch.insert(batch.begin() + long(fit) + 1, tail);
        ++fit;
      }
    }
    if (fit == 0) {
      bool room = EnsureRoom(slot, stream, need(batch, 1), claim);
      if (!room && stream == log::Stream::kRelocation && slot == gc::Slot::kHotGc) {
        // The writers' reserve holds one segment for the cleaner while
        // placement is passive; if placement turned active since, hot
        // relocations join the others rather than fail.
        slot = gc::Slot::kGc;
        si = int(slot);
        for (Request* r : batch) r->slot = slot;
        fit = fitting();
        room = fit > 0 || EnsureRoom(slot, stream, need(batch, 1), claim);
      }
      if (!room) {
        bool reclaimable = gc::PickVictim(Candidates()).reclaimable;
        bool closing;
        {
          absl::MutexLock l(&queue_mu_);
          closing = stop_;
        }
        bool halted = !cleaner_ || !cleaner_->started() || cleaner_->state() == "halted";
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

void PoolImpl::MaybeAutoCheckpoint() {
  // Checkpoints keep recovery short and let the cleaner take older
  // segments (victim_policy.h: the gate). sealed_since_ckpt_ counts a
  // segment sealed by user writes as 4, by the cleaner as 1
  // (docs/decisions.md: checkpoints stay a small share of user writes).
  bool due = ckpt_interval_.count() > 0 && next_seq_ != last_ckpt_seq_ &&
             std::chrono::steady_clock::now() - last_ckpt_ >= ckpt_interval_;
  if (auto_checkpoint_ &&
      (due || sealed_since_ckpt_ >= 4 * std::max<uint32_t>(4, geo_.segment_count / 8))) {
    StartAutoCheckpoint();
  }
}

void PoolImpl::WriterLoop() {
  CommitterScope scope;
  auto log = util::Logger("core");
  while (true) {
    std::vector<std::function<void(absl::Status)>> ckpt;
    bool drain = false, stopping = false;
    {
      absl::MutexLock l(&queue_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return stop_ || !ckpt_waiters_.empty() || (!committing_ && EligibleLocked());
      };
      queue_mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
      ckpt.swap(ckpt_waiters_);
      if (!committing_ && EligibleLocked()) {
        committing_ = true;
        drain = true;
      }
      stopping = stop_;
    }
    absl::MutexLock role(&commit_mu_);
    if (!ckpt.empty()) {
      absl::Status s = DoCheckpoint();
      if (!s.ok()) log->error("checkpoint failed: {}", s.ToString());
      for (auto& cb : ckpt) cb(s);
    }
    if (drain) DrainQueue();
    MaybeAutoCheckpoint();
    if (stopping) {
      absl::MutexLock l(&queue_mu_);
      if (!committing_ && gc_q_.empty() && user_q_.empty() && marker_q_.empty() &&
          ckpt_waiters_.empty())
        break;
    }
  }
}

absl::Status PoolImpl::WriteBatch(std::vector<Request*>& batch, log::Stream stream, gc::Slot slot,
                                const RecordPlan& plan) {
  uint32_t seg = open_seg_[int(slot)];
  log::RecordHeader h;
  h.seq = next_seq_;
  h.durable_seq = durable_seq_;
  h.uuid = sb_.uuid;
  h.stream = stream;
  h.joined = plan.joined;
  bool fua = false, catalog = false, synced = false;
  uint64_t user_blocks = 0, reloc_blocks = 0;
  size_t payload = 0;
  // Requests refused at commit time (their volume is gone, or a note no
  // longer applies); completed after the locks are dropped.
  std::vector<std::pair<Request*, absl::Status>> refused;
  {
    absl::MutexLock l(&map_mu_);
    uint32_t next_tree = state_->next_tree_id();
    size_t kept = 0;
    // The writes to the batch's first written volume (a batch rarely spans
    // volumes) are looked up all at once, for PlanWrite and ApplyRecord.
    prefetch_lbas_.clear();
    uint32_t prefetch_vol = UINT32_MAX;
    for (Request* r : batch) {
      if (r->note) continue;
      for (const ReqOp& op : r->ops) {
        if (op.type != log::OpType::kWrite) continue;
        if (prefetch_vol == UINT32_MAX) prefetch_vol = op.vol;
        if (op.vol == prefetch_vol) prefetch_lbas_.push_back(op.lba);
      }
    }
    if (!prefetch_lbas_.empty()) state_->LookupWrites(prefetch_vol, prefetch_lbas_);
    for (Request* r : batch) {
      absl::Status ok;
      std::vector<log::Op> ops;
      std::vector<uint32_t> dropped;  // by earlier ops of this request
      for (ReqOp& op : r->ops) {
        log::Op o;
        o.type = op.type;
        if (r->note) {
          if (op.type == log::OpType::kTrim) {
            o.trim = {op.vol, op.lba, op.count};
          } else {
            o = op.note;
            if (o.type == log::OpType::kTree) o.tree.id = next_tree;
          }
          ok = state_->ValidateNote(o, dropped);
          if (!ok.ok()) break;
          if (o.type == log::OpType::kDrop) dropped.push_back(o.drop);
          ops.push_back(std::move(o));
          continue;
        }
        if ((op.type == log::OpType::kWrite || op.type == log::OpType::kTrim) && !WritableLocked(op.vol)) {
          ok = absl::UnavailableError("the volume was removed");
          break;
        }
        ops.push_back(std::move(o));
      }
      if (!ok.ok()) {
        refused.push_back({r, ok});
        continue;
      }
      batch[kept++] = r;
      fua |= r->fua;
      catalog |= r->barrier;
      for (size_t k = 0; k < ops.size(); ++k) {
        log::Op& o = ops[k];
        ReqOp& op = r->ops[k];
        if (o.type == log::OpType::kTree) ++next_tree;
        // Catalogue notes go with barrier requests; the op types decide.
        catalog |= o.type == log::OpType::kTree || o.type == log::OpType::kDrop ||
                   o.type == log::OpType::kRollback || o.type == log::OpType::kAttr;
        if (!r->note) {
          switch (op.type) {
            case log::OpType::kWrite:
              o.write.vol = op.vol;
              o.write.lba = op.lba;
              state_->PlanWrite(op.vol, op.lba, op.count, &o.write.vba);
              o.write.csum = std::move(op.csum);
              user_blocks += op.count;
              break;
            case log::OpType::kTrim:
              o.trim = {op.vol, op.lba, op.count};
              break;
            case log::OpType::kReloc:
              o.reloc.blocks = std::move(op.reloc);
              reloc_blocks += o.reloc.blocks.size();
              break;
            default:
              break;
          }
        }
        payload += log::OpPayloadBytes(o);
        h.ops.push_back(std::move(o));
      }
    }
    batch.resize(kept);
  }
  for (auto& [r, why] : refused) {
    r->done(why);
    delete r;
  }
  if (batch.empty()) return absl::OkStatus();
  synced = plan.sync || (fua && !plan.acks);
  uint32_t hb = log::HeaderBlocksFor(payload);
  uint32_t data_blocks = uint32_t(user_blocks + reloc_blocks);
  // The committer's record buffer is reused from batch to batch.
  // The data follows the header in request order: handed to the media as
  // pieces when it gathers (no copy), else copied behind the header.
  const bool gather = media_->gathers_writes();
  const size_t record_bytes = size_t(hb + data_blocks) * kBlockSize;
  const size_t buf_bytes = gather ? size_t(hb) * kBlockSize : record_bytes;
  if (record_buf_.size() < buf_bytes) record_buf_ = AlignedBuffer(buf_bytes);
  std::span<std::byte> buf = record_buf_.span().subspan(0, buf_bytes);
  log::EncodeRecordHeader(h, buf.subspan(0, size_t(hb) * kBlockSize));
  gather_.clear();
  if (gather) gather_.push_back(buf.subspan(0, size_t(hb) * kBlockSize));
  std::byte* p = buf.data() + size_t(hb) * kBlockSize;
  for (Request* r : batch) {
    if (r->note) continue;
    for (const ReqOp& op : r->ops) {
      if (op.type != log::OpType::kWrite && op.type != log::OpType::kReloc) continue;
      size_t bytes = size_t(op.count) * kBlockSize;
      if (gather) {
        gather_.emplace_back(op.data, bytes);
      } else {
        std::memcpy(p, op.data, bytes);
        p += bytes;
      }
    }
  }
  Bno pba = state_->segments().FirstBlock(seg) + state_->segments().at(seg).write_ptr;
  absl::Status s = gather ? media_->WriteGather(MediaOffset(pba), gather_)
                          : media_->Write(MediaOffset(pba), buf);
  if (s.ok()) {
    // A sync names what it covers by last_written_seq_ (durable_seq in
    // later records). It must never name the first of a joined pair
    // alone: replay would then see a durable record whose partner is
    // missing and refuse to open. The partner's write moves it past both.
    if (!plan.joined) last_written_seq_ = h.seq;
    last_written_claim_ = h.durable_seq;
    if (!h.ops.empty()) last_content_seq_ = h.seq;
    // Joined records sync once, after the last of them (plan.sync).
    if (synced) s = SyncMedia();
  }
  if (!s.ok()) {
    // The record may or may not be on the media; recovery decides. The
    // pool stops taking writes (like a device that went read-only).
    {
      absl::MutexLock l(&map_mu_);
      for (const log::Op& o : h.ops)
        if (o.type == log::OpType::kWrite) state_->UnplanWrite(o.write.vba);
    }
    absl::Status failed = absl::DataLossError(absl::StrCat("media write failed, pool is read-only until reopened: ", s.message()));
    util::Logger("core")->error("{}", std::string(failed.message()));
    {
      absl::MutexLock l(&queue_mu_);
      failed_ = failed;
    }
    FailRequests(batch, failed);
    return failed;
  }
  media_bytes_ += record_bytes;
  NoteIo();
  user_bytes_ += user_blocks * kBlockSize;
  reloc_bytes_ += reloc_blocks * kBlockSize;
  if (gc::IsHot(slot)) {
    user_hot_bytes_ += user_blocks * kBlockSize;
    reloc_hot_bytes_ += reloc_blocks * kBlockSize;
  }
  ++next_seq_;
  {
    // A catalogue note changes what range operations check under
    // tree_meta_mu_ alone (pool_impl.h).
    std::optional<absl::MutexLock> meta;
    if (catalog) meta.emplace(&tree_meta_mu_);
    absl::MutexLock l(&map_mu_);
    state_->ApplyRecord(h, pba);
    auto& info = state_->segments().at(seg);
    if (geo_.segment_blocks - info.write_ptr < 2) {
      state_->segments().SetState(seg, log::SegmentState::kFull);
      info.sealed_seq = h.seq;
      open_seg_[int(slot)] = UINT32_MAX;
      sealed_since_ckpt_ += stream == log::Stream::kUser ? 4 : 1;
    }
  }
  if (catalog) RefreshVolumes();  // volumes or attributes changed
  if (plan.acks) {
    plan.acks->insert(plan.acks->end(), batch.begin(), batch.end());
    batch.clear();
    return absl::OkStatus();
  }
  if (synced && !h.ops.empty() && proven_seq_.load() < h.seq) {
    // Durable, but only a later durable record can tell recovery so.
    ProveDurable(std::move(batch));
    batch.clear();
    return absl::OkStatus();
  }
  for (Request* r : batch) {
    r->done(absl::OkStatus());
    delete r;
  }
  return absl::OkStatus();
}

}  // namespace ftl::core
