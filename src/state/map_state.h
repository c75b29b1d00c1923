#pragma once
// MapState: all in-memory metadata of a pool — segment table, VBA table,
// volume trees, per-block checksums — and the one function that applies a
// log record to it. The writer thread applies records through ApplyRecord
// after writing them, and recovery replays records through the same function,
// so replay reproduces exactly what the running pool did (docs/architecture.md, "Records").
// Not thread-safe: PoolImpl guards it with map_mu_ (writer exclusive,
// readers shared).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ftl/pool.h"
#include "map/attr_map.h"
#include "log/log_format.h"
#include "log/segment_table.h"
#include "map/extent_tree.h"
#include "map/vba_table.h"

namespace ftl::state {

using log::Bno;
using log::kNoBlock;

inline constexpr uint32_t kNoTree = UINT32_MAX;

enum class TreeKind : uint8_t { kVolume = 0, kSnapshot = 1 };

// One tree of the catalogue: a volume (writable unless read_only) or a
// snapshot (frozen). Volumes and snapshots share one id space. Tree 0 is
// the primary volume (made at format; it cannot be removed).
struct VolumeMeta {
  uint32_t id = 0;
  std::string name;
  uint64_t size_blocks = 0;
  map::ExtentTree tree;
  TreeKind kind = TreeKind::kVolume;
  // What the tree holds (docs/architecture.md, "Datasets"): set by the
  // DATASET note that created it; a snapshot takes its volume's, a volume
  // activated from a snapshot the snapshot's.
  DatasetKind dataset = DatasetKind::kBlock;
  bool read_only = false;
  // Snapshot: the volume it was taken of. Volume: the snapshot it was
  // activated from (kNoTree for the primary).
  uint32_t origin = kNoTree;
  std::string origin_name;  // snapshot: that volume's name (kept if it goes)
  // Lineage. Snapshot: the snapshot it descends from. Volume: its base, the
  // newest snapshot in its line (taken of it, activated from or rolled back to).
  uint32_t parent = kNoTree;
  uint64_t created_ns = 0;
  uint64_t seq = 0;  // seq of the note that created it (0: format)
  map::AttrMap attrs;
  VolumeMeta(uint32_t i, std::string n, uint64_t blocks, map::TreeContext* ctx)
      : id(i), name(std::move(n)), size_blocks(blocks), tree(ctx) {}
  bool is_snapshot() const { return kind == TreeKind::kSnapshot; }
};

enum class ApplyMode {
  kNormal,   // running pool or roll-forward after a checkpoint
  kRebuild,  // rebuild from the log alone: relocations win by data version
};

class MapState {
 public:
  MapState(uint32_t segment_count, uint32_t segment_blocks);
  MapState(const MapState&) = delete;

  log::SegmentTable& segments() { return segs_; }
  const log::SegmentTable& segments() const { return segs_; }
  map::VbaTable& vbas() { return vbas_; }
  const map::VbaTable& vbas() const { return vbas_; }
  map::TreeContext* tree_context() { return &ctx_; }
  const map::TreeContext& tree_context() const { return ctx_; }

  VolumeMeta* volume(uint32_t id);
  const VolumeMeta* volume(uint32_t id) const;
  VolumeMeta* AddVolume(uint32_t id, const std::string& name, uint64_t size_blocks);
  // Every tree, volumes and snapshots, by id.
  const std::map<uint32_t, std::unique_ptr<VolumeMeta>>& volumes() const { return volumes_; }
  // A volume (not a snapshot) by name, or nullptr.
  const VolumeMeta* FindVolume(const std::string& name) const;
  // The snapshot `name` taken of volume `volume`, or nullptr.
  const VolumeMeta* FindSnapshot(const std::string& volume, const std::string& name) const;
  uint32_t next_tree_id() const { return next_tree_id_; }
  void set_next_tree_id(uint32_t id) { next_tree_id_ = id; }

  // Snapshots taken of volume `id` (by origin id).
  uint32_t SnapshotCount(uint32_t id) const;

  // Checks that a note op can apply to the current state (trees exist and
  // have the right kind, ranges in bounds, names free, targets writable).
  // The committer calls it right before writing the note, so the check and
  // the apply see the same state.
  // `dropped`: trees removed by earlier ops of the same record.
  // Reads only the catalogue part of the state (trees, names, kinds, flags,
  // sizes, attributes), never a tree's mapping — except for a RESIZE that
  // shrinks without kResizeForce, which must find nothing mapped past the
  // new end: callers of that one hold map_mu (snap::Catalogue shared, the
  // committer exclusively), not tree_meta_mu alone.
  absl::Status ValidateNote(const log::Op& op, const std::vector<uint32_t>& dropped = {}) const;
  // FailedPrecondition if rolling volume `vol` back to snapshot `snap` would
  // change one of the volume's immutable ranges: map a block of it to
  // another VBA (other data, by VBA identity as in merge) or drop its
  // immutable attribute (the snapshot's attributes replace the volume's).
  // Reads the trees' mappings. REQUIRES: both trees exist.
  absl::Status CheckRollbackKeepsImmutable(uint32_t vol, uint32_t snap) const;
  // Unmaps every non-persistent range of every volume (crash recovery).
  // Returns the blocks unmapped.
  uint64_t DropNonPersistent();

