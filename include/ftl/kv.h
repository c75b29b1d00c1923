#pragma once
// Public API of ftld's key-value datasets (docs/kv.md): an ordered
// key-value store kept in a dataset of a Pool, built on in-page logging
// (IPL). Records live in data pages grouped into erase units; a change to
// a page is applied in the buffer and appended to the page's log sector;
// flushing writes log sectors (and whole pages only when they must be
// rewritten), merging an erase unit when a log fills.
//
// Contracts:
//  - Keys are 1..kMaxKeyBytes bytes, values 0..kMaxValueBytes bytes
//    (InvalidArgument beyond); order is bytewise (memcmp, shorter first).
//  - Every write (Put/Insert/Update/Delete/Write) is applied at once:
//    readers see it when the call returns. With WriteOptions::sync it is
//    durable when the call returns; concurrent synced writers share one
//    media write (group commit). Without sync it becomes durable with the
//    next synced write, Flush(), an eviction that must write, or Close();
//    a crash of the daemon before that loses it (whole operations only).
//  - Atomicity: after a crash the store holds a prefix of the acknowledged
//    operations: a WriteBatch is all or nothing, a page is never torn.
//  - Errors: NotFound (Get/Update/Delete of a missing key, no such
//    dataset), AlreadyExists (Insert of a present key), InvalidArgument
//    (sizes, bad geometry, batch too large), ResourceExhausted (pool full:
//    nothing changed, reads go on), FailedPrecondition (a read-only store,
//    e.g. a snapshot, or a dataset that is not a key-value one),
//    DataLoss (a page that fails its checks).
//
// Thread safety: every method of KvStore is safe from any thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ftl {

class Pool;
class Volume;

inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr size_t kMaxValueBytes = 64 * 1024;

// Layout of a dataset, fixed at create and kept in its header.
struct KvGeometry {
  uint32_t page_bytes = 4096;           // a data page (multiple of 4096)
  uint32_t pages_per_unit = 28;         // data pages of an erase unit
  uint32_t log_sectors_per_unit = 32;   // 512-byte log sectors of an erase unit
  uint32_t sectors_per_page = 1;        // log sectors each page owns
  static constexpr uint32_t kSectorBytes = 512;
  // InvalidArgument saying what is wrong.
  absl::Status Validate() const;
  // Blocks (4 KiB) one erase unit takes: pages, then log blocks.
  uint32_t unit_blocks() const;
  // "page=4096,pages=28,sectors=32,per-page=1"; Parse takes the same keys
  // (any subset, in any order; "" = defaults).
  std::string ToString() const;
  static absl::StatusOr<KvGeometry> Parse(std::string_view text);
};

// How pages reach the media (docs/kv.md, "Modes").
enum class KvMode {
  kIpl,       // in-page logging; a page that must be rewritten is written
              // alone (ftld remaps blocks, so no erase unit has to move)
  kIplMerge,  // the thesis: a page that must be rewritten merges its whole
              // erase unit (every page rewritten, logs emptied)
  kInPlace,   // no logs: a dirty page is written whole (the baseline)
  kPdl,       // page-differential logging: a change is appended to a log
              // shared by all pages (many pages' changes in one 4 KiB
              // block) and kept in memory per page; a page is written whole
              // only when its differential grows past a page or all of
              // them past KvOptions::diff_budget_bytes. A page read is one
              // read; a put to a page not in the buffer needs none.
};
// "ipl", "ipl-merge", "in-place", "pdl"; and back (nullopt: unknown).
const char* KvModeName(KvMode m);
std::optional<KvMode> ParseKvMode(std::string_view name);

