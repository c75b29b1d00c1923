// Page changes and searches (page.h).

#include "kv/page.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "util/encoding.h"

namespace ftl::kv {

namespace {

// The 8 bytes of `key` from `at` on, big-endian, zero-padded.
uint64_t HeadOf(std::string_view key, size_t at) {
  uint64_t h = 0;
  for (size_t i = 0; i < 8; ++i) h = (h << 8) | (at + i < key.size() ? uint8_t(key[at + i]) : 0);
  return h;
}

// Below this many entries a plain binary search over the keys is as fast.
constexpr size_t kMinHeads = 8;

// Whether `key` starts with the first `p` bytes of `with`.
bool SharesPrefix(std::string_view key, std::string_view with, size_t p) {
  return key.size() >= p && with.size() >= p && key.substr(0, p) == with.substr(0, p);
}

const std::byte* B(const char* p) { return reinterpret_cast<const std::byte*>(p); }
std::byte* B(char* p) { return reinterpret_cast<std::byte*>(p); }

}  // namespace

Entry Page::Ref::ToEntry() const {
  Entry e;
  e.key = std::string(key);
  e.value = std::string(value);
  e.blob = blob;
  e.child = child;
  return e;
}

Page::Page(const PageImage& img)
    : type_(img.type), has_log_(img.has_log), epoch_(img.epoch), first_child_(img.first_child), meta_(img.meta) {
  Assign(img.entries);
}

Page::Ref Page::entry(size_t i) const {
  const Slot& s = slots_[i];
  const char* p = arena_.data() + s.off;
  Ref r;
  if (type_ == PageType::kInner) {
    r.key = std::string_view(p + 2, s.klen);
    r.child = util::GetU32(B(p + 2 + s.klen));
    return r;
  }
  r.key = std::string_view(p + 3, s.klen);
  const char* v = p + 3 + s.klen;
  if (uint8_t(p[2]) == 1) {
    r.blob = BlobRef{util::GetU32(B(v)), util::GetU32(B(v + 4)), util::GetU32(B(v + 8))};
  } else {
    r.value = std::string_view(v + 2, util::GetU16(B(v)));
  }
  return r;
}

Page::Slot Page::AppendEntry(std::string_view key, std::string_view value,
                             const std::optional<BlobRef>& blob, uint32_t child) {
  Slot s;
  s.off = uint32_t(arena_.size());
  s.klen = uint16_t(key.size());
  s.len = uint32_t(EntryBytes(type_, key.size(), value.size(), blob.has_value()));
  if (arena_.capacity() < arena_.size() + s.len)
    arena_.reserve(std::max(2 * arena_.capacity(), arena_.size() + s.len));
  // Appended piece by piece: growing the arena by resize() would first
  // fill the bytes with zeros.
  auto put16 = [&](uint16_t v) { arena_.push_back(char(v & 0xff)), arena_.push_back(char(v >> 8)); };
  auto put32 = [&](uint32_t v) { put16(uint16_t(v & 0xffff)), put16(uint16_t(v >> 16)); };
  put16(uint16_t(key.size()));
  if (type_ == PageType::kInner) {
    arena_.append(key);
    put32(child);
    s.child = child;
    return s;
  }
  arena_.push_back(char(blob ? 1 : 0));
  arena_.append(key);
  if (blob) {
    put32(blob->lba);
    put32(blob->len);
    put32(blob->csum);
  } else {
    put16(uint16_t(value.size()));
    arena_.append(value);
  }
  return s;
}

void Page::DropFrom(size_t from) {
  for (size_t i = from; i < slots_.size(); ++i) {
    dead_ += slots_[i].len;
    bytes_ -= slots_[i].len;
  }
  slots_.resize(from);
}

void Page::MaybeCompact() {
  if (dead_ <= 1024 || dead_ < arena_.size() / 2) return;
  std::string live;
  live.resize(arena_.size() - dead_);
  size_t at = 0;
  for (Slot& s : slots_) {
    std::memcpy(live.data() + at, arena_.data() + s.off, s.len);
    s.off = uint32_t(at);
    at += s.len;
  }
  live.resize(at);
  arena_.swap(live);
  dead_ = 0;
}

void Page::HeaderChanged() {
  // The entries are unchanged: a current search index stays current.
  const bool heads = HeadsCurrent();
  ++version_;
  if (heads) heads_.version = version_;
}

void Page::Assign(std::span<const Entry> sorted) {
  ++version_;
  slots_.clear();
  arena_.clear();
  dead_ = 0;
  bytes_ = kPageHeaderBytes;
  slots_.reserve(sorted.size());
  for (const Entry& e : sorted) {
    slots_.push_back(AppendEntry(e.key, e.value, e.blob, e.child));
    bytes_ += slots_.back().len;
  }
}

void Page::Reset(PageType type) {
  type_ = type;
  Assign({});
}

absl::Status Page::Decode(std::span<const std::byte> in) {
  ++version_;
  slots_.clear();
  arena_.clear();
  dead_ = 0;
  // Where each entry lies (kv_format.h: WalkPage checks every length),
  // then the entries' bytes copied in at once.
  const bool inner = in.size() >= kPageHeaderBytes && PageType(uint8_t(in[2])) == PageType::kInner;
  // Room for the header's count of slots at once (no growth per entry on
  // a fresh frame), at most what the bytes could hold (5 bytes an entry).
  if (in.size() >= kPageHeaderBytes)
    slots_.reserve(std::min<size_t>(util::GetU16(&in[4]), (in.size() - kPageHeaderBytes) / 5));
  size_t end = kPageHeaderBytes;
  absl::StatusOr<PageHeader> h = WalkPage(
      in,
      [&](size_t at, size_t len, size_t klen) {
        Slot s;
        s.off = uint32_t(at - kPageHeaderBytes);
        s.len = uint32_t(len);
        s.klen = uint16_t(klen);
        if (inner) s.child = util::GetU32(&in[at + 2 + klen]);
        slots_.push_back(s);
      },
      &end);
  if (!h.ok()) {  // left empty, as a page never written
    const uint64_t version = version_;
    *this = Page();
    version_ = version + 1;
    return h.status();
  }
  type_ = h->type;
  has_log_ = h->has_log;
  epoch_ = h->epoch;
  first_child_ = h->first_child;
  meta_ = h->meta;
  arena_.assign(reinterpret_cast<const char*>(in.data()) + kPageHeaderBytes, end - kPageHeaderBytes);
  bytes_ = end;
  return absl::OkStatus();
}

void Page::Encode(std::span<std::byte> out) const {
  EncodePageHeader(PageHeader{type_, has_log_, uint16_t(slots_.size()), epoch_, first_child_, meta_}, out);
  std::byte* o = out.data();
  size_t at = kPageHeaderBytes;
  for (const Slot& s : slots_) {
    size_t n = std::min<size_t>(s.len, out.size() - at);
    std::memcpy(o + at, arena_.data() + s.off, n);
    at += n;
  }
  if (at < out.size()) std::memset(o + at, 0, out.size() - at);
}

PageImage Page::image() const {
  PageImage img;
  img.type = type_;
  img.has_log = has_log_;
  img.epoch = epoch_;
  img.first_child = first_child_;
  img.meta = meta_;
  img.entries.reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) img.entries.push_back(entry(i).ToEntry());
  return img;
}

