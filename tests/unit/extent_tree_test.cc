// ExtentTree and VbaTable: mapping semantics against a reference model,
// copy-on-write sharing (a shared tree never changes when another changes),
// path copying cost, and exact VBA / node refcounts.

#include <algorithm>
#include "map/extent_tree.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "log/segment_table.h"
#include "map/vba_table.h"
#include "map_test_util.h"

namespace ftl::map {
namespace {

constexpr Bno kSpace = 1 << 16;

struct Fixture {
  log::SegmentTable segs{64, 4096};
  VbaTable vbas{&segs, 1 << 20};
  TreeContext ctx{&vbas};
  std::vector<Bno> Fresh(Bno n) { return testing::FreshVbas(&vbas, n); }
};

using Model = std::vector<Bno>;  // lba -> vba or kNoBlock

Model Dump(const ExtentTree& t) {
  Model m(kSpace, kNoBlock);
  t.ForEach([&](const Extent& e) {
    for (Bno k = 0; k < e.len; ++k) m[e.lba + k] = e.vba + k;
  });
  return m;
}

// Counts references the way the refcounts should: each distinct node once.
void ExpectRefcountsExact(const Fixture& f, const std::vector<const ExtentTree*>& trees) {
  std::unordered_map<const Node*, uint32_t> node_refs;
  std::vector<const Node*> stack;
  for (const ExtentTree* t : trees)
    if (t->root() && node_refs[t->root()]++ == 0) stack.push_back(t->root());
  std::vector<uint32_t> vba_refs(f.vbas.size(), 0);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->leaf) {
      const auto* l = static_cast<const Leaf*>(n);
      for (int i = 0; i < l->count; ++i)
        for (Bno k = 0; k < l->e[i].len; ++k) ++vba_refs[l->e[i].vba + k];
    } else {
      const auto* in = static_cast<const Inner*>(n);
      for (int i = 0; i < in->count; ++i)
        if (node_refs[in->kid[i]]++ == 0) stack.push_back(in->kid[i]);
    }
  }
  for (const auto& [n, r] : node_refs) ASSERT_EQ(n->refs, r);
  for (Bno v = 0; v < f.vbas.size(); ++v) ASSERT_EQ(f.vbas.Get(v).refs, vba_refs[v]) << "vba " << v;
  EXPECT_EQ(f.ctx.leaves + f.ctx.inners, node_refs.size());
}

TEST(ExtentTree, AssignLookupMergeAndUnmap) {
  Fixture f;
  ExtentTree t(&f.ctx);
  auto v = f.Fresh(100);
  t.Assign(10, 50, v[0]);
  t.Assign(60, 50, v[50]);  // continues both runs: merges into one extent
  EXPECT_EQ(t.extent_count(), 1u);
  EXPECT_EQ(t.mapped_blocks(), 100u);
  std::vector<Extent> out;
  t.Lookup(0, 200, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (Extent{10, 100, v[0]}));
  t.Assign(30, 10, kNoBlock);  // punch a hole
  EXPECT_EQ(t.LookupOne(29), v[19]);
  EXPECT_EQ(t.LookupOne(30), kNoBlock);
  EXPECT_EQ(t.LookupOne(40), v[30]);
  EXPECT_EQ(t.mapped_blocks(), 90u);
  EXPECT_EQ(f.vbas.Get(v[20]).refs, 0u);  // unmapped VBAs are freed
  EXPECT_EQ(f.vbas.Get(v[30]).refs, 1u);
  ExpectRefcountsExact(f, {&t});
}

TEST(ExtentTree, ReassigningOwnVbaKeepsIt) {
  Fixture f;
  ExtentTree t(&f.ctx);
  auto v = f.Fresh(4);
  t.Assign(0, 4, v[0]);
  f.vbas.SetPba(v[1], 7);
  t.Assign(1, 1, v[1]);
  EXPECT_EQ(f.vbas.Get(v[1]).refs, 1u);
  EXPECT_EQ(f.vbas.Get(v[1]).pba, 7u);
}

TEST(ExtentTree, SequentialWritesStayOneExtentAndSmall) {
  Fixture f;
  ExtentTree t(&f.ctx);
  for (Bno lba = 0; lba < 60000; lba += 256) t.Assign(lba, 256, f.Fresh(256)[0]);
  EXPECT_EQ(t.extent_count(), 1u);
  EXPECT_EQ(f.ctx.leaves + f.ctx.inners, 1u);
}

