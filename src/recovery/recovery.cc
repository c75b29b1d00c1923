#include "recovery/recovery.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpointer.h"
#include "media/aligned_buffer.h"
#include "util/checksum.h"
#include "util/encoding.h"
#include "util/logging.h"

namespace ftl::recovery {
namespace {

using log::Bno;
// Records past a torn one may still be on the media; their seqs are never
// handed out again (see RollForward).
constexpr uint64_t kSeqJumpAfterCrash = uint64_t(1) << 32;

using media::AlignUp;

}  // namespace

absl::StatusOr<Recovered> Recovery::Run() {
  auto log = util::Logger("core");
  int order[2] = {sb_.newest_slot, 1 - sb_.newest_slot};
  for (int slot : order) {
    const log::SlotInfo& si = sb_.slots[slot];
    if (si.bytes == 0 || si.bytes > uint64_t(sb_.ckpt_slot_blocks) * kBlockSize) continue;
    media::AlignedBuffer buf(AlignUp(si.bytes, kBlockSize));
    // A mirror checks every copy of the slot and heals a bad one.
    auto slot_check = [&si](size_t, std::span<const std::byte> b) {
      return util::Xxh3(b.subspan(0, si.bytes)) == si.xxh3 ? ReadVerdict::kGood : ReadVerdict::kBad;
    };
    if (absl::Status s = media_->VerifyCopies(checkpoint::SlotOffset(sb_, slot), buf.span(), buf.size(), slot_check);
        !s.ok()) {
      log->warn("checkpoint slot {} unreadable: {}", slot, s.ToString());
      out_.degraded.push_back(absl::StrFormat("checkpoint slot %d is damaged (checksum mismatch or unreadable)", slot));
      continue;
    }
    auto bytes = buf.span().subspan(0, si.bytes);
    if (util::Xxh3(bytes) != si.xxh3) {
      log->warn("checkpoint slot {} is corrupt (checksum mismatch); trying the other", slot);
      out_.degraded.push_back(absl::StrFormat("checkpoint slot %d is damaged (checksum mismatch or unreadable)", slot));
      continue;
    }
    auto map = std::make_unique<state::MapState>(sb_.segment_count, sb_.segment_blocks);
    auto loaded = checkpoint::DecodeCheckpoint(bytes, sb_.uuid, map.get());
    if (!loaded.ok()) {
      log->warn("checkpoint slot {} unusable: {}", slot, std::string(loaded.status().message()));
      out_.degraded.push_back(absl::StrFormat("checkpoint slot %d is unusable (%s)", slot, loaded.status().message()));
      continue;
    }
    out_.map = std::move(map);
    for (uint32_t s = 0; s < sb_.segment_count; ++s) {
      if (out_.map->segments().at(s).state == log::SegmentState::kCleaning)
        out_.map->segments().AbortCleaning(s);
    }
    out_.next_seq = loaded->next_seq;
    if (sb_.clean && slot == sb_.newest_slot) {
      out_.clean = true;
      out_.report = absl::StrCat("clean open from checkpoint (next seq ", out_.next_seq, ")");
    } else {
      if (absl::Status s = RollForward(loaded->next_seq); !s.ok()) return s;
      if (slot != sb_.newest_slot) out_.report += absl::StrCat(" (fell back to checkpoint slot ", slot, ")");
      DropScratch();
      out_.needs_checkpoints = true;
    }
    return std::move(out_);
  }
  log->warn("no usable checkpoint; rebuilding the map from the log alone");
  out_.degraded.push_back(
      "no usable checkpoint: the map was rebuilt from the log alone (trims, clones, "
      "snapshots and datasets older than the log may be lost)");
  if (absl::Status s = RebuildFromLog(); !s.ok()) return s;
  DropScratch();
  out_.needs_checkpoints = true;
  return std::move(out_);
}

absl::Status Recovery::RollForward(uint64_t from_seq) {
  auto& segs = out_.map->segments();
  std::vector<FoundRecord> found;
  std::vector<FoundRecord> claims;  // damaged headers, as they read
  std::vector<uint32_t> was_open;
  // Records newer than the checkpoint are in segments that were free or
  // open then, or in segments cleaned and reused since: those start with a
  // record at or above from_seq in block 0.
  media::AlignedBuffer first_block(kBlockSize);
  for (uint32_t s = 0; s < segs.count(); ++s) {
    const auto& si = segs.at(s);
    log::Pba first = segs.FirstBlock(s);
    // Every copy: after a crash a mirror's devices may differ in what was
    // not yet synced; what replay accepts must be on every device before
    // the recovered checkpoints make it durable (docs/decisions.md,
    // "Issue 22: mirrors and scrub").
    log::CheckedBlockReader read = log::MediaSegmentReader(media_.get(), MediaOffset(first), /*all_copies=*/true);
    bool reused = false;
    // A mirror takes the copy that says "reused" if one does (the scan
    // below then judges each record on every copy).
    auto reused_check = [&](size_t, std::span<const std::byte> b) {
      return log::PeekHeaderBlocks(b) > 0 && util::GetU64(b.data() + 16) >= from_seq ? ReadVerdict::kUnsure
                                                                                      : ReadVerdict::kAbsent;
    };
    if (media_->ReadVerified(MediaOffset(first), first_block.span(), kBlockSize, reused_check).ok() &&
        log::PeekHeaderBlocks(first_block.span()) > 0) {
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
    so.segment_blocks = sb_.segment_blocks;
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
        out_.losses.push_back(absl::StrFormat(
            "record seq %d: damaged data among volume %s blocks %d-%d (the damaged ones read as EIO)",
            h.seq, out_.map->volume(o.write.vol) ? out_.map->volume(o.write.vol)->name : absl::StrCat("#", o.write.vol),
            o.write.lba, o.write.lba + o.write.csum.size() - 1));
        util::Logger("core")->error("{}", out_.losses.back());
      }
    }
    if (h.joined) {
      // All of a joined pair or none: its partner must be valid (or have
      // been durable, then a damaged partner is handled as above).
      bool partner = i + 1 < found.size() && found[i + 1].rec.header.seq == h.seq + 1 &&
                     found[i + 1].rec.data_ok;
      if (!partner && !said_durable(i, h.seq + 1)) break;
    }
    Bno pba = (segs.FirstBlock(found[i].seg) + found[i].rec.first_block).value();
    out_.map->ApplyRecord(h, pba);
    auto& si = segs.at(found[i].seg);
    if (si.state == log::SegmentState::kFree) segs.MarkReplayed(found[i].seg);
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
    if (segs.at(s).state == log::SegmentState::kOpen) segs.MarkReplayed(s);
  }
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto& si = segs.at(s);
    if (si.state == log::SegmentState::kFull && si.sealed_seq == 0) si.sealed_seq = si.max_seq;
  }
  // Records past a torn one in the same segment are invisible to the scan
  // but still on the media; their seqs must never be handed out again.
  // Periodic checkpoints sync, so far fewer than 2^32 records are ever
  // unsynced at a crash.
  out_.next_seq = max_seen + 1 + kSeqJumpAfterCrash;
  out_.report = absl::StrFormat(
      "recovered: checkpoint seq %d + %d records rolled forward%s", from_seq, applied,
      i < found.size() ? absl::StrFormat(" (%d unflushed records after seq %d discarded)",
                                         found.size() - i, expected - 1)
                       : "");
  util::Logger("core")->info("{}", out_.report);
  return absl::OkStatus();
}

