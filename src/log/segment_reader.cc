#include "log/segment_reader.h"

#include <algorithm>
#include <optional>

#include "util/checksum.h"
#include "util/encoding.h"

namespace ftl::log {

CheckedBlockReader MediaSegmentReader(Media* media, uint64_t segment_offset, bool all_copies) {
  return [media, segment_offset, all_copies](uint32_t first, uint32_t n, std::span<std::byte> out,
                                             size_t unit_bytes, ReadCheck check) {
    const uint64_t at = segment_offset + uint64_t(first) * kBlock;
    auto span = out.subspan(0, size_t(n) * kBlock);
    return all_copies ? media->VerifyCopies(at, span, unit_bytes, check)
                      : media->ReadVerified(at, span, unit_bytes, check);
  };
}

SegmentScan ScanSegment(const ScanOptions& opts, const SegmentBlockReader& read) {
  return ScanSegment(opts, CheckedBlockReader([&read](uint32_t first, uint32_t n, std::span<std::byte> out,
                                                      size_t, ReadCheck) { return read(first, n, out); }));
}

SegmentScan ScanSegment(const ScanOptions& opts, const CheckedBlockReader& read) {
  SegmentScan scan;
  uint32_t pos = opts.start_block;
  uint64_t last_seq = 0;
  std::vector<std::byte> buf;
  std::vector<std::byte> chain_block;  // the header block of a sector chain
  scan.end_block = pos;
  while (true) {
    if (pos >= opts.segment_blocks) {
      scan.stop_reason = "end";
      break;
    }
    // A header that continues this scan; anything else ends it (or, with
    // resync, is skipped). As a mirror's check: see the header.
    auto continues = [&](const RecordHeader& h) {
      return h.uuid == opts.uuid && h.seq >= opts.min_seq && h.seq > last_seq &&
             pos + h.header_blocks + h.data_blocks <= opts.segment_blocks;
    };
    auto judge_header = [&](std::span<const std::byte> b) {
      auto h = DecodeRecordHeader(b);
      if (!h.ok()) return ReadVerdict::kBad;
      if (!continues(*h)) return ReadVerdict::kAbsent;
      // A header block's sector headers are judged with it, so that a
      // mirror heals a damaged one from another copy.
      if (h->header_blocks == 1 && SectorHeaderFits(h->payload_len)) {
        for (uint32_t k = 1; k < kSectorsPerBlock; ++k) {
          auto sector = b.subspan(size_t(k) * kSectorBytes, kSectorBytes);
          if (util::GetU32(sector.data()) == kRecordMagic && !DecodeRecordHeader(sector).ok())
            return ReadVerdict::kBad;
        }
      }
      return ReadVerdict::kGood;
    };
    auto first_check = [&](size_t, std::span<const std::byte> b) {
      uint16_t n = PeekHeaderBlocks(b);
      if (n == 0 || n > kMaxHeaderBlocks || pos + n > opts.segment_blocks) return ReadVerdict::kAbsent;
      if (n > 1) return ReadVerdict::kUnsure;
      return judge_header(b);
    };
    buf.resize(kBlock);
    if (!read(pos, 1, buf, kBlock, first_check).ok()) {
      scan.stop_reason = "read error";
      break;
    }
    uint16_t hb = PeekHeaderBlocks(buf);
    if (hb == 0 || hb > kMaxHeaderBlocks || pos + hb > opts.segment_blocks) {
      scan.stop_reason = "no record";
      // Past a damaged record, or past the end of the records so far: a
      // record whose magic was damaged looks like the end of the log, and
      // the records after it (a durability marker among them) tell
      // recovery whether it was durable. Only segments with records get
      // here, so recovery reads the rest of a few open segments.
      if (opts.resync_after_damage && (scan.damaged > 0 || !scan.records.empty())) {
        ++pos;
        continue;
      }
      break;
    }
    if (hb > 1) {
      // Read whole, so that a mirror judges (and heals) the header as one.
      buf.resize(size_t(hb) * kBlock);
      auto whole_check = [&](size_t, std::span<const std::byte> b) { return judge_header(b); };
      if (!read(pos, hb, buf, size_t(hb) * kBlock, whole_check).ok()) {
        scan.stop_reason = "read error";
        break;
      }
    }
    // Verifies a record's data and adds it; false if its data failed (the
    // scan stops there, or with resync goes on after it).
    auto accept = [&](RecordHeader hdr, uint32_t first, uint32_t header_block) {
      ParsedRecord rec;
      rec.first_block = first;
      rec.header_block = header_block;
      rec.header = std::move(hdr);
      if (opts.verify_data && rec.header.data_blocks > 0) {
        std::vector<uint32_t> want;
        want.reserve(rec.header.data_blocks);
        for (const Op& op : rec.header.ops) {
          size_t n = op.data_blocks();
          for (size_t k = 0; k < n; ++k)
            want.push_back(op.type == OpType::kWrite ? op.write.csum[k] : op.reloc.blocks[k].csum);
        }
        auto data_check = [&want](size_t i, std::span<const std::byte> b) {
          return i < want.size() && util::BlockChecksum(b) == want[i] ? ReadVerdict::kGood : ReadVerdict::kBad;
        };
        std::vector<std::byte> data(size_t(rec.header.data_blocks) * kBlock);
        if (!read(first + rec.header.header_blocks, rec.header.data_blocks, data, kBlock, data_check).ok() ||
            want.size() != rec.header.data_blocks) {
          rec.data_ok = false;
        } else {
          for (size_t i = 0; i < want.size(); ++i) {
            if (data_check(i, std::span(data).subspan(i * kBlock, kBlock)) != ReadVerdict::kGood)
              rec.data_ok = false;
          }
        }
      }
      last_seq = rec.header.seq;
      pos = rec.end_block();
      bool ok = rec.data_ok;
      scan.records.push_back(std::move(rec));
      scan.end_block = pos;
      if (!ok) {
        scan.stop_reason = "data checksum";
        if (opts.resync_after_damage && scan.damaged++ == 0)
          scan.first_damaged_block = scan.records.back().first_block;
      }
      return ok;
    };
    // Keeps what a damaged header claims (unverified; recovery with
    // accept_loss lists it): a block header's record starts at `first`, a
    // sector header's where it says its data starts.
    auto add_claim = [&](std::span<const std::byte> bytes, std::optional<uint32_t> first, uint32_t header_block) {
      auto claim = DecodeRecordHeaderUnverified(bytes);
      if (!claim.ok() || claim->uuid != opts.uuid) return;
      ParsedRecord rec;
      rec.first_block = first.value_or(claim->data_start);
      rec.header_block = header_block;
      rec.header = std::move(*claim);
      rec.data_ok = false;
      scan.damaged_headers.push_back(std::move(rec));
    };
    // Reads the sector headers of header block `header_block` (its bytes
    // `blk`) that continue the scan: each at the end of the record before
    // it. With resync, a damaged sector is counted and passed (the next
    // one says where its data starts), and so is a damaged block header
    // (`after_damage`): its chain's records still tell recovery what was
    // durable. False if the scan must stop.
    auto walk_chain = [&](std::span<const std::byte> blk, uint32_t header_block, bool after_damage) {
      bool gap = after_damage;  // a record whose extent is unknown lies before
      for (uint32_t k = 1; k < kSectorsPerBlock; ++k) {
        auto sector = blk.subspan(size_t(k) * kSectorBytes, kSectorBytes);
        if (util::GetU32(sector.data()) != kRecordMagic) {
          // Not written (zeros), or another lap's bytes (left by a torn
          // first write of the header block, or by a first header written
          // as its sector alone): not damage. The chain
          // ends; with resync a later sector may still continue it (a
          // damaged magic), past a gap.
          if (!opts.resync_after_damage) break;
          gap = gap || std::any_of(sector.begin(), sector.end(), [](std::byte b) { return b != std::byte{0}; });
          continue;
        }
        auto sh = DecodeRecordHeader(sector);
        if (!sh.ok()) {
          // The chain ends; with resync it is a gap, and damage (counted,
          // its claim kept) if it says it is this pool's and continues the
          // chain; else another lap's or pool's bytes, as a sector
          // without magic.
          if (!opts.resync_after_damage) break;
          auto who = PeekRecordIdentity(sector);
          if (who && who->uuid == opts.uuid && who->seq > last_seq && who->seq >= opts.min_seq) {
            if (scan.damaged++ == 0) scan.first_damaged_block = header_block;
            add_claim(sector, std::nullopt, header_block);
          }
          gap = true;
          continue;
        }
        const bool placed = sh->data_start == pos || (gap && sh->data_start > pos);
        if (sh->sector != k || !placed || sh->uuid != opts.uuid || sh->seq < opts.min_seq ||
            sh->seq <= last_seq || uint64_t(sh->data_start) + sh->data_blocks > opts.segment_blocks)
          break;  // another lap's or pool's: the chain ends
        gap = false;
        pos = sh->data_start;
        if (!accept(std::move(*sh), pos, header_block) && !opts.resync_after_damage) return false;
      }
      return true;
    };
    auto h = DecodeRecordHeader(buf);
    if (!h.ok()) {
      scan.stop_reason = "checksum";
      if (opts.resync_after_damage) {
        if (scan.damaged++ == 0) scan.first_damaged_block = pos;
        add_claim(buf, pos, pos);
        // A chain's later records are found by their sector headers;
        // otherwise look for the next valid header.
        const uint32_t damaged_at = pos;
        const size_t found = scan.records.size();
        if (hb == 1) {
          chain_block.assign(buf.begin(), buf.begin() + kBlock);
          walk_chain(chain_block, damaged_at, /*after_damage=*/true);
        }
        if (scan.records.size() == found) pos = damaged_at + 1;
        continue;
      }
      break;
    }
    if (!continues(*h)) {
      scan.stop_reason = "sequence";
      if (opts.resync_after_damage && scan.damaged > 0) {
        ++pos;
        continue;
      }
      break;
    }
    const uint32_t header_block = pos;
    // A one-block header with room after it may start a chain of sector
    // headers (log_format.h): keep its block.
    const bool chain = hb == 1 && SectorHeaderFits(h->payload_len);
    if (chain) chain_block.assign(buf.begin(), buf.begin() + kBlock);
    if (!accept(std::move(*h), pos, header_block)) {
      if (opts.resync_after_damage) continue;  // the header was valid: the next record follows it
      break;
    }
    if (chain && !walk_chain(chain_block, header_block, /*after_damage=*/false)) break;
  }
  return scan;
}

}  // namespace ftl::log
