// Over 600 lines on purpose: one data structure whose lookup, insert,
// split, merge and copy-on-write paths share private helpers; cutting it
// would expose those helpers (docs/decisions.md, "Files over 600 lines").

#include "map/extent_tree.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace ftl::map {

Leaf* ExtentTree::NewLeaf(TreeContext* ctx) {
  ++ctx->leaves;
  Leaf* l = new Leaf;
  l->leaf = true;
  l->gen = ++ctx->last_gen;
  return l;
}

Inner* ExtentTree::NewInner(TreeContext* ctx) {
  ++ctx->inners;
  Inner* n = new Inner;
  n->leaf = false;
  return n;
}

TreeContext::~TreeContext() { ReapDeadLeaves(); }

void TreeContext::ReapDeadLeaves() {
  for (Node* n : dead) delete static_cast<Leaf*>(n);
  dead.clear();
}

void ExtentTree::Bury(Leaf* leaf) {
  leaf->refs = 0;
  NewGen(leaf);
  --ctx_->leaves;
  ctx_->dead.push_back(leaf);
}

ExtentTree::~ExtentTree() {
  ++ctx_->shape;
  if (root_) Release(root_);
}

ExtentTree::ExtentTree(ExtentTree&& o) noexcept
    : ctx_(o.ctx_), root_(std::exchange(o.root_, nullptr)), mapped_(std::exchange(o.mapped_, 0)) {
  Touch();
  o.Touch();
}

ExtentTree& ExtentTree::operator=(ExtentTree&& o) noexcept {
  if (this != &o) {
    if (root_) Release(root_);
    ctx_ = o.ctx_;
    root_ = std::exchange(o.root_, nullptr);
    mapped_ = std::exchange(o.mapped_, 0);
    Touch();
    o.Touch();
  }
  return *this;
}

ExtentTree ExtentTree::Share() const {
  ExtentTree t(ctx_);
  Touch();  // its paths are shared from now on
  if (root_) {
    ++root_->refs;
    t.root_ = root_;
    t.mapped_ = mapped_;
  }
  return t;
}

