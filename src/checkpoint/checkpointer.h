#pragma once
// Checkpointer: the pool's metadata area at the start of the media — the
// two superblock copies and the two checkpoint slots (log/log_format.h) —
// and the checkpoints written into it (docs/architecture.md, "Checkpoints").
//
// A checkpoint is encoded from the MapState in the commit role (the map
// does not change meanwhile), written into the slot the superblock does
// not name, synced, and only then named by a new superblock generation.
// Automatic checkpoints write and sync on their own thread while commits
// go on; the next checkpoint (and Join) waits for it.
//
// Thread safety: Checkpoint / StartAsync / Join / MarkDirty / MarkClean run
// in the commit role (or at open and close, when nothing else runs); the
// superblock is theirs. The estimate inputs and stats are atomics, read
// from any thread. Takes PoolState::map_mu shared while encoding.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "ftl/media.h"
#include "ftl/pool.h"
#include "log/durability.h"
#include "log/log_format.h"
#include "media/aligned_buffer.h"
#include "state/pool_state.h"

namespace ftl::checkpoint {

// Byte offset of checkpoint slot `slot` (0 or 1).
inline uint64_t SlotOffset(const log::Superblock& sb, int slot) {
  return (2 + uint64_t(slot) * sb.ckpt_slot_blocks) * log::kBlock;
}

// Writes a new, empty pool's metadata (format): both checkpoint slots with
// an empty map of one volume, then both superblock copies. Discards the
// data area first when `discard`.
absl::Status FormatMedia(Media& media, const FormatOptions& f, bool discard);

class Checkpointer {
 public:
  Checkpointer(std::shared_ptr<Media> media, log::Durability* durability, state::PoolState* state)
      : media_(std::move(media)), durability_(durability), state_(state) {}
  ~Checkpointer() { Join(); }

  // Reads the newer valid superblock copy; a damaged other copy is added to
  // `degraded`. NotFound: no pool; DataLoss: both copies corrupt.
  absl::Status ReadSuperblock(std::vector<std::string>* degraded);
  const log::Superblock& superblock() const { return sb_; }
  // Open: the pool is in use (not clean), at the current format version.
  absl::Status MarkDirty();
  // Close: everything is in the newest checkpoint.
  absl::Status MarkClean();

  // Encodes the map as of `next_seq` (the first seq not covered) and
  // writes it; durable when it returns. Commit role.
  absl::Status Checkpoint(uint64_t next_seq);
  // The same, but the slot write and sync run on a thread of their own.
  absl::Status StartAsync(uint64_t next_seq);
  // Waits for a checkpoint started by StartAsync.
  void Join();

  // Records older than every slot's checkpoint: the cleaner may take
  // segments holding only those (gc/victim_policy.h: the gate).
  uint64_t gate_seq() const { return gate_seq_.load(); }
  // When and at which seq the last checkpoint was encoded (commit role).
  std::chrono::steady_clock::time_point last_time() const { return last_time_; }
  uint64_t last_seq() const { return last_seq_; }
  uint64_t last_size() const { return last_size_.load(); }
  uint64_t capacity() const { return uint64_t(sb_.ckpt_slot_blocks) * log::kBlock; }

  // The map's node counts now (the volume registry refreshes them).
  void NoteMapSize(uint64_t leaves, uint64_t inners);
  // When the pool starts taking writes at `next_seq`: automatic checkpoints
  // count from here, and the estimate starts from the newest slot.
  void Started(uint64_t next_seq);
  // ResourceExhausted when the slot could not keep 1/reserve_divisor of
  // itself free for what a change may add. `checkpoint` (null: none) may be
  // called once to replace the estimate with a measurement.
  absl::Status CheckRoom(uint32_t reserve_divisor, const std::function<absl::Status()>& checkpoint);

 private:
  // Writes `next` (generation + 1) and syncs; only then is it sb_.
  absl::Status WriteSuperblock(log::Superblock next);
  absl::Status Encode(uint64_t next_seq);  // into io_ / pending_
  absl::Status WriteEncoded();             // slot write, sync, superblock

  struct Pending {
    uint64_t next_seq = 0;
    uint64_t bytes = 0;
    uint64_t checksum = 0;
    size_t padded = 0;
    uint64_t covered = 0;  // last record written before the encode
  };

  std::shared_ptr<Media> media_;
  log::Durability* durability_;
  state::PoolState* state_;
  log::Superblock sb_;  // as durable on the media
  // A superblock sync failed: what the media names is unknown (sticky).
  absl::Status failed_;
  // Buffers kept between checkpoints (no page faults on map-sized memory).
  std::vector<std::byte> buf_;
  media::AlignedBuffer io_;
  Pending pending_;
  std::thread io_thread_;
  std::atomic<uint64_t> gate_seq_{0};
  std::chrono::steady_clock::time_point last_time_;
  uint64_t last_seq_ = 0;
  // Map size at the last checkpoint and now, for CheckRoom's estimate.
  std::atomic<uint64_t> last_size_{0};
  std::atomic<uint64_t> last_leaves_{0}, last_inners_{0};
  std::atomic<uint64_t> leaves_now_{0}, inners_now_{0};
};

}  // namespace ftl::checkpoint
