// Volume entry points: validation, read path, read-modify-write for partial
// blocks, splitting at the atomic size.

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "core/volume_impl.h"
#include "media/aligned_buffer.h"
#include "util/checksum.h"

namespace ftl::core {

absl::Status VolumeImpl::CheckRange(uint64_t offset, uint64_t length, bool is_write) const {
  // Any byte offset and length: partial blocks are read-modify-written
  // (WriteAsync, WriteZeroes), trims round inward, reads copy out.
  uint64_t size = size_bytes();
  if (offset > size || length > size - offset) {
    std::string msg = absl::StrFormat("range [%d, +%d) is past the end of %s (%d bytes)", offset,
                                      length, name_, size);
    return is_write ? absl::OutOfRangeError(msg) : absl::InvalidArgumentError(msg);
  }
  return absl::OkStatus();
}

absl::Status VolumeImpl::CheckWritable(uint64_t offset, uint64_t length) {
  if (gone()) return absl::UnavailableError(name_ + " was removed");
  if (ro_) return absl::PermissionDeniedError(name_ + " is read-only");
  if (absl::Status s = CheckRange(offset, length, true); !s.ok()) return s;
  if (has_immutable_.load(std::memory_order_relaxed) && length > 0) {
    Bno b0 = Bno(offset / kBlockSize);
    Bno b1 = Bno((offset + length + kBlockSize - 1) / kBlockSize);
    if (ctx_->state->RangeImmutable(id_, b0, b1 - b0)) {
      return absl::PermissionDeniedError(
          absl::StrFormat("range [%d, +%d) of %s is immutable", offset, length, name_));
    }
  }
  // A small reserve: writes may grow the map (copy-on-write leaves).
  return ctx_->metadata_room(64);
}

absl::Status VolumeImpl::Read(uint64_t offset, std::span<std::byte> out) {
  if (gone()) return absl::UnavailableError(name_ + " was removed");
  if (absl::Status s = CheckRange(offset, out.size(), false); !s.ok()) return s;
  if (out.empty()) return absl::OkStatus();
  reads_.fetch_add(1, std::memory_order_relaxed);
  read_bytes_.fetch_add(out.size(), std::memory_order_relaxed);
  Bno b0 = Bno(offset / kBlockSize);
  Bno b1 = Bno((offset + out.size() + kBlockSize - 1) / kBlockSize);
  Bno n = b1 - b0;
  std::vector<std::pair<log::Pba, uint32_t>> blocks;
  std::vector<uint32_t> pinned;
  ctx_->state->counters.NoteIo();
  ctx_->state->LookupForRead(id_, b0, n, &blocks, &pinned);
  bool direct = offset % kBlockSize == 0 && out.size() % kBlockSize == 0;
  media::AlignedBuffer bounce;
  std::byte* dst = out.data();
  if (!direct) {
    bounce = media::AlignedBuffer(size_t(n) * kBlockSize);
    dst = bounce.data();
  }
  absl::Status status;
  for (Bno i = 0; i < n && status.ok();) {
    if (blocks[i].first == log::Pba(kNoBlock)) {
      std::memset(dst + size_t(i) * kBlockSize, 0, kBlockSize);
      ++i;
      continue;
    }
    Bno j = i + 1;
    while (j < n && blocks[j].first == blocks[j - 1].first + 1) ++j;
    // A mirror reads another copy of a block that fails its checksum
    // and heals the bad one (ftl/media.h, ReadVerified).
    auto check = [&blocks, i](size_t u, std::span<const std::byte> b) {
      return util::BlockChecksum(b) == blocks[i + u].second ? ReadVerdict::kGood : ReadVerdict::kBad;
    };
    ReadOutcome outcome;
    status = ctx_->media->ReadVerified(ctx_->MediaOffset(blocks[i].first),
                                       std::span<std::byte>(dst + size_t(i) * kBlockSize, size_t(j - i) * kBlockSize),
                                       kBlockSize, check, &outcome);
    // A mirror checked every block already.
    for (Bno k = i; k < j && status.ok() && outcome.good != uint64_t(j - i); ++k) {
      auto block = std::span<const std::byte>(dst + size_t(k) * kBlockSize, kBlockSize);
      if (util::BlockChecksum(block) != blocks[k].second) {
        status = absl::DataLossError(absl::StrFormat(
            "checksum mismatch in %s block %d (physical block %d)", name_, b0 + k, blocks[k].first.value()));
      }
    }
    i = j;
  }
  ctx_->state->Unpin(pinned);
  if (!status.ok()) return status;
  if (!direct) std::memcpy(out.data(), dst + (offset - uint64_t(b0) * kBlockSize), out.size());
  return absl::OkStatus();
}

namespace {
// Completes a split write once every part has.
struct Join {
  explicit Join(int parts, Volume::Callback cb) : remaining(parts), done(std::move(cb)) {}
  void Finish(absl::Status s) {
    {
      absl::MutexLock l(&mu);
      if (!s.ok() && first_error.ok()) first_error = s;
      if (--remaining > 0) return;
    }
    done(first_error);
  }
  absl::Mutex mu;
  int remaining;
  absl::Status first_error;
  Volume::Callback done;
};
}  // namespace

void VolumeImpl::MakeRequests(Bno first, Bno n, const std::byte* data, bool fua, Callback done,
                              std::vector<commit::Request*>* out) {
  // A write of up to max_atomic_bytes is one record; one that does not
  // start on a block boundary touches one block more (pool.h contract). A
  // larger write is cut only where the volume's address is a multiple of
  // the largest power of two within the atomic size (at least 64 KiB on
  // the default geometry), so that no cut falls inside a
  // database page (docs/decisions.md, "Splits at aligned boundaries").
  const Bno atomic = ctx_->max_atomic_blocks();
  std::vector<std::pair<Bno, Bno>> cuts;  // (offset in the write, blocks)
  if (n <= atomic + 1) {
    cuts.emplace_back(0, n);
  } else {
    const Bno align = std::bit_floor(atomic);
    for (Bno at = 0; at < n;) {
      Bno end = std::min<Bno>(n, (first + at) / align * align + align - first);
      cuts.emplace_back(at, end - at);
      at = end;
    }
  }
  const bool split = cuts.size() > 1;
  // One part (the common case) reports straight to `done`.
  std::shared_ptr<Join> join = split ? std::make_shared<Join>(int(cuts.size()), std::move(done)) : nullptr;
  for (auto [at, len] : cuts) {
    auto* r = new commit::Request;
    r->fua = fua;
    r->splittable = split;
    const std::byte* part = data + size_t(at) * kBlockSize;
    std::vector<uint32_t> csum(len);
    for (Bno k = 0; k < len; ++k) {
      csum[k] = util::BlockChecksum(
          std::span<const std::byte>(part + size_t(k) * kBlockSize, kBlockSize));
    }
    r->ops.push_back(commit::ReqOp::Write(id_, first + at, std::move(csum), part));
    if (join) {
      r->done = [join](absl::Status s) { join->Finish(s); };
    } else {
      r->done = std::move(done);
    }
    out->push_back(r);
  }
}

void VolumeImpl::WriteAsync(uint64_t offset, std::span<const std::byte> data, bool fua,
                            Callback done) {
  SubmitWrite(offset, data, fua, std::move(done), /*allow_inline=*/false);
}

void VolumeImpl::SubmitWrite(uint64_t offset, std::span<const std::byte> data, bool fua,
                             Callback done, bool allow_inline) {
  if (absl::Status s = CheckWritable(offset, data.size()); !s.ok()) return done(s);
  if (data.empty()) return done(absl::OkStatus());
  writes_.fetch_add(1, std::memory_order_relaxed);
  write_bytes_.fetch_add(data.size(), std::memory_order_relaxed);
  Bno b0 = Bno(offset / kBlockSize);
  Bno b1 = Bno((offset + data.size() + kBlockSize - 1) / kBlockSize);
  RangeLock& locks = *ctx_->range_lock;
  if (offset % kBlockSize == 0 && data.size() % kBlockSize == 0) {
    uint64_t t = locks.Lock(id_, b0, b1, false);
    std::vector<commit::Request*> rs;
    MakeRequests(b0, b1 - b0, data.data(), fua,
                 [&locks, t, done = std::move(done)](absl::Status s) {
                   locks.Unlock(t);
                   done(s);
                 },
                 &rs);
    ctx_->committer->SubmitMany(rs, allow_inline);
    return;
  }
  // Partial blocks: read the edges, merge, write whole blocks.
  uint64_t t = locks.Lock(id_, b0, b1, true);
  auto buf = std::make_shared<media::AlignedBuffer>(size_t(b1 - b0) * kBlockSize);
  uint64_t head = offset % kBlockSize;
  uint64_t tail_end = (offset + data.size()) % kBlockSize;
  absl::Status s;
  if (head != 0) s = Read(uint64_t(b0) * kBlockSize, buf->span().subspan(0, kBlockSize));
  if (s.ok() && tail_end != 0 && (b1 - 1 != b0 || head == 0)) {
    s = Read(uint64_t(b1 - 1) * kBlockSize,
             buf->span().subspan(size_t(b1 - 1 - b0) * kBlockSize, kBlockSize));
  }
  if (!s.ok()) {
    locks.Unlock(t);
    return done(s);
  }
  std::memcpy(buf->data() + head, data.data(), data.size());
  std::vector<commit::Request*> rs;
  MakeRequests(b0, b1 - b0, buf->data(), fua,
               [&locks, t, buf, done = std::move(done)](absl::Status s) {
                 locks.Unlock(t);
                 done(s);
               },
               &rs);
  ctx_->committer->SubmitMany(rs, allow_inline);
}

void VolumeImpl::WriteAsyncBatch(std::vector<AsyncWrite> writes) {
  // Whole-block writes are queued together; anything else takes the
  // ordinary path (validation errors, read-modify-write).
  std::vector<commit::Request*> rs;
  RangeLock& locks = *ctx_->range_lock;
  for (AsyncWrite& w : writes) {
    bool simple = !w.data.empty() && w.offset % kBlockSize == 0 &&
                  w.data.size() % kBlockSize == 0 && CheckWritable(w.offset, w.data.size()).ok();
    if (!simple) {
      // Queue what we hold first: a read-modify-write may wait on it.
      if (!rs.empty()) ctx_->committer->SubmitMany(rs, /*allow_inline=*/true);
      rs.clear();
      SubmitWrite(w.offset, w.data, w.fua, std::move(w.done), /*allow_inline=*/true);
      continue;
    }
    writes_.fetch_add(1, std::memory_order_relaxed);
    write_bytes_.fetch_add(w.data.size(), std::memory_order_relaxed);
    Bno b0 = Bno(w.offset / kBlockSize), b1 = Bno((w.offset + w.data.size()) / kBlockSize);
    uint64_t t = locks.Lock(id_, b0, b1, false);
    MakeRequests(b0, b1 - b0, w.data.data(), w.fua,
                 [&locks, t, done = std::move(w.done)](absl::Status s) {
                   locks.Unlock(t);
                   done(s);
                 },
                 &rs);
  }
  if (!rs.empty()) ctx_->committer->SubmitMany(rs, /*allow_inline=*/true);
}

absl::Status VolumeImpl::Write(uint64_t offset, std::span<const std::byte> data, bool fua) {
  absl::Notification n;
  absl::Status result;
  WriteAsync(offset, data, fua, [&](absl::Status s) {
    result = s;
    n.Notify();
  });
  n.WaitForNotification();
  return result;
}

absl::Status VolumeImpl::WriteAtomic(std::span<const Piece> pieces, bool fua) {
  return WriteAtomicAs(pieces, fua, false);
}

absl::Status VolumeImpl::WriteAtomicFreeing(std::span<const Piece> pieces, bool fua) {
  return WriteAtomicAs(pieces, fua, true);
}

absl::Status VolumeImpl::WriteAtomicAs(std::span<const Piece> pieces, bool fua, bool frees) {
  if (gone()) return absl::UnavailableError(name_ + " was removed");
  if (ro_) return absl::PermissionDeniedError(name_ + " is read-only");
  // The pieces by offset (empty ones ignored), to check overlaps and to
  // take the range locks in ascending order.
  std::vector<const Piece*> sorted;
  uint64_t total = 0;
  size_t payload = 0;
  for (const Piece& p : pieces) {
    if (p.offset % kBlockSize != 0 || p.data.size() % kBlockSize != 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "atomic write piece [%d, +%d) of %s is not 4096-byte aligned", p.offset, p.data.size(),
          name_));
    if (p.data.empty()) continue;
    if (absl::Status s = CheckRange(p.offset, p.data.size(), true); !s.ok()) return s;
    total += p.data.size();
    payload += log::WritePayloadBytes(p.data.size() / kBlockSize);
    sorted.push_back(&p);
  }
  if (total > ctx_->geo->max_atomic_bytes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "atomic write of %d bytes is larger than the atomic size (%d bytes)", total,
        ctx_->geo->max_atomic_bytes));
  // One record holds them all: its header must describe every piece.
  if (log::HeaderBlocksFor(payload) > log::kMaxHeaderBlocks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "atomic write of %d pieces does not fit one record header", sorted.size()));
  std::sort(sorted.begin(), sorted.end(),
            [](const Piece* a, const Piece* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i - 1]->offset + sorted[i - 1]->data.size() > sorted[i]->offset)
      return absl::InvalidArgumentError(absl::StrFormat(
          "atomic write pieces at %d and %d of %s overlap", sorted[i - 1]->offset,
          sorted[i]->offset, name_));
  }
  for (const Piece* p : sorted) {
    if (absl::Status s = CheckWritable(p->offset, p->data.size()); !s.ok()) return s;
  }
  if (sorted.empty()) return absl::OkStatus();
  writes_.fetch_add(1, std::memory_order_relaxed);
  write_bytes_.fetch_add(total, std::memory_order_relaxed);
  RangeLock& locks = *ctx_->range_lock;
  std::vector<uint64_t> tickets;
  auto* r = new commit::Request;
  r->fua = fua;
  r->frees = frees;       // may take the freeing requests' reserve
  r->splittable = false;  // one record, all or nothing
  for (const Piece* p : sorted) {
    const Bno b0 = Bno(p->offset / kBlockSize);
    const Bno n = Bno(p->data.size() / kBlockSize);
    tickets.push_back(locks.Lock(id_, b0, uint64_t(b0) + n, false));
    std::vector<uint32_t> csum(n);
    for (Bno k = 0; k < n; ++k) {
      csum[k] = util::BlockChecksum(p->data.subspan(size_t(k) * kBlockSize, kBlockSize));
    }
    r->ops.push_back(commit::ReqOp::Write(id_, b0, std::move(csum), p->data.data()));
  }
  // The caller waits anyway: a small one is committed on this thread when
  // nobody else is committing (as notes are; no hand-off to the writer
  // thread and back, two wake-ups per synced key-value flush).
  absl::Status result = ctx_->committer->SubmitAndWait(r, /*allow_inline=*/true);
  for (uint64_t t : tickets) locks.Unlock(t);
  return result;
}

