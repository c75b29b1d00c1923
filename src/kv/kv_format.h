#pragma once
// On-media format of a key-value dataset (docs/kv.md). A dataset is a
// volume-like tree of the pool (include/ftl/pool.h, DatasetKind::kKv);
// its blocks (4 KiB, "lba" = block of the dataset) are laid out as:
//
//   dataset   := header scratch unit{unit_count} ... blob_area anchor
//                dlog
//   header    := (block 0) magic u64 "FTLKVDS1" | version u32
//                | page_bytes u32 | pages_per_unit u32
//                | log_sectors_per_unit u32 | sectors_per_page u32
//                | scratch_base u32 | scratch_blocks u32 | unit_base u32
//                | unit_count u32 | blob_base u32 | blob_blocks u32
//                | created_ns u64
//                | (version 2) anchor_lba u32 | dlog_base u32
//                  | dlog_blocks u32
//                | xxh3 u64 (of everything before it)
//                Version 1 (no differential log) is still read; a store
//                opened writable rewrites it as version 2, carving the
//                anchor and the differential log out of the end of the
//                blob area (docs/kv.md, "Formats").
//   scratch   := blocks with the pool's non-persistent attribute: a flush
//                too large for one atomic write lands here first and is
//                moved into place by one range-move note
//   unit      := page{pages_per_unit} log_area   (an erase unit)
//   page      := (page_bytes) magic u16 "KP" | type u8 | flags u8
//                | count u16 | pad u16 | epoch u32 | first_child u32
//                | next_page u32 | blob_next u32 | height u32 | pad u32
//                | entry{count} | zeros
//   entry     := leaf:  klen u16 | vkind u8 | key
//                         | (vkind 0) vlen u16 | value
//                         | (vkind 1) blob
//                | inner: klen u16 | key | child u32
//   blob      := lba u32 | len u32 | xxh3_lo u32   (value in the blob area:
//                ceil(len / 4096) blocks from lba)
//   log_area  := (log_sectors_per_unit * 512 bytes, padded to whole
//                blocks) the log of page i is sectors
//                [i * sectors_per_page, +sectors_per_page):
//                magic u8 0xA7 | pad u8 | used u16 | epoch u32 | log_entry*
//   log_entry := PUT u8=1 | klen u16 | vlen u16 | key | value
//                | PUTBLOB u8=2 | klen u16 | key | blob
//                | DEL u8=3 | klen u16 | key
//                | TRUNC u8=4 | klen u16 | key        (drop keys >= key)
//                | CHILD u8=5 | klen u16 | key | child u32
//                | META u8=6 | next_page u32 | blob_next u32 | height u32
//                | EPOCH u8=7       (differential log only: the page was
//                                    written whole at the record's epoch)
//   anchor    := (block anchor_lba) magic u64 "FTLKVANC" | tail u64
//                | xxh3 u64 (of everything before it); all zeros: tail 0
//   dlog      := dlog_block{dlog_blocks}: a ring of the differential log
//                (mode kPdl, docs/kv.md "Differential logging"); log block
//                number `seq` (from 0, never reused) is at
//                dlog_base + seq % dlog_blocks
//   dlog_block:= magic u32 "KVDL" | used u16 | pad u16 | seq u64
//                | diff_record*   (used = bytes of records; a record
//                                  never spans blocks)
//   diff_record := page u32 | epoch u32 | log_entry
//                The live log is blocks tail .. head: from the anchor's
//                tail, every block whose magic and seq are right; the
//                first that is not (a trimmed block reads zeros, an older
//                lap's block has another seq) ends it. Replaying the
//                records in order gives each page the entries of its
//                newest epoch; a page applies them only if its epoch is
//                that epoch. Each flush writes its log blocks, the pages
//                it rewrites and (when it moved) the anchor in one atomic
//                write; blocks before the anchor's tail are trimmed after.
//
// A page's log applies to it only if the log's epoch equals the page's:
// writing a page whole increments its epoch, which empties its log
// without writing the log area. flags bit 0 ("has log"): the page's log
// area may hold entries (pages written by the in-place mode clear it, so
// reading them needs no log read). Page 0 is the root; its next_page,
// blob_next and height are the store's allocation state. Type 0 (all
// zeros) is a page never written. The pool checksums every block, so a
// page or log area is never torn: each flush is one atomic write
// (docs/kv.md, "Flushes").

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "ftl/kv.h"

