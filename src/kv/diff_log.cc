// Page-differential logging (diff_log.h).

#include "kv/diff_log.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "util/encoding.h"

namespace ftl::kv {

namespace {

// The anchor is rewritten once the tail moved this many blocks (or the log
// holds nothing live): replay at open reads at most this many dead blocks.
constexpr uint64_t kAnchorStep = 64;
constexpr size_t kPayload = kBlock - kDiffBlockHeaderBytes;

}  // namespace

void DiffLog::Unbucket(const PageDiff& d) {
  std::vector<uint32_t>& b = buckets_[BucketOf(d.bytes.size())];
  uint32_t last = b.back();
  b[d.slot] = last;
  diffs_[last].slot = d.slot;
  b.pop_back();
  bytes_ -= d.bytes.size();
}

void DiffLog::Bucket(uint32_t page, PageDiff& d) {
  size_t k = BucketOf(d.bytes.size());
  d.slot = uint32_t(buckets_[k].size());
  buckets_[k].push_back(page);
  top_ = std::max(top_, k);
  bytes_ += d.bytes.size();
}

void DiffLog::Unlist(uint32_t page, const PageDiff& d) {
  if (d.bytes.empty()) return;
  Unbucket(d);
  --listed_;
}

void DiffLog::List(uint32_t page, PageDiff& d) {
  if (d.bytes.empty()) return;
  Bucket(page, d);
  ++listed_;
}

void DiffLog::Aged(uint32_t page, uint64_t oldest) {
  age_.emplace_back(oldest, page);
  // Stale entries are bounded: past four per listed page (and a floor),
  // keep the live ones, each once, in their order.
  if (age_.size() <= 4 * listed_ + 4096) return;
  std::vector<bool> seen(diffs_.size());
  std::deque<std::pair<uint64_t, uint32_t>> live;
  for (const auto& a : age_) {
    if (!AgeLive(a) || seen[a.second]) continue;
    seen[a.second] = true;
    live.push_back(a);
  }
  age_.swap(live);
}

void DiffLog::TrimAge() const {
  while (!age_.empty() && !AgeLive(age_.front())) age_.pop_front();
}

uint64_t DiffLog::tail() const {
  TrimAge();
  return age_.empty() ? head_seq_ : age_.front().first;
}

uint64_t DiffLog::AppendRecord(uint32_t page, uint32_t epoch, std::span<const std::byte> entry) {
  const size_t rec = kDiffRecordHeaderBytes + entry.size();
  if (head_used_ + rec > kPayload) {
    PutDiffBlockHeader(head_, head_seq_, head_used_);
    full_.emplace(head_seq_, head_);
    ++head_seq_;
    std::fill(head_.begin(), head_.end(), std::byte{0});
    head_used_ = 0;
  }
  // (BTree::FitsInline keeps every entry of this mode within one block.)
  std::byte* at = head_.data() + kDiffBlockHeaderBytes + head_used_;
  util::PutU32(at, page);
  util::PutU32(at + 4, epoch);
  std::memcpy(at + kDiffRecordHeaderBytes, entry.data(), entry.size());
  head_used_ += rec;
  head_dirty_ = true;
  return head_seq_;
}

DiffLog::PageDiff& DiffLog::Emplace(uint32_t page, bool* fresh) {
  if (page >= diffs_.size()) diffs_.resize(std::max<size_t>(page + 1, diffs_.size() * 2));
  PageDiff& d = diffs_[page];
  *fresh = !d.present;
  d.present = true;
  return d;
}

void DiffLog::Append(uint32_t page, uint32_t epoch, std::span<const std::byte> entry) {
  bool fresh;
  PageDiff& d = Emplace(page, &fresh);
  if (fresh || d.epoch != epoch) {
    Unlist(page, d);
    std::string().swap(d.bytes);
    d.epoch = epoch;
  }
  uint64_t seq = AppendRecord(page, epoch, entry);
  if (d.bytes.empty()) {
    d.oldest = seq;
    d.bytes.append(reinterpret_cast<const char*>(entry.data()), entry.size());
    List(page, d);
    Aged(page, seq);
    return;
  }
  // Same age: only its size bucket may change.
  Unbucket(d);
  d.bytes.append(reinterpret_cast<const char*>(entry.data()), entry.size());
  Bucket(page, d);
}

void DiffLog::Reset(uint32_t page, uint32_t epoch) {
  PageDiff* d = Slot(page);
  if (!d) return;  // nothing of it in the live log
  const std::byte op{uint8_t(LogOp::kEpoch)};
  AppendRecord(page, epoch, std::span(&op, 1));
  Unlist(page, *d);
  Erase(page);
}

void DiffLog::Drop(uint32_t page) {
  PageDiff* d = Slot(page);
  if (!d) return;
  Unlist(page, *d);
  Erase(page);
}

size_t DiffLog::Relog(uint32_t page) {
  PageDiff* slot = Slot(page);
  if (!slot || slot->bytes.empty()) return 0;
  PageDiff& d = *slot;
  Unlist(page, d);
  std::string old = std::move(d.bytes);
  d.bytes.clear();
  // Entry by entry (a record holds one entry); the copies come after the
  // originals in the log, and replaying a page's entries twice in order
  // gives the same page (each entry sets keys, whatever was there).
  absl::StatusOr<std::vector<LogEntry>> entries =
      DecodeLogEntries(std::as_bytes(std::span(old.data(), old.size())));
  if (!entries.ok()) {  // cannot happen: these bytes were encoded here
    d.bytes = std::move(old);
    List(page, d);
    return 0;
  }
  for (const LogEntry& e : *entries) {
    std::vector<std::byte> b = EncodeLogEntry(e);
    uint64_t seq = AppendRecord(page, d.epoch, b);
    if (d.bytes.empty()) d.oldest = seq;
    d.bytes.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  List(page, d);
  if (!d.bytes.empty()) Aged(page, d.oldest);
  return old.size();
}

const DiffLog::PageDiff* DiffLog::Find(uint32_t page) const {
  return page < diffs_.size() && diffs_[page].present ? &diffs_[page] : nullptr;
}

std::pair<uint32_t, size_t> DiffLog::Largest() const {
  if (listed_ == 0) return {0, 0};
  size_t k = top_;
  while (k > 0 && buckets_[k].empty()) --k;
  top_ = k;
  uint32_t page = buckets_[k].back();
  return {page, diffs_[page].bytes.size()};
}

std::optional<uint32_t> DiffLog::Oldest() const {
  TrimAge();
  if (age_.empty()) return std::nullopt;
  return age_.front().second;
}

std::vector<uint32_t> DiffLog::PagesWithDiffs() const {
  std::vector<uint32_t> out;
  out.reserve(listed_);
  for (uint32_t page = 0; page < diffs_.size(); ++page)
    if (diffs_[page].present && !diffs_[page].bytes.empty()) out.push_back(page);
  return out;
}

uint64_t DiffLog::pending_blocks() const {
  uint64_t n = head_dirty_ && head_used_ > 0 ? 1 : 0;
  // full_ holds consecutive seqs (blocks enter at the head's seq, one
  // after another, and leave from the front only): count, do not walk (this
  // runs on every write).
  if (full_.empty()) return n;
  const uint64_t first = std::max(unplanned_, full_.begin()->first), last = full_.rbegin()->first;
  return n + (last >= first ? last - first + 1 : 0);
}

void DiffLog::PlanFlush(FlushPart* p) {
  if (!enabled()) return;
  p->from = unplanned_;
  const bool head = head_dirty_ && head_used_ > 0;
  if (head) PutDiffBlockHeader(head_, head_seq_, head_used_);
  // The full blocks from unplanned_ on, then the head: consecutive log
  // positions, so consecutive blocks but where the ring wraps.
  auto first = full_.lower_bound(unplanned_);
  const size_t n = size_t(std::distance(first, full_.end())) + (head ? 1 : 0);
  uint64_t run_start = 0;
  size_t run_blocks = 0;
  auto add = [&](uint64_t seq, const std::vector<std::byte>& block) {
    const bool joins = run_blocks > 0 && seq == run_start + run_blocks &&
                       layout_.DiffLba(seq) == layout_.DiffLba(run_start) + run_blocks;
    if (!joins) {
      run_start = seq;
      run_blocks = 0;
      p->blocks.emplace_back(layout_.DiffLba(seq), std::vector<std::byte>());
      // (At most the rest of the ring before it wraps.)
      const uint64_t to_wrap = layout_.dlog_blocks - seq % layout_.dlog_blocks;
      p->blocks.back().second.reserve(size_t(std::min<uint64_t>(n - p->log_blocks, to_wrap)) * kBlock);
    }
    std::vector<std::byte>& run = p->blocks.back().second;
    run.insert(run.end(), block.begin(), block.end());
    ++run_blocks;
    ++p->log_blocks;
  };
  for (auto it = first; it != full_.end(); ++it) add(it->first, it->second);
  if (head) {
    add(head_seq_, head_);
    p->head_written = true;
  }
  head_dirty_ = false;
  p->head_at_plan = head_seq_;
  unplanned_ = head_seq_;
  // Every block from the tail to the head is written by now or by this
  // plan (plans are written in order), so the anchor may name the tail.
  const uint64_t t = tail();
  if (t > anchor_planned_ && (t - anchor_planned_ >= kAnchorStep || age_.empty())) {
    p->anchor = t;
    anchor_planned_ = t;
    p->blocks.emplace_back(layout_.anchor_lba, EncodeAnchor(t));
  }
}

void DiffLog::Complete(const FlushPart& p, bool ok,
                       std::vector<std::pair<uint32_t, uint32_t>>* trims) {
  if (!enabled()) return;
  if (!ok) {
    unplanned_ = std::min(unplanned_, p.from);
    if (p.head_written || p.head_at_plan < head_seq_) head_dirty_ = true;
    if (p.anchor) anchor_planned_ = anchor_;
    return;
  }
  // Blocks that were full when planned are on the media as they stay.
  full_.erase(full_.begin(), full_.lower_bound(p.head_at_plan));
  if (p.anchor && *p.anchor > anchor_) {
    // The ring's blocks from the old tail to the new one hold nothing
    // live: give them back (a ring position is reused a lap later).
    uint64_t from = anchor_, to = *p.anchor;
    anchor_ = to;
    while (from < to) {
      uint32_t pos = uint32_t(from % layout_.dlog_blocks);
      uint64_t n = std::min<uint64_t>(to - from, layout_.dlog_blocks - pos);
      trims->emplace_back(layout_.dlog_base + pos, uint32_t(n));
      from += n;
    }
  }
}

absl::Status DiffLog::Load(Volume* v, uint64_t* blocks_read) {
  if (!enabled()) return absl::OkStatus();
  std::vector<std::byte> block(kBlock);
  if (absl::Status s = v->Read(uint64_t(layout_.anchor_lba) * kBlock, block); !s.ok()) return s;
  ++*blocks_read;
  absl::StatusOr<uint64_t> tail = DecodeAnchor(block);
  if (!tail.ok()) return tail.status();
  anchor_ = anchor_planned_ = *tail;
  head_seq_ = *tail;
  head_used_ = 0;
  std::fill(head_.begin(), head_.end(), std::byte{0});
  // Read ahead a chunk of the ring at a time (never across its end).
  constexpr uint64_t kChunk = 64;
  std::vector<std::byte> chunk;
  uint64_t seq = *tail;
  for (bool more = true; more;) {
    uint32_t pos = uint32_t(seq % layout_.dlog_blocks);
    uint64_t n = std::min<uint64_t>(kChunk, layout_.dlog_blocks - pos);
    chunk.resize(n * kBlock);
    if (absl::Status s = v->Read(uint64_t(layout_.dlog_base + pos) * kBlock, chunk); !s.ok()) return s;
    *blocks_read += n;
    for (uint64_t i = 0; i < n; ++i, ++seq) {
      std::span<const std::byte> b(chunk.data() + i * kBlock, kBlock);
      absl::StatusOr<std::optional<std::vector<DiffRecord>>> recs = DecodeDiffBlock(b, seq);
      if (!recs.ok()) return recs.status();
      if (!recs->has_value()) {
        more = false;
        break;
      }
      if (seq - *tail >= layout_.dlog_blocks)
        return absl::DataLossError("the differential log runs round its whole ring");
      for (const DiffRecord& r : **recs) {
        if (r.page >= layout_.max_pages())
          return absl::DataLossError(absl::StrFormat(
              "differential log block %d names page %d, past the dataset's pages", seq, r.page));
        bool fresh;
        PageDiff& d = Emplace(r.page, &fresh);
        if (!fresh && r.epoch < d.epoch) continue;  // (cannot happen: epochs only grow)
        Unlist(r.page, d);
        if (fresh || r.epoch > d.epoch) {
          d.bytes.clear();
          d.epoch = r.epoch;
        }
        bool began = false;
        if (r.op != LogOp::kEpoch) {
          if (d.bytes.empty()) {
            d.oldest = seq;
            began = true;
          }
          d.bytes.append(reinterpret_cast<const char*>(r.entry.data()), r.entry.size());
        } else {
          d.bytes.clear();
        }
        List(r.page, d);
        if (began) Aged(r.page, seq);
      }
      head_seq_ = seq;
      std::memcpy(head_.data(), b.data(), kBlock);
      head_used_ = util::GetU16(&b[4]);
    }
  }
  // The head block is on the media as it is; later records go after it.
  unplanned_ = head_seq_;
  head_dirty_ = false;
  // Pages whose last record was an EPOCH hold nothing.
  for (uint32_t page = 0; page < diffs_.size(); ++page)
    if (diffs_[page].present && diffs_[page].bytes.empty()) Erase(page);
  return absl::OkStatus();
}

}  // namespace ftl::kv