absl::Status VolumeImpl::Trim(uint64_t offset, uint64_t length, bool fua) {
  if (gone()) return absl::UnavailableError(name_ + " was removed");
  if (ro_) return absl::PermissionDeniedError(name_ + " is read-only");
  if (absl::Status s = CheckRange(offset, length, false); !s.ok()) return s;
  if (absl::Status s = CheckWritable(offset, length); !s.ok()) return s;
  trims_.fetch_add(1, std::memory_order_relaxed);
  Bno first = Bno((offset + kBlockSize - 1) / kBlockSize);
  Bno end = Bno((offset + length) / kBlockSize);
  if (first >= end) return absl::OkStatus();
  RangeLock& locks = *ctx_->range_lock;
  uint64_t t = locks.Lock(id_, first, end, false);
  auto* r = new commit::Request;
  r->fua = fua;
  r->frees = true;
  r->ops.push_back(commit::ReqOp::Trim(id_, first, end - first));
  absl::Status result = ctx_->committer->SubmitAndWait(r);
  locks.Unlock(t);
  return result;
}

absl::Status VolumeImpl::WriteZeroes(uint64_t offset, uint64_t length, bool fua, bool no_hole,
                                     bool fast_only) {
  if (absl::Status s = CheckWritable(offset, length); !s.ok()) return s;
  if (length == 0) return absl::OkStatus();
  // Allocated zeros are written like data: never faster than a write.
  if (no_hole && fast_only) return absl::UnimplementedError("zeroing without holes is not fast");
  zeroes_.fetch_add(1, std::memory_order_relaxed);
  if (no_hole) {
    // Allocated zeros: real zero blocks, written a chunk at a time.
    const uint64_t chunk = 8u << 20;
    std::vector<std::byte> zeros(std::min(length, chunk));
    for (uint64_t at = 0; at < length; at += chunk) {
      uint64_t len = std::min(chunk, length - at);
      if (absl::Status s = Write(offset + at, std::span(zeros).subspan(0, len), fua); !s.ok())
        return s;
    }
    return absl::OkStatus();
  }
  // One record: zeroed edge blocks (read-modify-write) plus a trim of the
  // whole blocks in between, so the request is atomic.
  Bno b0 = Bno(offset / kBlockSize);
  Bno b1 = Bno((offset + length + kBlockSize - 1) / kBlockSize);
  uint64_t head = offset % kBlockSize, end = offset + length;
  bool head_partial = head != 0 || (b1 - b0 == 1 && end % kBlockSize != 0);
  bool tail_partial = end % kBlockSize != 0 && !(b1 - b0 == 1 && head_partial);
  RangeLock& locks = *ctx_->range_lock;
  uint64_t t = locks.Lock(id_, b0, b1, head_partial || tail_partial);
  media::AlignedBuffer edges(2 * kBlockSize);
  auto* r = new commit::Request;
  r->fua = fua;
  r->frees = true;  // at most two edge blocks, and a trim of the rest
  absl::Status s;
  auto zero_edge = [&](Bno blk, int slot) {
    std::byte* p = edges.data() + size_t(slot) * kBlockSize;
    s = Read(uint64_t(blk) * kBlockSize, std::span(p, kBlockSize));
    if (!s.ok()) return;
    uint64_t lo = std::max<uint64_t>(offset, uint64_t(blk) * kBlockSize);
    uint64_t hi = std::min<uint64_t>(end, uint64_t(blk + 1) * kBlockSize);
    std::memset(p + (lo - uint64_t(blk) * kBlockSize), 0, hi - lo);
    r->ops.push_back(commit::ReqOp::Write(
        id_, blk, {util::BlockChecksum(std::span<const std::byte>(p, kBlockSize))}, p));
  };
  Bno mid_lo = b0, mid_hi = b1;
  if (head_partial) {
    zero_edge(b0, 0);
    ++mid_lo;
  }
  if (s.ok() && tail_partial) {
    zero_edge(b1 - 1, 1);
    --mid_hi;
  }
  if (!s.ok()) {
    delete r;
    locks.Unlock(t);
    return s;
  }
  if (mid_lo < mid_hi) {
    r->ops.push_back(commit::ReqOp::Trim(id_, mid_lo, mid_hi - mid_lo));
  }
  absl::Status result = ctx_->committer->SubmitAndWait(r);
  locks.Unlock(t);
  return result;
}

