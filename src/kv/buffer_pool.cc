// The buffer manager and in-page logs (buffer_pool.h).

#include "kv/buffer_pool.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_format.h"
#include "util/checksum.h"

namespace ftl::kv {

BufferPool::BufferPool(Volume* volume, const Layout& layout, KvMode mode, uint32_t capacity)
    : volume_(volume),
      layout_(layout),
      mode_(mode),
      capacity_(std::max<uint32_t>(capacity, 16)),
      diffs_(layout) {}

void PageInfo::ClearFilter() {
  std::fill(std::begin(filter), std::end(filter), 0);
  filtered = true;
}

namespace {

// An encoded PUT of an inline value or a DEL: BTree::FitsInline keeps an
// inline entry within 2048 bytes.
using InlineEntry = std::array<std::byte, 8 + kMaxKeyBytes + 2048>;

// A 64-bit hash of a key for the filters, which live in memory only (so
// it may change between versions): 8 bytes at a time, multiplied and
// folded, then murmur3's finalizer so that every bit of the result
// depends on every key bit. Inline: a key costs a few nanoseconds.
uint64_t FilterHash(std::string_view key) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size();
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, key.data() + i, key.size() - i);
  h ^= w;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

// Three bit positions of a key in a 512-bit filter, from one hash.
template <typename F>
void ForEachBit(std::string_view key, F&& f) {
  uint64_t h = FilterHash(key);
  for (int i = 0; i < 3; ++i) {
    uint32_t bit = uint32_t(h >> (i * 9)) & (PageInfo::kFilterWords * 64 - 1);
    f(bit / 64, uint64_t(1) << (bit % 64));
  }
}

}  // namespace

void PageInfo::AddKey(std::string_view key) {
  ForEachBit(key, [&](int w, uint64_t m) { filter[w] |= m; });
}

bool PageInfo::MayHold(std::string_view key) const {
  if (!filtered) return true;
  bool all = true;
  ForEachBit(key, [&](int w, uint64_t m) { all = all && (filter[w] & m); });
  return all;
}

void BufferPool::Remember(Frame& f) {
  PageInfo& info = Info(f.id);
  const Page& page = f.page;
  info.epoch = page.epoch();
  info.bytes = uint32_t(f.page.bytes());
  info.known = true;
  info.filtered = false;
  f.remembered = f.page.version();
  if (!page.leaf() || mode_ != KvMode::kPdl) return;
  info.ClearFilter();
  for (size_t i = 0; i < page.count(); ++i) info.AddKey(page.key(i));
}

PageInfo& BufferPool::Info(uint32_t id) {
  if (id >= info_.size()) info_.resize(std::max<size_t>(id + 1, info_.size() * 2));
  return info_[id];
}

absl::Status BufferPool::LoadDiffs() {
  absl::Status s = diffs_.Load(volume_, &stats_.diff_load_reads);
  if (!s.ok()) return absl::DataLossError(absl::StrFormat("differential log: %s", s.message()));
  return s;
}

namespace {

void CollectBlobs(const Page& page, std::vector<std::pair<std::string, BlobRef>>* out) {
  if (!page.leaf()) return;
  for (size_t i = 0; i < page.count(); ++i) {
    Page::Ref e = page.entry(i);
    if (e.blob) out->emplace_back(std::string(e.key), *e.blob);
  }
}

}  // namespace

absl::Status BufferPool::ApplyDiff(uint32_t id, Page* p,
                                   std::vector<std::pair<std::string, BlobRef>>* base_blobs) {
  const DiffLog::PageDiff* d = diffs_.Find(id);
  if (!d) return absl::OkStatus();
  const uint32_t epoch = p->epoch();
  if (d->epoch < epoch) {  // the page was written whole since (a merge of another mode)
    diffs_.Drop(id);
    return absl::OkStatus();
  }
  if (d->epoch > epoch)
    return absl::DataLossError(absl::StrFormat(
        "page %d is at epoch %d but the differential log has changes of epoch %d", id, epoch, d->epoch));
  if (base_blobs) CollectBlobs(*p, base_blobs);
  return ForEachLogEntry(std::as_bytes(std::span(d->bytes.data(), d->bytes.size())),
                         [p](const LogEntryView& e) { return p->ApplyView(e); });
}

