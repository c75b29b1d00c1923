// Lifecycle of a pool: format, open (clean / roll forward / rebuild), close,
// checkpoints and superblocks. Startup and shutdown run as named steps whose
// durations are logged.

#include "core/pool_impl.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "core/aligned_buffer.h"
#include "core/checkpoint_format.h"
#include "log/segment_reader.h"
#include "util/checksum.h"
#include "util/encoding.h"
#include "util/logging.h"

namespace ftl::core {
namespace {

constexpr uint32_t kGcReserveSegments = 2;
constexpr uint32_t kMinSegments = 16;
constexpr uint64_t kSeqJumpAfterCrash = uint64_t(1) << 32;

// Runs named steps in order, logging each one's duration; stops at the
// first failure.
struct Step {
  const char* name;
  std::function<absl::Status()> run;
};
absl::Status RunSteps(const char* what, const std::vector<Step>& steps) {
  auto log = util::Logger("core");
  auto total = std::chrono::steady_clock::now();
  for (const Step& s : steps) {
    auto t0 = std::chrono::steady_clock::now();
    absl::Status st = s.run();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      log->error("{}: step '{}' failed after {:.2f} ms: {}", what, s.name, ms, st.ToString());
      return st;
    }
    log->debug("{}: step '{}' took {:.2f} ms", what, s.name, ms);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - total).count();
  log->info("{} done in {:.2f} ms", what, ms);
  return absl::OkStatus();
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

uint32_t Request::data_blocks() const {
  uint32_t n = 0;
  for (const ReqOp& op : ops)
    if (op.type == log::OpType::kWrite || op.type == log::OpType::kReloc) n += op.count;
  return n;
}

size_t Request::payload_bytes() const {
  size_t n = 0;
  for (const ReqOp& op : ops) {
    switch (op.type) {
      case log::OpType::kWrite: n += 13 + 8 * size_t(op.count); break;
      case log::OpType::kTrim: n += 13; break;
      case log::OpType::kReloc: n += log::RelocPayloadBytes(op.reloc); break;
      default: n += log::OpPayloadBytes(op.note); break;
    }
  }
  return n;
}

// ---------------------------------------------------------------- format

absl::StatusOr<std::unique_ptr<PoolImpl>> PoolImpl::DoFormat(std::shared_ptr<Media> media,
                                                             const FormatOptions& f,
                                                             const OpenOptions& o) {
  if (f.segment_bytes % kBlockSize || f.segment_bytes < 64 * kBlockSize ||
      f.segment_bytes > (256u << 20)) {
    return absl::InvalidArgumentError("segment size must be a multiple of 4 KiB in [256 KiB, 256 MiB]");
  }
  if (!(f.over_provision >= 0.05 && f.over_provision <= 0.9)) {
    return absl::InvalidArgumentError("over-provisioning must be within [0.05, 0.9]");
  }
  if (f.volume_name.empty() || f.volume_name.size() > 255) {
    return absl::InvalidArgumentError("volume name must be 1..255 bytes");
  }
  uint64_t size = media->size();
  uint64_t physical_est = size / kBlockSize;
  log::Superblock sb;
  sb.uuid = log::NewUuid();
  sb.segment_blocks = uint32_t(f.segment_bytes / kBlockSize);
  sb.ckpt_slot_blocks = uint32_t(AlignUp(65536 + 64 * physical_est, kBlockSize) / kBlockSize);
  sb.data_offset = AlignUp((2 + 2 * uint64_t(sb.ckpt_slot_blocks)) * kBlockSize, 1 << 20);
  uint64_t segs = size > sb.data_offset ? (size - sb.data_offset) / f.segment_bytes : 0;
  if (segs < kMinSegments) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "media too small: %d bytes holds %d segments of %d bytes, need at least %d", size, segs,
        f.segment_bytes, kMinSegments));
  }
  if (segs * sb.segment_blocks >= kNoBlock) {
    return absl::InvalidArgumentError("media too large: at most 16 TiB of segments");
  }
  sb.segment_count = uint32_t(segs);
  sb.media_bytes = size;
  uint64_t usable = uint64_t(segs - kGcReserveSegments - 2) * sb.segment_blocks;
  sb.logical_blocks = uint64_t(double(usable) * (1.0 - f.over_provision)) / 256 * 256;
  uint64_t vol_blocks = f.volume_bytes ? f.volume_bytes / kBlockSize : sb.logical_blocks;
  if (vol_blocks == 0 || vol_blocks > sb.logical_blocks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "volume size %d exceeds the pool's logical capacity %d", vol_blocks * kBlockSize,
        sb.logical_blocks * kBlockSize));
  }
  sb.primary_name = f.volume_name;
  sb.primary_blocks = vol_blocks;

  // An empty checkpoint in both slots, then both superblock copies.
  MapState empty(sb.segment_count, sb.segment_blocks);
  empty.AddVolume(0, f.volume_name, vol_blocks);
  std::vector<std::byte> ck = EncodeCheckpoint(empty, sb.uuid, 1);
  AlignedBuffer slot(AlignUp(ck.size(), kBlockSize));
  std::memcpy(slot.data(), ck.data(), ck.size());
  for (int i = 0; i < 2; ++i) {
    uint64_t off = (2 + uint64_t(i) * sb.ckpt_slot_blocks) * kBlockSize;
    if (absl::Status s = media->Write(off, slot.span()); !s.ok()) return s;
    sb.slots[i] = {1, ck.size(), util::Xxh3(ck)};
  }
  // Old records must not look like ours; the uuid guards too.
  if (o.discard) (void)media->Discard(sb.data_offset, uint64_t(segs) * f.segment_bytes);
  for (int i = 0; i < 2; ++i) {
    sb.generation = uint64_t(i + 1);
    sb.newest_slot = 1;
    sb.clean = true;
    std::vector<std::byte> enc = log::EncodeSuperblock(sb);
    AlignedBuffer b(kBlockSize);
    std::memcpy(b.data(), enc.data(), kBlockSize);
    if (absl::Status s = media->Write(uint64_t(i) * kBlockSize, b.span()); !s.ok()) return s;
  }
  if (absl::Status s = media->Sync(); !s.ok()) return s;
  util::Logger("core")->info("formatted {}: {} segments of {}, logical {} MiB, uuid {}",
                             media->Describe(), segs, f.segment_bytes,
                             sb.logical_blocks * kBlockSize >> 20, log::UuidToString(sb.uuid));
  return DoOpen(std::move(media), o);
}

