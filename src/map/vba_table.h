#pragma once
// VbaTable: the global table VBA -> (PBA, refcount) (docs/architecture.md, "The map"). A VBA
// names one written version of a block; its refcount counts the tree leaf
// entries that reference it (a leaf shared by several trees counts once, so
// sharing a tree root costs nothing here). When the count drops to zero the
// VBA is freed and its PBA stops being live in the SegmentTable.
//
// Storage: chunks of 4096 VBAs. A chunk starts as a short sorted list of
// runs (consecutive VBAs with one refcount whose PBAs are consecutive too,
// or all without a PBA), 8 B a run: sequentially written data costs ~0.25 B
// per VBA, a random-order fill (one run per record) ~0.6 B. A chunk whose
// list grows past kMaxRuns, or is long and edited well inside, turns dense:
// a 4-byte PBA and a 1-byte refcount per VBA (counts >= 255 live in a side
// map), 5 B per VBA.
// Dense chunks turn back into runs when the table is loaded from a
// checkpoint. The form is invisible to callers.
//
// Not thread-safe: guarded by the owner's map lock (const methods may run
// concurrently with each other).

#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "log/log_format.h"
#include "log/segment_table.h"

namespace ftl::map {

using log::Bno;
using log::kNoBlock;

class VbaTable {
 public:
  struct Entry {
    Bno pba = kNoBlock;
    uint32_t refs = 0;
    bool operator==(const Entry&) const = default;
  };
  static constexpr Bno kChunkBits = 12;
  static constexpr Bno kChunkSize = Bno(1) << kChunkBits;
  // Run lists grow to kMaxRuns by edits near their end (new VBAs are
  // handed out in order, so a random-order fill appends one run per
  // record); an edit in a list longer than kMaxRunsEditedInside with more
  // than kMaxRunsAfterEdit runs after it turns the chunk dense instead of
  // moving the rest of the list (overwrites and frees in old data).
  static constexpr size_t kMaxRuns = 1024;  // 8 KiB of runs vs 20 KiB dense
  static constexpr size_t kMaxRunsEditedInside = 256;
  // The same for chunks that hold mirror windows: their VBAs are handed
  // out in the order first writes break sharing, mostly random.
  static constexpr size_t kMaxMirrorRunsEditedInside = 16;
  static constexpr size_t kMaxRunsAfterEdit = 32;

  // `max_vbas` caps the table (a pool never needs more VBAs than it has
  // physical blocks plus slack).
  VbaTable(log::SegmentTable* segs, Bno max_vbas);
  ~VbaTable();

  // Allocates n VBAs as few contiguous runs as it can; appends
  // (start, length) runs. ResourceExhausted-free by construction: callers
  // bound n by physical space. Allocated VBAs have refs 0 until referenced.
  void Allocate(Bno n, std::vector<std::pair<Bno, Bno>>* runs);
  // Marks one specific VBA allocated (replay). No-op if already allocated.
  // Replay runs without mirror windows (Load and a new table have none).
  void Claim(Bno vba);

  // Placement of a new VBA for the first write to a block whose VBA
  // old_vba is shared (a clone or snapshot "breaking" there). The VBAs of
  // old_vba's aligned window of kMirrorWindow get a window of as many new
  // VBAs, reserved at the tail, and old_vba + i maps to base + i: blocks
  // that were one run before the break get one run again, so the tree's
  // extents grow back together as neighbours are written instead of
  // leaving one extent per written block. Returns the mirror VBA,
  // allocated with refs 0 like Allocate's, or kNoBlock (then Allocate):
  // it was handed out already, or the window has none and `reserve` is
  // false or reserving would pass max_vbas or the reservation limit.
  // Reserved VBAs are free VBAs that only this function hands out; they
  // go back to the free list when Allocate would otherwise grow the table
  // past max_vbas, and are forgotten by Load (a checkpoint stores them as
  // free). Only a placement choice: nothing on the media refers to it.
  static constexpr Bno kMirrorWindow = 1024;
  Bno AllocateMirror(Bno old_vba, bool reserve);
  // VBAs held in mirror windows and not handed out yet.
  uint64_t mirror_reserved() const { return mirror_reserved_; }

  void Incref(Bno vba, Bno n);
  void Decref(Bno vba, Bno n);
  // Points vba at pba (the old PBA, if any, stops being live).
  // REQUIRES: refs(vba) > 0.
  void SetPba(Bno vba, Bno pba);
  // Relocation: moves vba to new_pba only if it still points at old_pba.
  bool CompareAndSetPba(Bno vba, Bno old_pba, Bno new_pba);

