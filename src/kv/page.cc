// Page changes and searches (page.h).

#include "kv/page.h"

#include <algorithm>

namespace ftl::kv {

Page::Page(PageImage img) : img_(std::move(img)) { Recount(); }

void Page::Recount() {
  bytes_ = kPageHeaderBytes;
  for (const Entry& e : img_.entries) bytes_ += EntryBytes(img_.type, e);
}

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

}  // namespace

bool Page::HeadsCurrent() const { return heads_.built && heads_.version == version_; }

void Page::BuildHeads() const {
  const auto& ents = img_.entries;
  // Sorted keys: what the first and the last share, all share.
  const std::string& a = ents.front().key;
  const std::string& b = ents.back().key;
  size_t p = 0, n = std::min(a.size(), b.size());
  while (p < n && a[p] == b[p]) ++p;
  heads_.prefix = p;
  heads_.shared.assign(a, 0, p);
  heads_.of.resize(ents.size());
  for (size_t i = 0; i < ents.size(); ++i) heads_.of[i] = HeadOf(ents[i].key, p);
  heads_.built = true;
  heads_.version = version_;
}

size_t Page::Bound(std::string_view key, bool upper, bool* equal) const {
  const auto& ents = img_.entries;
  auto below = [](const Entry& e, std::string_view k) { return e.key < k; };
  auto above = [](std::string_view k, const Entry& e) { return k < e.key; };
  auto search = [&](auto b, auto e) {
    size_t i = size_t((upper ? std::upper_bound(b, e, key, above) : std::lower_bound(b, e, key, below)) -
                      ents.begin());
    if (equal) *equal = !upper && i < ents.size() && ents[i].key == key;
    return i;
  };
  if (equal) *equal = false;
  if (ents.size() < kMinHeads) return search(ents.begin(), ents.end());
  if (!HeadsCurrent()) BuildHeads();
  const size_t p = heads_.prefix;
  int c = key.substr(0, p).compare(heads_.shared);
  if (c < 0) return 0;             // below the shared prefix: below every key
  if (c > 0) return ents.size();   // above it: above every key
  // Same prefix: heads below `key`'s are below it, heads above above it;
  // keys with the same head are compared whole.
  uint64_t h = HeadOf(key, p);
  auto lo = std::lower_bound(heads_.of.begin(), heads_.of.end(), h);
  auto hi = std::upper_bound(lo, heads_.of.end(), h);
  auto b = ents.begin() + (lo - heads_.of.begin());
  auto e = ents.begin() + (hi - heads_.of.begin());
  if (key.size() > p + 8) return search(b, e);
  // `key` ends within its head, so among keys with the same prefix and
  // head the shorter ones are below it (the rest of its head is zeros), one
  // of its length is it, and longer ones are above it: lengths decide, and
  // no key's bytes are read.
  auto by_length = upper ? std::upper_bound(b, e, key.size(),
                                            [](size_t n, const Entry& x) { return n < x.key.size(); })
                         : std::lower_bound(b, e, key.size(),
                                            [](const Entry& x, size_t n) { return x.key.size() < n; });
  size_t i = size_t(by_length - ents.begin());
  if (equal) *equal = !upper && by_length != e && by_length->key.size() == key.size();
  return i;
}

size_t Page::LowerBound(std::string_view key) const { return Bound(key, false); }

const Entry* Page::Find(std::string_view key) const {
  bool equal;
  size_t i = Bound(key, false, &equal);
  return equal ? &img_.entries[i] : nullptr;
}

uint32_t Page::ChildFor(std::string_view key, int* pos) const {
  // The last entry with key <= `key`: one before the first entry above it.
  int i = int(Bound(key, true)) - 1;
  if (pos) *pos = i;
  return i < 0 ? img_.first_child : img_.entries[size_t(i)].child;
}

absl::Status Page::Apply(const LogEntry& e) { return ApplyTo(e); }
absl::Status Page::Apply(LogEntry&& e) { return ApplyTo(std::move(e)); }
absl::Status Page::ApplyView(const LogEntryView& e) { return ApplyTo(e); }

