#include "map/extent_tree.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace ftl::map {

Leaf* ExtentTree::NewLeaf(TreeContext* ctx) {
  ++ctx->leaves;
  Leaf* l = new Leaf;
  l->leaf = true;
  return l;
}

Inner* ExtentTree::NewInner(TreeContext* ctx) {
  ++ctx->inners;
  Inner* n = new Inner;
  n->leaf = false;
  return n;
}

ExtentTree::~ExtentTree() {
  if (root_) Release(root_);
}

ExtentTree::ExtentTree(ExtentTree&& o) noexcept
    : ctx_(o.ctx_), root_(std::exchange(o.root_, nullptr)), mapped_(std::exchange(o.mapped_, 0)) {}

ExtentTree& ExtentTree::operator=(ExtentTree&& o) noexcept {
  if (this != &o) {
    if (root_) Release(root_);
    ctx_ = o.ctx_;
    root_ = std::exchange(o.root_, nullptr);
    mapped_ = std::exchange(o.mapped_, 0);
  }
  return *this;
}

ExtentTree ExtentTree::Share() const {
  ExtentTree t(ctx_);
  if (root_) {
    ++root_->refs;
    t.root_ = root_;
    t.mapped_ = mapped_;
  }
  return t;
}

void ExtentTree::AdoptRoot(Node* root, uint64_t mapped_blocks) {
  if (root_) Release(root_);
  root_ = root;
  mapped_ = mapped_blocks;
}

void ExtentTree::Release(Node* n) {
  // Invariant: a node is released at most as often as it is referenced.
  assert(n->refs > 0);
  if (--n->refs > 0) return;
  if (n->leaf) {
    Leaf* l = static_cast<Leaf*>(n);
    for (int i = 0; i < l->count; ++i) ctx_->vbas->Decref(l->e[i].vba, l->e[i].len);
    --ctx_->leaves;
    delete l;
  } else {
    Inner* in = static_cast<Inner*>(n);
    for (int i = 0; i < in->count; ++i) Release(in->kid[i]);
    --ctx_->inners;
    delete in;
  }
}

// Copies *slot if it is shared and returns the (now private) node.
Node* ExtentTree::MakeWritable(Node** slot) {
  Node* n = *slot;
  if (n->refs == 1) return n;
  if (n->leaf) {
    Leaf* copy = NewLeaf(ctx_);
    const Leaf* src = static_cast<Leaf*>(n);
    copy->count = src->count;
    std::copy(src->e, src->e + src->count, copy->e);
    for (int i = 0; i < copy->count; ++i) ctx_->vbas->Incref(copy->e[i].vba, copy->e[i].len);
    *slot = copy;
  } else {
    Inner* copy = NewInner(ctx_);
    const Inner* src = static_cast<Inner*>(n);
    copy->count = src->count;
    std::copy(src->key, src->key + src->count, copy->key);
    std::copy(src->kid, src->kid + src->count, copy->kid);
    for (int i = 0; i < copy->count; ++i) ++copy->kid[i]->refs;
    *slot = copy;
  }
  --n->refs;  // was > 1, so n stays alive for its other holders
  return *slot;
}

