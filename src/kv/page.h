#pragma once
// Page: one page of the tree in memory (kv_format.h, "page"): its header
// fields, and its entries kept as their encoded bytes (kv_format.h,
// "entry") in one arena, found through an array of slots sorted by key
// (a slotted page). Loading a page copies its body into the arena and
// records where each entry starts; writing it copies each entry out in
// slot order. No entry owns memory of its own, so a page costs two
// allocations whatever it holds, and inserting a key moves 16-byte slots,
// not strings (docs/decisions.md, "Slotted pages in the buffer").
//
// It also applies the changes a log entry makes. Applying is the same
// code whether the entry is new (a change) or read back from the page's
// log (reading a page applies its log), so the buffer and the media can
// never disagree on what an entry means.
//
// Views (Ref, key()) point into the arena: they stay valid until the page
// next changes.
//
// Thread safety: none (the store's lock guards every page); even the
// const searches (LowerBound, Find, ChildFor) may build the page's search
// index.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_format.h"

namespace ftl::kv {

class Page {
 public:
  // One entry, viewed in the page's arena.
  struct Ref {
    std::string_view key;
    std::string_view value;       // leaf, inline
    std::optional<BlobRef> blob;  // leaf, value in the blob area
    uint32_t child = kNoPage;     // inner
    Entry ToEntry() const;
  };

  Page() = default;
  explicit Page(PageType type) : type_(type) {}
  explicit Page(const PageImage& img);

  // Decodes an encoded page (page_bytes long) into this one, reusing its
  // memory. DataLoss if malformed; an all-zero page is type kNone.
  absl::Status Decode(std::span<const std::byte> in);
  // Encodes into `out` (page_bytes long): the same bytes as
  // EncodePage(image(), out). REQUIRES: it fits.
  void Encode(std::span<std::byte> out) const;
  // A decoded copy (tests, and the rare paths that want entries as
  // strings).
  PageImage image() const;

  // Changes so far (entries or header fields): equal versions of one Page
  // mean the same contents.
  uint64_t version() const { return version_; }
  PageType type() const { return type_; }
  bool leaf() const { return type_ == PageType::kLeaf; }
  bool has_log() const { return has_log_; }
  uint32_t epoch() const { return epoch_; }
  uint32_t first_child() const { return first_child_; }
  const Meta& meta() const { return meta_; }
  void set_has_log(bool v) { has_log_ = v, HeaderChanged(); }
  void set_epoch(uint32_t v) { epoch_ = v, HeaderChanged(); }
  void set_first_child(uint32_t v) { first_child_ = v, HeaderChanged(); }
  void set_meta(const Meta& v) { meta_ = v, HeaderChanged(); }

  size_t count() const { return slots_.size(); }
  // Encoded size (header included).
  size_t bytes() const { return bytes_; }
  std::string_view key(size_t i) const {
    const Slot& s = slots_[i];
    return {arena_.data() + s.off + KeyOffset(), s.klen};
  }
  Ref entry(size_t i) const;

  // Index of the first entry with key >= `key`; with `equal`, whether
  // that entry is `key`.
  size_t LowerBound(std::string_view key, bool* equal = nullptr) const;
  // The entry with exactly `key`, if any.
  std::optional<Ref> Find(std::string_view key) const;
  // Inner: the child whose subtree holds `key`, and its position (-1 for
  // first_child, else the entry index).
  uint32_t ChildFor(std::string_view key, int* pos = nullptr) const;

  // Cache hints (they change nothing): the search index (if current), and
  // the entry `key` falls on.
  void PrefetchIndex() const;
  void PrefetchEntry(std::string_view key) const;
  // The first lines of entry `i`'s bytes. REQUIRES: i < count().
  void PrefetchSlot(size_t i) const;

  // Applies one change. DataLoss for an entry that does not fit the page
  // type (a corrupt log).
  absl::Status Apply(const LogEntry& e);
  // The same from an entry viewed in its encoded bytes (which must not be
  // this page's own). With `replaced`: the value outside pages of an entry
  // the change replaced or deleted, if it had one.
  absl::Status ApplyView(const LogEntryView& e, std::optional<BlobRef>* replaced = nullptr);
  // Replaces every entry with `sorted` (sorted by key, unique): a page a
  // split fills.
  void Assign(std::span<const Entry> sorted);
  // Empties the page and gives it `type` (the other header fields stay):
  // a root that becomes an inner page.
  void Reset(PageType type);
  // Splits off the upper half by bytes: returns the entries from the
  // split point on, leaving the lower part here (at least one each side).
  // For inner pages the first returned entry's key is the separator to
  // push up and its child becomes the new page's first_child.
  std::vector<Entry> SplitUpper();
  // Copies of the entries SplitUpper would return; the page is unchanged.
  std::vector<Entry> UpperHalf() const;

 private:
  // An entry's encoded bytes: arena_[off, off + len), its key klen bytes
  // from KeyOffset() on.
  struct Slot {
    uint32_t off = 0;
    uint32_t len = 0;
    uint16_t klen = 0;
    uint32_t child = kNoPage;  // inner: a copy of the entry's child
  };
  size_t KeyOffset() const { return leaf() ? 3 : 2; }
  // Appends an entry's encoding to the arena; returns its slot.
  Slot AppendEntry(std::string_view key, std::string_view value, const std::optional<BlobRef>& blob,
                   uint32_t child);
  // Drops slots [from, end) (their bytes become garbage).
  void DropFrom(size_t from);
  // Rewrites the arena with only the live entries, in slot order, when
  // dead bytes outweigh the live ones.
  void MaybeCompact();
  void HeaderChanged();
  // Where SplitUpper cuts: the first entry past half the entries' bytes (at
  // least one entry on each side).
  size_t SplitPoint() const;
  // Whether heads_ indexes the entries as they are.
  bool HeadsCurrent() const;
  // Builds heads_ for the entries as they are.
  void BuildHeads() const;
  // Index of the first entry with key > `key` (upper) or >= `key`; with
  // `equal`, whether that entry is `key` (lower only).
  size_t Bound(std::string_view key, bool upper, bool* equal = nullptr) const;

  PageType type_ = PageType::kNone;
  bool has_log_ = true;
  uint32_t epoch_ = 0;
  uint32_t first_child_ = kNoPage;  // inner: child for keys below entry 0
  Meta meta_;                       // meaningful in page 0
  std::vector<Slot> slots_;         // sorted by key
  std::string arena_;               // entries' encodings, live and dead
  size_t dead_ = 0;                 // bytes of arena_ no slot points at
  size_t bytes_ = kPageHeaderBytes;
  uint64_t version_ = 0;
  // The search index of the page's keys (LowerBound, Find, ChildFor),
  // built on a search when it is not current and kept current by Apply:
  // the length of the prefix all keys share and, per entry, the next 8 key
  // bytes as a big-endian integer (zero-padded). Integers that differ
  // order their keys; among equal ones, keys that end within their 8
  // bytes are ordered by length, others compared whole. It is
  // current while `version` is the page's: any other change (SplitUpper,
  // Assign, Decode) leaves it behind, and Apply drops it (`built` false)
  // when a new key does not share the prefix.
  struct Heads {
    bool built = false;
    uint64_t version = 0;
    size_t prefix = 0;
    std::string shared;  // those bytes (searches need not read a key for them)
    std::vector<uint64_t> of;
  };
  mutable Heads heads_;
};

}  // namespace ftl::kv
