#pragma once
// ExtentTree: one volume's map LBA -> VBA as a copy-on-write B+tree of
// extents (docs/architecture.md, "The map"). Nodes are reference counted and may be shared by
// several trees (snapshots, clones): Share() is O(1), and the first change
// under a shared node copies the path down to the leaf (path copying).
// A leaf entry holds one reference on each VBA it maps (VbaTable refcounts);
// copying a leaf takes new references, freeing one drops them.
//
// Thread-safety: none. One writer mutates trees at a time while holding the
// pool's map lock exclusively; readers hold it shared.

#include <cassert>
#include <cstdint>
#include <functional>
#include <vector>

#include "map/vba_table.h"

namespace ftl::map {

struct Extent {
  Bno lba = 0;
  Bno len = 0;
  Bno vba = 0;
  Bno end() const { return lba + len; }
  bool operator==(const Extent&) const = default;
};

inline constexpr int kLeafCap = 64;
inline constexpr int kInnerCap = 64;

// Longest extent one leaf entry holds (256 MiB at 4 KiB): entries keep a
// 16-bit length so a leaf entry is 10 bytes, not 12; a longer extent is
// stored as several entries (ExtentTree::Assign splits, merges stop here).
inline constexpr Bno kMaxEntryLen = 0xFFFF;

// An Extent as a leaf stores it: packed, converts to and from Extent.
// REQUIRES (from Extent): len <= kMaxEntryLen.
struct __attribute__((packed)) LeafEntry {
  Bno lba = 0;
  Bno vba = 0;
  uint16_t len = 0;
  LeafEntry() = default;
  LeafEntry(const Extent& x) : lba(x.lba), vba(x.vba), len(uint16_t(x.len)) {  // NOLINT
    assert(x.len <= kMaxEntryLen);
  }
  operator Extent() const { return {lba, len, vba}; }  // NOLINT
  Bno end() const { return lba + len; }
};
static_assert(sizeof(LeafEntry) == 10);

struct Node {
  uint32_t refs = 1;
  uint16_t count = 0;
  bool leaf = true;
  // Leaves: changes (to a value no leaf of this context had before)
  // whenever the LBA range the leaf covers may change: see TreeContext::shape.
  uint32_t gen = 0;
};
struct Leaf : Node {
  LeafEntry e[kLeafCap];
};
// key[i] is the lowest LBA child i may hold (key[0] is unused by lookups).
struct Inner : Node {
  Bno key[kInnerCap];
  Node* kid[kInnerCap];
};

// One result of ExtentTree::LookupExtents.
struct ExtentLookup {
  Extent e;               // len 0: unmapped
  bool exclusive = true;  // the path to the leaf is this tree's alone
  // The leaf the lookup ended in (nullptr: empty tree). Once the tree may
  // have changed, only for PrefetchNode and AssignInLeaf: it may have been
  // dropped (refs 0, TreeContext::dead) or, after ReapDeadLeaves, freed.
  const Node* leaf = nullptr;
  uint32_t leaf_gen = 0;  // leaf->gen at the lookup
  int16_t index = 0;      // first entry of the leaf ending above the LBA then
};

// A hint: starts loading node n (which may have been freed) into the CPU
// cache. Changes nothing.
inline void PrefetchNode(const Node* n) {
  constexpr size_t kBytes = sizeof(Leaf) > sizeof(Inner) ? sizeof(Leaf) : sizeof(Inner);
  const char* p = reinterpret_cast<const char*>(n);
  for (size_t off = 0; off < kBytes; off += 64) __builtin_prefetch(p + off);
}

// Shared by all trees of one pool: where VBA references go and how many
// nodes exist (for map memory stats).
struct TreeContext {
  explicit TreeContext(VbaTable* v) : vbas(v) {}
  ~TreeContext();
  TreeContext(const TreeContext&) = delete;
  TreeContext& operator=(const TreeContext&) = delete;
  // Frees the leaves trees of this context have let go of since the last
  // call. Until then they stay allocated (refs 0, a new gen), so that a
  // leaf pointer kept from a lookup can still be checked (AssignInLeaf)
  // after its leaf was dropped: call it only when no such lookup will be
  // used again.
  void ReapDeadLeaves();
  VbaTable* vbas;
  uint64_t leaves = 0;
  uint64_t inners = 0;
  // Last ExtentTree::version() handed out to a tree of this context.
  uint64_t last_version = 0;
  // Changes whenever a tree here is destroyed, a path may have become
  // shared (Share, AdoptRoot, moves), or an LBA range moved between
  // children other than by a leaf split, rebalance or merge (those change
  // the leaves' gen instead; a dropped leaf gets a new gen and waits in
  // `dead`). While it and a leaf's gen stay the same, a leaf pointer from a
  // lookup still names a live leaf covering that LBA, and the exclusivity
  // that lookup saw still holds (AssignInLeaf).
  uint64_t shape = 0;
  uint32_t last_gen = 0;  // last Node::gen handed out
  std::vector<Node*> dead;  // dropped leaves, see ReapDeadLeaves
  uint64_t in_leaf_edits = 0;  // AssignInLeaf calls that edited (tests)
  uint64_t memory_bytes() const { return leaves * sizeof(Leaf) + inners * sizeof(Inner); }
};

class ExtentTree {
 public:
  explicit ExtentTree(TreeContext* ctx) : ctx_(ctx) { Touch(); }
  ~ExtentTree();
  ExtentTree(ExtentTree&& o) noexcept;
  ExtentTree& operator=(ExtentTree&& o) noexcept;
  ExtentTree(const ExtentTree&) = delete;
  ExtentTree& operator=(const ExtentTree&) = delete;

  // A new tree sharing this tree's nodes. O(1).
  ExtentTree Share() const;