ExtentTree::Split ExtentTree::AssignLeaf(Leaf* leaf, Bno lo, Bno hi, Bno vba, bool insert) {
  Extent tmp[kLeafCap + 3];
  int n = 0;
  std::vector<Extent> dropped;
  int insert_at = -1;
  for (int i = 0; i < leaf->count; ++i) {
    const Extent& e = leaf->e[i];
    if (e.end() <= lo || e.lba >= hi) {
      if (insert_at < 0 && e.lba >= hi) insert_at = n;
      tmp[n++] = e;
      continue;
    }
    Bno cut_lo = std::max(e.lba, lo), cut_hi = std::min(e.end(), hi);
    dropped.push_back({cut_lo, cut_hi - cut_lo, e.vba + (cut_lo - e.lba)});
    if (e.lba < lo) tmp[n++] = {e.lba, lo - e.lba, e.vba};
    if (insert_at < 0 && e.end() > hi) insert_at = n;
    if (e.end() > hi) tmp[n++] = {hi, e.end() - hi, e.vba + (hi - e.lba)};
  }
  if (insert_at < 0) insert_at = n;
  if (insert) {
    ctx_->vbas->Incref(vba, hi - lo);
    mapped_ += hi - lo;
    std::move_backward(tmp + insert_at, tmp + n, tmp + n + 1);
    tmp[insert_at] = {lo, hi - lo, vba};
    ++n;
    // Merge with neighbours that continue both the LBA and the VBA run.
    if (insert_at + 1 < n) {
      Extent& a = tmp[insert_at];
      const Extent& b = tmp[insert_at + 1];
      if (a.end() == b.lba && a.vba + a.len == b.vba) {
        a.len += b.len;
        std::move(tmp + insert_at + 2, tmp + n, tmp + insert_at + 1);
        --n;
      }
    }
    if (insert_at > 0) {
      Extent& a = tmp[insert_at - 1];
      const Extent& b = tmp[insert_at];
      if (a.end() == b.lba && a.vba + a.len == b.vba) {
        a.len += b.len;
        std::move(tmp + insert_at + 1, tmp + n, tmp + insert_at);
        --n;
      }
    }
  }
  for (const Extent& d : dropped) {
    ctx_->vbas->Decref(d.vba, d.len);
    mapped_ -= d.len;
  }
  Split split;
  if (n <= kLeafCap) {
    std::copy(tmp, tmp + n, leaf->e);
    leaf->count = uint16_t(n);
    return split;
  }
  // A leaf that overflows at its end (sequential appends) keeps most
  // entries; otherwise it splits in half.
  int keep = insert_at >= n - 2 ? n - 2 : n / 2;
  Leaf* right = NewLeaf(ctx_);
  std::copy(tmp, tmp + keep, leaf->e);
  leaf->count = uint16_t(keep);
  std::copy(tmp + keep, tmp + n, right->e);
  right->count = uint16_t(n - keep);
  split.right = right;
  split.key = right->e[0].lba;
  return split;
}

uint64_t ExtentTree::CountMapped(const Node* n) const {
  uint64_t total = 0;
  if (n->leaf) {
    const Leaf* l = static_cast<const Leaf*>(n);
    for (int i = 0; i < l->count; ++i) total += l->e[i].len;
  } else {
    const Inner* in = static_cast<const Inner*>(n);
    for (int i = 0; i < in->count; ++i) total += CountMapped(in->kid[i]);
  }
  return total;
}

ExtentTree::Split ExtentTree::AssignIn(Node** slot, Bno lo, Bno hi, Bno vba, bool insert) {
  Node* node = MakeWritable(slot);
  if (node->leaf) return AssignLeaf(static_cast<Leaf*>(node), lo, hi, vba, insert);
  Inner* in = static_cast<Inner*>(node);
  // i: child holding lo; j: last child starting below hi.
  int i = int(std::upper_bound(in->key + 1, in->key + in->count, lo) - in->key) - 1;
  int j = int(std::upper_bound(in->key + 1, in->key + in->count, hi - 1) - in->key) - 1;
  struct Slot {
    Bno key;
    Node* kid;
  };
  Slot tmp[kInnerCap + 3];
  int n = 0;
  for (int k = 0; k < i; ++k) tmp[n++] = {in->key[k], in->kid[k]};
  auto add_child = [&](Bno key, Node* kid, Split split) {
    if (kid->count > 0) {
      tmp[n++] = {key, kid};
    } else {
      Release(kid);
    }
    if (split.right) tmp[n++] = {split.key, split.right};
  };
  if (i == j) {
    Split s = AssignIn(&in->kid[i], lo, hi, vba, insert);
    add_child(in->key[i], in->kid[i], s);
  } else {
    Split si = AssignIn(&in->kid[i], lo, hi, vba, insert);
    add_child(in->key[i], in->kid[i], si);
    for (int k = i + 1; k < j; ++k) {
      mapped_ -= CountMapped(in->kid[k]);
      Release(in->kid[k]);
    }
    Split sj = AssignIn(&in->kid[j], lo, hi, kNoBlock, false);
    add_child(hi, in->kid[j], sj);
  }
  for (int k = j + 1; k < in->count; ++k) tmp[n++] = {in->key[k], in->kid[k]};
  Split split;
  if (n <= kInnerCap) {
    for (int k = 0; k < n; ++k) {
      in->key[k] = tmp[k].key;
      in->kid[k] = tmp[k].kid;
    }
    in->count = uint16_t(n);
    return split;
  }
  int keep = n / 2;
  Inner* right = NewInner(ctx_);
  for (int k = 0; k < keep; ++k) {
    in->key[k] = tmp[k].key;
    in->kid[k] = tmp[k].kid;
  }
  in->count = uint16_t(keep);
  for (int k = keep; k < n; ++k) {
    right->key[k - keep] = tmp[k].key;
    right->kid[k - keep] = tmp[k].kid;
  }
  right->count = uint16_t(n - keep);
  split.right = right;
  split.key = right->key[0];
  return split;
}

