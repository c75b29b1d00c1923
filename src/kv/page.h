#pragma once
// Page: a decoded page (kv_format.h) with the changes a log entry makes,
// its encoded size and the searches the tree needs. Applying a log entry
// here is the same code whether the entry is new (a change) or read back
// from the page's log (reading a page applies its log), so the buffer and
// the media can never disagree on what an entry means.
//
// Thread safety: none (the store's lock guards every page); even the
// const searches (LowerBound, Find, ChildFor) may build the page's search
// index.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_format.h"

namespace ftl::kv {

class Page {
 public:
  Page() = default;
  explicit Page(PageImage img);

  // Writable: counts as a change (the caller may change anything).
  PageImage& mutable_image() {
    ++version_;
    return img_;
  }
  // Changes so far (Apply, SplitUpper, mutable_image()): equal
  // versions of one Page mean the same contents.
  uint64_t version() const { return version_; }
  const PageImage& image() const { return img_; }
  bool leaf() const { return img_.type == PageType::kLeaf; }
  size_t count() const { return img_.entries.size(); }
  // Encoded size (header included).
  size_t bytes() const { return bytes_; }

  // Index of the first entry with key >= `key`.
  size_t LowerBound(std::string_view key) const;
  // The entry with exactly `key`, or nullptr.
  const Entry* Find(std::string_view key) const;
  // Inner: the child whose subtree holds `key`, and its position (-1 for
  // first_child, else the entry index).
  uint32_t ChildFor(std::string_view key, int* pos = nullptr) const;

  // Applies one change. DataLoss for an entry that does not fit the page
  // type (a corrupt log).
  absl::Status Apply(const LogEntry& e);
  // The same, taking over the entry's strings.
  absl::Status Apply(LogEntry&& e);
  // The same from an entry viewed in its encoded bytes (copied in, reusing
  // the memory of a value it replaces).
  absl::Status ApplyView(const LogEntryView& e);
  // Splits off the upper half by bytes: returns the entries from the
  // split point on, leaving the lower part here (at least one each side).
  // For inner pages the first returned entry's key is the separator to
  // push up and its child becomes the new page's first_child.
  std::vector<Entry> SplitUpper();
  // Copies of the entries SplitUpper would return; the page is unchanged.
  std::vector<Entry> UpperHalf() const;
  void Recount();

 private:
  template <typename E>
  absl::Status ApplyTo(E&& e);
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

  PageImage img_;
  size_t bytes_ = kPageHeaderBytes;
  uint64_t version_ = 0;
  // The search index of the page's keys (LowerBound, Find, ChildFor),
  // built on a search when it is not current and kept current by Apply:
  // the length of the prefix all keys share and, per entry, the next 8 key
  // bytes as a big-endian integer (zero-padded). Integers that differ
  // order their keys; among equal ones, keys that end within their 8
  // bytes are ordered by length, others compared whole. It is
  // current while `version` is the page's: any other change (SplitUpper,
  // mutable_image()) leaves it behind, and Apply drops it (`built` false)
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