template <typename E>
absl::Status Page::ApplyTo(E&& e) {
  // The search index follows the change (below) when it was current.
  const bool heads = HeadsCurrent();
  ++version_;
  if (heads) heads_.version = version_;
  auto& ents = img_.entries;
  switch (e.op) {
    case LogOp::kPut:
    case LogOp::kPutBlob:
    case LogOp::kChild: {
      bool inner = e.op == LogOp::kChild;
      if (inner != (img_.type == PageType::kInner))
        return absl::DataLossError("log entry does not fit its page type");
      size_t i = LowerBound(e.key);
      if (i < ents.size() && ents[i].key == e.key) {
        // Replaced in place: the key's string stays, the value's memory is
        // reused or (from an rvalue) taken over.
        Entry& x = ents[i];
        bytes_ -= EntryBytes(img_.type, x);
        x.child = e.child;
        if (e.op == LogOp::kPut) {
          x.value = std::forward<E>(e).value;
          x.blob.reset();
        } else {
          x.value.clear();
          if (e.op == LogOp::kPutBlob) x.blob = e.blob; else x.blob.reset();
        }
        if (e.op != LogOp::kChild) x.child = kNoPage;
      } else {
        if (heads_.version == version_) {
          // A key with the shared prefix gets its head; one without it
          // changes the prefix: the index is rebuilt at the next search.
          if (!ents.empty() && SharesPrefix(e.key, heads_.shared, heads_.prefix))
            heads_.of.insert(heads_.of.begin() + long(i), HeadOf(e.key, heads_.prefix));
          else
            heads_.built = false;
        }
        Entry x;
        x.key = std::forward<E>(e).key;  // (a view converts)
        if (e.op == LogOp::kPut) x.value = std::forward<E>(e).value;
        if (e.op == LogOp::kPutBlob) x.blob = e.blob;
        if (e.op == LogOp::kChild) x.child = e.child;
        ents.insert(ents.begin() + long(i), std::move(x));
      }
      bytes_ += EntryBytes(img_.type, ents[i]);
      return absl::OkStatus();
    }
    case LogOp::kDel: {
      size_t i = LowerBound(e.key);
      if (i < ents.size() && ents[i].key == e.key) {
        bytes_ -= EntryBytes(img_.type, ents[i]);
        ents.erase(ents.begin() + long(i));
        // (The keys left still share the prefix.)
        if (heads_.version == version_) heads_.of.erase(heads_.of.begin() + long(i));
      }
      return absl::OkStatus();
    }
    case LogOp::kTrunc: {
      size_t i = LowerBound(e.key);
      ents.erase(ents.begin() + long(i), ents.end());
      if (heads_.version == version_) heads_.of.resize(i);
      Recount();
      return absl::OkStatus();
    }
    case LogOp::kMeta:
      img_.meta = e.meta;
      return absl::OkStatus();
    case LogOp::kEpoch:
      break;  // a record of the differential log, never a page's entry
  }
  return absl::DataLossError("unknown log entry");
}

size_t Page::SplitPoint() const {
  const auto& ents = img_.entries;
  size_t half = (bytes_ - kPageHeaderBytes) / 2, acc = 0, cut = 0;
  while (cut < ents.size() && acc < half) acc += EntryBytes(img_.type, ents[cut++]);
  return std::clamp<size_t>(cut, 1, ents.size() - 1);
}

std::vector<Entry> Page::UpperHalf() const {
  return std::vector<Entry>(img_.entries.begin() + long(SplitPoint()), img_.entries.end());
}

std::vector<Entry> Page::SplitUpper() {
  const size_t cut = SplitPoint();
  ++version_;
  auto& ents = img_.entries;
  std::vector<Entry> upper(std::make_move_iterator(ents.begin() + long(cut)),
                           std::make_move_iterator(ents.end()));
  ents.resize(cut);
  Recount();
  return upper;
}

}  // namespace ftl::kv
