#pragma once
// BufferPool: the pages of one store in memory (the thesis's buffer
// manager) and the in-page logs (docs/kv.md, "In-page logging"). It owns
// - frames: decoded pages, at most `capacity` of them (more only while
//   every frame is pinned, dirty or in flight), evicted by the clock
//   (second-chance) approximation of least recently used: a hit only marks
//   the frame, and eviction walks from the oldest, moving marked frames to
//   the front unmarked; only clean frames are evicted, so the buffer runs over
//   its capacity while dirty frames fill it, until the store flushes at
//   the end of the operation (over_capacity());
// - log blocks: the 4 KiB blocks of log areas of the pages in the buffer
//   (a page pins the blocks its log area lies in), as on the media plus
//   the entries appended since the last flush;
// - values kept outside pages (blobs) not yet written.
// - the pages' differentials and the differential log (DiffLog,
//   diff_log.h), and what it knows of every page without reading it
//   (PageInfo: epoch and an upper bound of its size).
// A change goes through Change(): applied to the page and, in the IPL
// modes, appended to its log area; a page whose log cannot take the entry
// becomes a "bomb" and is written whole at the next flush. In the
// differential mode (kPdl) a change is appended to the page's
// differential instead, and BlindChange() logs one for a page not in the
// buffer without reading it. Every mode applies a page's differential when
// it reads the page. The Flusher (flusher.h) reads the dirty state and
// marks it clean.
//
// Thread safety: none; the store's lock (kv_store.cc) guards it. I/O
// (loading pages) happens under that lock.

#include <cstdint>
#include <functional>
#include <optional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ftl/kv.h"
#include "ftl/pool.h"
#include "kv/diff_log.h"
#include "kv/page.h"

namespace ftl::kv {

struct Frame {
  uint32_t id = 0;
  Page page;
  bool dirty_log = false;  // its log area has entries not yet written
  bool rewrite = false;    // written whole at the next flush
  int pins = 0;            // held by a tree operation
  int inflight = 0;        // in a flush whose write has not completed
  uint32_t log_epoch = 0;  // epoch of its log area (== page epoch once used)
  size_t log_used = 0;     // bytes of entries in its log area
  // Values outside pages its media image (before its differential)
  // referenced: when the page is written whole they are compared with what
  // it references then (changes logged without reading the page cannot
  // free the value they replace). Only kept while it has a differential.
  std::vector<std::pair<std::string, BlobRef>> base_blobs;  // key, value
  std::list<uint32_t>::iterator lru;
  bool referenced = false;  // used since it last passed the eviction hand
  // The page's version when the buffer last recorded what it knows of it
  // (PageInfo): unchanged since, evicting it need not record it again.
  uint64_t remembered = ~uint64_t(0);
};

// What the buffer knows of a page without reading it (kPdl): its epoch, an
// upper bound of its encoded size, and a Bloom filter of the keys its image
// held when last seen (a key it does not pass was not there: the page's
// differential, consulted first, says what changed since), once it has
// been read or written since the store was opened.
struct PageInfo {
  static constexpr int kFilterWords = 8;  // 512 bits: ~1% false at 50 keys
  uint32_t epoch = 0;
  uint32_t bytes = 0;
  bool known = false;
  bool filtered = false;
  uint64_t filter[kFilterWords] = {};
  void ClearFilter();
  void AddKey(std::string_view key);
  bool MayHold(std::string_view key) const;
};

struct LogBlock {
  std::vector<std::byte> bytes;  // 4 KiB
  bool dirty = false;
  int refs = 0;      // frames whose log area lies in it
  int inflight = 0;
};

struct Blob {
  std::string data;
  bool inflight = false;
};

class BufferPool {
 public:
  BufferPool(Volume* volume, const Layout& layout, KvMode mode, uint32_t capacity);