TEST(ExtentTree, ExtentsLongerThanOneLeafEntryAreStoredInPieces) {
  // A leaf entry holds at most kMaxEntryLen blocks: longer extents map
  // exactly, in as few entries as that allows, and growing a run stops
  // merging at the cap instead of overflowing the 16-bit length.
  Fixture f;
  ExtentTree t(&f.ctx);
  const Bno n = 3 * kMaxEntryLen + 100;
  auto v = f.Fresh(n);
  ASSERT_EQ(v.back(), v[0] + n - 1);
  t.Assign(0, n, v[0]);
  EXPECT_EQ(t.extent_count(), 4u);
  EXPECT_EQ(t.mapped_blocks(), n);
  std::vector<Extent> out;
  t.Lookup(0, n, &out);
  Bno at = 0;
  for (const Extent& e : out) {
    EXPECT_EQ(e.lba, at);
    EXPECT_EQ(e.vba, v[0] + at);
    EXPECT_LE(e.len, kMaxEntryLen);
    at += e.len;
  }
  EXPECT_EQ(at, n);
  ExpectRefcountsExact(f, {&t});

  // Sequential appends fold into one entry until it is full.
  ExtentTree s(&f.ctx);
  auto w = f.Fresh(kMaxEntryLen + 1000);
  ASSERT_EQ(w.back(), w[0] + kMaxEntryLen + 999);
  for (Bno lba = 0; lba + 100 <= kMaxEntryLen + 1000; lba += 100) s.Assign(lba, 100, w[lba]);
  EXPECT_EQ(s.extent_count(), 2u);
  EXPECT_EQ(s.LookupOne(kMaxEntryLen), w[kMaxEntryLen]);
  ExpectRefcountsExact(f, {&t, &s});
}

TEST(ExtentTree, LongAssignKeepsVbasAnEarlierPieceUnmaps) {
  // [0, kMaxEntryLen) maps to the VBAs that the second piece of a longer
  // assign over [0, 2 * kMaxEntryLen) maps again: the first piece unmaps
  // them before the second maps them, and they must not be freed between.
  Fixture f;
  ExtentTree t(&f.ctx);
  auto v = f.Fresh(2 * kMaxEntryLen);
  ASSERT_EQ(v.back(), v[0] + 2 * kMaxEntryLen - 1);
  t.Assign(0, kMaxEntryLen, v[kMaxEntryLen]);
  t.Assign(0, 2 * kMaxEntryLen, v[0]);
  for (Bno k : {Bno(0), kMaxEntryLen - 1, kMaxEntryLen, 2 * kMaxEntryLen - 1}) {
    EXPECT_EQ(t.LookupOne(k), v[k]);
    EXPECT_EQ(f.vbas.Get(v[k]).refs, 1u) << k;
  }
  EXPECT_EQ(f.vbas.live_vbas(), 2u * kMaxEntryLen);
  // None of them was handed back to the allocator (single VBAs come from
  // the lowest free ones).
  for (int i = 0; i < 8; ++i) EXPECT_GE(f.Fresh(1)[0], v[0] + 2 * kMaxEntryLen);
  ExpectRefcountsExact(f, {&t});
}

