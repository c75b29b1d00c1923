#pragma once
// Media: the byte-addressed store under the FTL (a file, a raw block device,
// memory, or a fault-injecting wrapper). Offsets and lengths passed by the
// engine are multiples of 4096 and buffers are 4096-aligned; implementations
// that need alignment (O_DIRECT) bounce anything else. Errors are statuses:
// an I/O error is absl::DataLossError or absl::InternalError naming the
// offset. Thread-safety: all methods may be called concurrently.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ftl {

// What a reader's check says about one unit of data just read
// (Media::ReadVerified).
enum class ReadVerdict {
  kGood,    // intact: it passed a checksum
  kUnsure,  // usable, but nothing proves it (e.g. a header's first block)
  kAbsent,  // nothing there (no record magic): not damage
  kBad,     // damaged: a checksum failed
};
// Judges unit `index` (unit_bytes long; the last may be shorter) of a read.
using ReadCheck = absl::FunctionRef<ReadVerdict(size_t index, std::span<const std::byte> unit)>;
// What ReadVerified found, for callers that report it (scrub).
struct ReadOutcome {
  uint64_t bad_copies = 0;    // units of some copy that were kBad or unreadable
  uint64_t repaired = 0;      // of those, rewritten from a good copy
  uint64_t unrecovered = 0;   // units no copy of which was kGood or kUnsure
  uint64_t good = 0;          // units in `out` that the check called kGood
                              // (media that do not check leave it 0)
};

class Media {
 public:
  virtual ~Media() = default;
  virtual uint64_t size() const = 0;
  virtual absl::Status Read(uint64_t offset, std::span<std::byte> out) = 0;
  virtual absl::Status Write(uint64_t offset, std::span<const std::byte> data) = 0;
  // Writes `pieces` back to back from `offset`: the same effect, durability
  // and failure modes as one Write of their concatenation (which is what the
  // default does, through a temporary buffer). File and memory media write
  // the pieces in place; gathers_writes() says so, and the engine then
  // hands over a record's header and its requests' data without first
  // copying them into one buffer.
  virtual absl::Status WriteGather(uint64_t offset,
                                   std::span<const std::span<const std::byte>> pieces);
  virtual bool gathers_writes() const { return false; }
  // One write of WriteEach: `pieces` back to back from `offset`.
  struct WriteAt {
    uint64_t offset = 0;
    std::span<const std::span<const std::byte>> pieces;
  };
  // Writes each of `writes` as WriteGather does, but they may run at
  // once and complete in any order (a crash may keep any subset of them,
  // as of separate writes). The default writes them one after the other;
  // media with direct I/O submit them together (a record's data and its
  // sector header: two device writes in the time of one).
  virtual absl::Status WriteEach(std::span<const WriteAt> writes);
  // True if a Write of one aligned 512-byte sector reaches the device as
  // that sector alone (or as its 4 KiB block with the other sectors' bytes
  // unchanged), cheaply: no read of the rest of the block. The log then
  // puts small records' headers into sectors of an earlier header block
  // (log/log_format.h, "Sector chains"); a power cut leaves such a sector
  // old or new, as the crash model assumes of every sector. Default false:
  // every record gets a header block.
  virtual bool writes_sectors() const { return false; }
  // True if writes_sectors() holds also for a sector whose block was not
  // just written: no cache reads the rest of the block first (direct I/O,
  // memory). The log then writes a chain's first header as sector 0 of
  // its header block alone, leaving sectors 1-7 as they were (another
  // lap's bytes until the chain reaches them). Not the page cache, which
  // reads a block it does not hold before changing a sector of it.
  // Default false.
  virtual bool writes_lone_sectors() const { return false; }
  // Reads as Read, for a caller that can judge what it gets: `check` is
  // called on each unit_bytes of `out`. Media holding one copy of each
  // byte read once and ignore the check (the default); a mirror
  // (ftl/mirror.h) reads one copy, reads each unit that is not kGood (or
  // that the copy failed to read) from the other copies, keeps the first
  // kGood one (else the first kUnsure, else the first copy's bytes) in
  // `out`, and rewrites the copies that were kBad, kAbsent or unreadable
  // with it (self-heal; docs/decisions.md, "Issue 22: mirrors and scrub").
  // The status is an I/O error only if no copy could be read; callers
  // still verify what they got. `outcome` (may be null) adds up what was
  // found.
  virtual absl::Status ReadVerified(uint64_t offset, std::span<std::byte> out, size_t unit_bytes,
                                    ReadCheck check, ReadOutcome* outcome = nullptr) {
    (void)unit_bytes;
    (void)check;
    (void)outcome;
    return Read(offset, out);
  }
  // As ReadVerified, but every copy is read and checked, not only until a
  // good one is found (scrub); bad copies are rewritten from a good one.
  // Media with one copy: ReadVerified.
  virtual absl::Status VerifyCopies(uint64_t offset, std::span<std::byte> out, size_t unit_bytes,
                                    ReadCheck check, ReadOutcome* outcome = nullptr) {
    return ReadVerified(offset, out, unit_bytes, check, outcome);
  }
  // True if a Discard'ed range reads as zeros afterwards (a file: punched
  // holes). A mirror's resilver uses it to copy zeros without writing them.
  virtual bool discard_zeroes() const { return false; }
  // Makes every completed Write durable.
  virtual absl::Status Sync() = 0;
  // Tells the device a range is free (punch hole / BLKDISCARD). Reading it
  // afterwards returns zeros or old data; callers must not depend on which.
  virtual absl::Status Discard(uint64_t offset, uint64_t length) = 0;
  // Hint: [offset, offset+length) is about to be written in full. A file
  // allocates it (fallocate, size kept): writing into a hole of a sparse
  // file costs the file system an allocation per page, ~10x a plain copy
  // into the page cache on ext4. Best effort, contents unchanged.
  virtual void Prepare(uint64_t offset, uint64_t length) {
    (void)offset;
    (void)length;
  }
  // Hint: [offset, offset+length) is written in full and will be synced
  // before long; start writing it back to the device now, without waiting
  // (a file: sync_file_range WRITE). The next Sync then has less to do and
  // the device is kept busy between syncs. Best effort, durability
  // unchanged: only Sync makes writes durable.
  virtual void StartWriteback(uint64_t offset, uint64_t length) {
    (void)offset;
    (void)length;
  }
  // "file /path", "blockdev /dev/sdb", "memory": for logs and status.
  virtual std::string Describe() const = 0;
};

