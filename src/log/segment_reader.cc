#include "log/segment_reader.h"

#include "util/checksum.h"

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
      return continues(*h) ? ReadVerdict::kGood : ReadVerdict::kAbsent;
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
    auto h = DecodeRecordHeader(buf);
    if (!h.ok()) {
      scan.stop_reason = "checksum";
      if (opts.resync_after_damage) {
        if (scan.damaged++ == 0) scan.first_damaged_block = pos;
        if (auto claim = DecodeRecordHeaderUnverified(buf); claim.ok() && claim->uuid == opts.uuid) {
          ParsedRecord rec;
          rec.first_block = pos;
          rec.header = std::move(*claim);
          rec.data_ok = false;
          scan.damaged_headers.push_back(std::move(rec));
        }
        ++pos;  // look for the next valid header
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
    ParsedRecord rec;
    rec.first_block = pos;
    rec.header = std::move(*h);
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
      if (!read(pos + hb, rec.header.data_blocks, data, kBlock, data_check).ok() ||
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
      if (opts.resync_after_damage) {
        if (scan.damaged++ == 0) scan.first_damaged_block = scan.records.back().first_block;
        continue;  // the header was valid: the next record follows it
      }
      break;
    }
  }
  return scan;
}

}  // namespace ftl::log