bool Page::HeadsCurrent() const { return heads_.built && heads_.version == version_; }

void Page::BuildHeads() const {
  // Sorted keys: what the first and the last share, all share.
  const std::string_view a = key(0);
  const std::string_view b = key(slots_.size() - 1);
  size_t p = 0, n = std::min(a.size(), b.size());
  while (p < n && a[p] == b[p]) ++p;
  heads_.prefix = p;
  heads_.shared.assign(a.substr(0, p));
  heads_.of.resize(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) heads_.of[i] = HeadOf(key(i), p);
  heads_.built = true;
  heads_.version = version_;
}

size_t Page::Bound(std::string_view k, bool upper, bool* equal) const {
  const size_t n = slots_.size();
  // Plain binary search over slots [b, e).
  auto search = [&](size_t b, size_t e) {
    while (b < e) {
      size_t mid = b + (e - b) / 2;
      bool go_right = upper ? !(k < key(mid)) : key(mid) < k;
      if (go_right) b = mid + 1; else e = mid;
    }
    if (equal) *equal = !upper && b < n && key(b) == k;
    return b;
  };
  if (equal) *equal = false;
  if (n < kMinHeads) return search(0, n);
  if (!HeadsCurrent()) BuildHeads();
  const size_t p = heads_.prefix;
  int c = k.substr(0, p).compare(heads_.shared);
  if (c < 0) return 0;  // below the shared prefix: below every key
  if (c > 0) return n;  // above it: above every key
  // Same prefix: heads below `k`'s are below it, heads above above it;
  // keys with the same head are compared whole.
  const uint64_t h = HeadOf(k, p);
  const uint64_t* of = heads_.of.data();
  // Halve down to a window of at most kScan heads, then count the heads
  // below h in it: a scan of a few cache lines the CPU loads at once,
  // where a binary search waits for one line after another.
  constexpr size_t kScan = 32;
  size_t b = 0, e = n;
  while (e - b > kScan) {
    size_t mid = b + (e - b) / 2;
    if (of[mid] < h) b = mid + 1; else e = mid;
  }
  size_t below = 0;
  for (size_t i = b; i < e; ++i) below += of[i] < h;
  b += below;
  // The end of the run of heads equal to h: a binary search (the run can
  // be long: in a page whose keys span namespaces, the shared prefix is
  // short and every key of a namespace has the same head).
  const size_t same_end = size_t(std::upper_bound(of + b, of + n, h) - of);
  e = same_end;
  if (k.size() > p + 8) return search(b, e);
  // `k` ends within its head, so among keys with the same prefix and
  // head the shorter ones are below it (the rest of its head is zeros), one
  // of its length is it, and longer ones are above it: lengths decide, and
  // no key's bytes are read.
  while (b < e) {
    size_t mid = b + (e - b) / 2;
    size_t len = slots_[mid].klen;
    bool go_right = upper ? !(k.size() < len) : len < k.size();
    if (go_right) b = mid + 1; else e = mid;
  }
  if (equal) *equal = !upper && b < same_end && slots_[b].klen == k.size();
  return b;
}