namespace ftl::kv {

inline constexpr uint64_t kHeaderMagic = 0x315344564b4c5446ull;  // "FTLKVDS1"
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint64_t kAnchorMagic = 0x434e41564b4c5446ull;  // "FTLKVANC"
inline constexpr uint32_t kDiffBlockMagic = 0x4c44564b;          // "KVDL"
inline constexpr size_t kDiffBlockHeaderBytes = 16;
inline constexpr size_t kDiffRecordHeaderBytes = 8;              // page, epoch
inline constexpr uint16_t kPageMagic = 0x504b;                   // "KP"
inline constexpr uint8_t kLogMagic = 0xA7;
inline constexpr uint32_t kBlock = 4096;
inline constexpr size_t kPageHeaderBytes = 32;
inline constexpr size_t kLogHeaderBytes = 8;
inline constexpr uint32_t kNoPage = UINT32_MAX;

// Where things are in a dataset (header above).
struct Layout {
  KvGeometry geo;
  uint32_t scratch_base = 0, scratch_blocks = 0;
  uint32_t unit_base = 0, unit_count = 0;
  uint32_t blob_base = 0, blob_blocks = 0;
  uint64_t created_ns = 0;
  uint32_t version = kFormatVersion;  // as read (1: no differential log)
  uint32_t anchor_lba = 0, dlog_base = 0, dlog_blocks = 0;

  // Lays out a dataset of `blocks` blocks; InvalidArgument if too small.
  static absl::StatusOr<Layout> Plan(const KvGeometry& geo, uint64_t blocks);
  uint32_t page_blocks() const { return geo.page_bytes / kBlock; }
  uint32_t log_blocks() const;
  uint32_t max_pages() const { return unit_count * geo.pages_per_unit; }
  uint32_t UnitOf(uint32_t page) const { return page / geo.pages_per_unit; }
  uint32_t PageLba(uint32_t page) const;
  // The page's log area: byte offset from the first log block of its unit,
  // and that block's lba.
  uint32_t LogLba(uint32_t page) const;
  size_t LogOffset(uint32_t page) const;
  size_t log_area_bytes() const { return size_t(geo.sectors_per_page) * KvGeometry::kSectorBytes; }
  bool has_diff_log() const { return dlog_blocks > 0; }
  uint32_t DiffLba(uint64_t seq) const { return dlog_base + uint32_t(seq % dlog_blocks); }
  // Gives the end of the blob area to the anchor and the differential log
  // (format version 2; also the upgrade of a version 1 header). False if
  // the blob area is too small or `blob_used` of it is taken.
  bool CarveDiffLog(uint32_t blob_used);
};

std::vector<std::byte> EncodeHeader(const Layout& l);
// NotFound if the magic is absent; DataLoss on a checksum mismatch;
// InvalidArgument for a geometry this build refuses.
absl::StatusOr<Layout> DecodeHeader(std::span<const std::byte> block);

struct BlobRef {
  uint32_t lba = 0;
  uint32_t len = 0;
  uint32_t csum = 0;
  bool operator==(const BlobRef&) const = default;
};

// One key of a page: a leaf's value (inline or blob) or an inner child.
struct Entry {
  std::string key;
  std::string value;                // leaf, inline
  std::optional<BlobRef> blob;      // leaf, value in the blob area
  uint32_t child = kNoPage;         // inner
};

enum class PageType : uint8_t { kNone = 0, kLeaf = 1, kInner = 2 };

// Root allocation state (kept in page 0's header).
struct Meta {
  uint32_t next_page = 1;
  uint32_t blob_next = 0;
  uint32_t height = 1;
  bool operator==(const Meta&) const = default;
};

// A decoded page.
struct PageImage {
  PageType type = PageType::kNone;
  bool has_log = true;
  uint32_t epoch = 0;
  uint32_t first_child = kNoPage;  // inner: child for keys below entries[0]
  Meta meta;                       // meaningful in page 0
  std::vector<Entry> entries;      // sorted by key
};

// Encoded size of one entry in a page of `type`: key of `klen` bytes and
// an inline value of `vlen` bytes or a blob reference.
size_t EntryBytes(PageType type, size_t klen, size_t vlen, bool blob);
size_t EntryBytes(PageType type, const Entry& e);

// A page's header fields (the "page" grammar above, before its entries).
struct PageHeader {
  PageType type = PageType::kNone;
  bool has_log = true;
  uint16_t count = 0;
  uint32_t epoch = 0;
  uint32_t first_child = kNoPage;
  Meta meta;
};
// Writes the header into the first kPageHeaderBytes of `out`.
void EncodePageHeader(const PageHeader& h, std::span<std::byte> out);
// Where an encoded page's entries lie: `entry` sees each entry's offset in
// `in`, its encoded length and its key's length, in order. Returns the
// header, and in `*bytes` (if set) the encoded size. An all-zero header is
// a page never written (type kNone, no entries); DataLoss for a bad magic
// or type or an entry that runs past the end. The one walker of the
// format: DecodePage, ProbePage and kv::Page::Decode all use it.
absl::StatusOr<PageHeader> WalkPage(std::span<const std::byte> in,
                                    absl::FunctionRef<void(size_t at, size_t len, size_t klen)> entry,
                                    size_t* bytes = nullptr);
// Encodes into `out` (page_bytes long). REQUIRES: it fits.
void EncodePage(const PageImage& p, std::span<std::byte> out);
// DataLoss if the page is malformed; an all-zero page is type kNone.
absl::StatusOr<PageImage> DecodePage(std::span<const std::byte> in);
// The same into `out`, overwriting every field and reusing the memory of
// the entries it already holds. On error `out` is left partly decoded.
absl::Status DecodePageInto(std::span<const std::byte> in, PageImage* out);

// A key looked up in an encoded page without decoding it (reads of pages
// not in the buffer).
struct PageProbe {
  PageType type = PageType::kNone;
  uint32_t epoch = 0;
  bool has_log = false;
  size_t bytes = 0;          // encoded size (header included)
  std::optional<Entry> hit;  // the key's entry, if the page holds it
};
// DataLoss if malformed (as DecodePage).
// `on_key` (if set) sees every key of the page.
absl::StatusOr<PageProbe> ProbePage(std::span<const std::byte> in, std::string_view key,
                                    const std::function<void(std::string_view)>& on_key = {});

enum class LogOp : uint8_t {
  kPut = 1, kPutBlob = 2, kDel = 3, kTrunc = 4, kChild = 5, kMeta = 6,
  kEpoch = 7,  // differential log only (see the grammar)
};

struct LogEntry {
  LogOp op = LogOp::kPut;
  std::string key;
  std::string value;
  BlobRef blob;
  uint32_t child = kNoPage;
  Meta meta;
};

// A log entry viewed in the bytes it was decoded from (valid while they are).
struct LogEntryView {
  LogOp op = LogOp::kPut;
  std::string_view key;
  std::string_view value;
  BlobRef blob;
  uint32_t child = kNoPage;
  Meta meta;

