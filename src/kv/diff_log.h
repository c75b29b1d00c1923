#pragma once
// DiffLog: page-differential logging, the store's mode KvMode::kPdl
// (docs/kv.md, "Differential logging"). It owns
//  - every page's differential: the log entries that changed the page
//    since it was last written whole (its epoch), encoded, in memory, so
//    reading a page is one read (the page) and the entries are applied
//    from here; a change needs no read at all when the page's epoch and
//    size are known (BufferPool::BlindChange);
//  - the differential log on the media (kv_format.h: anchor, dlog): one
//    ring of 4 KiB blocks into which the records of all pages are appended
//    packed, so a small change costs its own bytes, not a block; the head
//    block being filled, the full blocks not yet written, and the anchor
//    (the log's tail);
//  - what a flush writes of it (PlanFlush, Complete), which the Flusher
//    puts into the same atomic write as the pages it rewrites.
// A page written whole gets an EPOCH record (Reset), so replaying the live
// log at open (Load) gives every page exactly its current differential.
//
// Thread safety: none; the store's lock guards it (BufferPool owns it).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ftl/pool.h"
#include "kv/kv_format.h"

namespace ftl::kv {

class DiffLog {
 public:
  struct PageDiff {
    uint32_t epoch = 0;
    std::string bytes;    // encoded log entries of this epoch, in order
    uint64_t oldest = 0;  // log block of the first of them (bytes non-empty)
    uint32_t slot = 0;    // its place in its size bucket (bytes non-empty)
    bool present = false; // (a slot of the table by page id)
  };
  // The differential log's part of a flush.
  struct FlushPart {
    // lba, whole blocks: each run of consecutive log blocks in one buffer
    // (a flush writes it as one piece, not copied again to join blocks).
    std::vector<std::pair<uint32_t, std::vector<std::byte>>> blocks;
    uint64_t from = 0;          // first full block this plan writes
    uint64_t head_at_plan = 0;  // blocks before it were written full
    bool head_written = false;
    std::optional<uint64_t> anchor;  // the tail it writes into the anchor
    uint64_t log_blocks = 0;         // of `blocks`, log blocks (not the anchor)
  };

  explicit DiffLog(const Layout& l) : layout_(l), head_(kBlock) {}
  bool enabled() const { return layout_.has_diff_log(); }

  // Open: reads the anchor and replays the live log. `blocks_read` counts
  // the blocks read. DataLoss if a block of the live log is malformed.
  absl::Status Load(Volume* v, uint64_t* blocks_read);

  // A change of `page` at `epoch` (one encoded log entry).
  void Append(uint32_t page, uint32_t epoch, std::span<const std::byte> entry);
  // The page is written whole at `epoch`: its differential is over (an
  // EPOCH record is logged if it had one).
  void Reset(uint32_t page, uint32_t epoch);
  // The differential was found stale at load (the page is newer): forget it.
  void Drop(uint32_t page);
  // Copies the page's differential to the head (so the tail can advance).
  // Returns the bytes copied.
  size_t Relog(uint32_t page);

  const PageDiff* Find(uint32_t page) const;
  // A cache hint: the page's entry of the table (a change reads and
  // writes it; BTree::Prefetch).
  void Prefetch(uint32_t page) const {
    if (page < diffs_.size()) __builtin_prefetch(&diffs_[page], 1);
  }
  // Bytes of differentials held in memory, and pages holding one.
  size_t bytes() const { return bytes_; }
  size_t pages() const { return listed_; }
  // The page with the largest differential and its size (size 0: none).
  std::pair<uint32_t, size_t> Largest() const;
  // The page whose differential starts oldest in the log (nullopt: none).
  std::optional<uint32_t> Oldest() const;
  std::vector<uint32_t> PagesWithDiffs() const;
  // Log blocks: the head block (being filled) and the tail (the first
  // block holding a live record; the head if none).
  uint64_t head() const { return head_seq_; }
  uint64_t tail() const;