size_t Page::LowerBound(std::string_view key, bool* equal) const { return Bound(key, false, equal); }

namespace {

// Prefetches up to `lines` cache lines from `p` on (`bytes` long).
void PrefetchBytes(const void* p, size_t bytes, size_t lines) {
  const char* c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes && lines > 0; at += 64, --lines) __builtin_prefetch(c + at);
}

}  // namespace

void Page::PrefetchIndex() const {
  // The heads only (a search reads up to four lines of them last); the
  // slot a search ends on is unknown until it ran. A core has a dozen
  // outstanding misses at most: prefetching more of a page for every key
  // of a batch stalls the prefetches themselves.
  if (HeadsCurrent()) PrefetchBytes(heads_.of.data(), heads_.of.size() * sizeof(uint64_t), 4);
}

void Page::PrefetchEntry(std::string_view key) const {
  if (slots_.empty()) return;
  const size_t i = std::min(LowerBound(key), slots_.size() - 1);
  PrefetchBytes(arena_.data() + slots_[i].off, slots_[i].len, 2);
}

void Page::PrefetchSlot(size_t i) const { PrefetchBytes(arena_.data() + slots_[i].off, slots_[i].len, 2); }

std::optional<Page::Ref> Page::Find(std::string_view key) const {
  bool equal;
  size_t i = Bound(key, false, &equal);
  if (!equal) return std::nullopt;
  return entry(i);
}

uint32_t Page::ChildFor(std::string_view key, int* pos) const {
  // The last entry with key <= `key`: one before the first entry above it.
  int i = int(Bound(key, true)) - 1;
  if (pos) *pos = i;
  return i < 0 ? first_child_ : slots_[size_t(i)].child;
}

absl::Status Page::Apply(const LogEntry& e) { return ApplyView(LogEntryView(e)); }