struct KvOptions {
  uint32_t buffer_pages = 1024;  // pages the buffer manager holds (>= 16)
  KvMode mode = KvMode::kPdl;
  bool read_only = false;        // snapshots are always read-only
  // Largest flush written as one atomic write (0: the pool's atomic size;
  // 256 KiB for a store opened on a bare Volume). Larger flushes go through
  // the scratch area (Open by name only).
  uint64_t max_atomic_bytes = 0;
  // kPdl: memory the pages' differentials may take before the largest are
  // merged into their pages (docs/kv.md, "Differential logging"). Every
  // mode holds the differentials a dataset was left with at open.
  uint64_t diff_budget_bytes = 32ull << 20;
  // Unsynced writes that fill the buffer hand its flush to a thread of the
  // store's own (planned by the writer, written and completed there; at
  // most one such flush in flight) instead of writing it on the writer's
  // thread (docs/kv.md, "Flushes"). What a crash may lose is unchanged:
  // unsynced writes until the next synced one or Flush.
  bool background_flush = false;
};

struct KvWriteOptions {
  bool sync = false;
};

// Per-dataset counters since the store was opened.
struct KvStats {
  uint64_t page_reads = 0;         // data pages read from the media
  uint64_t log_reads = 0;          // log blocks read from the media
  uint64_t page_writes = 0;        // data pages written (merges included)
  uint64_t log_sector_writes = 0;  // page log sectors written
  uint64_t log_block_writes = 0;   // 4 KiB blocks of log sectors written
  uint64_t unit_merges = 0;        // erase units rewritten
  uint64_t bombs = 0;              // pages whose log could not take an entry
  uint64_t buffer_hits = 0;
  uint64_t buffer_misses = 0;
  uint64_t evictions = 0;
  uint64_t flushes = 0;            // media writes of the store (group commits)
  uint64_t scratch_flushes = 0;    // of them, larger than one atomic write
  uint64_t synced_writes = 0;      // calls with sync that waited for a flush
  uint64_t blob_writes = 0;        // values kept outside pages
  uint64_t media_write_bytes = 0;  // bytes the store wrote to its dataset
  // Differential logging (kPdl).
  uint64_t diff_records = 0;       // changes appended to the differential log
  uint64_t blind_writes = 0;       // of them, to pages not read for it
  uint64_t diff_block_writes = 0;  // 4 KiB blocks of the differential log written
  uint64_t diff_merges = 0;        // pages written whole for their differential
  uint64_t diff_relogs = 0;        // differentials copied to the log's head
  uint64_t diff_load_reads = 0;    // blocks read to replay the log at open
  uint64_t diff_answers = 0;       // reads answered by a differential, no page read
  uint64_t filter_answers = 0;     // absent keys told by a page's key filter, no read
  uint64_t diff_bytes = 0;         // differentials in memory now
  uint64_t diff_pages = 0;         // pages with one now
  uint64_t pages = 0;              // pages allocated in the dataset
  uint32_t buffer_pages = 0;       // pages in the buffer now
  uint32_t tree_height = 0;
};

// An atomic group of changes (Store::Write).
class KvWriteBatch {
 public:
  enum class Kind : uint8_t { kPut, kDelete, kInsert, kUpdate };
  struct Op {
    Kind kind;
    std::string key;
    std::string value;
  };
  void Put(std::string_view key, std::string_view value) { Add(Kind::kPut, key, value); }
  // Deleting a missing key is no error inside a batch.
  void Delete(std::string_view key) { Add(Kind::kDelete, key, {}); }
  // Insert / Update fail the whole batch (AlreadyExists / NotFound).
  void Insert(std::string_view key, std::string_view value) { Add(Kind::kInsert, key, value); }
  void Update(std::string_view key, std::string_view value) { Add(Kind::kUpdate, key, value); }
  void Clear() { ops_.clear(); bytes_ = 0; }
  size_t size() const { return ops_.size(); }
  size_t bytes() const { return bytes_; }
  const std::vector<Op>& ops() const { return ops_; }

 private:
  void Add(Kind k, std::string_view key, std::string_view value) {
    ops_.push_back(Op{k, std::string(key), std::string(value)});
    bytes_ += key.size() + value.size();
  }
  std::vector<Op> ops_;
  size_t bytes_ = 0;
};

// The limits of one batch (InvalidArgument beyond).
inline constexpr size_t kMaxBatchOps = 4096;
inline constexpr size_t kMaxBatchBytes = 8u << 20;