absl::StatusOr<LogArea> BufferPool::ReadLogOnce(uint32_t id) {
  std::vector<std::byte> area(layout_.log_area_bytes());
  absl::Status status;
  ForEachLogPiece(id, [&](uint32_t lba, size_t boff, size_t aoff, size_t n) {
    if (!status.ok()) return;
    auto it = log_blocks_.find(lba);
    if (it != log_blocks_.end()) {
      std::memcpy(area.data() + aoff, it->second.bytes.data() + boff, n);
      return;
    }
    std::vector<std::byte> b(kBlock);
    status = volume_->Read(uint64_t(lba) * kBlock, b);
    ++stats_.log_reads;
    std::memcpy(area.data() + aoff, b.data() + boff, n);
  });
  if (!status.ok()) return status;
  absl::StatusOr<LogArea> log = DecodeLogArea(area);
  if (!log.ok()) return absl::DataLossError(absl::StrFormat("page %d log: %s", id, log.status().message()));
  return log;
}

void BufferPool::ForEachLogPiece(uint32_t id,
                                 const std::function<void(uint32_t, size_t, size_t, size_t)>& fn) const {
  uint32_t lba = layout_.LogLba(id);
  size_t off = layout_.LogOffset(id), done = 0, total = layout_.log_area_bytes();
  while (done < total) {
    size_t n = std::min(total - done, size_t(kBlock) - off);
    fn(lba, off, done, n);
    done += n;
    off = 0;
    ++lba;
  }
}

absl::Status BufferPool::LoadLogBlocks(uint32_t id) {
  absl::Status status;
  ForEachLogPiece(id, [&](uint32_t lba, size_t, size_t, size_t) {
    if (!status.ok()) return;
    auto it = log_blocks_.find(lba);
    if (it == log_blocks_.end()) {
      LogBlock b;
      b.bytes.resize(kBlock);
      status = volume_->Read(uint64_t(lba) * kBlock, b.bytes);
      if (!status.ok()) return;
      ++stats_.log_reads;
      it = log_blocks_.emplace(lba, std::move(b)).first;
    }
    ++it->second.refs;
  });
  return status;
}

void BufferPool::ReleaseLogBlocks(uint32_t id) {
  ForEachLogPiece(id, [&](uint32_t lba, size_t, size_t, size_t) {
    auto it = log_blocks_.find(lba);
    if (it == log_blocks_.end()) return;
    if (--it->second.refs == 0 && !it->second.dirty && it->second.inflight == 0) log_blocks_.erase(it);
  });
}

std::vector<std::byte> BufferPool::ReadArea(uint32_t id) const {
  std::vector<std::byte> area(layout_.log_area_bytes());
  ForEachLogPiece(id, [&](uint32_t lba, size_t boff, size_t aoff, size_t n) {
    std::memcpy(area.data() + aoff, log_blocks_.at(lba).bytes.data() + boff, n);
  });
  return area;
}

void BufferPool::WriteArea(uint32_t id, size_t area_off, std::span<const std::byte> bytes) {
  ForEachLogPiece(id, [&](uint32_t lba, size_t boff, size_t aoff, size_t n) {
    size_t lo = std::max(aoff, area_off), hi = std::min(aoff + n, area_off + bytes.size());
    if (lo >= hi) return;
    LogBlock& b = log_blocks_.at(lba);
    std::memcpy(b.bytes.data() + boff + (lo - aoff), bytes.data() + (lo - area_off), hi - lo);
    b.dirty = true;
    dirty_log_lbas_.insert(lba);
  });
}

