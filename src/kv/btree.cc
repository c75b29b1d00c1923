// The B+tree of a store (btree.h).

#include "kv/btree.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_format.h"

namespace ftl::kv {

bool BTree::FitsInline(size_t key_bytes, size_t value_bytes) const {
  return 3 + key_bytes + 2 + value_bytes <= std::min<size_t>(buf_->layout().geo.page_bytes / 4, 2048);
}

absl::StatusOr<std::optional<uint32_t>> BTree::DescendBlind(std::string_view key, size_t bytes,
                                                            Path* path) {
  return DescendUntil(key, path, [&](uint32_t id) { return buf_->CanChangeBlind(id, bytes); });
}

absl::StatusOr<std::optional<uint32_t>> BTree::DescendToRead(std::string_view key, Path* path) {
  if (buf_->mode() != KvMode::kPdl) {
    if (absl::Status s = Descend(key, path); !s.ok()) return s;
    return std::optional<uint32_t>();
  }
  // A leaf not in the buffer is probed where it lies (one read, nothing
  // decoded) unless the buffer has room for it: then it is loaded, so the
  // next read of it costs no I/O (docs/kv.md, "Reads").
  return DescendUntil(key, path,
                      [&](uint32_t id) { return !buf_->has_room() && !buf_->Buffered(id); });
}

absl::StatusOr<std::optional<uint32_t>> BTree::DescendUntil(std::string_view key, Path* path,
                                                            const std::function<bool(uint32_t)>& stop) {
  path->buf = buf_;
  const uint32_t height = buf_->meta().height;
  uint32_t id = 0;
  for (uint32_t depth = 0;; ++depth) {
    if (depth > 64) return absl::DataLossError("the tree is deeper than 64 levels (a cycle?)");
    // Leaves are at depth height - 1 (the root is one while height is 1).
    if (depth > 0 && depth + 1 == height && stop(id)) return std::optional<uint32_t>(id);
    absl::StatusOr<Frame*> f = buf_->Get(id);
    if (!f.ok()) return f.status();
    path->frames.push_back(*f);
    if ((*f)->page.leaf()) return std::optional<uint32_t>();
    int pos = 0;
    id = (*f)->page.ChildFor(key, &pos);
    path->pos.push_back(pos);
    if (id == kNoPage) return absl::DataLossError(absl::StrFormat("inner page %d has no child", (*f)->id));
  }
}

absl::Status BTree::Descend(std::string_view key, Path* path) {
  path->buf = buf_;
  uint32_t id = 0;
  for (int depth = 0;; ++depth) {
    if (depth > 64) return absl::DataLossError("the tree is deeper than 64 levels (a cycle?)");
    absl::StatusOr<Frame*> f = buf_->Get(id);
    if (!f.ok()) return f.status();
    path->frames.push_back(*f);
    if ((*f)->page.leaf()) return absl::OkStatus();
    int pos = 0;
    id = (*f)->page.ChildFor(key, &pos);
    path->pos.push_back(pos);
    if (id == kNoPage) return absl::DataLossError(absl::StrFormat("inner page %d has no child", (*f)->id));
  }
}

absl::StatusOr<std::string> BTree::ValueOf(const Entry& e) {
  if (e.blob) return buf_->ReadBlob(*e.blob);
  return e.value;
}

absl::StatusOr<std::string> BTree::ValueOf(const Page::Ref& e) {
  if (e.blob) return buf_->ReadBlob(*e.blob);
  return std::string(e.value);
}

absl::Status BTree::Locate(std::string_view key, Located* at) {
  absl::StatusOr<std::optional<uint32_t>> leaf = DescendToRead(key, &at->path);
  if (!leaf.ok()) return leaf.status();
  at->leaf_path = &at->path;
  if (leaf->has_value()) {
    absl::StatusOr<BufferPool::Probe> p = buf_->ProbeLeaf(**leaf, key);
    if (!p.ok()) return p.status();
    if (p->answered) {
      at->leaf_path = nullptr;
      at->unread = **leaf;
      if (!p->entry) return absl::OkStatus();
      absl::StatusOr<std::string> v = ValueOf(*p->entry);
      if (!v.ok()) return v.status();
      at->value = std::move(*v);
      return absl::OkStatus();
    }
    // The page needs loading (its in-page log): the whole way down again.
    if (absl::Status s = Descend(key, &at->full); !s.ok()) return s;
    at->leaf_path = &at->full;
  }
  std::optional<Page::Ref> e = at->leaf_path->frames.back()->page.Find(key);
  if (!e) return absl::OkStatus();
  absl::StatusOr<std::string> v = ValueOf(*e);
  if (!v.ok()) return v.status();
  at->value = std::move(*v);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> BTree::Get(std::string_view key) {
  Located at;
  if (absl::Status s = Locate(key, &at); !s.ok()) return s;
  return std::move(at.value);
}

absl::StatusOr<bool> BTree::Contains(std::string_view key) {
  Path path;
  absl::StatusOr<std::optional<uint32_t>> leaf = DescendToRead(key, &path);
  if (!leaf.ok()) return leaf.status();
  if (leaf->has_value()) {
    absl::StatusOr<BufferPool::Probe> p = buf_->ProbeLeaf(**leaf, key);
    if (!p.ok()) return p.status();
    if (p->answered) return p->entry.has_value();
    Path full;
    if (absl::Status s = Descend(key, &full); !s.ok()) return s;
    return full.frames.back()->page.Find(key).has_value();
  }
  return path.frames.back()->page.Find(key).has_value();
}

absl::Status BTree::Put(std::string_view key, std::string_view value, bool blind) {
  Path path;
  const bool inline_value = FitsInline(key.size(), value.size());
  if (blind && inline_value) {
    absl::StatusOr<std::optional<uint32_t>> leaf_id =
        DescendBlind(key, 3 + key.size() + 2 + value.size(), &path);
    if (!leaf_id.ok()) return leaf_id.status();
    if (leaf_id->has_value()) {
      buf_->BlindChange(**leaf_id, key, value);
      return absl::OkStatus();
    }
  } else if (absl::Status s = Descend(key, &path); !s.ok()) {
    return s;
  }
  return PutIn(key, value, &path);
}

absl::Status BTree::PutIn(std::string_view key, std::string_view value, Path* path) {
  Frame* leaf = path->frames.back();
  if (FitsInline(key.size(), value.size())) {
    // (The value it replaces, if kept outside pages, is freed.)
    if (absl::Status s = buf_->ChangePut(leaf, key, value, /*free_replaced=*/true); !s.ok()) return s;
    return SplitIfFull(path, path->frames.size() - 1);
  }
  LogEntry e;
  e.key = std::string(key);
  absl::StatusOr<BlobRef> r = buf_->PutBlob(value);
  if (!r.ok()) return r.status();
  e.op = LogOp::kPutBlob;
  e.blob = *r;
  if (std::optional<Page::Ref> old = leaf->page.Find(key); old && old->blob) buf_->FreeBlob(*old->blob);
  if (absl::Status s = buf_->Change(leaf, e); !s.ok()) return s;
  return SplitIfFull(path, path->frames.size() - 1);
}

absl::Status BTree::Modify(std::string_view key, ModifyFn fn, bool blind, bool* changing) {
  *changing = false;
  Located at;
  if (absl::Status s = Locate(key, &at); !s.ok()) return s;
  absl::StatusOr<std::optional<std::string>> value =
      fn(at.value ? std::optional<std::string_view>(*at.value) : std::nullopt);
  if (!value.ok()) return value.status();
  if (!value->has_value()) return absl::OkStatus();
  const std::string& v = **value;
  if (at.unread) {
    // As Put logs a leaf it need not read; else the leaf is loaded now.
    if (blind && FitsInline(key.size(), v.size()) &&
        buf_->CanChangeBlind(*at.unread, 3 + key.size() + 2 + v.size())) {
      *changing = true;
      buf_->BlindChange(*at.unread, key, v);
      return absl::OkStatus();
    }
    if (absl::Status s = Descend(key, &at.full); !s.ok()) return s;
    at.leaf_path = &at.full;
  }
  *changing = true;
  return PutIn(key, v, at.leaf_path);
}

absl::StatusOr<std::optional<bool>> BTree::Delete(std::string_view key, bool blind) {
  Path path;
  if (blind) {
    // The key's entry from a probe (its differential, its filter or the
    // page as it is on the media), so a value kept outside pages is freed
    // now: a delete is how space is given back.
    absl::StatusOr<std::optional<uint32_t>> leaf_id = DescendToRead(key, &path);
    if (!leaf_id.ok()) return leaf_id.status();
    if (leaf_id->has_value()) {
      absl::StatusOr<BufferPool::Probe> p = buf_->ProbeLeaf(**leaf_id, key);
      if (!p.ok()) return p.status();
      if (p->answered && !p->entry) return std::optional<bool>(false);
      if (p->answered && buf_->CanChangeBlind(**leaf_id, 0)) {
        if (p->entry->blob) buf_->FreeBlob(*p->entry->blob);
        buf_->BlindChange(**leaf_id, key, std::nullopt);
        return std::optional<bool>(true);
      }
    }
  }
  Path full;
  if (absl::Status s = Descend(key, &full); !s.ok()) return s;
  return DeleteIn(key, &full);
}

absl::StatusOr<std::optional<bool>> BTree::DeleteIn(std::string_view key, Path* path) {
  Frame* leaf = path->frames.back();
  std::optional<Page::Ref> old = leaf->page.Find(key);
  if (!old) return std::optional<bool>(false);
  if (old->blob) buf_->FreeBlob(*old->blob);
  LogEntry e;
  e.op = LogOp::kDel;
  e.key = std::string(key);
  if (absl::Status s = buf_->Change(leaf, e); !s.ok()) return s;
  return std::optional<bool>(true);
}

namespace {

// A frame's first four lines: the members a search and Get read.
void PrefetchFrame(const Frame* f) {
  for (size_t at = 0; at < std::min<size_t>(sizeof(Frame), 256); at += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(f) + at);
}

}  // namespace

void BTree::Prefetch(std::span<const std::string_view> keys) {
  constexpr size_t kMaxKeys = 64;
  if (buf_->meta().height < 2) return;
  std::array<const Frame*, kMaxKeys> leaves{};
  const size_t n = std::min(keys.size(), kMaxKeys);
  // 1: each key's leaf through the buffered inner pages (which stay in the
  // cache: few and often used); the leaf's frame is only prefetched.
  for (size_t i = 0; i < n; ++i) {
    uint32_t id = kNoPage;
    const Frame* leaf = BufferedLeaf(keys[i], &id, /*count_hits=*/false);
    if (id != kNoPage) buf_->diffs().Prefetch(id);
    if (leaf != nullptr) PrefetchFrame(leaf);
    leaves[i] = leaf;
  }
  // 2: their search indexes and slots.
  for (size_t i = 0; i < n; ++i)
    if (leaves[i] != nullptr) leaves[i]->page.PrefetchIndex();
  // 3: the entries the keys fall on.
  for (size_t i = 0; i < n; ++i)
    if (leaves[i] != nullptr && leaves[i]->page.leaf()) leaves[i]->page.PrefetchEntry(keys[i]);
}

const Frame* BTree::BufferedLeaf(std::string_view key, uint32_t* leaf_id, bool count_hits) {
  constexpr uint32_t kMaxDepth = 16;
  *leaf_id = kNoPage;
  const uint32_t height = buf_->meta().height;
  if (height > kMaxDepth) return nullptr;
  std::array<uint32_t, kMaxDepth> ids;
  uint32_t id = 0;
  for (uint32_t depth = 0; depth + 1 < height; ++depth) {
    const Frame* f = buf_->Peek(id);
    if (f == nullptr || f->page.leaf()) return nullptr;  // (Get's descent reports a bad tree)
    ids[depth] = id;
    id = f->page.ChildFor(key);
    if (id == kNoPage) return nullptr;
  }
  *leaf_id = id;
  const Frame* leaf = buf_->Peek(id);
  if (leaf == nullptr) return nullptr;
  if (count_hits)
    for (uint32_t d = 0; d + 1 < height; ++d) buf_->Hit(ids[d]);
  return leaf;
}

absl::Status BTree::GetMany(std::span<const std::string_view> keys, KvStore::GetManyFn fn) {
  constexpr size_t kChunk = 64;
  struct Found {
    const Frame* leaf = nullptr;  // null: a key no key can be (absent)
    uint32_t id = 0;
    size_t slot = 0;
    bool equal = false;
  };
  std::array<Found, kChunk> found;
  size_t i = 0;
  while (i < keys.size()) {
    // 1: the leaves, until a key whose way down leaves the buffer; their
    // frames' first lines towards the cache (a leaf is not read before
    // pass 3, so the misses of the chunk's leaves overlap).
    size_t n = 0;
    bool alone = false;  // keys[i + n] is read by Get, after the chunk
    for (; n < kChunk && i + n < keys.size(); ++n) {
      const std::string_view k = keys[i + n];
      found[n] = Found();
      if (k.empty() || k.size() > kMaxKeyBytes) continue;
      const Frame* leaf = BufferedLeaf(k, &found[n].id, /*count_hits=*/true);
      if (leaf == nullptr) {
        alone = true;
        break;
      }
      found[n].leaf = leaf;
      PrefetchFrame(leaf);
    }
    // 2: their search indexes. 3: the searches, and the entries found.
    for (size_t j = 0; j < n; ++j)
      if (found[j].leaf != nullptr) found[j].leaf->page.PrefetchIndex();
    for (size_t j = 0; j < n; ++j) {
      Found& f = found[j];
      if (f.leaf == nullptr) continue;
      if (!f.leaf->page.leaf()) {  // the tree's height is wrong: Get says how
        n = j;
        alone = true;
        break;
      }
      buf_->Hit(f.id);
      f.slot = f.leaf->page.LowerBound(keys[i + j], &f.equal);
      if (f.equal) f.leaf->page.PrefetchSlot(f.slot);
    }
    // 4: the answers, in order.
    for (size_t j = 0; j < n; ++j, ++i) {
      const Found& f = found[j];
      std::optional<std::string_view> value;
      std::string outside;
      if (f.leaf != nullptr && f.equal) {
        Page::Ref r = f.leaf->page.entry(f.slot);
        if (r.blob) {
          absl::StatusOr<std::string> v = buf_->ReadBlob(*r.blob);
          if (!v.ok()) return v.status();
          outside = std::move(*v);
          value = outside;
        } else {
          value = r.value;
        }
      }
      if (!fn(i, value)) return absl::OkStatus();
    }
    if (alone) {
      absl::StatusOr<std::optional<std::string>> v = Get(keys[i]);
      if (!v.ok()) return v.status();
      std::optional<std::string_view> value;
      if (v->has_value()) value = **v;
      if (!fn(i, value)) return absl::OkStatus();
      ++i;
    }
  }
  return absl::OkStatus();
}

absl::Status BTree::SplitIfFull(Path* path, size_t level) {
  Frame* f = path->frames[level];
  if (f->page.bytes() <= buf_->layout().geo.page_bytes) return absl::OkStatus();
  if (f->page.count() < 3 && !f->page.leaf())
    return absl::InternalError("an inner page overflows with fewer than 3 entries");
  if (level == 0) return SplitRoot(f);
  // The upper half is copied into the new page; the old page loses it by
  // the TRUNC logged below (its change, applied as any change is).
  std::vector<Entry> upper = f->page.UpperHalf();
  std::string sep = upper.front().key;
  absl::StatusOr<Frame*> n = buf_->Allocate(f->page.type());
  if (!n.ok()) return n.status();
  Page& np = (*n)->page;
  if (f->page.leaf()) {
    np.Assign(upper);
  } else {
    np.set_first_child(upper.front().child);
    np.Assign(std::span<const Entry>(upper).subspan(1));
  }
  uint32_t new_id = (*n)->id;
  buf_->Unpin(*n);
  LogEntry trunc;
  trunc.op = LogOp::kTrunc;
  trunc.key = sep;
  if (absl::Status s = buf_->Change(f, trunc); !s.ok()) return s;
  LogEntry child;
  child.op = LogOp::kChild;
  child.key = sep;
  child.child = new_id;
  Frame* parent = path->frames[level - 1];
  if (absl::Status s = buf_->Change(parent, child); !s.ok()) return s;
  return SplitIfFull(path, level - 1);
}

absl::Status BTree::SplitRoot(Frame* root) {
  Page lower = root->page;
  std::vector<Entry> upper = lower.SplitUpper();
  PageType type = root->page.type();
  absl::StatusOr<Frame*> a = buf_->Allocate(type);
  if (!a.ok()) return a.status();
  absl::StatusOr<Frame*> b = buf_->Allocate(type);
  if (!b.ok()) {
    buf_->Unpin(*a);
    return b.status();
  }
  std::string sep = upper.front().key;
  Page& ap = (*a)->page;
  ap.set_first_child(root->page.first_child());
  ap.Assign(lower.image().entries);
  Page& bp = (*b)->page;
  if (type == PageType::kLeaf) {
    bp.Assign(upper);
  } else {
    bp.set_first_child(upper.front().child);
    bp.Assign(std::span<const Entry>(upper).subspan(1));
  }
  // The root is written whole: it becomes an inner page over the two.
  buf_->MarkRewrite(root);
  Entry e;
  e.key = sep;
  e.child = (*b)->id;
  root->page.Reset(PageType::kInner);
  root->page.set_first_child((*a)->id);
  root->page.Assign(std::span<const Entry>(&e, 1));
  ++buf_->meta().height;
  buf_->Unpin(*a);
  buf_->Unpin(*b);
  return absl::OkStatus();
}

absl::Status BTree::ScanPage(uint32_t id, std::string_view from, std::string_view to, size_t limit,
                             std::vector<std::pair<std::string, std::string>>* out, bool* done) {
  absl::StatusOr<Frame*> fr = buf_->Get(id);
  if (!fr.ok()) return fr.status();
  Frame* f = *fr;
  absl::Status status;
  const Page& page = f->page;
  if (page.leaf()) {
    for (size_t i = page.LowerBound(from); i < page.count(); ++i) {
      const Page::Ref e = page.entry(i);
      if ((!to.empty() && e.key >= to) || out->size() >= limit) {
        *done = true;
        break;
      }
      absl::StatusOr<std::string> v = ValueOf(e);
      if (!v.ok()) {
        status = v.status();
        break;
      }
      out->emplace_back(e.key, std::move(*v));
    }
  } else {
    int pos = 0;
    f->page.ChildFor(from, &pos);
    // Children from the one holding `from` on; copy ids first (loading
    // may evict nothing pinned, but the entries vector may not change).
    std::vector<std::pair<std::string, uint32_t>> kids;
    for (int i = pos; i < int(page.count()); ++i)
      kids.emplace_back(i < 0 ? std::string() : std::string(page.key(size_t(i))),
                        i < 0 ? page.first_child() : page.entry(size_t(i)).child);
    for (const auto& [lo, kid] : kids) {
      if (!to.empty() && !lo.empty() && lo >= to) {
        *done = true;
        break;
      }
      status = ScanPage(kid, from, to, limit, out, done);
      if (!status.ok() || *done) break;
    }
  }
  buf_->Unpin(f);
  return status;
}

absl::Status BTree::Scan(std::string_view from, std::string_view to, size_t limit,
                         std::vector<std::pair<std::string, std::string>>* out) {
  bool done = false;
  if (limit == 0) return absl::OkStatus();
  return ScanPage(0, from, to, limit, out, &done);
}

}  // namespace ftl::kv