TEST(ExtentTree, RandomOrderFillKeepsLeavesFourFifthsFull) {
  // Every block its own extent (VBAs never continue), written in random
  // order: overflowing leaves share with a neighbour instead of leaving two
  // half-full leaves (a plain B+tree ends near ln 2 = 69%).
  Fixture f;
  ExtentTree t(&f.ctx);
  std::vector<Bno> order(kSpace);
  for (Bno i = 0; i < kSpace; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  Model want(kSpace, kNoBlock);
  for (Bno lba : order) {
    auto v = f.Fresh(2);  // the second VBA stays unused: no extent continues
    t.Assign(lba, 1, v[0]);
    want[lba] = v[0];
  }
  ASSERT_EQ(t.extent_count(), kSpace);
  ASSERT_EQ(Dump(t), want);
  double fill = double(kSpace) / double(f.ctx.leaves * kLeafCap);
  EXPECT_GE(fill, 0.78) << f.ctx.leaves << " leaves";
  ExpectRefcountsExact(f, {&t});
}

TEST(ExtentTree, LookupExtentsMatchesLookupExtentExclusive) {
  Fixture f;
  ExtentTree t(&f.ctx);
  auto check = [&](const ExtentTree& tree, const std::vector<Bno>& lbas) {
    std::vector<ExtentLookup> got(lbas.size());
    Model before = Dump(tree);
    uint64_t nodes = f.ctx.leaves + f.ctx.inners;
    const uint64_t version = tree.version();
    tree.LookupExtents(lbas.data(), lbas.size(), got.data());
    for (size_t k = 0; k < lbas.size(); ++k) {
      bool excl = false;
      Extent want = tree.LookupExtentExclusive(lbas[k], &excl);
      ASSERT_EQ(got[k].e, want) << "lba " << lbas[k];
      ASSERT_EQ(got[k].exclusive, excl) << "lba " << lbas[k];
    }
    EXPECT_EQ(Dump(tree), before);
    EXPECT_EQ(f.ctx.leaves + f.ctx.inners, nodes);
    EXPECT_EQ(tree.version(), version);  // a lookup changes nothing
  };
  std::vector<Bno> lbas = {0, 5, kSpace - 1, kSpace + 100, 12345};
  check(t, lbas);  // empty tree
  t.Assign(3, 1, f.Fresh(1)[0]);
  check(t, {2, 3, 4});  // a root leaf
  for (Bno lba = 0; lba < kSpace; lba += 3) t.Assign(lba, 1, f.Fresh(2)[0]);
  ASSERT_GT(f.ctx.inners, 0u);
  std::vector<Bno> many;
  for (Bno i = 0; i < 300; ++i) many.push_back((i * 7919) % (kSpace + 50));
  check(t, many);  // several groups of a deep tree, past the end too
  // Shared paths: every path of t and of its copy is shared, then only
  // the ones a write to the copy made private again.
  ExtentTree copy = t.Share();
  check(t, many);
  for (Bno lba = 0; lba < kSpace; lba += 997) copy.Assign(lba, 1, f.Fresh(1)[0]);
  check(t, many);
  check(copy, many);
  ExpectRefcountsExact(f, {&t, &copy});
}

// The apply fast path: batches of single-block writes edit the leaves a
// LookupExtents found, as long as the shape counter has not moved; each
// write either edits in place or is refused and goes through Assign. The
// result equals a model, a shared tree never changes, refcounts stay exact.
TEST(ExtentTree, AssignInLeafMatchesAssignWhileTheShapeHolds) {
  Fixture f;
  ExtentTree t(&f.ctx);
  for (Bno lba = 0; lba < kSpace; lba += 2) t.Assign(lba, 1, f.Fresh(1)[0]);
  ASSERT_GT(f.ctx.inners, 0u);
  Model model = Dump(t);
  ExtentTree snap = t.Share();
  const Model frozen = Dump(snap);
  std::mt19937_64 rng(5);
  uint64_t in_place = 0, refused_shared = 0;
  for (int round = 0; round < 400; ++round) {
    // Early rounds: every path is shared with snap, so the first write of
    // a batch copies its path (Assign) and the shape moves.
    std::vector<Bno> lbas(32);
    for (Bno& b : lbas) b = Bno(rng() % kSpace);
    std::vector<ExtentLookup> look(lbas.size());
    t.LookupExtents(lbas.data(), lbas.size(), look.data());
    const uint64_t shape = f.ctx.shape;
    for (size_t k = 0; k < lbas.size(); ++k) {
      const Bno vba = f.Fresh(1)[0];
      const uint64_t version = t.version();
      const bool moved = f.ctx.shape != shape;
      if (t.AssignInLeaf(look[k], shape, lbas[k], vba)) {
        ++in_place;
        EXPECT_FALSE(moved);
        EXPECT_TRUE(look[k].exclusive);
        EXPECT_EQ(f.ctx.shape, shape);
      } else {
        if (!look[k].exclusive) ++refused_shared;
        t.Assign(lbas[k], 1, vba);
      }
      EXPECT_NE(t.version(), version);
      model[lbas[k]] = vba;
    }
    if (round % 50 == 0) ASSERT_EQ(Dump(t), model) << "round " << round;
  }
  EXPECT_EQ(Dump(t), model);
  EXPECT_EQ(Dump(snap), frozen);
  EXPECT_GT(in_place, 1000u);
  EXPECT_GT(refused_shared, 0u);
  // A shared leaf and a leaf outside the band are refused unchanged.
  ExtentTree again = t.Share();
  std::vector<ExtentLookup> look(1);
  const Bno lba = 100;
  t.LookupExtents(&lba, 1, look.data());
  EXPECT_FALSE(look[0].exclusive);
  EXPECT_EQ(look[0].leaf->refs, 1u);  // the leaf alone looks private
  EXPECT_FALSE(t.AssignInLeaf(look[0], f.ctx.shape, lba, f.Fresh(1)[0]));
  EXPECT_EQ(Dump(t), model);
  // A stale shape is refused too.
  ExtentTree other(&f.ctx);
  std::vector<ExtentLookup> look2(1);
  other.Assign(0, 1, f.Fresh(1)[0]);
  again = ExtentTree(&f.ctx);  // t is exclusive again; shape moved
  t.LookupExtents(&lba, 1, look2.data());
  const uint64_t stale = f.ctx.shape - 1;
  EXPECT_TRUE(look2[0].exclusive);
  EXPECT_FALSE(t.AssignInLeaf(look2[0], stale, lba, f.Fresh(1)[0]));
  EXPECT_EQ(Dump(t), model);
  ExtentTree small(&f.ctx);
  small.Assign(0, 1, f.Fresh(1)[0]);
  small.LookupExtents(&lba, 1, look.data());
  EXPECT_FALSE(small.AssignInLeaf(look[0], f.ctx.shape, lba, f.Fresh(1)[0]));  // 1 entry
  EXPECT_EQ(small.extent_count(), 1u);
  ExpectRefcountsExact(f, {&t, &snap, &small, &other});
}

// The in-leaf edit of one block (the first write to a shared block, and
// AssignInLeaf's shortcut for it) must leave exactly the entries Assign
// leaves: pieces of the old extent, folds into either neighbour, joins of
// both, and the 16-bit entry length limit on every fold.
TEST(ExtentTree, OneBlockInLeafEditsLeaveTheEntriesAssignLeaves) {
  Fixture f;
  ExtentTree a(&f.ctx), b(&f.ctx);  // a: in-leaf edits where it can; b: Assign
  // Old data, then a "mirror" range whose VBA i belongs to block i (as
  // first writes to a clone get) written over all of it but a few holes,
  // so that the extents around a hole are up to kMaxEntryLen long; and 40
  // one-block extents after it, so that the one leaf has enough entries
  // to be edited in place.
  const Bno space = 3 * kMaxEntryLen;
  const std::vector<Bno> old = f.Fresh(space + 100);
  const std::vector<Bno> mirror = f.Fresh(space);
  const std::vector<Bno> holes = {30000, kMaxEntryLen - 1, kMaxEntryLen, kMaxEntryLen + 1,
                                  100000, 165000};
  for (ExtentTree* t : {&a, &b}) {
    t->Assign(0, space, old[0]);
    for (Bno i = 0; i < 40; ++i) t->Assign(space + 2 * i, 1, old[space + 2 * i]);
    Bno from = 0;
    for (Bno h : holes) {
      t->Assign(from, h - from, mirror[from]);
      from = h + 1;
    }
    t->Assign(from, space - from, mirror[from]);
  }
  auto entries = [](const ExtentTree& t) {
    std::vector<Extent> out;
    t.ForEach([&](const Extent& e) { out.push_back(e); });
    return out;
  };
  ASSERT_EQ(entries(a), entries(b));
  ASSERT_EQ(f.ctx.inners, 0u);  // one leaf each
  std::mt19937_64 rng(17);
  uint64_t in_leaf = 0;
  for (int step = 0; step < 20000; ++step) {
    // At or next to a hole, mostly its mirror VBA (a fold or a join,
    // within the length limit or not), sometimes a new or the old VBA
    // (which opens the hole again).
    Bno lba = holes[rng() % holes.size()] + Bno(rng() % 5) - 2;
    const int what = int(rng() % 8);
    const Bno vba = what < 5 ? mirror[lba] : what < 6 ? f.Fresh(1)[0] : old[lba];
    ExtentLookup look;
    a.LookupExtents(&lba, 1, &look);
    const uint64_t edits = f.ctx.in_leaf_edits;
    if (!a.AssignInLeaf(look, f.ctx.shape, lba, vba)) a.Assign(lba, 1, vba);
    in_leaf += f.ctx.in_leaf_edits - edits;
    b.Assign(lba, 1, vba);
    f.ctx.ReapDeadLeaves();
    ASSERT_EQ(entries(a), entries(b)) << "step " << step << " lba " << lba;
  }
  EXPECT_GT(in_leaf, 10000u);
  ExpectRefcountsExact(f, {&a, &b});
}

// A leaf dropped by a merge stays allocated (refs 0, new gen) until
// ReapDeadLeaves, so a lookup that went through it is refused, not read
// after free; and a merge no longer moves the shape, so lookups into
// untouched leaves still edit in place.
TEST(ExtentTree, DroppedLeavesAreRefusedAndOthersStillEditInPlace) {
  Fixture f;
  ExtentTree t(&f.ctx);
  for (Bno lba = 0; lba < kSpace; lba += 2) t.Assign(lba, 1, f.Fresh(1)[0]);
  Model model = Dump(t);
  const Node* n = t.root();
  ASSERT_FALSE(n->leaf);
  while (!static_cast<const Inner*>(n)->kid[0]->leaf) n = static_cast<const Inner*>(n)->kid[0];
  const Inner* parent = static_cast<const Inner*>(n);
  ASSERT_GE(parent->count, 4);
  const Leaf* a = static_cast<const Leaf*>(parent->kid[1]);
  const Leaf* b = static_cast<const Leaf*>(parent->kid[2]);
  const Leaf* c = static_cast<const Leaf*>(parent->kid[3]);
  ASSERT_GT(a->count, 40);
  ASSERT_GT(b->count, 40);
  // An unmapped block inside each of a, b and c.
  std::vector<Bno> lbas = {Bno(a->e[5].lba + 1), Bno(b->e[5].lba + 1), Bno(c->e[30].lba + 1)};
  std::vector<ExtentLookup> look(lbas.size());
  t.LookupExtents(lbas.data(), lbas.size(), look.data());
  for (const ExtentLookup& l : look) ASSERT_TRUE(l.exclusive);
  ASSERT_EQ(look[1].leaf, b);
  const uint64_t shape = f.ctx.shape;
  const uint64_t dead0 = f.ctx.dead.size();
  // Unmap the tails of a (to 20 entries) and b (to 10): b then merges into a.
  auto trim_tail = [&](const Leaf* l, int keep) {
    const Bno lo = l->e[keep].lba, hi = l->e[l->count - 1].end();
    t.Assign(lo, hi - lo, kNoBlock);
    for (Bno k = lo; k < hi; ++k) model[k] = kNoBlock;
  };
  trim_tail(a, 20);
  EXPECT_EQ(f.ctx.dead.size(), dead0);
  trim_tail(b, 10);
  EXPECT_EQ(f.ctx.dead.size(), dead0 + 1);  // b, merged into a
  EXPECT_EQ(b->refs, 0u);
  EXPECT_EQ(f.ctx.shape, shape);
  EXPECT_EQ(Dump(t), model);
  for (size_t k = 0; k < lbas.size(); ++k) {
    const Bno vba = f.Fresh(1)[0];
    const bool in_place = t.AssignInLeaf(look[k], shape, lbas[k], vba);
    EXPECT_EQ(in_place, k == 2) << k;  // a's gen moved, b is dropped, c is untouched
    if (!in_place) t.Assign(lbas[k], 1, vba);
    model[lbas[k]] = vba;
  }
  EXPECT_EQ(Dump(t), model);
  ExpectRefcountsExact(f, {&t});
  f.ctx.ReapDeadLeaves();
  EXPECT_TRUE(f.ctx.dead.empty());
  ExpectRefcountsExact(f, {&t});
}

// The in-place edit is refused exactly when the leaf would have to split:
// a full leaf still takes a block that folds into an entry.
TEST(ExtentTree, AssignInLeafFillsALeafToCapacityButDoesNotSplitIt) {
  Fixture f;
  ExtentTree t(&f.ctx);
  std::vector<Bno> vbas = f.Fresh(kSpace);
  for (Bno lba = 0; lba < kSpace; lba += 4) t.Assign(lba, 1, vbas[lba]);  // one entry each
  Model model = Dump(t);
  const Inner* parent = nullptr;
  for (const Node* p = t.root(); !p->leaf; p = static_cast<const Inner*>(p)->kid[0])
    parent = static_cast<const Inner*>(p);
  ASSERT_NE(parent, nullptr);
  ASSERT_GE(parent->count, 2);
  const Leaf* leaf = static_cast<const Leaf*>(parent->kid[1]);
  ASSERT_GE(leaf->count, kLeafCap / 2);
  ASSERT_LT(leaf->count, kLeafCap);  // appends leave leaves one or two short
  // Unmapped blocks of this leaf: lba + 1 (folds into lba's entry when
  // given vbas[lba + 1]) and lba + 2 (a new entry), for each entry.
  std::vector<Bno> lbas;
  for (int i = 0; i < leaf->count - 1; ++i) {
    lbas.push_back(leaf->e[i].lba + 1);
    lbas.push_back(leaf->e[i].lba + 2);
  }
  std::vector<ExtentLookup> look(lbas.size());
  t.LookupExtents(lbas.data(), lbas.size(), look.data());
  const uint64_t shape = f.ctx.shape;
  int adds = 0, folds = 0;
  for (size_t k = 0; k < lbas.size(); ++k) {
    const bool fold = k % 2 == 0;
    const Bno vba = fold ? vbas[lbas[k]] : f.Fresh(1)[0];
    const int count = leaf->count;
    const bool in_place = t.AssignInLeaf(look[k], shape, lbas[k], vba);
    if (fold) {
      EXPECT_TRUE(in_place) << k;
      EXPECT_EQ(leaf->count, count);
      ++folds;
    } else {
      EXPECT_EQ(in_place, count < kLeafCap) << k;
      if (!in_place) {
        EXPECT_EQ(leaf->count, count);  // refused unchanged
        t.Assign(lbas[k], 1, vba);
      } else {
        ++adds;
      }
    }
    model[lbas[k]] = vba;
    if (!in_place) break;  // the leaf split: the other lookups went stale
  }
  EXPECT_GT(adds, 0);
  EXPECT_GT(folds, 0);
  EXPECT_EQ(Dump(t), model);
  ExpectRefcountsExact(f, {&t});
}

TEST(ExtentTree, VersionChangesWithTheMapOrItsSharing) {
  Fixture f;
  ExtentTree t(&f.ctx);
  ExtentTree u(&f.ctx);
  EXPECT_NE(t.version(), u.version());
  uint64_t v = t.version();
  t.Assign(0, 4, f.Fresh(4)[0]);
  EXPECT_NE(t.version(), v);
  v = t.version();
  std::vector<Extent> out;
  t.Lookup(0, 4, &out);
  (void)t.LookupOne(2);
  EXPECT_EQ(t.version(), v);
  ExtentTree s = t.Share();  // t's paths are shared now
  EXPECT_NE(t.version(), v);
  EXPECT_NE(s.version(), t.version());
  v = t.version();
  ExtentTree moved = std::move(t);
  EXPECT_NE(moved.version(), v);
  v = u.version();
  u = s.Share();
  EXPECT_NE(u.version(), v);
}

TEST(ExtentTree, FillingAGapJoinsBothNeighbours) {
  Fixture f;
  ExtentTree t(&f.ctx);
  auto run = f.Fresh(30);
  ASSERT_EQ(run[29], run[0] + 29);
  t.Assign(0, 10, run[0]);
  t.Assign(20, 10, run[20]);
  EXPECT_EQ(t.extent_count(), 2u);
  t.Assign(10, 10, run[10]);  // continues the left run and leads into the right
  EXPECT_EQ(t.extent_count(), 1u);
  EXPECT_EQ(t.mapped_blocks(), 30u);
  // Unmapping the middle splits it again; re-mapping a block its own VBA
  // inside an extent keeps one extent.
  t.Assign(12, 3, kNoBlock);
  EXPECT_EQ(t.extent_count(), 2u);
  EXPECT_EQ(t.LookupOne(12), kNoBlock);
  EXPECT_EQ(t.LookupOne(15), run[15]);
  t.Assign(25, 1, run[25]);
  EXPECT_EQ(t.extent_count(), 2u);
  EXPECT_EQ(t.mapped_blocks(), 27u);
}

TEST(ExtentTree, RandomOpsMatchModelAndSnapshotsNeverChange) {
  Fixture f;
  std::mt19937_64 rng(7);
  ExtentTree live(&f.ctx);
  Model model(kSpace, kNoBlock);
  std::vector<std::pair<ExtentTree, Model>> snaps;
  for (int op = 0; op < 20000; ++op) {
    Bno lba = Bno(rng() % kSpace);
    Bno len = Bno(1 + rng() % (rng() % 8 == 0 ? 2000 : 8));
    len = std::min(len, kSpace - lba);
    if (rng() % 5 == 0) {
      live.Assign(lba, len, kNoBlock);
      for (Bno k = 0; k < len; ++k) model[lba + k] = kNoBlock;
    } else {
      auto vbas = f.Fresh(len);
      // Fresh() may return several runs; assign run by run.
      for (Bno k = 0; k < len;) {
        Bno j = k + 1;
        while (j < len && vbas[j] == vbas[j - 1] + 1) ++j;
        live.Assign(lba + k, j - k, vbas[k]);
        for (Bno x = k; x < j; ++x) model[lba + x] = vbas[x];
        k = j;
      }
    }
    if (op % 2000 == 0) snaps.emplace_back(live.Share(), model);
    if (op % 5000 == 4999 && !snaps.empty()) snaps.erase(snaps.begin());  // delete a snapshot
    if (op % 997 == 0) {
      ASSERT_EQ(Dump(live), model) << "op " << op;
      ASSERT_EQ(live.mapped_blocks(),
                uint64_t(std::count_if(model.begin(), model.end(), [](Bno v) { return v != kNoBlock; })))
          << "op " << op;
      for (auto& [t, m] : snaps) ASSERT_EQ(Dump(t), m) << "snapshot changed at op " << op;
      std::vector<const ExtentTree*> all{&live};
      for (auto& s : snaps) all.push_back(&s.first);
      ExpectRefcountsExact(f, all);
    }
  }
  // Range lookups agree with point lookups.
  for (int i = 0; i < 200; ++i) {
    Bno lba = Bno(rng() % kSpace), len = std::min<Bno>(Bno(1 + rng() % 3000), kSpace - lba);
    std::vector<Extent> out;
    live.Lookup(lba, len, &out);
    Model got(len, kNoBlock);
    Bno prev_end = lba;
    for (const Extent& e : out) {
      ASSERT_GE(e.lba, prev_end);
      prev_end = e.end();
      for (Bno k = 0; k < e.len; ++k) got[e.lba - lba + k] = e.vba + k;
    }
    ASSERT_EQ(got, Model(model.begin() + lba, model.begin() + lba + len));
  }
  snaps.clear();
  live.Assign(0, kSpace, kNoBlock);
  EXPECT_EQ(live.mapped_blocks(), 0u);
  EXPECT_EQ(f.vbas.live_vbas(), 0u);
  EXPECT_EQ(f.ctx.leaves + f.ctx.inners, 0u);
}

// Blocks first mapped one extent each (random order), then remapped in
// random order onto one run of VBAs in LBA order, as first writes to a
// clone are (VbaTable::AllocateMirror): the extents fold back into one and
// leaves that shrank merge, also across leaf boundaries; a snapshot taken
// midway keeps its leaves.
TEST(ExtentTree, ExtentsGrowingBackTogetherMergeLeaves) {
  Fixture f;
  constexpr Bno kN = 8192;
  std::mt19937_64 rng(3);
  std::vector<Bno> order(kN);
  for (Bno i = 0; i < kN; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  ExtentTree t(&f.ctx);
  Model model(kSpace, kNoBlock);
  for (Bno lba : order) {
    Bno v = f.Fresh(1)[0];
    t.Assign(lba, 1, v);
    model[lba] = v;
  }
  const uint64_t leaves_full = f.ctx.leaves;
  const std::vector<Bno> run = f.Fresh(kN);
  ASSERT_EQ(run.back(), run.front() + kN - 1);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::pair<ExtentTree, Model>> snaps;
  for (Bno i = 0; i < kN; ++i) {
    const Bno lba = order[i];
    t.Assign(lba, 1, run[0] + lba);
    model[lba] = run[0] + lba;
    if (i == kN / 2) snaps.emplace_back(t.Share(), model);
    if (i % 1024 == 1023) {
      ASSERT_EQ(Dump(t), model) << "after " << i;
      for (auto& [s, m] : snaps) ASSERT_EQ(Dump(s), m);
      std::vector<const ExtentTree*> all{&t};
      for (auto& s : snaps) all.push_back(&s.first);
      ExpectRefcountsExact(f, all);
    }
  }
  snaps.clear();
  ExpectRefcountsExact(f, {&t});
  // A handful (nodes edited last, before their neighbours shrank, stay
  // apart) instead of one extent per block in ~kN / 50 leaves.
  EXPECT_LE(t.extent_count(), 4u);
  EXPECT_LE(f.ctx.leaves, 4u);
  EXPECT_GT(leaves_full, 100u);
  EXPECT_EQ(t.mapped_blocks(), uint64_t(kN));
}

TEST(ExtentTree, ShareIsConstantTimeAndWriteCopiesOnlyOnePath) {
  Fixture f;
  ExtentTree t(&f.ctx);
  for (Bno lba = 0; lba < 50000; lba += 2) t.Assign(lba, 1, f.Fresh(1)[0]);
  uint64_t nodes = f.ctx.leaves + f.ctx.inners;
  ASSERT_GT(nodes, 100u);
  ExtentTree snap = t.Share();
  EXPECT_EQ(f.ctx.leaves + f.ctx.inners, nodes);  // no copy on share
  EXPECT_FALSE(t.Exclusive(100));
  t.Assign(100, 1, f.Fresh(1)[0]);
  // One leaf and its ancestors were copied: tree height is at most 3 here.
  uint64_t copied = f.ctx.leaves + f.ctx.inners - nodes;
  EXPECT_GE(copied, 2u);
  EXPECT_LE(copied, 3u);
  EXPECT_TRUE(t.Exclusive(100));
  EXPECT_FALSE(t.Exclusive(40000));  // elsewhere still shared
  // The one-descent form agrees with LookupOne + Exclusive.
  for (Bno lba : {Bno(99), Bno(100), Bno(101), Bno(40000), Bno(40001), Bno(60000)}) {
    bool excl = false;
    EXPECT_EQ(t.LookupOneExclusive(lba, &excl), t.LookupOne(lba)) << lba;
    EXPECT_EQ(excl, t.Exclusive(lba)) << lba;
  }
  ExpectRefcountsExact(f, {&t, &snap});
}

TEST(VbaTable, AllocateFreeAndClaim) {
  log::SegmentTable segs(4, 64);
  VbaTable v(&segs, 1000);
  std::vector<std::pair<Bno, Bno>> runs;
  v.Allocate(10, &runs);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (std::pair<Bno, Bno>{0, 10}));
  v.Incref(0, 10);
  v.SetPba(3, 100);
  EXPECT_TRUE(segs.IsValid(100));
  EXPECT_EQ(segs.at(1).live, 1u);
  v.Decref(3, 1);  // freed: its block is no longer live
  EXPECT_FALSE(segs.IsValid(100));
  EXPECT_EQ(segs.at(1).live, 0u);
  runs.clear();
  v.Allocate(1, &runs);
  EXPECT_EQ(runs[0].first, 3u);  // single blocks reuse freed VBAs
  v.Claim(20);                   // replay names a VBA beyond the table
  EXPECT_GE(v.size(), 21u);
  runs.clear();
  v.Allocate(1, &runs);
  EXPECT_EQ(runs[0].first, 10u);  // the gap below the claimed VBA is free
  v.Incref(3, 1);
  v.SetPba(3, 5);
  EXPECT_FALSE(v.CompareAndSetPba(3, 6, 7));  // lost race
  EXPECT_TRUE(v.CompareAndSetPba(3, 5, 7));
  EXPECT_FALSE(segs.IsValid(5));
  EXPECT_TRUE(segs.IsValid(7));
}

}  // namespace
}  // namespace ftl::map
