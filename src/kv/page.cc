// Page changes and searches (page.h).

#include "kv/page.h"

#include <algorithm>

namespace ftl::kv {

Page::Page(PageImage img) : img_(std::move(img)) { Recount(); }

void Page::Recount() {
  bytes_ = kPageHeaderBytes;
  for (const Entry& e : img_.entries) bytes_ += EntryBytes(img_.type, e);
}

size_t Page::LowerBound(std::string_view key) const {
  auto it = std::lower_bound(img_.entries.begin(), img_.entries.end(), key,
                             [](const Entry& e, std::string_view k) { return e.key < k; });
  return size_t(it - img_.entries.begin());
}

const Entry* Page::Find(std::string_view key) const {
  size_t i = LowerBound(key);
  if (i < img_.entries.size() && img_.entries[i].key == key) return &img_.entries[i];
  return nullptr;
}

uint32_t Page::ChildFor(std::string_view key, int* pos) const {
  // The last entry with key <= `key`.
  auto it = std::upper_bound(img_.entries.begin(), img_.entries.end(), key,
                             [](std::string_view k, const Entry& e) { return k < e.key; });
  int i = int(it - img_.entries.begin()) - 1;
  if (pos) *pos = i;
  return i < 0 ? img_.first_child : img_.entries[size_t(i)].child;
}

Entry EntryOf(const LogEntry& e) {
  Entry x;
  x.key = e.key;
  if (e.op == LogOp::kPut) x.value = e.value;
  if (e.op == LogOp::kPutBlob) x.blob = e.blob;
  if (e.op == LogOp::kChild) x.child = e.child;
  return x;
}

absl::Status Page::Apply(const LogEntry& e) {
  auto& ents = img_.entries;
  switch (e.op) {
    case LogOp::kPut:
    case LogOp::kPutBlob:
    case LogOp::kChild: {
      bool inner = e.op == LogOp::kChild;
      if (inner != (img_.type == PageType::kInner))
        return absl::DataLossError("log entry does not fit its page type");
      size_t i = LowerBound(e.key);
      Entry x = EntryOf(e);
      if (i < ents.size() && ents[i].key == e.key) {
        bytes_ -= EntryBytes(img_.type, ents[i]);
        ents[i] = std::move(x);
      } else {
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
      }
      return absl::OkStatus();
    }
    case LogOp::kTrunc: {
      size_t i = LowerBound(e.key);
      ents.erase(ents.begin() + long(i), ents.end());
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

std::vector<Entry> Page::SplitUpper() {
  auto& ents = img_.entries;
  size_t half = (bytes_ - kPageHeaderBytes) / 2, acc = 0, cut = 0;
  while (cut < ents.size() && acc < half) acc += EntryBytes(img_.type, ents[cut++]);
  cut = std::clamp<size_t>(cut, 1, ents.size() - 1);
  std::vector<Entry> upper(std::make_move_iterator(ents.begin() + long(cut)),
                           std::make_move_iterator(ents.end()));
  ents.resize(cut);
  Recount();
  return upper;
}

}  // namespace ftl::kv