absl::Status Page::ApplyView(const LogEntryView& e, std::optional<BlobRef>* replaced) {
  // The search index follows the change (below) when it was current.
  const bool heads = HeadsCurrent();
  ++version_;
  if (heads) heads_.version = version_;
  switch (e.op) {
    case LogOp::kPut:
    case LogOp::kPutBlob:
    case LogOp::kChild: {
      bool inner = e.op == LogOp::kChild;
      if (inner != (type_ == PageType::kInner))
        return absl::DataLossError("log entry does not fit its page type");
      std::optional<BlobRef> blob;
      if (e.op == LogOp::kPutBlob) blob = e.blob;
      std::string_view value = e.op == LogOp::kPut ? e.value : std::string_view();
      const size_t len = EntryBytes(type_, e.key.size(), value.size(), blob.has_value());
      bool equal;
      size_t i = Bound(e.key, false, &equal);
      if (equal) {
        Slot& s = slots_[i];
        if (replaced && !inner && uint8_t(arena_[s.off + 2]) == 1) *replaced = entry(i).blob;
        bytes_ -= s.len;
        if (s.len == len) {
          // The same size: rewritten where it is (the key stays).
          char* p = arena_.data() + s.off;
          if (inner) {
            util::PutU32(B(p + 2 + s.klen), e.child);
            s.child = e.child;
          } else {
            p[2] = char(blob ? 1 : 0);
            char* v = p + 3 + s.klen;
            if (blob) {
              util::PutU32(B(v), blob->lba);
              util::PutU32(B(v + 4), blob->len);
              util::PutU32(B(v + 8), blob->csum);
            } else {
              util::PutU16(B(v), uint16_t(value.size()));
              if (!value.empty()) std::memcpy(v + 2, value.data(), value.size());
            }
          }
        } else {
          dead_ += s.len;
          s = AppendEntry(e.key, value, blob, e.child);
        }
        bytes_ += s.len;
        MaybeCompact();
        return absl::OkStatus();
      }
      if (heads_.version == version_) {
        // A key with the shared prefix gets its head; one without it
        // changes the prefix: the index is rebuilt at the next search.
        if (!slots_.empty() && SharesPrefix(e.key, heads_.shared, heads_.prefix))
          heads_.of.insert(heads_.of.begin() + long(i), HeadOf(e.key, heads_.prefix));
        else
          heads_.built = false;
      }
      Slot s = AppendEntry(e.key, value, blob, e.child);
      slots_.insert(slots_.begin() + long(i), s);
      bytes_ += s.len;
      return absl::OkStatus();
    }
    case LogOp::kDel: {
      bool equal;
      size_t i = Bound(e.key, false, &equal);
      if (equal) {
        if (replaced && leaf() && uint8_t(arena_[slots_[i].off + 2]) == 1) *replaced = entry(i).blob;
        dead_ += slots_[i].len;
        bytes_ -= slots_[i].len;
        slots_.erase(slots_.begin() + long(i));
        // (The keys left still share the prefix.)
        if (heads_.version == version_) heads_.of.erase(heads_.of.begin() + long(i));
        MaybeCompact();
      }
      return absl::OkStatus();
    }
    case LogOp::kTrunc: {
      size_t i = LowerBound(e.key);
      DropFrom(i);
      if (heads_.version == version_) heads_.of.resize(i);
      MaybeCompact();
      return absl::OkStatus();
    }
    case LogOp::kMeta:
      meta_ = e.meta;
      return absl::OkStatus();
    case LogOp::kEpoch:
      break;  // a record of the differential log, never a page's entry
  }
  return absl::DataLossError("unknown log entry");
}

size_t Page::SplitPoint() const {
  size_t half = (bytes_ - kPageHeaderBytes) / 2, acc = 0, cut = 0;
  while (cut < slots_.size() && acc < half) acc += slots_[cut++].len;
  return std::clamp<size_t>(cut, 1, slots_.size() - 1);
}

std::vector<Entry> Page::UpperHalf() const {
  std::vector<Entry> upper;
  for (size_t i = SplitPoint(); i < slots_.size(); ++i) upper.push_back(entry(i).ToEntry());
  return upper;
}

std::vector<Entry> Page::SplitUpper() {
  const size_t cut = SplitPoint();
  std::vector<Entry> upper;
  upper.reserve(slots_.size() - cut);
  for (size_t i = cut; i < slots_.size(); ++i) upper.push_back(entry(i).ToEntry());
  ++version_;
  DropFrom(cut);
  MaybeCompact();
  return upper;
}

}  // namespace ftl::kv
