// Flushes of a store's buffer (flusher.h).

#include "kv/flusher.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_format.h"

namespace ftl::kv {

uint64_t FlushPlan::blocks() const {
  uint64_t n = 0;
  for (const Piece& p : pieces) n += p.bytes.size() / kBlock;
  return n;
}

absl::StatusOr<FlushPlan> Flusher::Plan(uint64_t op_seq) {
  BufferPool& b = *buf_;
  const Layout& l = b.layout();
  FlushPlan p;
  p.op_seq = op_seq;
  p.healed = healed_;
  // The root's allocation state, as an entry of its log.
  {
    absl::StatusOr<Frame*> root = b.Get(0);
    if (!root.ok()) return root.status();
    if ((*root)->page.meta() != b.meta()) {
      LogEntry e;
      e.op = LogOp::kMeta;
      e.meta = b.meta();
      if (absl::Status s = b.Change(*root, e); !s.ok()) {
        b.Unpin(*root);
        return s;
      }
    }
    b.Unpin(*root);
  }
  auto encode = [&](Frame* f) {
    FlushPlan::Piece piece;
    piece.lba = l.PageLba(f->id);
    piece.bytes.resize(l.geo.page_bytes);
    f->page.set_has_log(b.mode() == KvMode::kIpl || b.mode() == KvMode::kIplMerge);
    f->page.Encode(piece.bytes);
    p.pieces.push_back(std::move(piece));
    ++p.add.page_writes;
  };
  auto fly = [&](Frame* f) {
    ++f->inflight;
    p.frames.push_back(f->id);
    if (f->rewrite) p.rewrites.push_back(f->id);
    if (f->dirty_log) {
      p.dirty_logs.push_back(f->id);
      // The sectors its log fills (header and entries), not every sector
      // it owns.
      p.add.log_sector_writes +=
          (kLogHeaderBytes + f->log_used + KvGeometry::kSectorBytes - 1) / KvGeometry::kSectorBytes;
    }
    f->rewrite = false;
    f->dirty_log = false;
  };
  std::set<uint32_t> merged;  // units rewritten whole
  if (b.mode() == KvMode::kIplMerge)
    for (uint32_t id : b.rewrite_ids()) merged.insert(l.UnitOf(id));
  // Every page of the merged units, pinned until it flies (so that loading
  // one does not evict another); those not in the buffer are loaded into
  // it first (so that a failed read leaves nothing in flight). They stay
  // in the buffer while the write is in flight: a page written from a copy
  // outside it could be loaded from the media, older than the write, by an
  // operation meanwhile (a synced flush is written without the store
  // lock), and its next change logged against the old epoch would be lost
  // (docs/kv.md, "Flushes").
  std::vector<Frame*> loaded;
  auto unpin_loaded = [&] {
    for (Frame* f : loaded) b.Unpin(f);
  };
  for (uint32_t unit : merged) {
    uint32_t first = unit * l.geo.pages_per_unit;
    uint32_t end = std::min(first + l.geo.pages_per_unit, b.meta().next_page);
    for (uint32_t id = first; id < end; ++id) {
      absl::StatusOr<Frame*> f = b.Get(id);
      if (!f.ok()) {
        unpin_loaded();
        return f.status();
      }
      loaded.push_back(*f);
    }
  }
  for (uint32_t unit : merged) {
    ++p.add.unit_merges;
    uint32_t first = unit * l.geo.pages_per_unit;
    uint32_t end = std::min(first + l.geo.pages_per_unit, b.meta().next_page);
    for (uint32_t id = first; id < end; ++id) {
      Frame* f = b.frames().at(id).get();  // (pinned above)
      if (!f->rewrite) {  // rewritten with its unit: a new epoch empties its log
        f->page.set_epoch(f->page.epoch() + 1);
        f->log_used = 0;
        f->rewrite = true;
      }
      encode(f);
      fly(f);
    }
  }
  unpin_loaded();
  for (uint32_t id : b.rewrite_ids()) {
    if (merged.count(l.UnitOf(id))) continue;
    Frame* f = b.frames().at(id).get();
    encode(f);
    fly(f);
  }
  b.rewrite_ids().clear();
  for (uint32_t id : b.dirty_log_ids()) {
    Frame* f = b.frames().at(id).get();
    if (f->dirty_log) fly(f);  // (merged units' frames flew above)
  }
  b.dirty_log_ids().clear();
  for (uint32_t lba : b.dirty_log_lbas()) {
    LogBlock& lb = b.log_blocks().at(lba);
    lb.dirty = false;
    ++lb.inflight;
    p.log_lbas.push_back(lba);
    uint32_t unit = (lba - l.unit_base) / l.geo.unit_blocks();
    if (merged.count(unit)) continue;  // its pages start new logs
    p.pieces.push_back({lba, lb.bytes});
    ++p.add.log_block_writes;
  }
  b.dirty_log_lbas().clear();
  for (auto& [lba, blob] : b.blobs()) {
    if (blob.inflight) continue;
    blob.inflight = true;
    p.blob_lbas.push_back(lba);
    FlushPlan::Piece piece;
    piece.lba = lba;
    size_t blocks = std::max<size_t>(1, (blob.data.size() + kBlock - 1) / kBlock);
    piece.bytes.resize(blocks * kBlock);
    std::memcpy(piece.bytes.data(), blob.data.data(), blob.data.size());
    p.blob_blocks += blocks;
    p.pieces.push_back(std::move(piece));
  }
  b.blob_blocks_pending() -= p.blob_blocks;
  // The differential log: its new blocks (and the anchor), in the same
  // write as the pages whose EPOCH records they carry.
  b.diffs().PlanFlush(&p.dlog);
  for (auto& [lba, bytes] : p.dlog.blocks) p.pieces.push_back({lba, std::move(bytes)});
  p.dlog.blocks.clear();
  p.add.diff_block_writes += p.dlog.log_blocks;
  p.trims = std::move(b.freed_blobs());
  b.freed_blobs().clear();
  std::sort(p.pieces.begin(), p.pieces.end(),
            [](const FlushPlan::Piece& x, const FlushPlan::Piece& y) { return x.lba < y.lba; });
  // Adjacent pieces become one (each run allocated once, at its size:
  // growing it piece by piece left the heap holding megabytes per flush).
  std::vector<FlushPlan::Piece> joined;
  for (size_t i = 0; i < p.pieces.size();) {
    size_t j = i + 1, bytes = p.pieces[i].bytes.size();
    while (j < p.pieces.size() &&
           p.pieces[j - 1].lba + p.pieces[j - 1].bytes.size() / kBlock == p.pieces[j].lba)
      bytes += p.pieces[j++].bytes.size();
    if (j == i + 1) {
      joined.push_back(std::move(p.pieces[i]));
    } else {
      FlushPlan::Piece run;
      run.lba = p.pieces[i].lba;
      run.bytes.reserve(bytes);
      for (size_t k = i; k < j; ++k) {
        run.bytes.insert(run.bytes.end(), p.pieces[k].bytes.begin(), p.pieces[k].bytes.end());
        std::vector<std::byte>().swap(p.pieces[k].bytes);
      }
      joined.push_back(std::move(run));
    }
    i = j;
  }
  p.pieces = std::move(joined);
  absl::MutexLock lock(&seq_mu_);
  p.ticket = next_ticket_++;
  return p;
}

absl::Status Flusher::WriteScratch(const FlushPlan& p) {
  const Layout& l = buf_->layout();
  if (pool_ == nullptr || name_.empty())
    return absl::InvalidArgumentError(absl::StrFormat(
        "a flush of %d blocks is larger than one atomic write (%d blocks)", p.blocks(),
        max_atomic_blocks_));
  if (p.blocks() > l.scratch_blocks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "a flush of %d blocks is larger than the scratch area (%d blocks)", p.blocks(), l.scratch_blocks));
  // All pieces back to back in the scratch area (one write: the pool
  // splits it into records as it likes; none of it counts until moved).
  std::vector<RangeOp> moves;
  std::vector<std::byte> all;
  all.reserve(p.blocks() * kBlock);
  uint64_t at = l.scratch_base;
  for (const FlushPlan::Piece& piece : p.pieces) {
    RangeOp op;
    op.kind = RangeOp::Kind::kMove;
    op.from = name_;
    op.to = name_;
    op.src = at * kBlock;
    op.dst = uint64_t(piece.lba) * kBlock;
    op.len = piece.bytes.size();
    moves.push_back(op);
    at += piece.bytes.size() / kBlock;
    all.insert(all.end(), piece.bytes.begin(), piece.bytes.end());
  }
  if (absl::Status s = buf_->volume()->Write(uint64_t(l.scratch_base) * kBlock, all); !s.ok())
    return s;
  return pool_->ApplyRangeOps(moves);
}