class KvIterator {
 public:
  virtual ~KvIterator() = default;
  // Positions at the first key >= key.
  virtual void Seek(std::string_view key) = 0;
  virtual void SeekToFirst() = 0;
  virtual bool Valid() const = 0;
  virtual void Next() = 0;
  virtual const std::string& key() const = 0;
  virtual const std::string& value() const = 0;
  // Not OK if reading failed (then !Valid()).
  virtual absl::Status status() const = 0;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Creates a key-value dataset `name` in the pool and lays its header.
  static absl::Status Create(Pool* pool, const std::string& name, const KvGeometry& geo = {});
  // Opens dataset `ref` ("NAME", or "NAME@SNAP": a snapshot, read-only).
  static absl::StatusOr<std::unique_ptr<KvStore>> Open(Pool* pool, const std::string& ref,
                                                       const KvOptions& opts = {});
  // The same over a volume the caller owns (tests, benchmarks): Format lays
  // an empty store on it, Open opens it.
  static absl::Status Format(Volume* volume, const KvGeometry& geo = {});
  static absl::StatusOr<std::unique_ptr<KvStore>> Open(Volume* volume, const KvOptions& opts = {});

  virtual absl::Status Put(std::string_view key, std::string_view value,
                           const KvWriteOptions& w = {}) = 0;
  virtual absl::Status Insert(std::string_view key, std::string_view value,
                              const KvWriteOptions& w = {}) = 0;
  virtual absl::Status Update(std::string_view key, std::string_view value,
                              const KvWriteOptions& w = {}) = 0;
  virtual absl::Status Delete(std::string_view key, const KvWriteOptions& w = {}) = 0;
  virtual absl::Status Write(const KvWriteBatch& batch, const KvWriteOptions& w = {}) = 0;
  // What Modify's function makes of a key's value (nullopt: absent): the
  // new value, nullopt to leave the key as it is, or an error (nothing
  // changes; Modify returns it).
  using ModifyFn = absl::FunctionRef<absl::StatusOr<std::optional<std::string>>(
      std::optional<std::string_view>)>;
  // Reads `key` and puts what `fn` makes of its value as one operation:
  // no other call reads or changes the store between the read and the
  // write (a counter, an append), and the tree is searched once for both.
  // `fn` runs once, under the store's lock: it must not call the store.
  // The new value is checked as Put checks it.
  virtual absl::Status Modify(std::string_view key, ModifyFn fn, const KvWriteOptions& w = {}) = 0;
  virtual absl::StatusOr<std::string> Get(std::string_view key) = 0;
  // Reads `keys` in order as one call: fn(i, value) for keys[i] (nullopt:
  // absent, as for a key of a size no key can have; the view lasts until
  // fn returns), until fn returns false. Under one hold of the store, with
  // the misses of keys whose pages are in the buffer overlapped (a batch of
  // GETs). `fn` runs under the store's lock: it must not call the store.
  // An error is about the key after the last one fn was given; the keys
  // before it were answered.
  using GetManyFn = absl::FunctionRef<bool(size_t, std::optional<std::string_view>)>;
  virtual absl::Status GetMany(std::span<const std::string_view> keys, GetManyFn fn);
  // Keys in [from, to) in order ("" as `to`: to the end), at most `limit`.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Scan(
      std::string_view from, std::string_view to, size_t limit = SIZE_MAX) = 0;
  virtual std::unique_ptr<KvIterator> NewIterator() = 0;
  // A hint that these keys are about to be read or written: brings the
  // pages already in the buffer that hold them towards the CPU's cache,
  // so that the misses of many keys overlap instead of following one
  // another. Changes nothing, reads nothing from the media, and does
  // nothing while another thread holds the store.
  virtual void Prefetch(std::span<const std::string_view> keys) { (void)keys; }
  // Every write acknowledged before the call is durable.
  virtual absl::Status Flush() = 0;
  // Flushes; the store must not be used afterwards (the destructor closes too).
  virtual absl::Status Close() = 0;

  virtual KvStats Stats() const = 0;
  virtual const KvGeometry& geometry() const = 0;
  virtual bool read_only() const = 0;
};

}  // namespace ftl