// ---------------------------------------------------------------- open

absl::StatusOr<std::unique_ptr<PoolImpl>> PoolImpl::DoOpen(std::shared_ptr<Media> media,
                                                           const OpenOptions& o) {
  std::unique_ptr<PoolImpl> p(new PoolImpl(std::move(media)));
  PoolImpl* pool = p.get();
  pool->read_only_ = o.read_only;
  pool->accept_loss_ = o.accept_loss;
  absl::Status st = RunSteps(
      "open",
      {
          {"read superblock", [&] { return pool->ReadSuperblock(); }},
          {"load checkpoint / recover", [&] { return pool->LoadCheckpointOrRebuild(); }},
          {"mark dirty",
           [&] {
             if (pool->read_only_) return absl::OkStatus();
             pool->sb_.clean = false;
             // Opening upgrades an older format: from now on records may
             // carry ops it lacks.
             pool->sb_.format_version = log::kFormatVersion;
             pool->geo_.format_version = log::kFormatVersion;
             return pool->WriteSuperblock();
           }},
          {"start threads",
           [&] {
             pool->StartThreads(o);
             return absl::OkStatus();
           }},
      });
  if (!st.ok()) return st;
  return p;
}

void PoolImpl::SetGeometry(const log::Superblock& sb) {
  geo_.block_size = sb.block_size;
  geo_.media_bytes = sb.media_bytes;
  geo_.segment_blocks = sb.segment_blocks;
  geo_.segment_count = sb.segment_count;
  geo_.data_offset = sb.data_offset;
  geo_.checkpoint_slot_blocks = sb.ckpt_slot_blocks;
  geo_.logical_blocks = sb.logical_blocks;
  geo_.max_atomic_bytes =
      std::min<uint64_t>(uint64_t(sb.segment_blocks) * kBlockSize / 4, 8u << 20);
  geo_.format_version = sb.format_version;
  geo_.uuid = log::UuidToString(sb.uuid);
}

absl::Status PoolImpl::ReadSuperblock() {
  if (media_->size() < 2 * kBlockSize) return absl::NotFoundError("media too small to hold a pool");
  AlignedBuffer buf(2 * kBlockSize);
  if (absl::Status s = media_->Read(0, buf.span()); !s.ok()) return s;
  absl::StatusOr<log::Superblock> copies[2] = {
      log::DecodeSuperblock(buf.span().subspan(0, kBlockSize)),
      log::DecodeSuperblock(buf.span().subspan(kBlockSize, kBlockSize))};
  int best = -1;
  for (int i = 0; i < 2; ++i) {
    if (copies[i].ok() && (best < 0 || copies[i]->generation > copies[best]->generation)) best = i;
  }
  if (best < 0) {
    for (auto& c : copies)
      if (absl::IsFailedPrecondition(c.status())) return c.status();
    if (absl::IsNotFound(copies[0].status()) && absl::IsNotFound(copies[1].status()))
      return absl::NotFoundError("no ftld pool on this media (no superblock)");
    return absl::DataLossError("both superblock copies are corrupt");
  }
  if (!copies[1 - best].ok()) {
    degraded_.push_back(absl::StrFormat("superblock copy %d is unusable (%s)", 1 - best,
                                        copies[1 - best].status().message()));
    util::Logger("core")->warn("superblock copy {} unusable ({}); using copy {}", 1 - best,
                               std::string(copies[1 - best].status().message()), best);
  }
  sb_ = *copies[best];
  if (sb_.media_bytes > media_->size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "media is %d bytes but the pool was formatted for %d", media_->size(), sb_.media_bytes));
  }
  SetGeometry(sb_);
  seg_readers_ = std::make_unique<std::atomic<uint32_t>[]>(sb_.segment_count);
  return absl::OkStatus();
}

absl::Status PoolImpl::WriteSuperblock() {
  ++sb_.generation;
  std::vector<std::byte> enc = log::EncodeSuperblock(sb_);
  AlignedBuffer b(kBlockSize);
  std::memcpy(b.data(), enc.data(), kBlockSize);
  if (absl::Status s = media_->Write((sb_.generation % 2) * kBlockSize, b.span()); !s.ok())
    return s;
  media_bytes_ += kBlockSize;
  return SyncMedia();
}

void PoolImpl::DropScratch() {
  // Non-persistent ranges lose their content in a crash (range.h); the
  // checkpoints written right after recovery make that durable.
  uint64_t n = state_->DropNonPersistent();
  if (n > 0) {
    open_report_ += absl::StrFormat("; %d blocks of non-persistent ranges dropped", n);
    util::Logger("core")->info("dropped {} blocks of non-persistent ranges", n);
  }
}