Frame* BufferPool::Hit(uint32_t id) {
  Frame* f = Lookup(id);
  if (f == nullptr) return nullptr;
  ++stats_.buffer_hits;
  f->referenced = true;
  return f;
}

absl::StatusOr<Frame*> BufferPool::Get(uint32_t id) {
  if (Frame* f = Lookup(id)) {
    ++stats_.buffer_hits;
    f->referenced = true;  // (the clock moves it when it passes, if ever)
    ++f->pins;
    return f;
  }
  ++stats_.buffer_misses;
  if (id >= root_meta_.next_page)
    return absl::DataLossError(absl::StrFormat("page %d is past the allocated pages", id));
  if (absl::Status s = MakeRoom(); !s.ok()) return s;
  read_buf_.resize(layout_.geo.page_bytes);
  if (absl::Status s = volume_->Read(uint64_t(layout_.PageLba(id)) * kBlock, read_buf_); !s.ok())
    return s;
  ++stats_.page_reads;
  auto f = std::make_unique<Frame>();
  if (absl::Status s = f->page.Decode(read_buf_); !s.ok())
    return absl::DataLossError(absl::StrFormat("page %d: %s", id, s.message()));
  if (f->page.type() == PageType::kNone)
    return absl::DataLossError(absl::StrFormat("page %d was never written", id));
  f->id = id;
  bool has_log = f->page.has_log();
  if (mode_ == KvMode::kPdl) {
    // Its in-page log (written by an IPL mode), read once: the frame keeps
    // no log blocks.
    if (has_log) {
      absl::StatusOr<LogArea> log = ReadLogOnce(id);
      if (!log.ok()) return log.status();
      if (log->epoch == f->page.epoch())
        for (LogEntry& e : log->entries)
          if (absl::Status s = f->page.Apply(std::move(e)); !s.ok()) return s;
    }
  } else if (mode_ != KvMode::kInPlace || has_log) {
    if (absl::Status s = LoadLogBlocks(id); !s.ok()) return s;
    absl::StatusOr<LogArea> log = DecodeLogArea(ReadArea(id));
    if (!log.ok()) {
      ReleaseLogBlocks(id);
      return absl::DataLossError(absl::StrFormat("page %d log: %s", id, log.status().message()));
    }
    f->log_epoch = log->epoch;
    f->log_used = log->used;
    if (log->epoch == f->page.epoch()) {
      for (const LogEntry& e : log->entries) {
        if (absl::Status s = f->page.Apply(e); !s.ok()) {
          ReleaseLogBlocks(id);
          return s;
        }
      }
    } else {
      f->log_used = 0;
    }
    if (mode_ == KvMode::kInPlace) ReleaseLogBlocks(id);
  }
  if (absl::Status s = ApplyDiff(id, &f->page, &f->base_blobs); !s.ok()) {
    if (ipl()) ReleaseLogBlocks(id);
    return s;
  }
  Remember(*f);
  f->pins = 1;
  lru_.push_front(id);
  f->lru = lru_.begin();
  Frame* raw = f.get();
  Index(f.get());
  frames_.emplace(id, std::move(f));
  return raw;
}

absl::StatusOr<Frame*> BufferPool::Allocate(PageType type) {
  uint32_t id = root_meta_.next_page;
  if (id >= layout_.max_pages())
    return absl::ResourceExhaustedError(
        absl::StrFormat("the dataset's %d pages are all in use", layout_.max_pages()));
  if (absl::Status s = MakeRoom(); !s.ok()) return s;
  ++root_meta_.next_page;
  auto f = std::make_unique<Frame>();
  f->id = id;
  PageImage img;
  img.type = type;
  img.epoch = 1;
  img.has_log = ipl();
  f->page = Page(img);
  PageInfo& info = Info(id);
  info.epoch = 1;
  info.bytes = uint32_t(f->page.bytes());
  info.known = true;
  info.filtered = false;
  if (ipl()) {
    if (absl::Status s = LoadLogBlocks(id); !s.ok()) {
      --root_meta_.next_page;
      return s;
    }
  }
  f->rewrite = true;
  rewrite_ids_.insert(id);
  f->pins = 1;
  lru_.push_front(id);
  f->lru = lru_.begin();
  Frame* raw = f.get();
  Index(f.get());
  frames_.emplace(id, std::move(f));
  return raw;
}