  Entry Get(Bno vba) const;
  // Get(vba).refs, reading only the refcount (one cache line fewer).
  uint32_t Refs(Bno vba) const;
  // A hint: starts loading vba's entry into the CPU cache. Changes nothing.
  void Prefetch(Bno vba) const;
  // The same for Refs(vba) only.
  void PrefetchRefs(Bno vba) const;
  bool InRange(Bno vba) const { return vba < size_; }
  Bno size() const { return size_; }
  uint64_t live_vbas() const { return live_; }
  uint64_t memory_bytes() const;
  // Chunks currently dense (for stats and tests).
  uint64_t dense_chunks() const;

  // Calls fn(vba, len, pba, refs) for [from, to) clipped to size(), in
  // order, as runs: VBA vba + i has PBA pba + i (or kNoBlock when pba is
  // kNoBlock) and refcount refs. Runs may be split arbitrarily.
  void ForEachRun(Bno from, Bno to,
                  const std::function<void(Bno vba, Bno len, Bno pba, uint32_t refs)>& fn) const;

  // Replaces the whole table (checkpoint load) and rebuilds the free runs.
  // Does not touch the SegmentTable (the caller restores validity).
  void Load(const std::vector<Entry>& entries);

 private:
  // Run form: runs[k] covers [runs[k].off, runs[k+1].off) (the last one to
  // the chunk's end); runs[0].off == 0; neighbours never continue each other.
  struct Run {
    Bno pba;
    uint16_t off;
    uint16_t refs;
  };
  static constexpr uint32_t kMaxRunRefs = 0xFFFF;
  static constexpr uint8_t kBigRefs = 255;  // dense: the count is in big_refs_
  static constexpr Bno kWindowsPerChunk = kChunkSize / kMirrorWindow;
  struct Chunk {
    std::vector<Run> runs;
    std::unique_ptr<Bno[]> pba;       // dense form when set
    std::unique_ptr<uint8_t[]> refs;  // dense form
    // The mirror windows of this chunk's VBAs as old VBAs: 1 + an index
    // into mirror_pool_, 0 for none. Kept here because AllocateMirror's
    // caller has just read the old VBA's refcount from this chunk.
    uint32_t mirror[kWindowsPerChunk] = {};
    bool mirrors = false;             // holds (part of) a mirror window's new VBAs
    bool dense() const { return pba != nullptr; }
  };

  struct Mirror {
    Bno window;     // old_vba / kMirrorWindow
    Bno base;       // new VBA of the window's first old VBA
    uint32_t left;  // not handed out yet; 0: the slot is free
    std::bitset<kMirrorWindow> taken;
  };
  // Gives every reserved, not handed out VBA back to the free list.
  void ReleaseMirrors();
  // Forgets the window in mirror_pool_[slot - 1] (its slot becomes free).
  void DropMirror(uint32_t slot);

  void Free(Bno vba, Bno n, Bno pba);
  void AddFreeRun(Bno start, Bno len);
  void EnsureSize(Bno n);

  // Run-form editing: makes run boundaries at off (returns the index of the
  // run starting there), and merges neighbours that continue each other
  // over runs [first, last].
  static size_t SplitAt(Chunk& c, uint32_t off);
  static void MergeAround(Chunk& c, size_t first, size_t last);
  static uint32_t RunEnd(const Chunk& c, size_t k);
  void Densify(Chunk& c);
  uint32_t DenseRefs(const Chunk& c, Bno chunk_base, uint32_t off) const;
  void SetDenseRefs(Chunk& c, Bno chunk_base, uint32_t off, uint32_t refs);
  // Applies fn(first_vba, len, &pba, &refs) to each run piece of
  // [vba, vba + n), in run form or dense form; grows_refs: fn may raise
  // refcounts (so a run near its 16-bit limit goes dense first).
  template <typename F>
  void Edit(Bno vba, Bno n, bool grows_refs, F fn);

  log::SegmentTable* segs_;
  Bno max_vbas_;
  Bno size_ = 0;
  std::vector<Chunk> chunks_;
  absl::flat_hash_map<Bno, uint32_t> big_refs_;  // dense entries with refs >= 255
  // Free VBAs below size_: start -> length, coalesced.
  absl::btree_map<Bno, Bno> free_runs_;
  uint64_t live_ = 0;  // VBAs with refs > 0
  // Mirror windows (see AllocateMirror), found through Chunk::mirror;
  // slots with left == 0 are free and listed in mirror_free_.
  std::vector<Mirror> mirror_pool_;
  std::vector<uint32_t> mirror_free_;
  uint64_t mirror_reserved_ = 0;
};

}  // namespace ftl::map