  uint32_t block_csum(Bno pba) const { return csums_[pba]; }
  std::vector<uint32_t>& block_csums() { return csums_; }
  const std::vector<uint32_t>& block_csums() const { return csums_; }

  // Chooses the VBA each block of a write to [lba, lba+n) will use: the
  // current VBA if this tree alone references it (refcount 1 on an
  // unshared path), else a newly allocated one: for a shared block the
  // mirror of its old VBA (VbaTable::AllocateMirror), otherwise contiguous
  // where possible.
  void PlanWrite(uint32_t vol, Bno lba, Bno n, std::vector<Bno>* vbas);
  // Before a batch of PlanWrites to volume `vol`, with their first LBAs in
  // the order PlanWrite will be called (calls may be left out): looks them
  // all up in one level-by-level walk of the tree (ExtentTree::
  // LookupExtents) and starts loading the VBA-table entries they map to.
  // PlanWrite uses these lookups instead of descending the tree again,
  // as long as the tree has not changed since (ExtentTree::version()),
  // and ApplyRecord of the record so planned prefetches the nodes they
  // went through, a few writes ahead of the one it applies.
  void LookupWrites(uint32_t vol, const std::vector<Bno>& lbas);
  // Returns VBAs from PlanWrite that were never applied (failed write).
  void UnplanWrite(const std::vector<Bno>& vbas);

  // Applies a record whose header block is at physical block `pba`.
  // Updates the segment's write pointer and max seq.
  void ApplyRecord(const log::RecordHeader& h, Bno pba, ApplyMode mode = ApplyMode::kNormal);

  uint64_t memory_bytes() const { return ctx_.memory_bytes() + vbas_.memory_bytes(); }
  uint64_t vba_table_memory_bytes() const { return vbas_.memory_bytes(); }
  uint64_t mapped_blocks() const;

 private:
  // `planned`: PlanWrite chose w's VBAs (a live write, not replay);
  // `lookup`: the index in lookups_ PlanWrite used for w, or -1.
  void ApplyWrite(const log::WriteOp& w, Bno first_pba, uint64_t seq, ApplyMode mode,
                  bool planned, int32_t lookup);
  void ApplyReloc(const log::RelocOp& r, Bno first_pba, ApplyMode mode);
  void ApplyNote(const log::Op& op, uint64_t seq);

  log::SegmentTable segs_;
  map::VbaTable vbas_;
  map::TreeContext ctx_;
  std::map<uint32_t, std::unique_ptr<VolumeMeta>> volumes_;
  uint32_t next_tree_id_ = 1;
  std::vector<uint32_t> csums_;  // per physical block
  // PlanWrite's scratch list of allocated runs (reused: no allocation per
  // planned write).
  std::vector<std::pair<Bno, Bno>> alloc_runs_;
  // LookupWrites' lookups (lookups_[k] for lookup_lbas_[k]), for the
  // PlanWrites that follow: valid for volume lookups_vol_ while its tree
  // is at lookups_version_; consumed in order from lookups_next_.
  std::vector<Bno> lookup_lbas_;
  std::vector<map::ExtentLookup> lookups_;
  uint32_t lookups_vol_ = kNoTree;
  uint64_t lookups_version_ = 0;
  uint64_t lookups_shape_ = 0;  // ctx_.shape at LookupWrites
  size_t lookups_next_ = 0;
  // LookupWrites' lookup for write `w` (lookups_[lookup]) if it was made
  // for w's volume and first block, else nullptr.
  const map::ExtentLookup* LookupForApply(const log::WriteOp& w, int32_t lookup) const;
  // The lookup LookupWrites made for (vol, lba) if it is still valid,
  // else nullptr.
  const map::ExtentLookup* TakeLookup(uint32_t vol, const map::ExtentTree& tree, Bno lba);
  // Per PlanWrite since the last ApplyRecord or UnplanWrite: the index in
  // lookups_ it used, or -1. ApplyRecord of the planned record starts
  // loading the nodes and VBA-table entries of the write a few ahead of
  // the one it applies (hints only: they may have changed or gone).
  std::vector<int32_t> planned_;
  std::vector<const log::WriteOp*> apply_writes_;  // ApplyRecord's scratch
  void PrefetchForApply(const log::WriteOp& w, int32_t lookup) const;
  // kRebuild only: data version (seq) of each VBA's current copy.
  std::vector<uint64_t> rebuild_dv_;
};

}  // namespace ftl::state