void ExtentTree::AdoptRoot(Node* root, uint64_t mapped_blocks) {
  Touch();
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
    Bury(l);
  } else {
    // Lookups keep leaf pointers only: freeing an inner node moves no
    // leaf's range.
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

namespace {

// How many of a[0, n) satisfy `pred`, which holds on a prefix of them:
// std::partition_point without data-dependent branches (the halving
// compiles to a conditional move). Node searches run on every tree
// descent, and on a fragmented tree a branchy search mispredicts about
// every other step.
template <typename T, typename Pred>
inline int PrefixCount(const T* a, int n, Pred pred) {
  if (n <= 0) return 0;
  const T* base = a;
  int len = n;
  while (len > 1) {
    const int half = len / 2;
    base = pred(base[half]) ? base + half : base;
    len -= half;
  }
  return int(base - a) + int(pred(*base));
}

// First entry of e[0, count) whose end is above lba (entries are sorted and
// disjoint, so ends ascend too).
int FirstEndingAbove(const LeafEntry* e, int count, Bno lba) {
  return PrefixCount(e, count, [lba](const LeafEntry& x) { return x.end() <= lba; });
}

// The child of `in` whose range holds lba: the last i >= 1 with
// key[i] <= lba, else 0 (key[0] is not compared).
int ChildFor(const Inner* in, Bno lba) {
  return PrefixCount(in->key + 1, in->count - 1, [lba](Bno k) { return k <= lba; });
}

// Entries that continue both the LBA and the VBA run of `a` fold into it,
// as long as one leaf entry can hold the result.
bool Continues(const Extent& a, const Extent& b) {
  return a.end() == b.lba && a.vba + a.len == b.vba && a.len + b.len <= kMaxEntryLen;
}

}  // namespace

ExtentTree::Split ExtentTree::AssignLeaf(Leaf* leaf, Bno lo, Bno hi, Bno vba, bool insert,
                                         bool* in_place, int hint) {
  LeafEntry* e = leaf->e;
  const int count = leaf->count;
  // [a, b): the entries [lo, hi) touches.
  const bool hint_holds = hint >= 0 && hint <= count && (hint == count || e[hint].end() > lo) &&
                          (hint == 0 || e[hint - 1].end() <= lo);
  const int a = hint_holds ? hint : FirstEndingAbove(e, count, lo);
  int b = a;
  while (b < count && e[b].lba < hi) ++b;
  if (!insert && a == b) return {};

  // What replaces [a, b), with the neighbours a-1 and b around it so the
  // new extent can fold into them: at most 2 + 3 entries.
  Extent mid[5];
  int m = 0;
  const int from = a > 0 ? a - 1 : a;             // first entry rewritten
  const int to = b < count ? b + 1 : b;           // one past the last
  if (a > 0) mid[m++] = e[a - 1];
  if (a < b && e[a].lba < lo) mid[m++] = {e[a].lba, lo - e[a].lba, e[a].vba};
  if (insert) {
    Extent n{lo, hi - lo, vba};
    if (m > 0 && Continues(mid[m - 1], n)) {
      mid[m - 1].len += n.len;
    } else {
      mid[m++] = n;
    }
  }
  if (a < b && e[b - 1].end() > hi) {
    const Extent last = e[b - 1];
    Extent r{hi, last.end() - hi, last.vba + (hi - last.lba)};
    if (insert && Continues(mid[m - 1], r)) {
      mid[m - 1].len += r.len;
    } else {
      mid[m++] = r;
    }
  }
  if (b < count) {
    if (insert && m > 0 && mid[m - 1].end() == hi && Continues(mid[m - 1], e[b])) {
      mid[m - 1].len += e[b].len;
    } else {
      mid[m++] = e[b];
    }
  }

  const int n = count - (to - from) + m;
  if (in_place && (n > kLeafCap || n < kLeafCap / 4)) {
    *in_place = false;
    return {};
  }

  // References: the new VBAs first, then drop the overwritten pieces.
  if (insert) {
    ctx_->vbas->Incref(vba, hi - lo);
    mapped_ += hi - lo;
  }
  for (int k = a; k < b; ++k) {
    const Extent x = e[k];
    Bno cut_lo = std::max(x.lba, lo), cut_hi = std::min(x.end(), hi);
    ctx_->vbas->Decref(x.vba + (cut_lo - x.lba), cut_hi - cut_lo);
    mapped_ -= cut_hi - cut_lo;
  }
  if (n <= kLeafCap) {
    std::memmove(e + from + m, e + to, sizeof(LeafEntry) * size_t(count - to));
    std::copy(mid, mid + m, e + from);
    leaf->count = uint16_t(n);
    return {};
  }
  // Overflow: rebuild and split. A leaf that overflows at its end
  // (sequential appends) keeps most entries; otherwise it splits in half.
  LeafEntry tmp[kLeafCap + 3];
  std::copy(e, e + from, tmp);
  std::copy(mid, mid + m, tmp + from);
  std::copy(e + to, e + count, tmp + from + m);
  const bool at_end = to >= count;
  int keep = at_end ? n - 2 : n / 2;
  Leaf* right = NewLeaf(ctx_);
  NewGen(leaf);  // its range shrinks to [.., right's first)
  std::copy(tmp, tmp + keep, leaf->e);
  leaf->count = uint16_t(keep);
  std::copy(tmp + keep, tmp + n, right->e);
  right->count = uint16_t(n - keep);
  Split split;
  split.right = right;
  split.key = right->e[0].lba;
  return split;
}

void ExtentTree::Rebalance(Inner* in, int i, Split* s) {
  Leaf* l = static_cast<Leaf*>(in->kid[i]);
  Leaf* r = static_cast<Leaf*>(s->right);
  // An end split (sequential appends) already left a full leaf behind.
  if (r->count < kLeafCap / 4) return;
  auto usable = [&](int k) {
    return k >= 0 && k < in->count && in->kid[k]->leaf && in->kid[k]->refs == 1;
  };
  const int nb = usable(i + 1) ? i + 1 : usable(i - 1) ? i - 1 : -1;
  if (nb < 0) return;
  Leaf* n = static_cast<Leaf*>(in->kid[nb]);
  // The three leaves in LBA order, and all their entries.
  Leaf* group[3] = {l, r, n};
  if (nb < i) group[0] = n, group[1] = l, group[2] = r;
  LeafEntry all[3 * kLeafCap + 3];
  int t = 0;
  for (Leaf* g : group) {
    std::copy(g->e, g->e + g->count, all + t);
    t += g->count;
  }
  // Two leaves if they can hold everything (the split's new leaf goes),
  // else three evened out.
  const int parts = t <= 2 * kLeafCap ? 2 : 3;
  for (Leaf* g : group) NewGen(g);  // ranges move between them
  Leaf* dst[3] = {group[0], group[1], group[2]};
  if (parts == 2) {
    if (nb > i) dst[1] = n;  // l, n
  }
  int at = 0;
  for (int p = 0; p < parts; ++p) {
    int take = t / parts + (p < t % parts);
    std::copy(all + at, all + at + take, dst[p]->e);
    dst[p]->count = uint16_t(take);
    at += take;
  }
  // Separators: each leaf after the first starts at its first entry. The
  // entries moved between leaves owned only here, so no VBA reference
  // changes hands.
  if (parts == 2) {
    in->key[std::max(i, nb)] = dst[1]->e[0].lba;
    Bury(r);
    *s = {};
    return;
  }
  s->key = r->e[0].lba;
  if (nb > i) {
    in->key[nb] = n->e[0].lba;
  } else {
    in->key[i] = l->e[0].lba;
  }
}

void ExtentTree::MergeSmallChild(Inner* in, int i) {
  Node* kid = in->kid[i];
  const int cap = kid->leaf ? kLeafCap : kInnerCap;
  if (kid->count >= cap / 4) return;
  // Invariant: AssignIn made child i private.
  assert(kid->refs == 1);
  auto fits = [&](int k) {
    return k >= 0 && k < in->count && in->kid[k]->leaf == kid->leaf && in->kid[k]->refs == 1 &&
           in->kid[k]->count + kid->count <= cap * 3 / 4;
  };
  int l;
  if (fits(i - 1)) {
    l = i - 1;
  } else if (fits(i + 1)) {
    l = i;
  } else {
    return;
  }
  const int r = l + 1;
  // Both nodes are owned only here: entries and children change nodes, no
  // reference (VBA or node) changes hands.
  if (kid->leaf) {
    Leaf* a = static_cast<Leaf*>(in->kid[l]);
    Leaf* b = static_cast<Leaf*>(in->kid[r]);
    int n = a->count, k0 = 0;
    if (n > 0 && b->count > 0 && Continues(a->e[n - 1], b->e[0])) {
      a->e[n - 1].len += b->e[0].len;
      k0 = 1;
    }
    std::copy(b->e + k0, b->e + b->count, a->e + n);
    a->count = uint16_t(n + b->count - k0);
    NewGen(a);  // its range grows over b's
    b->count = 0;
    Bury(b);
  } else {
    Inner* a = static_cast<Inner*>(in->kid[l]);
    Inner* b = static_cast<Inner*>(in->kid[r]);
    const int n = a->count;
    std::copy(b->key, b->key + b->count, a->key + n);
    std::copy(b->kid, b->kid + b->count, a->kid + n);
    a->key[n] = in->key[r];  // b's lower bound (its key[0] is not kept)
    a->count = uint16_t(n + b->count);
    --ctx_->inners;
    delete b;  // the leaves below keep their ranges
  }
  std::copy(in->key + r + 1, in->key + in->count, in->key + r);
  std::copy(in->kid + r + 1, in->kid + in->count, in->kid + r);
  --in->count;
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
  int i = ChildFor(in, lo);
  // A range within child i (every single-block write) needs no second search.
  int j = i + 1 >= in->count || hi <= in->key[i + 1] ? i : ChildFor(in, hi - 1);
  struct Slot {
    Bno key;
    Node* kid;
  };
  // The rebuilt child list; its unchanged prefix [0, i) is copied only
  // when the common in-place cases below do not apply.
  Slot tmp[kInnerCap + 3];
  int n = 0;
  auto copy_prefix = [&] {
    for (int k = 0; k < i; ++k) tmp[n++] = {in->key[k], in->kid[k]};
  };
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
    Node* kid = in->kid[i];
    if (s.right && kid->leaf) Rebalance(in, i, &s);
    // Common cases in place: the child changed within itself, or split
    // into a node that still fits here.
    if (kid->count > 0 && !s.right) {
      MergeSmallChild(in, i);
      return {};
    }
    if (kid->count > 0 && in->count < kInnerCap) {
      std::copy_backward(in->key + i + 1, in->key + in->count, in->key + in->count + 1);
      std::copy_backward(in->kid + i + 1, in->kid + in->count, in->kid + in->count + 1);
      in->key[i + 1] = s.key;
      in->kid[i + 1] = s.right;
      ++in->count;
      return {};
    }
    copy_prefix();
    add_child(in->key[i], kid, s);
  } else {
    ++ctx_->shape;  // child j's lower bound moves to hi
    Split si = AssignIn(&in->kid[i], lo, hi, vba, insert);
    copy_prefix();
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
  Bump();
  if (vba == kNoBlock || len <= kMaxEntryLen) {
    AssignRange(lba, len, vba);
    return;
  }
  // Longer than one leaf entry: in pieces. The guard references keep a
  // new VBA that an earlier piece unmaps from a later piece's LBAs alive.
  ctx_->vbas->Incref(vba, len);
  for (Bno done = 0; done < len;) {
    const Bno n = std::min(len - done, kMaxEntryLen);
    AssignRange(lba + done, n, vba + done);
    done += n;
  }
  ctx_->vbas->Decref(vba, len);
}

void ExtentTree::AssignRange(Bno lba, Bno len, Bno vba) {
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
      delete old;  // its one child reference moves to root_; no range moves
    } else {
      break;
    }
  }
}