  // The page, loaded if needed (and pinned until Unpin). DataLoss if it
  // fails its checks.
  absl::StatusOr<Frame*> Get(uint32_t id);
  void Unpin(Frame* f) { --f->pins; }
  // A new empty page of `type` (written whole at the next flush), pinned.
  absl::StatusOr<Frame*> Allocate(PageType type);
  // Applies `e` to the page and logs it (see above).
  absl::Status Change(Frame* f, const LogEntry& e);
  // The same for a PUT of an inline value (BTree::FitsInline), without
  // building a LogEntry. With `free_replaced`, a value outside pages that
  // the put replaces is freed (FreeBlob).
  absl::Status ChangePut(Frame* f, std::string_view key, std::string_view value,
                         bool free_replaced = false);
  // kPdl: whether a change of `bytes` (encoded page entry, 0 for a delete)
  // to page `id` can be logged without reading it: it is not in the
  // buffer, its epoch is known and it stays within a page.
  bool CanChangeBlind(uint32_t id, size_t bytes) const;
  // Logs a leaf's PUT (`value`) or DEL (nullopt) of `key` as a change of
  // page `id` unread. REQUIRES: CanChangeBlind.
  void BlindChange(uint32_t id, std::string_view key, std::optional<std::string_view> value);
  bool Buffered(uint32_t id) const { return Lookup(id) != nullptr; }
  // The frame of page `id` if it is buffered, without counting a hit or
  // pinning it (cache hints, and the descents of BTree::BufferedLeaf).
  const Frame* Peek(uint32_t id) const { return Lookup(id); }
  // The frame of page `id` if it is buffered, counted as a hit and marked
  // used as Get does, but not pinned: for a read that loads nothing (so
  // evicts nothing) before it is done with it (BTree::GetMany).
  Frame* Hit(uint32_t id);
  // kPdl reads: `key` in leaf `id` (not in the buffer) without loading the
  // page into the buffer: from its differential when that decides, else
  // from the page read and searched as it is on the media. `entry` nullopt:
  // absent. Not `answered`: the page needs its in-page log (written by an
  // IPL mode) or is no leaf; load it.
  struct Probe {
    bool answered = false;
    std::optional<Entry> entry;
  };
  absl::StatusOr<Probe> ProbeLeaf(uint32_t id, std::string_view key);
  // kPdl upkeep after an operation: pages whose differential outgrew a
  // page, or the largest while all differentials pass `budget` bytes, are
  // written whole (merged); when the log is longer than its limit, the
  // pages holding its tail are merged or their differentials copied to
  // the head. An error (a page that cannot be read) stops it.
  absl::Status MaintainDiffs(uint64_t budget);
  // Writes every page with a differential whole (opening in another mode
  // than kPdl); `flush` is called whenever the dirty pages pass `limit`.
  absl::Status MergeAllDiffs(uint64_t limit, const std::function<absl::Status()>& flush);
  // Replays the differential log (open).
  absl::Status LoadDiffs();
  DiffLog& diffs() { return diffs_; }
  const DiffLog& diffs() const { return diffs_; }
  // Marks the page to be written whole (its log is emptied by a new epoch).
  void MarkRewrite(Frame* f);

  // Blobs.
  absl::StatusOr<BlobRef> PutBlob(std::string_view value);
  absl::StatusOr<std::string> ReadBlob(const BlobRef& r);
  void FreeBlob(const BlobRef& r) { freed_blobs_.push_back(r); }

  // Blocks a flush would write now.
  uint64_t Footprint() const;
  bool dirty() const;

  Meta& meta() { return root_meta_; }
  const Meta& meta() const { return root_meta_; }
  KvMode mode() const { return mode_; }
  const Layout& layout() const { return layout_; }
  Volume* volume() const { return volume_; }
  // Counters; pages, buffer_pages, tree_height and synced_writes are the
  // store's to fill in (KvStoreImpl::Stats).
  KvStats& stats() { return stats_; }
  const KvStats& stats() const { return stats_; }
  size_t frame_count() const { return frames_.size(); }
  bool over_capacity() const { return frames_.size() > capacity_; }
  // A page can come in without evicting one.
  bool has_room() const { return frames_.size() < capacity_; }