void ExtentTree::Assign(Bno lba, Bno len, Bno vba) {
  if (len == 0) return;
  bool insert = vba != kNoBlock;
  if (!root_) {
    if (!insert) return;
    root_ = NewLeaf(ctx_);
  }
  Split s = AssignIn(&root_, lba, lba + len, vba, insert);
  if (s.right) {
    Inner* r = NewInner(ctx_);
    r->count = 2;
    r->key[0] = 0;
    r->kid[0] = root_;
    r->key[1] = s.key;
    r->kid[1] = s.right;
    root_ = r;
  }
  // Collapse an empty root and single-child inner roots. The root is
  // private here (AssignIn made it writable).
  while (root_) {
    if (root_->count == 0) {
      Release(root_);
      root_ = nullptr;
    } else if (!root_->leaf && root_->count == 1) {
      Inner* old = static_cast<Inner*>(root_);
      root_ = old->kid[0];
      --ctx_->inners;
      delete old;  // its one child reference moves to root_
    } else {
      break;
    }
  }
}

void ExtentTree::Lookup(Bno lba, Bno len, std::vector<Extent>* out) const {
  if (!root_ || len == 0) return;
  Bno hi = lba + len;
  // Iterative DFS over the children that intersect [lba, hi).
  absl::InlinedVector<const Node*, 32> stack{root_};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->leaf) {
      const Leaf* l = static_cast<const Leaf*>(n);
      for (int i = 0; i < l->count; ++i) {
        const Extent& e = l->e[i];
        if (e.end() <= lba) continue;
        if (e.lba >= hi) break;
        Bno a = std::max(e.lba, lba), b = std::min(e.end(), hi);
        out->push_back({a, b - a, e.vba + (a - e.lba)});
      }
      continue;
    }
    const Inner* in = static_cast<const Inner*>(n);
    int i = int(std::upper_bound(in->key + 1, in->key + in->count, lba) - in->key) - 1;
    int j = int(std::upper_bound(in->key + 1, in->key + in->count, hi - 1) - in->key) - 1;
    for (int k = j; k >= i; --k) stack.push_back(in->kid[k]);  // leftmost popped first
  }
}

Bno ExtentTree::LookupOne(Bno lba) const {
  const Node* n = root_;
  while (n) {
    if (n->leaf) {
      const Leaf* l = static_cast<const Leaf*>(n);
      for (int i = 0; i < l->count; ++i) {
        const Extent& e = l->e[i];
        if (lba < e.lba) return kNoBlock;
        if (lba < e.end()) return e.vba + (lba - e.lba);
      }
      return kNoBlock;
    }
    const Inner* in = static_cast<const Inner*>(n);
    int i = int(std::upper_bound(in->key + 1, in->key + in->count, lba) - in->key) - 1;
    n = in->kid[i];
  }
  return kNoBlock;
}

bool ExtentTree::Exclusive(Bno lba) const {
  const Node* n = root_;
  while (n) {
    if (n->refs != 1) return false;
    if (n->leaf) return true;
    const Inner* in = static_cast<const Inner*>(n);
    int i = int(std::upper_bound(in->key + 1, in->key + in->count, lba) - in->key) - 1;
    n = in->kid[i];
  }
  return true;
}

void ExtentTree::ForEach(const std::function<void(const Extent&)>& fn) const {
  if (!root_) return;
  std::vector<const Node*> stack{root_};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->leaf) {
      const Leaf* l = static_cast<const Leaf*>(n);
      for (int i = 0; i < l->count; ++i) fn(l->e[i]);
    } else {
      const Inner* in = static_cast<const Inner*>(n);
      for (int k = in->count - 1; k >= 0; --k) stack.push_back(in->kid[k]);
    }
  }
}

uint64_t ExtentTree::extent_count() const {
  uint64_t n = 0;
  ForEach([&](const Extent&) { ++n; });
  return n;
}

}  // namespace ftl::map