void BufferPool::MarkRewrite(Frame* f) {
  if (f->id == probe_page_) probe_page_ = kNoPage;  // its media image changes
  if (f->rewrite) return;
  f->rewrite = true;
  f->page.set_epoch(f->page.epoch() + 1);  // empties its log
  f->log_used = 0;
  rewrite_ids_.insert(f->id);
  if (const DiffLog::PageDiff* d = diffs_.Find(f->id)) {
    // Values its differential or its old image referenced that it no
    // longer does (changes logged unread could not free them) are freed
    // once this write is durable. A value freed twice is trimmed twice
    // (harmless: blob addresses are never reused). Keys at or above a
    // split's TRUNC moved to the new page with their values: not freed.
    std::vector<std::pair<std::string, BlobRef>> maybe = std::move(f->base_blobs);
    std::optional<std::string> moved;  // keys >= it left the page
    std::vector<std::pair<std::string, BlobRef>> logged;
    std::optional<std::string> trunc;
    absl::Status walked = ForEachLogEntry(
        std::as_bytes(std::span(d->bytes.data(), d->bytes.size())), [&](const LogEntryView& e) {
          if (e.op == LogOp::kPutBlob) logged.emplace_back(e.key, e.blob);
          if (e.op == LogOp::kTrunc && (!trunc || e.key < *trunc)) trunc = std::string(e.key);
          return absl::OkStatus();
        });
    if (walked.ok()) {  // (a malformed differential frees nothing)
      maybe.insert(maybe.end(), std::make_move_iterator(logged.begin()),
                   std::make_move_iterator(logged.end()));
      moved = std::move(trunc);
    }
    if (!maybe.empty()) {
      std::vector<std::pair<std::string, BlobRef>> live;
      CollectBlobs(f->page, &live);
      for (const auto& m : maybe) {
        if (moved && m.first >= *moved) continue;
        const BlobRef& r = m.second;
        if (std::none_of(live.begin(), live.end(), [&](const auto& x) { return x.second == r; }))
          freed_blobs_.push_back(r);
      }
    }
    diffs_.Reset(f->id, f->page.epoch());
  }
  f->base_blobs.clear();
  PageInfo& info = Info(f->id);
  info.epoch = f->page.epoch();
  info.known = true;
}

absl::Status BufferPool::Change(Frame* f, const LogEntry& e) {
  if (absl::Status s = f->page.Apply(e); !s.ok()) return s;
  return Record(f, EncodeLogEntry(e));
}

absl::Status BufferPool::ChangePut(Frame* f, std::string_view key, std::string_view value,
                                   bool free_replaced) {
  LogEntryView v;
  v.op = LogOp::kPut;
  v.key = key;
  v.value = value;
  std::optional<BlobRef> replaced;
  if (absl::Status s = f->page.ApplyView(v, &replaced); !s.ok()) return s;
  if (free_replaced && replaced) FreeBlob(*replaced);
  InlineEntry buf;
  return Record(f, std::span<const std::byte>(buf.data(), EncodePutEntry(key, value, buf)));
}

