#pragma once
// MapState: all in-memory metadata of a pool — segment table, VBA table,
// volume trees, per-block checksums — and the one function that applies a
// log record to it. The writer thread applies records through ApplyRecord
// after writing them, and recovery replays records through the same function,
// so replay reproduces exactly what the running pool did (DESIGN.md §2).
// Not thread-safe: PoolImpl guards it with map_mu_ (writer exclusive,
// readers shared).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "log/log_format.h"
#include "log/segment_table.h"
#include "map/extent_tree.h"
#include "map/vba_table.h"

namespace ftl::core {

using log::Bno;
using log::kNoBlock;

struct VolumeMeta {
  uint32_t id = 0;
  std::string name;
  uint64_t size_blocks = 0;
  map::ExtentTree tree;
  VolumeMeta(uint32_t i, std::string n, uint64_t blocks, map::TreeContext* ctx)
      : id(i), name(std::move(n)), size_blocks(blocks), tree(ctx) {}
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
  const std::map<uint32_t, std::unique_ptr<VolumeMeta>>& volumes() const { return volumes_; }

  uint32_t block_csum(Bno pba) const { return csums_[pba]; }
  std::vector<uint32_t>& block_csums() { return csums_; }
  const std::vector<uint32_t>& block_csums() const { return csums_; }

  // Chooses the VBA each block of a write to [lba, lba+n) will use: the
  // current VBA if this tree alone references it (refcount 1 on an
  // unshared path), else a newly allocated one (contiguous where possible).
  void PlanWrite(uint32_t vol, Bno lba, Bno n, std::vector<Bno>* vbas);
  // Returns VBAs from PlanWrite that were never applied (failed write).
  void UnplanWrite(const std::vector<Bno>& vbas);

  // Applies a record whose header block is at physical block `pba`.
  // Updates the segment's write pointer and max seq.
  void ApplyRecord(const log::RecordHeader& h, Bno pba, ApplyMode mode = ApplyMode::kNormal);

  uint64_t memory_bytes() const { return ctx_.memory_bytes() + vbas_.memory_bytes(); }
  uint64_t mapped_blocks() const;

 private:
  void ApplyWrite(const log::WriteOp& w, Bno first_pba, uint64_t seq, ApplyMode mode);
  void ApplyReloc(const log::RelocOp& r, Bno first_pba, ApplyMode mode);

  log::SegmentTable segs_;
  map::VbaTable vbas_;
  map::TreeContext ctx_;
  std::map<uint32_t, std::unique_ptr<VolumeMeta>> volumes_;
  std::vector<uint32_t> csums_;  // per physical block
  // kRebuild only: data version (seq) of each VBA's current copy.
  std::vector<uint64_t> rebuild_dv_;
};

}  // namespace ftl::core