absl::Status VolumeImpl::Flush() {
  if (gone()) return absl::UnavailableError(name_ + " was removed");
  flushes_.fetch_add(1, std::memory_order_relaxed);
  return ctx_->committer->FlushDurable();
}

absl::StatusOr<std::vector<BlockExtent>> VolumeImpl::BlockStatus(uint64_t offset,
                                                                 uint64_t length) {
  if (gone()) return absl::UnavailableError(name_ + " was removed");
  if (absl::Status s = CheckRange(offset, length, false); !s.ok()) return s;
  if (length == 0) return std::vector<BlockExtent>{};
  Bno b0 = Bno(offset / kBlockSize);
  Bno b1 = Bno((offset + length + kBlockSize - 1) / kBlockSize);
  std::vector<BlockExtent> ext = ctx_->state->MappedExtents(id_, b0, b1 - b0);
  // Clip to the byte range asked for.
  ext.front().length -= offset - ext.front().offset;
  ext.front().offset = offset;
  uint64_t end = offset + length;
  ext.back().length = end - ext.back().offset;
  return ext;
}

VolumeStats VolumeImpl::Stats() const {
  VolumeStats s;
  s.name = name_;
  s.id = id_;
  s.size_bytes = size_bytes();
  s.mapped_bytes = ctx_->state->MappedBlocks(id_) * kBlockSize;
  s.reads = reads_;
  s.writes = writes_;
  s.trims = trims_;
  s.zeroes = zeroes_;
  s.flushes = flushes_;
  s.read_bytes = read_bytes_;
  s.write_bytes = write_bytes_;
  return s;
}

}  // namespace ftl::core