absl::Status BufferPool::Record(Frame* f, std::span<const std::byte> entry) {
  Info(f->id).bytes = uint32_t(f->page.bytes());
  if (f->rewrite) return absl::OkStatus();
  if (mode_ == KvMode::kPdl) {
    diffs_.Append(f->id, f->page.epoch(), entry);
    ++stats_.diff_records;
    return absl::OkStatus();
  }
  // A page written without the "has log" flag (by kInPlace or kPdl) is
  // read by those modes without its log area, so an IPL mode writes it
  // whole once (with the flag) rather than logging a change it would hide.
  if (mode_ == KvMode::kInPlace || !f->page.has_log()) {
    MarkRewrite(f);
    return absl::OkStatus();
  }
  size_t room = layout_.log_area_bytes() - kLogHeaderBytes;
  uint32_t epoch = f->page.epoch();
  if (f->log_epoch != epoch) f->log_used = 0;
  if (f->log_used + entry.size() > room) {
    ++stats_.bombs;
    MarkRewrite(f);
    return absl::OkStatus();
  }
  std::vector<std::byte> header(kLogHeaderBytes);
  PutLogHeader(header, epoch, f->log_used + entry.size());
  WriteArea(f->id, kLogHeaderBytes + f->log_used, entry);
  WriteArea(f->id, 0, header);
  f->log_epoch = epoch;
  f->log_used += entry.size();
  f->dirty_log = true;
  dirty_log_ids_.insert(f->id);
  return absl::OkStatus();
}

bool BufferPool::CanChangeBlind(uint32_t id, size_t bytes) const {
  if (mode_ != KvMode::kPdl || Lookup(id) || id >= info_.size()) return false;
  const PageInfo& i = info_[id];
  return i.known && i.bytes + bytes <= layout_.geo.page_bytes;
}

void BufferPool::BlindChange(uint32_t id, std::string_view key, std::optional<std::string_view> value) {
  PageInfo& info = Info(id);
  InlineEntry buf;
  size_t n = value ? EncodePutEntry(key, *value, buf) : EncodeDelEntry(key, buf);
  diffs_.Append(id, info.epoch, std::span<const std::byte>(buf.data(), n));
  // An upper bound: as if the key were new (a delete: as if absent).
  if (value) info.bytes += uint32_t(3 + key.size() + 2 + value->size());
  ++stats_.diff_records;
  ++stats_.blind_writes;
}

absl::StatusOr<BufferPool::Probe> BufferPool::ProbeLeaf(uint32_t id, std::string_view key) {
  Probe r;
  if (id >= root_meta_.next_page)
    return absl::DataLossError(absl::StrFormat("page %d is past the allocated pages", id));
  const DiffLog::PageDiff* d = diffs_.Find(id);
  auto decide = [&](const DiffLog::PageDiff& diff) -> absl::StatusOr<bool> {
    absl::StatusOr<KeyFate> fate =
        FateOfKey(std::as_bytes(std::span(diff.bytes.data(), diff.bytes.size())), key);
    if (!fate.ok()) return fate.status();
    if (fate->kind == KeyFate::kUnknown) return false;
    r.answered = true;
    if (fate->kind == KeyFate::kPresent) r.entry = std::move(fate->entry);
    ++stats_.diff_answers;
    return true;
  };
  // Its differential, trusted without the page when the page's epoch is
  // known; then its key filter.
  const bool known = id < info_.size() && info_[id].known;
  if (d && known && info_[id].epoch == d->epoch) {
    absl::StatusOr<bool> done = decide(*d);
    if (!done.ok()) return done.status();
    if (*done) return r;
  }
  if (known && (!d || info_[id].epoch == d->epoch) && !info_[id].MayHold(key)) {
    ++stats_.filter_answers;
    r.answered = true;
    return r;
  }
  std::vector<std::byte>& buf = probe_buf_;
  if (probe_page_ != id) {
    probe_page_ = kNoPage;
    buf.resize(layout_.geo.page_bytes);
    if (absl::Status s = volume_->Read(uint64_t(layout_.PageLba(id)) * kBlock, buf); !s.ok()) return s;
    probe_page_ = id;
    ++stats_.page_reads;
    ++stats_.buffer_misses;
  }
  PageInfo& info = Info(id);
  const bool build = !info.known || !info.filtered;
  if (build) info.ClearFilter();
  std::function<void(std::string_view)> add;
  if (build) add = [&info](std::string_view k) { info.AddKey(k); };
  absl::StatusOr<PageProbe> p = ProbePage(buf, key, add);
  if (!p.ok()) {
    info.known = info.filtered = false;
    return absl::DataLossError(absl::StrFormat("page %d: %s", id, p.status().message()));
  }
  if (p->type == PageType::kNone) {
    info.known = info.filtered = false;
    return absl::DataLossError(absl::StrFormat("page %d was never written", id));
  }
  if (p->type != PageType::kLeaf || p->has_log) {  // load it
    info.filtered = false;
    return r;
  }
  size_t diff_bytes = 0;
  if (d && d->epoch > p->epoch)
    return absl::DataLossError(absl::StrFormat(
        "page %d is at epoch %d but the differential log has changes of epoch %d", id, p->epoch, d->epoch));
  if (d && d->epoch < p->epoch) {
    diffs_.Drop(id);  // stale (the page was written whole by another mode)
    d = nullptr;
  }
  if (d) {
    diff_bytes = d->bytes.size();
    absl::StatusOr<bool> done = decide(*d);
    if (!done.ok()) return done.status();
    if (*done) return r;
  }
  if (!info.known) {
    // An upper bound of its size (a differential's entry is never smaller
    // than the page entry it makes).
    info.epoch = p->epoch;
    info.bytes = uint32_t(p->bytes + diff_bytes);
    info.known = true;
  }
  r.answered = true;
  r.entry = std::move(p->hit);
  return r;
}