void PoolImpl::SealHotSegments() {
  absl::MutexLock l(&map_mu_);
  for (gc::Slot slot : {gc::Slot::kHot, gc::Slot::kHotGc}) {
    uint32_t& seg = open_seg_[int(slot)];
    if (seg == UINT32_MAX) continue;
    auto& si = state_->segments().at(seg);
    state_->segments().SetState(seg, log::SegmentState::kFull);
    si.sealed_seq = si.max_seq;
    seg = UINT32_MAX;
  }
}

void PoolImpl::AdoptOpenSegments() {
  // Resume appending to the segments that were open. The media keep only
  // the stream (user / relocation), not the slot: a user segment resumes
  // as the cold slot, a relocation segment as the relocation slot, and a
  // second open segment of either (a hot one) is sealed.
  auto& segs = state_->segments();
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto& si = segs.at(s);
    if (si.state != log::SegmentState::kOpen) continue;
    gc::Slot slot = si.stream == log::Stream::kUser ? gc::Slot::kCold : gc::Slot::kGc;
    if (open_seg_[int(slot)] == UINT32_MAX) {
      open_seg_[int(slot)] = s;
      si.opened_seq = si.max_seq;
    } else {
      segs.SetState(s, log::SegmentState::kFull);
      si.sealed_seq = si.max_seq;
    }
  }
}

absl::Status PoolImpl::LoadCheckpointOrRebuild() {
  auto log = util::Logger("core");
  int order[2] = {sb_.newest_slot, 1 - sb_.newest_slot};
  for (int slot : order) {
    const log::SlotInfo& si = sb_.slots[slot];
    if (si.bytes == 0 || si.bytes > uint64_t(sb_.ckpt_slot_blocks) * kBlockSize) continue;
    AlignedBuffer buf(AlignUp(si.bytes, kBlockSize));
    uint64_t off = (2 + uint64_t(slot) * sb_.ckpt_slot_blocks) * kBlockSize;
    if (absl::Status s = media_->Read(off, buf.span()); !s.ok()) {
      log->warn("checkpoint slot {} unreadable: {}", slot, s.ToString());
      degraded_.push_back(absl::StrFormat("checkpoint slot %d is damaged (checksum mismatch or unreadable)", slot));
      continue;
    }
    auto bytes = buf.span().subspan(0, si.bytes);
    if (util::Xxh3(bytes) != si.xxh3) {
      log->warn("checkpoint slot {} is corrupt (checksum mismatch); trying the other", slot);
      degraded_.push_back(absl::StrFormat("checkpoint slot %d is damaged (checksum mismatch or unreadable)", slot));
      continue;
    }
    auto state = std::make_unique<MapState>(sb_.segment_count, sb_.segment_blocks);
    auto loaded = DecodeCheckpoint(bytes, sb_.uuid, state.get());
    if (!loaded.ok()) {
      log->warn("checkpoint slot {} unusable: {}", slot, std::string(loaded.status().message()));
      degraded_.push_back(absl::StrFormat("checkpoint slot %d is unusable (%s)", slot, loaded.status().message()));
      continue;
    }
    state_ = std::move(state);
    for (uint32_t s = 0; s < sb_.segment_count; ++s) {
      if (state_->segments().at(s).state == log::SegmentState::kCleaning)
        state_->segments().SetState(s, log::SegmentState::kFull);
    }
    next_seq_ = loaded->next_seq;
    if (sb_.clean && slot == sb_.newest_slot) {
      AdoptOpenSegments();
      open_report_ = absl::StrCat("clean open from checkpoint (next seq ", next_seq_, ")");
    } else {
      if (absl::Status s = RollForward(loaded->next_seq); !s.ok()) return s;
      if (slot != sb_.newest_slot) open_report_ += absl::StrCat(" (fell back to checkpoint slot ", slot, ")");
      DropScratch();
    }
    last_written_seq_ = next_seq_ - 1;
    durable_seq_ = next_seq_ - 1;
    proven_seq_ = next_seq_ - 1;  // the checkpoints below (or a clean one) cover it
    if (!read_only_ && (!sb_.clean || slot != sb_.newest_slot)) {
      // Both slots get the recovered state, so neither can later replay
      // records past the point where this recovery stopped.
      for (int i = 0; i < 2; ++i)
        if (absl::Status s = DoCheckpoint(); !s.ok()) return s;
    }
    gate_seq_ = std::min(sb_.slots[0].next_seq, sb_.slots[1].next_seq);
    return absl::OkStatus();
  }
  log->warn("no usable checkpoint; rebuilding the map from the log alone");
  degraded_.push_back(
      "no usable checkpoint: the map was rebuilt from the log alone (trims, clones and "
      "snapshots older than the log may be lost)");
  if (absl::Status s = RebuildFromLog(); !s.ok()) return s;
  DropScratch();
  last_written_seq_ = next_seq_ - 1;
  durable_seq_ = next_seq_ - 1;
  proven_seq_ = next_seq_ - 1;
  for (int i = 0; i < 2 && !read_only_; ++i)
    if (absl::Status s = DoCheckpoint(); !s.ok()) return s;
  gate_seq_ = std::min(sb_.slots[0].next_seq, sb_.slots[1].next_seq);
  return absl::OkStatus();
}

