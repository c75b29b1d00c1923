#pragma once
// SegmentTable: the state of every segment (free / open / full / being
// cleaned), its write pointer, the highest record seq it holds, and a
// validity bitmap + live count of its blocks (a block is valid iff the VBA
// table points at it with refcount > 0; docs/architecture.md, "The map"). The cleaner reads
// it to choose victims. Not thread-safe: the owner (state::MapState) guards
// it with its map lock.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "log/log_format.h"

namespace ftl::log {

enum class SegmentState : uint8_t { kFree = 0, kOpen = 1, kFull = 2, kCleaning = 3 };
const char* SegmentStateName(SegmentState s);

struct SegmentInfo {
  SegmentState state = SegmentState::kFree;
  Stream stream = Stream::kUser;
  uint32_t write_ptr = 0;   // blocks used from the segment start
  uint32_t live = 0;        // valid data blocks
  uint64_t max_seq = 0;     // highest record seq written into it (0: none)
  uint64_t sealed_seq = 0;  // seq when it became full (its age for the cleaner)
  bool discarded = false;   // free and already discarded (trim / punch hole)
  // In memory only (not in checkpoints; after a restart segments from the
  // checkpoint count as cold and are dated by max_seq), for placement
  // (gc/placement.h):
  bool hot = false;           // opened for the hot slot
  uint64_t opened_seq = 0;    // next seq when it was opened
  uint64_t data_seq_sum = 0;  // sum of the data seqs of the blocks written
  uint32_t data_count = 0;    // blocks written (header blocks not counted)
  // Mean data seq of the blocks written, or max_seq if not known.
  uint64_t mean_data_seq() const { return data_count ? data_seq_sum / data_count : max_seq; }
};

class SegmentTable {
 public:
  SegmentTable(uint32_t segment_count, uint32_t segment_blocks);

  uint32_t count() const { return uint32_t(segs_.size()); }
  uint32_t segment_blocks() const { return segment_blocks_; }
  uint32_t SegmentOf(Pba pba) const { return pba.value() / segment_blocks_; }
  Pba FirstBlock(uint32_t seg) const { return Pba(Bno(uint64_t(seg) * segment_blocks_)); }

  SegmentInfo& at(uint32_t seg) { return segs_[seg]; }
  const SegmentInfo& at(uint32_t seg) const { return segs_[seg]; }

  // Marks a physical block as holding live data / no longer live.
  void SetValid(Bno pba);
  void ClearValid(Bno pba);
  bool IsValid(Bno pba) const {
    return (bits_[pba / 64] >> (pba % 64)) & 1;
  }
  // Forgets all validity of a segment (it is being erased).
  void ResetSegment(uint32_t seg);

  uint32_t free_count() const { return free_count_; }
  // Segments in state `s` (kept by every transition; for Pool::Stats).
  uint32_t count_in(SegmentState s) const { return state_counts_[size_t(s)]; }

  // The segment state machine: every state change goes through one of
  // these, and each checks that it is a legal transition (docs/
  // architecture.md, "Segments"):
  //
  //   free --Open--> open --Seal--> full --BeginCleaning--> cleaning
  //   cleaning --AbortCleaning--> full      cleaning --Release--> free
  //   free --BeginDiscard--> cleaning --EndDiscard--> free (discarded)
  //   free|open --MarkReplayed--> full   (recovery found records in it)
  //
  // Open: free -> open for `stream`, its fields reset, opened at `next_seq`.
  void Open(uint32_t seg, Stream stream, bool hot, uint64_t next_seq);
  // Seal: open -> full; `sealed_seq` dates it for the cleaner.
  void Seal(uint32_t seg, uint64_t sealed_seq);
  // full -> cleaning (the cleaner took it).
  void BeginCleaning(uint32_t seg);
  // cleaning -> full (cleaning failed or was interrupted).
  void AbortCleaning(uint32_t seg);
  // cleaning -> free: its validity forgotten (ResetSegment), reusable.
  void Release(uint32_t seg);
  // free -> cleaning while it is discarded; EndDiscard: back to free.
  void BeginDiscard(uint32_t seg);
  void EndDiscard(uint32_t seg);
  // Recovery: a free or open segment holds replayed records -> full.
  void MarkReplayed(uint32_t seg);
  // Loading a checkpoint: the state as stored, unchecked.
  void Load(uint32_t seg, SegmentState s);
  uint64_t live_blocks() const { return live_total_; }

 private:
  // Changes the state if it is one of `from`; aborts otherwise.
  void Move(uint32_t seg, std::initializer_list<SegmentState> from, SegmentState to);

  uint32_t segment_blocks_;
  std::vector<SegmentInfo> segs_;
  std::vector<uint64_t> bits_;
  uint32_t free_count_;
  std::array<uint32_t, 4> state_counts_{};  // indexed by SegmentState
  uint64_t live_total_ = 0;
};

}  // namespace ftl::log
