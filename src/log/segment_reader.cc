#include "log/segment_reader.h"

#include "util/checksum.h"

namespace ftl::log {

SegmentScan ScanSegment(const ScanOptions& opts, const SegmentBlockReader& read) {
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
    buf.resize(kBlock);
    if (!read(pos, 1, buf).ok()) {
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
      buf.resize(size_t(hb) * kBlock);
      if (!read(pos + 1, hb - 1, std::span(buf).subspan(kBlock)).ok()) {
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
    if (h->uuid != opts.uuid || h->seq < opts.min_seq || h->seq <= last_seq ||
        pos + hb + h->data_blocks > opts.segment_blocks) {
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
      std::vector<std::byte> data(size_t(rec.header.data_blocks) * kBlock);
      if (!read(pos + hb, rec.header.data_blocks, data).ok()) {
        rec.data_ok = false;
      } else {
        uint32_t i = 0;
        for (const Op& op : rec.header.ops) {
          size_t n = op.data_blocks();
          for (size_t k = 0; k < n; ++k, ++i) {
            uint32_t want =
                op.type == OpType::kWrite ? op.write.csum[k] : op.reloc.blocks[k].csum;
            if (util::BlockChecksum(std::span(data).subspan(size_t(i) * kBlock, kBlock)) !=
                want) {
              rec.data_ok = false;
            }
          }
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
