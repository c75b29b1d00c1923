#pragma once
// PoolState: the in-memory state of an open pool that every part shares —
// the MapState, the two locks that guard it, the segment pins of readers,
// and the pool's counters (docs/architecture.md, "Locks").
//
// Thread safety and lock order:
//  - map_mu guards *map. The committer (the one thread holding the commit
//    role, commit/committer.h) is the only thread that changes the map
//    (recovery at open aside); it takes map_mu exclusively to change it and
//    reads it without the lock. Everyone else reads under map_mu shared.
//  - tree_meta_mu also guards the catalogue part of the map (which trees
//    exist and everything of a VolumeMeta but its tree): it changes only
//    with both locks held exclusively, so either one held shared is enough
//    to read it. Range operations check their input under tree_meta_mu
//    alone and so never wait for the committer applying a batch.
//  - Lock order: tree_meta_mu before map_mu. Both come after the commit
//    role, the snapshot catalogue's lock and the range lock, and are never
//    held while taking the committer's queue lock.
//  - Pins and counters are atomics.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ftl/pool.h"
#include "state/map_state.h"

namespace ftl::state {

// What the pool has written and done, for Pool::Stats (atomics).
struct PoolCounters {
  std::atomic<uint64_t> user_bytes{0}, media_bytes{0}, reloc_bytes{0};
  std::atomic<uint64_t> user_hot_bytes{0}, reloc_hot_bytes{0};
  std::atomic<uint64_t> ckpt_count{0}, ckpt_bytes{0};
  // Wall-clock time (Unix ns) of the newest checkpoint written, or of the
  // open (the state then matches the media); PoolStats::last_checkpoint_unix_ns.
  std::atomic<int64_t> ckpt_last_unix_ns{0};
  void NoteCheckpoint() {
    ckpt_last_unix_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count(),
                            std::memory_order_relaxed);
  }
  // Steady-clock time of the last read or record (idle detection).
  std::atomic<int64_t> last_io_ns{0};
  void NoteIo() {
    last_io_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count(),
                     std::memory_order_relaxed);
  }
};

class PoolState {
 public:
  mutable absl::Mutex tree_meta_mu ABSL_ACQUIRED_BEFORE(map_mu);
  mutable absl::Mutex map_mu;
  // Guarded by map_mu (and the commit role; see above). Set at open.
  std::unique_ptr<MapState> map;
  PoolCounters counters;
  // The first seq not covered by the newest checkpoint encoded (commit
  // role): a record's header may join a sector chain only if the chain's
  // first record is not older (log/log_format.h, "Sector chains").
  uint64_t checkpoint_encoded_seq = 0;

  // Sizes the reader pins once the segment count is known.
  void InitPins(uint32_t segment_count);

  // Looks up [lba, lba+n) of tree `vol`: per block its (pba, csum) or
  // (Pba(kNoBlock), 0); pins the segments it maps to, so the cleaner does not
  // reuse them while they are read. REQUIRES: Unpin(pinned) after reading.
  void LookupForRead(uint32_t vol, Bno lba, Bno n, std::vector<std::pair<log::Pba, uint32_t>>* out,
                     std::vector<uint32_t>* pinned) ABSL_LOCKS_EXCLUDED(map_mu);
  void Unpin(const std::vector<uint32_t>& pinned);
  // Pins segment `seg` for a reader that reads it without a lookup (scrub);
  // REQUIRES: map_mu held, and Unpin({seg}) after reading.
  void PinSegment(uint32_t seg) ABSL_SHARED_LOCKS_REQUIRED(map_mu) { pins_[seg].fetch_add(1); }
  // Whether a reader still reads segment `seg`.
  bool Pinned(uint32_t seg) const { return pins_[seg].load() != 0; }

  // Allocated and unallocated runs of [lba, lba+n) of tree `vol`, in bytes.
  std::vector<BlockExtent> MappedExtents(uint32_t vol, Bno lba, Bno n) ABSL_LOCKS_EXCLUDED(map_mu);
  uint64_t MappedBlocks(uint32_t vol) ABSL_LOCKS_EXCLUDED(map_mu);
  // True if any block of the range is immutable.
  bool RangeImmutable(uint32_t vol, Bno lba, Bno n) ABSL_LOCKS_EXCLUDED(map_mu);

 private:
  std::unique_ptr<std::atomic<uint32_t>[]> pins_;
};

}  // namespace ftl::state