ExtentTree::Remap ExtentTree::RemapOneInLeaf(Leaf* leaf, int hint, Bno lba, Bno vba) {
  LeafEntry* e = leaf->e;
  const int count = leaf->count;
  // The entry x holding lba, found by the lookup (checked).
  const int a = hint;
  if (a < 0 || a >= count || e[a].lba > lba || e[a].end() <= lba) return Remap::kOther;
  const Extent x = e[a];
  const Bno old = x.vba + (lba - x.lba);
  if (vba == old || vba == kNoBlock) return Remap::kOther;
  // x becomes [left piece] [lba -> vba] [right piece]; the new block folds
  // into the entry before x when nothing of x is left of it and the VBAs
  // go on, likewise into the entry after x (AssignLeaf's Continues).
  const bool has_l = x.lba < lba, has_r = x.end() > lba + 1;
  const Extent n{lba, 1, vba};
  const bool into_prev = !has_l && a > 0 && Continues(e[a - 1], n);
  const bool into_next = !has_r && a + 1 < count && Continues(n, e[a + 1]);
  // Both: the entries before and after x join through the new block.
  const bool join = into_prev && into_next &&
                    Bno(e[a - 1].len) + 1 + e[a + 1].len <= kMaxEntryLen;
  // What replaces e[first, last): the pieces, at most three entries.
  Extent mid[3];
  int m = 0, first = a, last = a + 1;
  if (join) {
    first = a - 1, last = a + 2;
    mid[m++] = {e[a - 1].lba, Bno(e[a - 1].len) + 1 + e[a + 1].len, e[a - 1].vba};
  } else {
    if (has_l) mid[m++] = {x.lba, lba - x.lba, x.vba};
    if (into_prev) {
      first = a - 1;
      mid[m++] = {e[a - 1].lba, Bno(e[a - 1].len) + 1, e[a - 1].vba};
    } else if (into_next) {
      last = a + 2;
      mid[m++] = {lba, 1 + Bno(e[a + 1].len), vba};
    } else {
      mid[m++] = n;
    }
    if (has_r) mid[m++] = {lba + 1, x.end() - lba - 1, old + 1};
  }
  const int total = count - (last - first) + m;
  if (total > kLeafCap || total < kLeafCap / 4) return Remap::kRefused;
  ctx_->vbas->Incref(vba, 1);
  ctx_->vbas->Decref(old, 1);
  if (last - first != m)
    std::memmove(e + first + m, e + last, sizeof(LeafEntry) * size_t(count - last));
  for (int k = 0; k < m; ++k) e[first + k] = mid[k];
  leaf->count = uint16_t(total);
  return Remap::kDone;
}

