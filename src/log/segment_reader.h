#pragma once
// Parses the records of one segment (log_format.h grammar), for recovery,
// the cleaner and ftl-tool.

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "ftl/media.h"
#include "log/log_format.h"

namespace ftl::log {

// Reads n blocks starting at block `first` of the segment into out.
using SegmentBlockReader =
    std::function<absl::Status(uint32_t first, uint32_t n, std::span<std::byte> out)>;
// The same for media that can read another copy of what fails a check
// (Media::ReadVerified): `check` judges `out` in units of unit_bytes.
using CheckedBlockReader = std::function<absl::Status(uint32_t first, uint32_t n, std::span<std::byte> out,
                                                      size_t unit_bytes, ReadCheck check)>;
// Reads the segment whose block 0 is at byte `segment_offset` of `media`
// through ReadVerified: on a mirror, a record header or data block that
// fails its checksum on one device is read from another and healed. With
// all_copies (scrub), through VerifyCopies: every copy is checked.
CheckedBlockReader MediaSegmentReader(Media* media, uint64_t segment_offset, bool all_copies = false);

struct ParsedRecord {
  RecordHeader header;
  // Block offset of the header within the segment; for a sector header
  // (header_blocks 0) that of its first data block, the header being in
  // sector header.sector of header_block.
  uint32_t first_block = 0;
  uint32_t header_block = 0;
  bool data_ok = true;       // every data block matched its checksum
  uint32_t end_block() const { return first_block + header.header_blocks + header.data_blocks; }
  uint32_t data_block(uint32_t i) const { return first_block + header.header_blocks + i; }
};

struct SegmentScan {
  std::vector<ParsedRecord> records;
  uint32_t end_block = 0;  // just after the last record accepted
  // Why the scan stopped: "end" (segment full), "no record", "checksum",
  // "sequence", "data checksum" or "read error".
  std::string stop_reason;
  // Damaged records were skipped (resync_after_damage only); the first one
  // starts at this block.
  uint32_t damaged = 0;
  uint32_t first_damaged_block = 0;
  // Headers that failed their checksum but still decode (resync only), as
  // DecodeRecordHeaderUnverified reads them: unverified claims.
  std::vector<ParsedRecord> damaged_headers;
};

struct ScanOptions {
  uint32_t segment_blocks = 0;
  uint32_t start_block = 0;
  Uuid uuid{};
  uint64_t min_seq = 0;       // records below this seq end the scan
  bool verify_data = true;    // read data blocks and check checksums
  // After a record whose header or data fails its checksum, keep looking
  // for later valid records in the segment (recovery needs them to tell a
  // torn tail from a damaged durable record). Without it the scan stops.
  bool resync_after_damage = false;
};

// Stops at the first block that is not a valid record, at a record whose seq
// does not increase (a chain of sector headers ends at its first sector that
// is not a valid record continuing it: log_format.h), or after a record whose data fails its checksum (that
// record is returned with data_ok = false). Reads header-first so that a
// segment with no new records costs one block read.
// The checks it passes: a header's first block is kGood if it is a whole
// valid header that continues the scan, kAbsent if it holds no magic or a
// header that ends the scan (another pool's, an older seq), kUnsure if it
// starts a longer header, kBad if its checksum fails; a whole header the
// same; a data block kGood or kBad by its checksum.
SegmentScan ScanSegment(const ScanOptions& opts, const SegmentBlockReader& read);
SegmentScan ScanSegment(const ScanOptions& opts, const CheckedBlockReader& read);

}  // namespace ftl::log