absl::Status BufferPool::Merge(uint32_t id) {
  absl::StatusOr<Frame*> f = Get(id);
  if (!f.ok()) return f.status();
  MarkRewrite(*f);
  Unpin(*f);
  ++stats_.diff_merges;
  return absl::OkStatus();
}

absl::Status BufferPool::MaintainDiffs(uint64_t budget) {
  if (mode_ != KvMode::kPdl || !diffs_.enabled()) return absl::OkStatus();
  const size_t page = layout_.geo.page_bytes;
  if (log_limit_ == 0) {
    // The live log may be three times what the budget holds, at most half
    // the ring (a lap must never reach the tail).
    log_limit_ = std::clamp<uint64_t>(3 * budget / kBlock, 64, layout_.dlog_blocks / 2);
  }
  // The live records fill at most a third of the log limit.
  budget = std::min<uint64_t>(budget, log_limit_ * kBlock / 3);
  for (int n = 0; n < 64; ++n) {
    auto [id, size] = diffs_.Largest();
    if (size == 0 || (diffs_.bytes() <= budget && size <= page)) break;
    if (absl::Status s = Merge(id); !s.ok()) return s;
  }
  for (int n = 0; n < 256 && diffs_.head() - diffs_.tail() > log_limit_; ++n) {
    std::optional<uint32_t> id = diffs_.Oldest();
    if (!id) break;
    // Copying a small differential costs its bytes; a large one is better
    // merged (a page write also empties it for good).
    if (diffs_.Find(*id)->bytes.size() >= page / 8) {
      if (absl::Status s = Merge(*id); !s.ok()) return s;
    } else {
      diffs_.Relog(*id);
      ++stats_.diff_relogs;
    }
  }
  return absl::OkStatus();
}

absl::Status BufferPool::MergeAllDiffs(uint64_t limit, const std::function<absl::Status()>& flush) {
  for (uint32_t id : diffs_.PagesWithDiffs()) {
    if (!diffs_.Find(id)) continue;  // (dropped as stale meanwhile)
    if (id >= root_meta_.next_page) return absl::DataLossError(absl::StrFormat(
        "the differential log changes page %d, past the allocated pages", id));
    if (absl::Status s = Merge(id); !s.ok()) return s;
    if (Footprint() > limit || over_capacity())
      if (absl::Status s = flush(); !s.ok()) return s;
  }
  return flush();
}

