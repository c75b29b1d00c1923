#pragma once
// VolumeImpl: one volume of an open pool (ftl::Volume) — validation of
// each request, the read path (lookup, pin, media read, checksum check),
// read-modify-write of partial blocks, and writes split at the atomic size
// into requests for the committer (docs/architecture.md, "An NBD write",
// "An NBD read"); atomic multi-range writes (WriteAtomic: one request, one
// record). The same class serves read-only views of snapshots
// (Pool::SnapshotVolume).
//
// Thread safety: every method is safe from any thread. Writes to the same
// blocks are ordered by the range lock (core/range_lock.h), taken before
// any other lock; WriteAtomic takes one per piece, in ascending LBA order
// (so two of them never wait on each other in a cycle).

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "commit/committer.h"
#include "core/range_lock.h"
#include "ftl/pool.h"
#include "state/pool_state.h"

namespace ftl::core {

using log::Bno;
using log::kNoBlock;

// What a volume uses of its pool; owned by the pool, outlives its volumes.
struct VolumeContext {
  commit::Committer* committer = nullptr;
  state::PoolState* state = nullptr;
  Media* media = nullptr;
  const Geometry* geo = nullptr;
  RangeLock* range_lock = nullptr;
  // ResourceExhausted when the metadata area has no room (PoolImpl).
  std::function<absl::Status(uint32_t)> metadata_room;
  Bno max_atomic_blocks() const { return Bno(geo->max_atomic_bytes / kBlockSize); }
  uint64_t MediaOffset(log::Pba pba) const { return geo->data_offset + uint64_t(pba.value()) * kBlockSize; }
};

class VolumeImpl : public Volume {
 public:
  VolumeImpl(const VolumeContext* ctx, uint32_t id, std::string name, uint64_t size_blocks, bool ro,
             DatasetKind kind = DatasetKind::kBlock)
      : ctx_(ctx), id_(id), name_(std::move(name)), size_blocks_(size_blocks), ro_(ro),
        kind_(kind) {}
  // Set once the volume is removed: every request fails with Unavailable.
  void MarkGone() { gone_.store(true); }
  bool gone() const { return gone_.load(std::memory_order_relaxed); }
  // Whether some range is immutable (then writes consult the attributes).
  void SetHasImmutable(bool v) { has_immutable_.store(v); }
  const std::string& name() const override { return name_; }
  uint64_t size_bytes() const override { return size_blocks() * kBlockSize; }
  uint64_t size_blocks() const { return size_blocks_.load(std::memory_order_relaxed); }
  // After a RESIZE note (VolumeRegistry::Sync). Requests checked against
  // the old size meanwhile are checked again by the committer
  // (state::CheckUserRange).
  void SetSizeBlocks(uint64_t n) { size_blocks_.store(n, std::memory_order_relaxed); }
  bool read_only() const override { return ro_; }
  DatasetKind kind() const override { return kind_; }
  uint32_t id() const { return id_; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data, bool fua) override;
  void WriteAsync(uint64_t offset, std::span<const std::byte> data, bool fua,
                  Callback done) override;
  void WriteAsyncBatch(std::vector<AsyncWrite> writes) override;
  absl::Status WriteAtomic(std::span<const Piece> pieces, bool fua) override;
  absl::Status Trim(uint64_t offset, uint64_t length, bool fua) override;
  absl::Status WriteZeroes(uint64_t offset, uint64_t length, bool fua, bool no_hole,
                           bool fast_only) override;
  absl::Status Flush() override;
  absl::StatusOr<std::vector<BlockExtent>> BlockStatus(uint64_t offset,
                                                       uint64_t length) override;
  VolumeStats Stats() const override;

 private:
  absl::Status CheckRange(uint64_t offset, uint64_t length, bool is_write) const;
  // Gone, read-only and immutable-range checks of a change to the range.
  absl::Status CheckWritable(uint64_t offset, uint64_t length);
  // Builds the requests for whole-block writes of [first, first+n) from
  // `data`, split at the atomic size; `done` runs once all parts are
  // applied. The requests are appended to `out` for the committer.
  void MakeRequests(Bno first, Bno n, const std::byte* data, bool fua, Callback done,
                    std::vector<commit::Request*>* out);
  // WriteAsync; with `allow_inline` (WriteAsyncBatch's contract) the calling
  // thread may commit the write and run `done` before returning.
  void SubmitWrite(uint64_t offset, std::span<const std::byte> data, bool fua, Callback done,
                   bool allow_inline);

  const VolumeContext* ctx_;
  uint32_t id_;
  std::string name_;
  std::atomic<uint64_t> size_blocks_;
  bool ro_;
  DatasetKind kind_;
  std::atomic<bool> gone_{false};
  std::atomic<bool> has_immutable_{false};
  mutable std::atomic<uint64_t> reads_{0}, writes_{0}, trims_{0}, zeroes_{0}, flushes_{0};
  mutable std::atomic<uint64_t> read_bytes_{0}, write_bytes_{0};
};

}  // namespace ftl::core