bool ExtentTree::AssignInLeaf(const ExtentLookup& found, uint64_t shape, Bno lba, Bno vba) {
  // An unchanged shape and gen mean the leaf still covers lba and the path
  // is still as exclusive as the lookup saw it (a dropped leaf is still
  // allocated until ReapDeadLeaves, with refs 0 and a new gen). AssignLeaf
  // then refuses an edit that would split the leaf or leave it small
  // enough to merge, the two changes that need the parent.
  const Node* leaf = found.leaf;
  if (shape != ctx_->shape || !found.exclusive || leaf == nullptr || !leaf->leaf ||
      leaf->gen != found.leaf_gen || leaf->refs != 1 || vba == kNoBlock)
    return false;
  Leaf* l = const_cast<Leaf*>(static_cast<const Leaf*>(leaf));  // this tree's alone
  switch (RemapOneInLeaf(l, found.index, lba, vba)) {
    case Remap::kDone:
      break;
    case Remap::kRefused:
      return false;
    case Remap::kOther: {
      bool in_place = true;
      const Split s = AssignLeaf(l, lba, lba + 1, vba, true, &in_place, found.index);
      if (!in_place) return false;
      assert(s.right == nullptr);
      (void)s;
      break;
    }
  }
  Bump();  // the mapping changed; the shape did not
  ++ctx_->in_leaf_edits;
  return true;
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
        const Extent e = l->e[i];
        if (e.end() <= lba) continue;
        if (e.lba >= hi) break;
        Bno a = std::max(e.lba, lba), b = std::min(e.end(), hi);
        out->push_back({a, b - a, e.vba + (a - e.lba)});
      }
      continue;
    }
    const Inner* in = static_cast<const Inner*>(n);
    int i = ChildFor(in, lba);
    int j = ChildFor(in, hi - 1);
    for (int k = j; k >= i; --k) stack.push_back(in->kid[k]);  // leftmost popped first
  }
}

