#pragma once
// Placement: which open segment (slot) a block is appended to, by how soon
// it is expected to die. Blocks that die together leave segments empty
// together, so the cleaner copies less (issue 2: write amplification of
// skewed workloads). Three slots:
//
//   kHot   user writes whose previous version lived briefly, and blocks the
//          cleaner finds still young in hot segments
//   kCold  the other user writes (and first writes of a block)
//   kGc    the other relocations
//
// "Briefly" is measured against L, the mean lifespan (seqs from opening to
// cleaning) of the last reclaimed hot segments: a user write is hot if the
// version it replaces is younger than L, or younger than
// kStayHot * L while that version sits in a hot segment (a block needs one
// short interval to become hot and stays hot while its intervals stay
// below kStayHot * L). A relocated block from a hot segment stays hot
// while younger than kStayHot * L. Before any hot segment was reclaimed
// every overwrite is hot. The ages come from sequence numbers: a
// relocation carries its block's data seq; a user write's old version is
// dated by the mean data seq of the segment holding it (no per-block
// memory).
//
// The rule was chosen with bench/greedy_sim.cc (bench/RESULTS.md, "Hot/cold
// placement"). Pure logic, no locking: the owner serialises calls
// (core::PoolImpl under its map lock).

#include <cstdint>
#include <deque>
#include <optional>

namespace ftl::gc {

enum class Slot : uint8_t { kHot = 0, kCold = 1, kGc = 2 };
inline constexpr int kSlotCount = 3;
const char* SlotName(Slot s);

// The version a user write replaces.
struct OldVersion {
  uint64_t written_seq = 0;  // when it was written (estimate)
  bool in_hot = false;       // it sits in a hot segment
};

class Placement {
 public:
  // Lifespans of this many reclaimed hot segments are averaged.
  static constexpr uint32_t kWindow = 16;
  static constexpr uint64_t kStayHot = 4;

  // A user write at `now` replacing `old` (nullopt: the block was not
  // mapped).
  Slot ForUserWrite(const std::optional<OldVersion>& old, uint64_t now) const;
  // A live block the cleaner moves out of a segment (hot or not), written
  // at `data_seq`.
  Slot ForRelocation(bool from_hot, uint64_t data_seq, uint64_t now) const;
  // The cleaner reclaimed a hot segment that was opened `lifespan` seqs ago.
  void HotSegmentReclaimed(uint64_t lifespan);
  // L (0 while nothing was measured: everything counts as young).
  uint64_t hot_lifespan() const { return lifespans_.empty() ? 0 : sum_ / lifespans_.size(); }

 private:
  // Whether `age` is below k * L.
  bool Younger(uint64_t age, uint64_t k) const;

  std::deque<uint64_t> lifespans_;
  uint64_t sum_ = 0;
};

}  // namespace ftl::gc