  // Blocks the next flush writes.
  uint64_t pending_blocks() const;
  // Adds the blocks to write (full blocks and the head block with records
  // not yet planned, and the anchor when the tail moved) to `p`.
  void PlanFlush(FlushPart* p);
  // After the write of `p`: on success the ranges of the ring before the
  // new tail go to `trims` (lba, blocks), to be trimmed by the caller; on
  // failure its blocks are planned again.
  void Complete(const FlushPart& p, bool ok, std::vector<std::pair<uint32_t, uint32_t>>* trims);

 private:
  // Appends one record; returns the log block it went to.
  uint64_t AppendRecord(uint32_t page, uint32_t epoch, std::span<const std::byte> entry);
  // A non-empty differential is listed in the size bucket of its bytes;
  // Unlist/List around any change of them.
  void Unlist(uint32_t page, const PageDiff& d);
  void List(uint32_t page, PageDiff& d);
  // The differential's first record went to block `oldest` (d.oldest was
  // just set): it joins the age queue.
  void Aged(uint32_t page, uint64_t oldest);
  // Drops the age queue's front entries that no longer describe a
  // differential (see age_).
  void TrimAge() const;
  void Unbucket(const PageDiff& d);
  void Bucket(uint32_t page, PageDiff& d);
  static size_t BucketOf(size_t bytes) { return std::min<size_t>(bytes / 64, kBuckets - 1); }
  static constexpr size_t kBuckets = 1024;

  Layout layout_;
  // By page id (ids are dense: pages are numbered from 0 as allocated).
  PageDiff* Slot(uint32_t page) {
    return page < diffs_.size() && diffs_[page].present ? &diffs_[page] : nullptr;
  }
  PageDiff& Emplace(uint32_t page, bool* fresh);
  // (Swapped, not assigned: a string assigned an empty one keeps its buffer.)
  void Erase(uint32_t page) {
    std::string().swap(diffs_[page].bytes);
    diffs_[page] = PageDiff();
  }
  std::vector<PageDiff> diffs_;
  // Pages by the size of their differential, in buckets of 64 bytes (the
  // largest is found in O(1) amortized; a std::set cost a tenth of the
  // time of random puts).
  std::vector<std::vector<uint32_t>> buckets_ = std::vector<std::vector<uint32_t>>(kBuckets);
  mutable size_t top_ = 0;  // no bucket above it holds a page (a cache)
  size_t listed_ = 0;  // pages listed
  // Pages by age: (oldest, page) in the order their differentials began,
  // which is the order of `oldest` (records only go to the head). Entries
  // are not removed when a differential ends or restarts; an entry counts
  // only while its page's differential is non-empty and still begins at
  // its block, and stale ones leave from the front (TrimAge) or when the
  // queue outgrows the listed pages (Aged compacts it). A std::set cost
  // 3.5% of a SET's time on a 1M-key dataset (bench/JOURNAL.md 2026-11-27).
  mutable std::deque<std::pair<uint64_t, uint32_t>> age_;
  bool AgeLive(const std::pair<uint64_t, uint32_t>& a) const {
    return a.second < diffs_.size() && diffs_[a.second].present && !diffs_[a.second].bytes.empty() &&
           diffs_[a.second].oldest == a.first;
  }
  size_t bytes_ = 0;
  uint64_t head_seq_ = 0;
  std::vector<std::byte> head_;  // the head block (header written at plan)
  size_t head_used_ = 0;         // bytes of records in it
  bool head_dirty_ = false;      // records not yet in a plan
  std::map<uint64_t, std::vector<std::byte>> full_;  // full blocks not yet written
  uint64_t unplanned_ = 0;       // first full block in no plan yet
  uint64_t anchor_ = 0;          // tail in the anchor on the media
  uint64_t anchor_planned_ = 0;  // tail in the newest planned anchor
};

}  // namespace ftl::kv