  // Appends the mapped pieces of [lba, lba+len), clipped to it, in order.
  void Lookup(Bno lba, Bno len, std::vector<Extent>* out) const;
  // The first mapped piece of [lba, lba+len), clipped to it (len 0 if the
  // range maps nothing). Stops at the first leaf entry it finds.
  Extent FirstMapped(Bno lba, Bno len) const;
  // The VBA mapped at lba, or kNoBlock.
  Bno LookupOne(Bno lba) const;
  // Maps [lba, lba+len) to vba, vba+1, ... (vba == kNoBlock unmaps).
  // Takes references on the new VBAs before dropping those of the old ones,
  // so re-assigning a block its own VBA is safe.
  void Assign(Bno lba, Bno len, Bno vba);
  // True if the path to the leaf covering lba is referenced by this tree
  // alone (a write there may reuse a VBA whose refcount is 1).
  bool Exclusive(Bno lba) const;
  // LookupOne and Exclusive in one descent.
  Bno LookupOneExclusive(Bno lba, bool* exclusive) const;
  // The whole extent holding lba (len 0 if lba is unmapped), and whether
  // its path is referenced by this tree alone, in one descent.
  Extent LookupExtentExclusive(Bno lba, bool* exclusive) const;
  // LookupExtentExclusive for each of lbas[0, n), into out[0, n).
  // Walks the paths of all of them level by level, loading the nodes of a
  // level into the CPU cache before searching any of them, so that a batch
  // of random writes waits for about one cache miss per level instead of
  // one per level per write, and descends once per LBA.
  void LookupExtents(const Bno* lbas, size_t n, ExtentLookup* out) const;

  // Assign(lba, 1, vba) done inside the leaf `found` names, where `found`
  // is this tree's LookupExtents result for lba and `shape` was ctx->shape
  // then, and no ReapDeadLeaves ran since. Skips the descent. Refuses
  // (returns false, changes nothing; use Assign) unless the shape and the
  // leaf's gen are still the same, that lookup's path was this tree's
  // alone, and the leaf can take the change without splitting or becoming
  // small enough to merge (then neither shape nor gen changes).
  bool AssignInLeaf(const ExtentLookup& found, uint64_t shape, Bno lba, Bno vba);

  // Changes whenever a lookup here could answer differently: the mapping
  // or the exclusivity of a path (Assign, AdoptRoot, Share, moves). Unique
  // among the trees of one TreeContext, so a (tree, version) pair seen
  // earlier names one state of the map.
  uint64_t version() const { return version_; }

  void ForEach(const std::function<void(const Extent&)>& fn) const;
  uint64_t mapped_blocks() const { return mapped_; }
  uint64_t extent_count() const;

  // For checkpoints: the root (nullptr when empty) and adopting a root built
  // by a loader (whose reference the tree takes over).
  const Node* root() const { return root_; }
  void AdoptRoot(Node* root, uint64_t mapped_blocks);

  // Node helpers shared with checkpoint loading.
  static Leaf* NewLeaf(TreeContext* ctx);
  static Inner* NewInner(TreeContext* ctx);

 private:
  struct Split {
    Node* right = nullptr;
    Bno key = 0;
  };
  void Release(Node* n);
  Node* MakeWritable(Node** slot);
  Split AssignIn(Node** slot, Bno lo, Bno hi, Bno vba, bool insert);
  // With `in_place`, the edit must leave the leaf between kLeafCap / 4 and
  // kLeafCap entries (no split, no merge): otherwise *in_place is set to
  // false and nothing changes. `hint`: where the entries [lo, hi) touches
  // may start (checked; a lookup's index).
  Split AssignLeaf(Leaf* leaf, Bno lo, Bno hi, Bno vba, bool insert, bool* in_place = nullptr,
                   int hint = -1);
  // AssignInLeaf's common case, without AssignLeaf's generality: lba is
  // inside the entry e[hint] and gets a VBA other than its own. kOther:
  // not that case (use AssignLeaf); kRefused: the leaf would split or
  // become small enough to merge; nothing changed unless kDone.
  enum class Remap { kDone, kRefused, kOther };
  Remap RemapOneInLeaf(Leaf* leaf, int hint, Bno lba, Bno vba);
  // Drops a leaf no tree references any more (see TreeContext::dead).
  void Bury(Leaf* leaf);
  // Assign without Bump; an insert is at most kMaxEntryLen blocks.
  void AssignRange(Bno lba, Bno len, Bno vba);
  // B*-style: child i of `in` split into itself and s->right; shares the
  // entries with a neighbour leaf owned only by `in` so that random inserts
  // leave leaves ~80% full instead of ~69%: all three fit in two (s->right
  // is freed and *s cleared) or are evened out over three.
  void Rebalance(Inner* in, int i, Split* s);
  // The reverse: child i of `in`, a node that shrank below a quarter, is
  // merged with a neighbour of its kind owned only by `in` when both fit in
  // three quarters of a node; leaf extents that continue each other across
  // the two fold into one. Without it a range whose extents grow back
  // together (first writes to a clone, see VbaTable::AllocateMirror) keeps
  // every node it ever needed, nearly empty, and its extents split at
  // their boundaries.
  void MergeSmallChild(Inner* in, int i);
  uint64_t CountMapped(const Node* n) const;
  // A new version(); Touch also invalidates leaf pointers from lookups.
  void Bump() const { version_ = ++ctx_->last_version; }
  void Touch() const {
    Bump();
    ++ctx_->shape;
  }
  void NewGen(Node* leaf) { leaf->gen = ++ctx_->last_gen; }

  TreeContext* ctx_;
  Node* root_ = nullptr;
  uint64_t mapped_ = 0;
  mutable uint64_t version_ = 0;  // see version(); Share() changes it
};

}  // namespace ftl::map