  LogEntryView() = default;
  // A view of `e` (valid while `e` is).
  explicit LogEntryView(const LogEntry& e)
      : op(e.op), key(e.key), value(e.value), blob(e.blob), child(e.child), meta(e.meta) {}
  // A copy that owns its strings.
  LogEntry ToEntry() const { return LogEntry{op, std::string(key), std::string(value), blob, child, meta}; }
};

std::vector<std::byte> EncodeLogEntry(const LogEntry& e);
// A PUT or DEL entry into `out` (at least 5 + key + value bytes); returns
// its length. The same bytes as EncodeLogEntry, without building a LogEntry.
size_t EncodePutEntry(std::string_view key, std::string_view value, std::span<std::byte> out);
size_t EncodeDelEntry(std::string_view key, std::span<std::byte> out);
// A log area: its header and entries. An area whose magic is absent
// (never written) holds nothing. DataLoss if malformed.
struct LogArea {
  uint32_t epoch = 0;
  std::vector<LogEntry> entries;
  size_t used = 0;  // bytes of entries
};
absl::StatusOr<LogArea> DecodeLogArea(std::span<const std::byte> area);
// What a run of encoded log entries (a page's differential) says of `key`
// in the end: nothing (kUnknown: the page decides), gone (a DEL of it, a
// TRUNC at or below it), or its entry (a PUT or PUTBLOB). DataLoss if
// malformed.
struct KeyFate {
  enum Kind { kUnknown, kAbsent, kPresent } kind = kUnknown;
  Entry entry;  // kPresent
};
absl::StatusOr<KeyFate> FateOfKey(std::span<const std::byte> entries, std::string_view key);
// A run of encoded log entries (a log area's body, a page's differential).
// DataLoss if malformed.
absl::StatusOr<std::vector<LogEntry>> DecodeLogEntries(std::span<const std::byte> bytes);
// The same without copying: `fn` sees each entry in place, in order; the
// first error it returns ends the walk and is returned.
absl::Status ForEachLogEntry(std::span<const std::byte> bytes,
                             const std::function<absl::Status(const LogEntryView&)>& fn);

// The anchor block: the differential log's tail. All zeros: tail 0.
std::vector<std::byte> EncodeAnchor(uint64_t tail);
absl::StatusOr<uint64_t> DecodeAnchor(std::span<const std::byte> block);

// One record of a differential log block.
struct DiffRecord {
  uint32_t page = 0;
  uint32_t epoch = 0;
  std::span<const std::byte> entry;  // encoded log entry (into the block)
  LogOp op = LogOp::kPut;
};
// A block of the differential log: empty optional if it is not block
// `seq` (the end of the log); DataLoss if it is but its records are
// malformed.
absl::StatusOr<std::optional<std::vector<DiffRecord>>> DecodeDiffBlock(
    std::span<const std::byte> block, uint64_t seq);
// Writes a block header (`used` bytes of records follow it).
void PutDiffBlockHeader(std::span<std::byte> block, uint64_t seq, size_t used);
// Writes an empty log area header of `epoch` with `used` bytes of entries.
void PutLogHeader(std::span<std::byte> area, uint32_t epoch, size_t used);

}  // namespace ftl::kv