namespace {
struct FoundRecord {
  log::ParsedRecord rec;
  uint32_t seg;
};
}  // namespace

absl::Status PoolImpl::RollForward(uint64_t from_seq) {
  auto& segs = state_->segments();
  std::vector<FoundRecord> found;
  std::vector<FoundRecord> claims;  // damaged headers, as they read
  std::vector<uint32_t> was_open;
  // Records newer than the checkpoint are in segments that were free or
  // open then, or in segments cleaned and reused since: those start with a
  // record at or above from_seq in block 0.
  AlignedBuffer first_block(kBlockSize);
  for (uint32_t s = 0; s < segs.count(); ++s) {
    const auto& si = segs.at(s);
    Bno first = segs.FirstBlock(s);
    auto read = [&](uint32_t b, uint32_t n, std::span<std::byte> out) {
      return media_->Read(MediaOffset(first + b), out.subspan(0, size_t(n) * kBlockSize));
    };
    bool reused = false;
    if (read(0, 1, first_block.span()).ok() && log::PeekHeaderBlocks(first_block.span()) > 0) {
      uint64_t seq = util::GetU64(first_block.data() + 16);
      reused = seq >= from_seq;
    }
    if (si.state == log::SegmentState::kOpen) was_open.push_back(s);
    if (!reused && si.state != log::SegmentState::kFree && si.state != log::SegmentState::kOpen)
      continue;
    if (reused) {
      // Cleaned and rewritten since the checkpoint: what it held then is
      // gone; its extent is what replay applies now.
      segs.at(s).write_ptr = 0;
      segs.at(s).max_seq = 0;
    }
    log::ScanOptions so;
    so.segment_blocks = geo_.segment_blocks;
    so.start_block = !reused && si.state == log::SegmentState::kOpen ? si.write_ptr : 0;
    so.uuid = sb_.uuid;
    so.min_seq = from_seq;
    so.resync_after_damage = true;
    auto scan = log::ScanSegment(so, read);
    for (auto& r : scan.records) found.push_back({std::move(r), s});
    for (auto& r : scan.damaged_headers) claims.push_back({std::move(r), s});
  }
  std::sort(found.begin(), found.end(),
            [](const FoundRecord& a, const FoundRecord& b) { return a.rec.header.seq < b.rec.header.seq; });
  uint64_t expected = from_seq, max_seen = from_seq - 1;
  size_t applied = 0;
  size_t i = 0;
  // Whether a record from found[from] on says record `seq` was durable;
  // said_durable: one after found[i].
  auto durable_from = [&](size_t from, uint64_t seq) {
    for (size_t k = from; k < found.size(); ++k)
      if (found[k].rec.header.durable_seq >= seq) return true;
    return false;
  };
  auto said_durable = [&](size_t i, uint64_t seq) { return durable_from(i + 1, seq); };
  for (; i < found.size(); ++i) {
    const auto& h = found[i].rec.header;
    // A gap that a durable record after it proves was acknowledged: lost
    // (accept_loss) or the open fails below.
    while (accept_loss_ && h.seq > expected && durable_from(i, expected)) {
      const FoundRecord* claim = nullptr;
      for (const FoundRecord& c : claims)
        if (c.rec.header.seq == expected) claim = &c;
      AcceptLostRecord(expected, claim ? &claim->rec : nullptr, claim ? claim->seg : 0);
      ++expected;
    }
    if (h.seq != expected) break;
    if (!found[i].rec.data_ok) {
      // Torn tail (not yet durable) or a damaged durable record? A later
      // record that saw it durable tells.
      if (!said_durable(i, h.seq)) break;
      util::Logger("core")->error(
          "record seq {} has damaged data blocks but was durable; applying it (those blocks will read as errors)",
          h.seq);
      for (const log::Op& o : h.ops) {
        if (o.type != log::OpType::kWrite) continue;
        losses_.push_back(absl::StrFormat(
            "record seq %d: damaged data among volume %s blocks %d-%d (the damaged ones read as EIO)",
            h.seq, state_->volume(o.write.vol) ? state_->volume(o.write.vol)->name : absl::StrCat("#", o.write.vol),
            o.write.lba, o.write.lba + o.write.csum.size() - 1));
        util::Logger("core")->error("{}", losses_.back());
      }
    }
    if (h.joined) {
      // All of a joined pair or none: its partner must be valid (or have
      // been durable, then a damaged partner is handled as above).
      bool partner = i + 1 < found.size() && found[i + 1].rec.header.seq == h.seq + 1 &&
                     found[i + 1].rec.data_ok;
      if (!partner && !said_durable(i, h.seq + 1)) break;
    }
    Bno pba = segs.FirstBlock(found[i].seg) + found[i].rec.first_block;
    state_->ApplyRecord(h, pba);
    auto& si = segs.at(found[i].seg);
    if (si.state == log::SegmentState::kFree) segs.SetState(found[i].seg, log::SegmentState::kFull);
    si.stream = h.stream;
    ++applied;
    ++expected;
  }
  for (const auto& f : found) max_seen = std::max(max_seen, f.rec.header.seq);
  for (size_t k = i; k < found.size(); ++k) {
    if (found[k].rec.header.durable_seq >= expected) {
      return absl::DataLossError(absl::StrFormat(
          "log record seq %d is missing or corrupt but a later record says it was durable; "
          "refusing to open (ftl-tool check --accept-loss lists what is lost; ftld "
          "--accept-loss opens with those blocks answering EIO)",
          expected));
    }
  }
  for (uint32_t s : was_open) {
    if (segs.at(s).state == log::SegmentState::kOpen) segs.SetState(s, log::SegmentState::kFull);
  }
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto& si = segs.at(s);
    if (si.state == log::SegmentState::kFull && si.sealed_seq == 0) si.sealed_seq = si.max_seq;
  }
  // Records past a torn one in the same segment are invisible to the scan
  // but still on the media; their seqs must never be handed out again.
  // Periodic checkpoints sync, so far fewer than 2^32 records are ever
  // unsynced at a crash.
  next_seq_ = max_seen + 1 + kSeqJumpAfterCrash;
  open_report_ = absl::StrFormat(
      "recovered: checkpoint seq %d + %d records rolled forward%s", from_seq, applied,
      i < found.size() ? absl::StrFormat(" (%d unflushed records after seq %d discarded)",
                                         found.size() - i, expected - 1)
                       : "");
  util::Logger("core")->info("{}", open_report_);
  return absl::OkStatus();
}

