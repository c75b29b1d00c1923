#pragma once
// VbaTable: the global table VBA -> (PBA, refcount) (DESIGN.md §3). A VBA
// names one written version of a block; its refcount counts the tree leaf
// entries that reference it (a leaf shared by several trees counts once, so
// sharing a tree root costs nothing here). When the count drops to zero the
// VBA is freed and its PBA stops being live in the SegmentTable.
// Not thread-safe: guarded by the owner's map lock.

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
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
  };
  // `max_vbas` caps the table (a pool never needs more VBAs than it has
  // physical blocks plus slack).
  VbaTable(log::SegmentTable* segs, Bno max_vbas);

  // Allocates n VBAs as few contiguous runs as it can; appends
  // (start, length) runs. ResourceExhausted-free by construction: callers
  // bound n by physical space. Allocated VBAs have refs 0 until referenced.
  void Allocate(Bno n, std::vector<std::pair<Bno, Bno>>* runs);
  // Marks one specific VBA allocated (replay). No-op if already allocated.
  void Claim(Bno vba);

  void Incref(Bno vba, Bno n);
  void Decref(Bno vba, Bno n);
  // Points vba at pba (the old PBA, if any, stops being live).
  // REQUIRES: refs(vba) > 0.
  void SetPba(Bno vba, Bno pba);
  // Relocation: moves vba to new_pba only if it still points at old_pba.
  bool CompareAndSetPba(Bno vba, Bno old_pba, Bno new_pba);

  const Entry& Get(Bno vba) const { return entries_[vba]; }
  bool InRange(Bno vba) const { return vba < entries_.size(); }
  Bno size() const { return Bno(entries_.size()); }
  uint64_t live_vbas() const { return live_; }
  uint64_t memory_bytes() const {
    return entries_.capacity() * sizeof(Entry) + free_runs_.size() * 32;
  }

  // Serialisation support: the table is dense; free entries have refs 0.
  const std::vector<Entry>& entries() const { return entries_; }
  // Replaces the whole table (checkpoint load) and rebuilds the free runs.
  // Does not touch the SegmentTable (the caller restores validity).
  void Load(std::vector<Entry> entries);

 private:
  void Free(Bno vba);
  void AddFreeRun(Bno start, Bno len);
  void EnsureSize(Bno n);

  log::SegmentTable* segs_;
  Bno max_vbas_;
  std::vector<Entry> entries_;
  // Free VBAs below entries_.size(): start -> length, coalesced.
  absl::btree_map<Bno, Bno> free_runs_;
  uint64_t live_ = 0;  // VBAs with refs > 0
};

}  // namespace ftl::map