// How a regular file's I/O meets the kernel's page cache (ftld
// --direct-io; docs/decisions.md, "Direct writes to backing files").
// Either way durability is the same: only Media::Sync makes writes durable.
enum class DirectIo {
  kOff,     // reads and writes through the page cache; a Sync writes it back
  kWrites,  // writes whose offset, length and buffers are 4096-aligned go
            // straight to the device (O_DIRECT); reads may hit the page cache
  kAll,     // as kWrites, and aligned reads bypass the page cache too
};
// "off", "writes", "on"; and back (false on anything else).
const char* DirectIoName(DirectIo d);
bool ParseDirectIo(std::string_view name, DirectIo* out);

// A regular file. If it does not exist and create_size > 0 it is created
// sparse with that size and mode 0600; an existing file keeps its size and
// mode. With `direct` other than kOff the file is opened a second time with
// O_DIRECT for the aligned I/O; a file system that refuses O_DIRECT (tmpfs
// before Linux 6.6) gets kOff, logged once, and Describe() says which.
absl::StatusOr<std::shared_ptr<Media>> OpenFileMedia(const std::string& path,
                                                     uint64_t create_size = 0,
                                                     DirectIo direct = DirectIo::kOff);
// A raw block device opened with O_DIRECT; size from BLKGETSIZE64, discard by
// BLKDISCARD.
absl::StatusOr<std::shared_ptr<Media>> OpenBlockDeviceMedia(const std::string& path);
// Picks file or block device by stat(2); `direct` applies to files (block
// devices are always O_DIRECT).
absl::StatusOr<std::shared_ptr<Media>> OpenMedia(const std::string& path,
                                                 uint64_t create_size = 0,
                                                 DirectIo direct = DirectIo::kOff);
// Zero-filled memory.
std::shared_ptr<Media> NewMemMedia(uint64_t size);
// For tests and benchmarks only: `inner` behind the volatile write cache of
// a disk. Writes stay in memory until a Sync writes them through, sector by
// sector in an order shuffled by `seed`, so that killing the process loses
// what a power cut would: everything unsynced, and a random subset of the
// sectors of a sync in progress. Past max_cached_bytes of cached writes the
// cache is written through without a sync (src/media/volatile_cache_media.h).
std::shared_ptr<Media> NewVolatileCacheMedia(std::shared_ptr<Media> inner, uint64_t seed,
                                             uint64_t max_cached_bytes = 256ull << 20);

}  // namespace ftl