void PoolImpl::AcceptLostRecord(uint64_t seq, const log::ParsedRecord* claim, uint32_t seg) {
  auto log = util::Logger("core");
  if (!claim) {
    losses_.push_back(absl::StrFormat(
        "record seq %d is lost (no readable header): the blocks it changed are unknown", seq));
    log->error("accepting loss: {}", losses_.back());
    return;
  }
  const log::RecordHeader& h = claim->header;
  // Only user writes are fenced off. A damaged header's notes and
  // relocations are not applied: nothing in it is verified, and a wrong
  // VBA or tree id would corrupt the map.
  log::RecordHeader poison;
  poison.seq = seq;
  poison.durable_seq = h.durable_seq;
  poison.uuid = h.uuid;
  poison.stream = h.stream;
  poison.header_blocks = h.header_blocks;
  uint32_t skipped = 0;
  bool data_before = false;  // a skipped op consumed data blocks first
  for (const log::Op& o : h.ops) {
    const VolumeMeta* v = o.type == log::OpType::kWrite ? state_->volume(o.write.vol) : nullptr;
    const Bno count = Bno(o.write.csum.size());
    const bool usable = v && !v->is_snapshot() && !data_before && count > 0 &&
                        o.write.vba.size() == count &&
                        uint64_t(o.write.lba) + count <= v->size_blocks;
    if (!usable) {
      ++skipped;
      if (o.data_blocks() > 0) data_before = true;
      continue;
    }
    log::Op w = o;
    for (uint32_t& c : w.write.csum) c = ~c;  // never the block's checksum
    w.write.vba.clear();  // fresh VBAs, as a live write of these blocks gets
    state_->PlanWrite(w.write.vol, w.write.lba, count, &w.write.vba);
    poison.data_blocks += count;
    losses_.push_back(absl::StrFormat(
        "record seq %d lost: volume %s blocks %d-%d read as EIO (as its damaged header names them)",
        seq, v->name, w.write.lba, w.write.lba + count - 1));
    log->error("accepting loss: {}", losses_.back());
    poison.ops.push_back(std::move(w));
  }
  if (skipped > 0) {
    losses_.push_back(absl::StrFormat(
        "record seq %d lost: %d of its operations (trims, notes, relocations or writes whose "
        "header fields are implausible) were not applied",
        seq, skipped));
    log->error("accepting loss: {}", losses_.back());
  }
  if (!poison.ops.empty())
    state_->ApplyRecord(poison, state_->segments().FirstBlock(seg) + claim->first_block);
}

absl::Status PoolImpl::RebuildFromLog() {
  state_ = std::make_unique<MapState>(sb_.segment_count, sb_.segment_blocks);
  state_->AddVolume(0, sb_.primary_name, sb_.primary_blocks);
  auto& segs = state_->segments();
  std::vector<FoundRecord> found;
  for (uint32_t s = 0; s < segs.count(); ++s) {
    log::ScanOptions so;
    so.segment_blocks = geo_.segment_blocks;
    so.uuid = sb_.uuid;
    Bno first = segs.FirstBlock(s);
    auto scan = log::ScanSegment(so, [&](uint32_t b, uint32_t n, std::span<std::byte> out) {
      return media_->Read(MediaOffset(first + b), out.subspan(0, size_t(n) * kBlockSize));
    });
    for (auto& r : scan.records) found.push_back({std::move(r), s});
  }
  std::sort(found.begin(), found.end(),
            [](const FoundRecord& a, const FoundRecord& b) { return a.rec.header.seq < b.rec.header.seq; });
  uint64_t max_seen = 0;
  size_t applied = 0;
  // A joined record whose partner is missing or torn and was never said
  // durable is the torn tail of one atomic batch: skipped like its partner.
  // (A partner cleaned away since is not missing: the cleaner only takes
  // records both checkpoints cover, and those were synced.)
  std::unordered_map<uint64_t, const FoundRecord*> by_seq;
  uint64_t durable_max = 0;
  for (const FoundRecord& f : found) {
    by_seq[f.rec.header.seq] = &f;
    if (f.rec.data_ok) durable_max = std::max(durable_max, f.rec.header.durable_seq);
  }
  for (const FoundRecord& f : found) {
    max_seen = std::max(max_seen, f.rec.header.seq);
    if (!f.rec.data_ok) continue;
    if (f.rec.header.joined && durable_max <= f.rec.header.seq) {
      auto it = by_seq.find(f.rec.header.seq + 1);
      if (it == by_seq.end() || !it->second->rec.data_ok) continue;
    }
    state_->ApplyRecord(f.rec.header, segs.FirstBlock(f.seg) + f.rec.first_block,
                        ApplyMode::kRebuild);
    auto& si = segs.at(f.seg);
    if (si.state == log::SegmentState::kFree) segs.SetState(f.seg, log::SegmentState::kFull);
    si.stream = f.rec.header.stream;
    ++applied;
  }
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto& si = segs.at(s);
    if (si.state == log::SegmentState::kFull) si.sealed_seq = si.max_seq;
  }
  next_seq_ = max_seen + 1 + kSeqJumpAfterCrash;
  open_report_ = absl::StrFormat("rebuilt from the log alone: %d records applied", applied);
  util::Logger("core")->warn("{}", open_report_);
  return absl::OkStatus();
}