void Recovery::AcceptLostRecord(uint64_t seq, const log::ParsedRecord* claim, uint32_t seg) {
  auto log = util::Logger("core");
  if (!claim) {
    out_.losses.push_back(absl::StrFormat(
        "record seq %d is lost (no readable header): the blocks it changed are unknown", seq));
    log->error("accepting loss: {}", out_.losses.back());
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
    const state::VolumeMeta* v = o.type == log::OpType::kWrite ? out_.map->volume(o.write.vol) : nullptr;
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
    out_.map->PlanWrite(w.write.vol, w.write.lba, count, &w.write.vba);
    poison.data_blocks += count;
    out_.losses.push_back(absl::StrFormat(
        "record seq %d lost: volume %s blocks %d-%d read as EIO (as its damaged header names them)",
        seq, v->name, w.write.lba, w.write.lba + count - 1));
    log->error("accepting loss: {}", out_.losses.back());
    poison.ops.push_back(std::move(w));
  }
  if (skipped > 0) {
    out_.losses.push_back(absl::StrFormat(
        "record seq %d lost: %d of its operations (trims, notes, relocations or writes whose "
        "header fields are implausible) were not applied",
        seq, skipped));
    log->error("accepting loss: {}", out_.losses.back());
  }
  if (!poison.ops.empty())
    out_.map->ApplyRecord(poison, (out_.map->segments().FirstBlock(seg) + claim->first_block).value());
}

absl::Status Recovery::RebuildFromLog() {
  out_.map = std::make_unique<state::MapState>(sb_.segment_count, sb_.segment_blocks);
  out_.map->AddVolume(0, sb_.primary_name, sb_.primary_blocks);
  auto& segs = out_.map->segments();
  std::vector<FoundRecord> found;
  for (uint32_t s = 0; s < segs.count(); ++s) {
    log::ScanOptions so;
    so.segment_blocks = sb_.segment_blocks;
    so.uuid = sb_.uuid;
    log::Pba first = segs.FirstBlock(s);
    auto scan = log::ScanSegment(so, log::MediaSegmentReader(media_.get(), MediaOffset(first), /*all_copies=*/true));
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
    out_.map->ApplyRecord(f.rec.header, (segs.FirstBlock(f.seg) + f.rec.first_block).value(),
                        state::ApplyMode::kRebuild);
    auto& si = segs.at(f.seg);
    if (si.state == log::SegmentState::kFree) segs.MarkReplayed(f.seg);
    si.stream = f.rec.header.stream;
    ++applied;
  }
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto& si = segs.at(s);
    if (si.state == log::SegmentState::kFull) si.sealed_seq = si.max_seq;
  }
  out_.next_seq = max_seen + 1 + kSeqJumpAfterCrash;
  out_.report = absl::StrFormat("rebuilt from the log alone: %d records applied", applied);
  util::Logger("core")->warn("{}", out_.report);
  return absl::OkStatus();
}

void Recovery::DropScratch() {
  // Non-persistent ranges lose their content in a crash (range.h); the
  // checkpoints written right after recovery make that durable.
  uint64_t n = out_.map->DropNonPersistent();
  if (n > 0) {
    out_.report += absl::StrFormat("; %d blocks of non-persistent ranges dropped", n);
    util::Logger("core")->info("dropped {} blocks of non-persistent ranges", n);
  }
}

}  // namespace ftl::recovery