  // For the Flusher.
  std::unordered_map<uint32_t, std::unique_ptr<Frame>>& frames() { return frames_; }
  std::map<uint32_t, LogBlock>& log_blocks() { return log_blocks_; }
  std::set<uint32_t>& dirty_log_lbas() { return dirty_log_lbas_; }
  // Frames with dirty_log set (so a flush need not scan the buffer).
  std::set<uint32_t>& dirty_log_ids() { return dirty_log_ids_; }
  std::set<uint32_t>& rewrite_ids() { return rewrite_ids_; }
  std::map<uint32_t, Blob>& blobs() { return blobs_; }
  std::vector<BlobRef>& freed_blobs() { return freed_blobs_; }
  uint64_t& blob_blocks_pending() { return blob_blocks_pending_; }
  // Evicts clean frames beyond capacity (after a flush made some clean).
  void Trim();
  void TrimTo(size_t target);

 private:
  // Each (lba, offset in block, offset in area, length) piece of a page's
  // log area.
  void ForEachLogPiece(uint32_t id, const std::function<void(uint32_t, size_t, size_t, size_t)>& fn) const;
  absl::Status LoadLogBlocks(uint32_t id);
  void ReleaseLogBlocks(uint32_t id);
  std::vector<std::byte> ReadArea(uint32_t id) const;
  void WriteArea(uint32_t id, size_t area_off, std::span<const std::byte> bytes);
  absl::Status MakeRoom();
  void Evict(Frame* f);
  // What Change does after applying: the page's size bound, and the
  // encoded `entry` logged as its mode logs it.
  absl::Status Record(Frame* f, std::span<const std::byte> entry);
  // Reads a page's log area once, uncached.
  absl::StatusOr<LogArea> ReadLogOnce(uint32_t id);
  // Applies the page's differential to `p` if it has one of its epoch
  // (dropping a stale one); `base_blobs` gets the values the image
  // referenced before, if it had one.
  absl::Status ApplyDiff(uint32_t id, Page* p, std::vector<std::pair<std::string, BlobRef>>* base_blobs);
  // Records what a page in the buffer is: epoch, size, key filter.
  void Remember(Frame& f);
  // Writes page `id` whole at the next flush (kPdl merges).
  absl::Status Merge(uint32_t id);
  PageInfo& Info(uint32_t id);
  bool ipl() const { return mode_ == KvMode::kIpl || mode_ == KvMode::kIplMerge; }

  Volume* volume_;
  Layout layout_;
  KvMode mode_;
  uint32_t capacity_;
  std::unordered_map<uint32_t, std::unique_ptr<Frame>> frames_;
  // The same frames indexed by page id (page ids are dense), for the hot
  // lookups: one load instead of a hash-table probe per tree level.
  std::vector<Frame*> by_id_;
  Frame* Lookup(uint32_t id) const { return id < by_id_.size() ? by_id_[id] : nullptr; }
  void Index(Frame* f);
  std::list<uint32_t> lru_;  // front = most recently loaded or spared
  std::vector<std::byte> read_buf_;  // the page Get is loading
  std::map<uint32_t, LogBlock> log_blocks_;
  std::set<uint32_t> dirty_log_lbas_;
  std::set<uint32_t> dirty_log_ids_;
  std::set<uint32_t> rewrite_ids_;
  std::map<uint32_t, Blob> blobs_;  // by lba, not yet written
  uint64_t blob_blocks_pending_ = 0;
  std::vector<BlobRef> freed_blobs_;
  Meta root_meta_;
  KvStats stats_;
  DiffLog diffs_;
  std::vector<PageInfo> info_;  // by page id
  uint64_t log_limit_ = 0;      // live differential log blocks before cleaning
  std::vector<std::byte> probe_buf_;  // a page read by ProbeLeaf
  uint32_t probe_page_ = kNoPage;     // whose media image probe_buf_ holds
                                      // (a delete's check and the delete
                                      // read it once); reset when it is
                                      // rewritten
};

}  // namespace ftl::kv