void PoolImpl::StartThreads(const OpenOptions& o) {
  placement_mode_ = o.placement;
  placement_.set_active(o.placement == OpenOptions::Placement::kOn);
  discard_ = o.discard;
  separation_ = gc::SampledSeparation(geo_.logical_blocks);
  RefreshVolumes();
  if (last_ckpt_size_ == 0) {
    last_ckpt_size_ = sb_.slots[sb_.newest_slot].bytes;
    last_ckpt_leaves_ = leaves_now_.load();
    last_ckpt_inners_ = inners_now_.load();
  }
  ckpt_interval_ = o.checkpoint_interval;
  auto_checkpoint_ = o.auto_checkpoint;
  last_ckpt_ = std::chrono::steady_clock::now();
  last_ckpt_seq_ = next_seq_;
  if (!read_only_) writer_ = std::thread([this] { WriterLoop(); });
  gc::CleanerOptions co;
  // A small fixed reserve, whatever the pool's size: every free segment
  // kept idle is space the cleaner cannot use to let victims age. At fill
  // 0.9 each one costs about 0.1 of write amplification, and a cleaner
  // that kept up cleaned ahead to its high watermark (uniform writes with
  // 9 free segments: WA 6.63; with 5: 6.28). Users block at
  // kGcReserveSegments free until the cleaner catches up.
  co.critical = kGcReserveSegments + 1;
  co.low_watermark = co.critical + 1;
  co.high_watermark = co.low_watermark + 1;
  co.max_segments_per_second = 0;
  cleaner_ = std::make_unique<gc::Cleaner>(this, co);
  if (o.start_cleaner && !read_only_) cleaner_->Start();
}

void PoolImpl::StopThreads() {
  if (cleaner_) cleaner_->Stop();
  {
    absl::MutexLock l(&queue_mu_);
    stop_ = true;
  }
  if (writer_.joinable()) writer_.join();
  JoinCheckpointIo();
}

PoolImpl::~PoolImpl() {
  // Without Close() this is a crash as far as the media is concerned: the
  // queued requests are written, nothing else.
  StopThreads();
}

absl::Status PoolImpl::Close() {
  if (closed_) return absl::FailedPreconditionError("pool already closed");
  closed_ = true;
  if (read_only_) return absl::OkStatus();
  return RunSteps("close", {
                               {"stop cleaner and writer",
                                [&] {
                                  StopThreads();
                                  absl::MutexLock l(&queue_mu_);
                                  return failed_;
                                }},
                               {"checkpoint",
                                [&] {
                                  absl::MutexLock role(&commit_mu_);
                                  SealHotSegments();
                                  return DoCheckpoint();
                                }},
                               {"mark clean",
                                [&] {
                                  sb_.clean = true;
                                  return WriteSuperblock();
                                }},
                           });
}

// ---------------------------------------------------------------- checkpoint

absl::Status PoolImpl::DoCheckpoint() {
  if (absl::Status s = EncodeCheckpointNow(); !s.ok()) return s;
  return WriteEncodedCheckpoint();
}

void PoolImpl::StartAutoCheckpoint() {
  if (absl::Status s = EncodeCheckpointNow(); !s.ok()) {
    util::Logger("core")->error("checkpoint failed: {}", s.ToString());
    return;
  }
  // The slot write and its sync overlap with new commits: the encoded state
  // is complete, records after it stay in the log, and the superblock only
  // names the new slot once it is durable.
  ckpt_io_thread_ = std::thread([this] {
    if (absl::Status s = WriteEncodedCheckpoint(); !s.ok())
      util::Logger("core")->error("checkpoint failed: {}", s.ToString());
  });
}

void PoolImpl::JoinCheckpointIo() {
  if (ckpt_io_thread_.joinable()) ckpt_io_thread_.join();
}