absl::StatusOr<BlobRef> BufferPool::PutBlob(std::string_view value) {
  uint32_t blocks = uint32_t((value.size() + kBlock - 1) / kBlock);
  if (blocks == 0) blocks = 1;
  if (uint64_t(root_meta_.blob_next) + blocks > layout_.blob_blocks)
    return absl::ResourceExhaustedError("the dataset's area for large values is used up");
  BlobRef r;
  r.lba = layout_.blob_base + root_meta_.blob_next;
  r.len = uint32_t(value.size());
  r.csum = uint32_t(util::Xxh3(std::as_bytes(std::span(value.data(), value.size()))));
  root_meta_.blob_next += blocks;
  blobs_[r.lba] = Blob{std::string(value), false};
  blob_blocks_pending_ += blocks;
  ++stats_.blob_writes;
  return r;
}

absl::StatusOr<std::string> BufferPool::ReadBlob(const BlobRef& r) {
  auto it = blobs_.find(r.lba);
  if (it != blobs_.end()) return it->second.data;
  size_t blocks = std::max<size_t>(1, (r.len + kBlock - 1) / kBlock);
  std::vector<std::byte> buf(blocks * kBlock);
  if (absl::Status s = volume_->Read(uint64_t(r.lba) * kBlock, buf); !s.ok()) return s;
  std::span<const std::byte> v(buf.data(), r.len);
  if (uint32_t(util::Xxh3(v)) != r.csum)
    return absl::DataLossError(absl::StrFormat("value at block %d fails its checksum", r.lba));
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

uint64_t BufferPool::Footprint() const {
  uint64_t n = dirty_log_lbas_.size() + blob_blocks_pending_ + diffs_.pending_blocks();
  if (mode_ == KvMode::kIplMerge) {
    std::set<uint32_t> units;
    for (uint32_t id : rewrite_ids_) units.insert(layout_.UnitOf(id));
    n += uint64_t(units.size()) * layout_.geo.pages_per_unit * layout_.page_blocks();
  } else {
    n += uint64_t(rewrite_ids_.size()) * layout_.page_blocks();
  }
  return n;
}

bool BufferPool::dirty() const {
  return !dirty_log_lbas_.empty() || !rewrite_ids_.empty() || blob_blocks_pending_ > 0 ||
         diffs_.pending_blocks() > 0;
}

void BufferPool::Evict(Frame* f) {
  if (ipl()) ReleaseLogBlocks(f->id);
  // What a change logged unread needs to know (pages filled directly, such
  // as a split's new page, were not counted by Change), unless nothing
  // changed since it was recorded (every change of a buffered page's
  // PageInfo comes with a change of the page).
  if (f->remembered != f->page.version()) Remember(*f);
  lru_.erase(f->lru);
  by_id_[f->id] = nullptr;
  frames_.erase(f->id);
  ++stats_.evictions;
}

void BufferPool::Index(Frame* f) {
  if (f->id >= by_id_.size()) by_id_.resize(std::max<size_t>(f->id + 1, by_id_.size() * 2), nullptr);
  by_id_[f->id] = f;
}

void BufferPool::Trim() { TrimTo(capacity_); }

void BufferPool::TrimTo(size_t target) {
  auto it = lru_.end();
  while (frames_.size() > target && it != lru_.begin()) {
    --it;
    Frame* f = by_id_[*it];
    if (f->id == 0 || f->pins || f->inflight || f->dirty_log || f->rewrite) continue;
    auto next = it;
    ++next;
    if (f->referenced) {  // a second chance: to the front, unmarked
      f->referenced = false;
      lru_.splice(lru_.begin(), lru_, it);
    } else {
      Evict(f);
    }
    it = next;
  }
}

absl::Status BufferPool::MakeRoom() {
  if (frames_.size() < capacity_) return absl::OkStatus();
  TrimTo(capacity_ - 1);  // room for the page about to come in
  if (frames_.size() < capacity_) return absl::OkStatus();
  // Over capacity until the store flushes at the end of the operation
  // (never inside one: a page may be over-full until its split is done).
  return absl::OkStatus();
}

}  // namespace ftl::kv