absl::Status Flusher::Write(const FlushPlan& p, bool sync, bool frees) {
  {
    absl::MutexLock lock(&seq_mu_);
    while (done_ticket_ + 1 != p.ticket) seq_cv_.Wait(&seq_mu_);
  }
  absl::Status s;
  bool skipped = false;
  {
    absl::MutexLock lock(&seq_mu_);
    skipped = failures_ > p.healed;
  }
  if (skipped) {
    s = absl::AbortedError("an earlier flush failed; written again with the next one");
  } else if (p.pieces.empty()) {
    if (sync) s = buf_->volume()->Flush();
  } else if (p.blocks() <= max_atomic_blocks_) {
    std::vector<Volume::Piece> pieces;
    for (const FlushPlan::Piece& piece : p.pieces)
      pieces.push_back({uint64_t(piece.lba) * kBlock, piece.bytes});
    s = frees ? buf_->volume()->WriteAtomicFreeing(pieces, sync)
              : buf_->volume()->WriteAtomic(pieces, sync);
  } else {
    s = WriteScratch(p);
  }
  absl::MutexLock lock(&seq_mu_);
  if (!s.ok()) ++failures_;
  done_ticket_ = p.ticket;
  seq_cv_.SignalAll();
  return s;
}

void Flusher::Complete(FlushPlan& p, const absl::Status& s) {
  BufferPool& b = *buf_;
  for (uint32_t id : p.frames) {
    auto it = b.frames().find(id);
    if (it != b.frames().end()) --it->second->inflight;
  }
  std::vector<std::pair<uint32_t, uint32_t>> ring_trims;
  b.diffs().Complete(p.dlog, s.ok(), &ring_trims);
  for (uint32_t lba : p.log_lbas) {
    auto it = b.log_blocks().find(lba);
    if (it == b.log_blocks().end()) continue;
    --it->second.inflight;
    if (!s.ok()) {
      it->second.dirty = true;
      b.dirty_log_lbas().insert(lba);
    } else if (it->second.refs == 0 && !it->second.dirty && it->second.inflight == 0) {
      b.log_blocks().erase(it);
    }
  }
  if (!s.ok()) {
    ++healed_;
    for (uint32_t id : p.rewrites) {
      Frame* f = b.frames().at(id).get();
      f->rewrite = true;
      b.rewrite_ids().insert(id);
    }
    for (uint32_t id : p.dirty_logs) {
      b.frames().at(id)->dirty_log = true;
      b.dirty_log_ids().insert(id);
    }
    for (uint32_t lba : p.blob_lbas) b.blobs().at(lba).inflight = false;
    b.blob_blocks_pending() += p.blob_blocks;
    for (const BlobRef& r : p.trims) b.freed_blobs().push_back(r);
    return;
  }
  for (uint32_t lba : p.blob_lbas) b.blobs().erase(lba);
  for (const BlobRef& r : p.trims) {
    uint64_t blocks = std::max<uint64_t>(1, (r.len + kBlock - 1) / kBlock);
    (void)b.volume()->Trim(uint64_t(r.lba) * kBlock, blocks * kBlock);
  }
  for (auto [lba, n] : ring_trims)
    (void)b.volume()->Trim(uint64_t(lba) * kBlock, uint64_t(n) * kBlock);
  KvStats& st = b.stats();
  st.diff_block_writes += p.add.diff_block_writes;
  st.page_writes += p.add.page_writes;
  st.log_sector_writes += p.add.log_sector_writes;
  st.log_block_writes += p.add.log_block_writes;
  st.unit_merges += p.add.unit_merges;
  st.media_write_bytes += p.blocks() * kBlock;
  ++st.flushes;
  if (p.blocks() > max_atomic_blocks_) ++st.scratch_flushes;
  b.Trim();
}

}  // namespace ftl::kv