Extent ExtentTree::FirstMapped(Bno lba, Bno len) const {
  if (!root_ || len == 0) return {};
  const Bno hi = lba + len;
  // The same walk as Lookup, leftmost child first, ending at the first hit.
  absl::InlinedVector<const Node*, 32> stack{root_};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->leaf) {
      const Leaf* l = static_cast<const Leaf*>(n);
      for (int i = 0; i < l->count; ++i) {
        const Extent e = l->e[i];
        if (e.end() <= lba) continue;
        if (e.lba >= hi) break;
        Bno a = std::max(e.lba, lba), b = std::min(e.end(), hi);
        return {a, b - a, e.vba + (a - e.lba)};
      }
      continue;
    }
    const Inner* in = static_cast<const Inner*>(n);
    int i = ChildFor(in, lba);
    int j = ChildFor(in, hi - 1);
    for (int k = j; k >= i; --k) stack.push_back(in->kid[k]);
  }
  return {};
}

Bno ExtentTree::LookupOne(Bno lba) const {
  bool exclusive;
  return LookupOneExclusive(lba, &exclusive);
}

Bno ExtentTree::LookupOneExclusive(Bno lba, bool* exclusive) const {
  const Extent e = LookupExtentExclusive(lba, exclusive);
  return e.len == 0 ? kNoBlock : e.vba + (lba - e.lba);
}

Extent ExtentTree::LookupExtentExclusive(Bno lba, bool* exclusive) const {
  *exclusive = true;
  const Node* n = root_;
  while (n) {
    if (n->refs != 1) *exclusive = false;
    if (n->leaf) {
      const Leaf* l = static_cast<const Leaf*>(n);
      int i = FirstEndingAbove(l->e, l->count, lba);
      if (i == l->count || lba < l->e[i].lba) return {};
      return l->e[i];
    }
    const Inner* in = static_cast<const Inner*>(n);
    int i = ChildFor(in, lba);
    n = in->kid[i];
  }
  return {};
}

void ExtentTree::LookupExtents(const Bno* lbas, size_t n, ExtentLookup* out) const {
  std::fill(out, out + n, ExtentLookup{});
  if (!root_) return;
  constexpr size_t kGroup = 64;
  const Node* cur[kGroup];
  for (size_t base = 0; base < n; base += kGroup) {
    const size_t m = std::min(kGroup, n - base);
    std::fill(cur, cur + m, root_);
    // Every leaf is at the same depth: one pass per level, each pass
    // searching the nodes the previous one started loading.
    for (bool deeper = true; deeper;) {
      deeper = false;
      for (size_t k = 0; k < m; ++k) {
        const Node* node = cur[k];
        if (node->refs != 1) out[base + k].exclusive = false;
        const Bno lba = lbas[base + k];
        if (node->leaf) {
          const Leaf* l = static_cast<const Leaf*>(node);
          const int i = FirstEndingAbove(l->e, l->count, lba);
          if (i < l->count && l->e[i].lba <= lba) out[base + k].e = l->e[i];
          out[base + k].index = int16_t(i);
          out[base + k].leaf = node;
          out[base + k].leaf_gen = node->gen;
          continue;
        }
        const Inner* in = static_cast<const Inner*>(node);
        const Node* kid = in->kid[ChildFor(in, lba)];
        PrefetchNode(kid);
        cur[k] = kid;
        deeper = true;
      }
    }
  }
}

bool ExtentTree::Exclusive(Bno lba) const {
  bool exclusive;
  LookupOneExclusive(lba, &exclusive);
  return exclusive;
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