absl::Status PoolImpl::EncodeCheckpointNow() {
  JoinCheckpointIo();  // the previous one has settled sb_ and its slot
  // ckpt_buf_ / ckpt_io_ keep their memory between checkpoints: encoding
  // into fresh map-sized allocations spent most of a checkpoint zeroing
  // pages (and the committer waits for it).
  std::vector<std::byte>& ck = ckpt_buf_;
  uint64_t ck_leaves, ck_inners;
  {
    absl::ReaderMutexLock l(&map_mu_);
    EncodeCheckpointInto(*state_, sb_.uuid, next_seq_, &ck);
    ck_leaves = state_->tree_context()->leaves;
    ck_inners = state_->tree_context()->inners;
  }
  uint64_t cap = uint64_t(sb_.ckpt_slot_blocks) * kBlockSize;
  if (ck.size() > cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "checkpoint of %d bytes does not fit its %d-byte slot", ck.size(), cap));
  }
  const size_t padded = AlignUp(ck.size(), kBlockSize);
  if (ckpt_io_.size() < padded) ckpt_io_ = AlignedBuffer(AlignUp(padded + padded / 8, kBlockSize));
  std::memcpy(ckpt_io_.data(), ck.data(), ck.size());
  std::memset(ckpt_io_.data() + ck.size(), 0, padded - ck.size());
  ckpt_pending_ = {next_seq_, ck.size(), util::Xxh3(ck), padded, last_written_seq_.load()};
  // Committer-side bookkeeping: the next automatic checkpoint counts from here.
  last_ckpt_size_ = ck.size();
  last_ckpt_leaves_ = ck_leaves;
  last_ckpt_inners_ = ck_inners;
  last_ckpt_ = std::chrono::steady_clock::now();
  last_ckpt_seq_ = next_seq_;
  sealed_since_ckpt_ = 0;
  return absl::OkStatus();
}

absl::Status PoolImpl::WriteEncodedCheckpoint() {
  const PendingCheckpoint& p = ckpt_pending_;
  int slot = 1 - sb_.newest_slot;
  std::span<const std::byte> buf(ckpt_io_.data(), p.padded);
  uint64_t off = (2 + uint64_t(slot) * sb_.ckpt_slot_blocks) * kBlockSize;
  if (absl::Status s = media_->Write(off, buf); !s.ok()) return s;
  media_bytes_ += buf.size();
  if (absl::Status s = SyncMedia(); !s.ok()) return s;
  sb_.slots[slot] = {p.next_seq, p.bytes, p.checksum};
  sb_.newest_slot = uint8_t(slot);
  if (absl::Status s = WriteSuperblock(); !s.ok()) return s;
  uint64_t d = durable_seq_.load();
  while (d < p.covered && !durable_seq_.compare_exchange_weak(d, p.covered)) {
  }
  RaiseProven(p.next_seq - 1);  // replay never reads records the checkpoint covers
  gate_seq_ = std::min(sb_.slots[0].next_seq, sb_.slots[1].next_seq);
  ++ckpt_count_;
  ckpt_bytes_ += buf.size();
  return absl::OkStatus();
}

absl::Status PoolImpl::Checkpoint() {
  if (read_only_) return absl::FailedPreconditionError("pool is open read-only");
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

absl::Status PoolImpl::SyncMedia() {
  absl::MutexLock l(&sync_mu_);
  // The claim is read first: it belongs to a record at or before `covered`.
  uint64_t claim = last_written_claim_.load();
  uint64_t covered = last_written_seq_.load();
  absl::Status s = media_->Sync();
  if (!s.ok()) return s;
  uint64_t d = durable_seq_.load();
  while (d < covered && !durable_seq_.compare_exchange_weak(d, covered)) {
  }
  RaiseProven(claim);
  return absl::OkStatus();
}

void PoolImpl::RaiseProven(uint64_t seq) {
  uint64_t p = proven_seq_.load();
  while (p < seq && !proven_seq_.compare_exchange_weak(p, seq)) {
  }
}

absl::Status PoolImpl::FlushDurable() {
  if (absl::Status s = SyncMedia(); !s.ok()) return s;
  // Records with ops up to what is durable now need a durable record that
  // says so; a marker is one (nothing else is written for it).
  const uint64_t need = std::min(durable_seq_.load(), last_content_seq_.load());
  if (proven_seq_.load() >= need) return absl::OkStatus();
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

// ---------------------------------------------------------------- queries

std::vector<std::string> PoolImpl::VolumeNames() const {
  std::vector<std::string> out;
  absl::MutexLock l(&vols_mu_);
  for (const auto& [id, v] : volumes_)
    if (!v->gone()) out.push_back(v->name());
  return out;
}

Volume* PoolImpl::GetVolume(const std::string& name) {
  absl::MutexLock l(&vols_mu_);
  for (auto& [id, v] : volumes_)
    if (!v->gone() && v->name() == name) return v.get();
  return nullptr;
}

Volume* PoolImpl::PrimaryVolume() {
  absl::MutexLock l(&vols_mu_);
  auto it = volumes_.find(0);
  return it == volumes_.end() ? nullptr : it->second.get();
}

void PoolImpl::RefreshVolumes() {
  struct Live {
    uint32_t id;
    std::string name;
    uint64_t size;
    bool ro;
    bool immutable;
  };
  std::vector<Live> live;
  {
    absl::ReaderMutexLock l(&map_mu_);
    for (const auto& [id, v] : state_->volumes()) {
      if (v->is_snapshot()) continue;
      live.push_back({id, v->name, v->size_blocks, read_only_ || v->read_only,
                      (v->attrs.union_bits() & log::kAttrImmutable) != 0});
    }
    leaves_now_ = state_->tree_context()->leaves;
    inners_now_ = state_->tree_context()->inners;
  }
  absl::MutexLock l(&vols_mu_);
  size_t k = 0;
  for (auto& [id, v] : volumes_) {
    while (k < live.size() && live[k].id < id) ++k;
    if (k == live.size() || live[k].id != id) v->MarkGone();
  }
  for (const Live& lv : live) {
    auto it = volumes_.find(lv.id);
    if (it == volumes_.end() || it->second->gone()) {
      // A reused id (after a drop) gets a fresh object; the old one stays.
      if (it != volumes_.end()) graveyard_.push_back(std::move(it->second));
      auto v = std::make_unique<VolumeImpl>(this, lv.id, lv.name, lv.size, lv.ro);
      it = volumes_.insert_or_assign(lv.id, std::move(v)).first;
    }
    it->second->SetHasImmutable(lv.immutable);
  }
}

bool PoolImpl::RangeImmutable(uint32_t vol, Bno lba, Bno n) {
  absl::ReaderMutexLock l(&map_mu_);
  const VolumeMeta* v = state_->volume(vol);
  return v && v->attrs.Any(lba, n, log::kAttrImmutable);
}

namespace {
// Set on the thread that is committing records: it must not wait for a
// checkpoint (the writer thread would wait for it in turn).
thread_local bool t_committing = false;
}  // namespace

CommitterScope::CommitterScope() : outer_(t_committing) { t_committing = true; }
CommitterScope::~CommitterScope() { t_committing = outer_; }

absl::Status PoolImpl::CheckMetadataRoom(uint32_t reserve_divisor) {
  const uint64_t cap = uint64_t(sb_.ckpt_slot_blocks) * kBlockSize;
  const uint64_t reserve = cap / reserve_divisor;
  uint64_t estimate = 0, grown = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    // New nodes since the last checkpoint at their largest encoding.
    uint64_t leaves = leaves_now_, inners = inners_now_;
    grown = (leaves > last_ckpt_leaves_ ? leaves - last_ckpt_leaves_ : 0) * 15 * map::kLeafCap +
            (inners > last_ckpt_inners_ ? inners - last_ckpt_inners_ : 0) * 10 * map::kInnerCap;
    estimate = last_ckpt_size_ + grown;
    if (estimate + reserve <= cap) return absl::OkStatus();
    // The estimate counts new nodes at their largest; a checkpoint measures
    // them. Only worth it when that part is large (at most one checkpoint
    // per 1/64 of the slot of growth).
    if (grown < cap / 64 || read_only_ || t_committing || attempt > 0) break;
    if (absl::Status s = Checkpoint(); !s.ok()) break;
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "metadata area full: the map needs about %d of %d bytes of checkpoint space; delete "
      "snapshots or clones, or reformat with more space",
      estimate, cap));
}

PoolStats PoolImpl::Stats() const {
  PoolStats s;
  s.user_write_bytes = user_bytes_;
  s.media_write_bytes = media_bytes_;
  s.write_amplification = s.user_write_bytes ? double(s.media_write_bytes) / double(s.user_write_bytes) : 0;
  s.gc_relocated_bytes = reloc_bytes_;
  s.user_hot_write_bytes = user_hot_bytes_;
  s.gc_hot_relocated_bytes = reloc_hot_bytes_;
  s.gc_segments_cleaned = cleaner_ ? cleaner_->segments_cleaned() : 0;
  s.checkpoint_count = ckpt_count_;
  s.checkpoint_bytes = ckpt_bytes_;
  {
    absl::ReaderMutexLock l(&map_mu_);
    const auto& segs = state_->segments();
    s.segments_total = segs.count();
    s.segments_free = segs.free_count();
    s.free_bytes = uint64_t(segs.free_count()) * geo_.segment_blocks * kBlockSize;
    s.live_bytes = segs.live_blocks() * kBlockSize;
    s.map_memory_bytes = state_->memory_bytes();
    s.map_vba_table_bytes = state_->vba_table_memory_bytes();
    s.hot_lifespan_seqs = placement_.hot_lifespan();
    s.mapped_blocks = state_->mapped_blocks();
  }
  s.next_seq = last_written_seq_ + 1;
  {
    absl::ReaderMutexLock l(&map_mu_);
    for (const auto& [id, v] : state_->volumes()) s.snapshots += v->is_snapshot() ? 1 : 0;
  }
  s.metadata_bytes = last_ckpt_size_;
  s.metadata_capacity = uint64_t(sb_.ckpt_slot_blocks) * kBlockSize;
  s.cleaner_state = cleaner_ ? cleaner_->state() : "stopped";
  return s;
}

uint64_t PoolImpl::MappedBlocks(uint32_t vol) {
  absl::ReaderMutexLock l(&map_mu_);
  const VolumeMeta* v = state_->volume(vol);
  return v ? v->tree.mapped_blocks() : 0;
}

}  // namespace ftl::core

namespace ftl {

// ---------------------------------------------------------------- Pool API

absl::StatusOr<std::unique_ptr<Pool>> Pool::Format(std::shared_ptr<Media> media,
                                                   const FormatOptions& f,
                                                   const OpenOptions& o) {
  auto p = core::PoolImpl::DoFormat(std::move(media), f, o);
  if (!p.ok()) return p.status();
  return std::unique_ptr<Pool>(std::move(*p));
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::Open(std::shared_ptr<Media> media,
                                                 const OpenOptions& o) {
  auto p = core::PoolImpl::DoOpen(std::move(media), o);
  if (!p.ok()) return p.status();
  return std::unique_ptr<Pool>(std::move(*p));
}

bool Pool::LooksFormatted(Media& media) {
  if (media.size() < 2 * kBlockSize) return false;
  core::AlignedBuffer buf(2 * kBlockSize);
  if (!media.Read(0, buf.span()).ok()) return false;
  for (int i = 0; i < 2; ++i) {
    auto sb = log::DecodeSuperblock(buf.span().subspan(i * kBlockSize, kBlockSize));
    if (sb.ok() || !absl::IsNotFound(sb.status())) return true;
  }
  return false;
}

}  // namespace ftl
