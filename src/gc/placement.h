#pragma once
// Placement: which open segment (slot) a block is appended to, by how soon
// it is expected to die. Blocks that die together leave segments empty
// together, so the cleaner copies less (issue 2: write amplification of
// skewed workloads). Four slots:
//
//   kHot    user writes whose previous version lived briefly
//   kCold   the other user writes (and first writes of a block)
//   kGc     relocations
//   kHotGc  relocations of blocks still young in hot segments
//
// (Hot relocations have a segment of their own rather than sharing the
// user's hot one: a segment the cleaner opens must never take user writes,
// or the writer's reserve of free segments could end up in user data.)
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
// Separating costs something too: a batch of user writes becomes two
// records (two header blocks), and one more segment is open. It pays only
// if the hot slot really collects blocks that die sooner, so Placement is
// active only while a SampledSeparation says so. While passive, all user
// writes go to the cold slot and all relocations to kGc: no hot segment is
// open (one that filled slowly would hold its unwritten space, and every
// block of it that died meanwhile, out of the cleaner's reach; docs/
// decisions.md has the measurements).
//
// The rule was chosen with bench/greedy_sim.cc (docs/decisions.md). Pure logic, no locking: the owner serialises calls
// (guarded by state::PoolState::map_mu).

#include <cstdint>
#include <deque>
#include <optional>

#include "absl/container/flat_hash_map.h"

namespace ftl::gc {

enum class Slot : uint8_t { kHot = 0, kCold = 1, kGc = 2, kHotGc = 3 };
inline constexpr int kSlotCount = 4;
// Segments of these slots are hot segments.
inline bool IsHot(Slot s) { return s == Slot::kHot || s == Slot::kHotGc; }
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

  bool active() const { return active_; }
  void set_active(bool a) { active_ = a; }
  // A user write at `now` replacing `old` (nullopt: the block was not
  // mapped). Only asked while active.
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
  bool active_ = false;
};

// Tells whether the hot slot collects blocks that die sooner than the
// rest: over a window of user writes it counts the overwrites of versions
// in hot segments and in all other segments, and compares them per live
// block of each. Separation pays if hot blocks are overwritten at least
// kMinRatio times as often (in the model: 80/20 writes ~3-10, uniform ~1;
// comparing with cold user segments alone was not robust: at fill 0.9
// they hold many hot blocks too).
class SeparationMeter {
 public:
  static constexpr double kMinRatio = 2;
  static constexpr uint64_t kMinSamples = 32;

  // A user write replaced a version in a hot segment or elsewhere.
  void NoteOverwrite(bool in_hot) { ++(in_hot ? hot_ : other_); }
  // Ends the window: the verdict given the live blocks in hot and in other
  // segments now; nullopt if too few samples (they carry over to the next
  // window) or no live blocks on one side.
  std::optional<bool> EndWindow(uint64_t live_hot, uint64_t live_other);

 private:
  uint64_t hot_ = 0, other_ = 0;
};

// The SeparationMeter's inputs without hot segments: a sample of the
// blocks (1 in 2^shift by a hash of volume and LBA; at most about
// kTargetSample of them, all of a small pool's) with each one's last
// write time and class. A write of a sampled block classes the version it replaces: hot if it lived shorter than the
// mean life of the versions replaced in the previous window (before
// that, cold), and counts an overwrite of that class; live blocks per
// class are the sampled blocks per class. It asks the same question as
// the placement rule (do blocks that were overwritten young die sooner
// again?) by age alone, which needs no hot segment to be open. Trims are
// not seen: a trimmed sampled block counts as live until written again.
// Time is any counter that grows with user writes. Memory: about 40 bytes
// per sampled block.
class SampledSeparation {
 public:
  static constexpr uint64_t kTargetSample = 1 << 14;
  // Hard cap on followed blocks (several volumes share the rate).
  static constexpr size_t kMaxSampled = 4 * kTargetSample;

  // `blocks`: the logical blocks written to (sets the sample rate).
  explicit SampledSeparation(uint64_t blocks = 0);
  // A user write of block `lba` of volume `vol` at time `now`.
  void NoteWrite(uint32_t vol, uint64_t lba, uint64_t now) {
    const uint64_t h = ((uint64_t(vol) << 48) ^ lba) * 0x9E3779B97F4A7C15ull;
    if (shift_ != 0 && (h >> (64 - shift_)) != 0) return;
    NoteSampled(vol, lba, now);
  }
  // Ends a window: the SeparationMeter's verdict (nullopt: not enough
  // samples yet; they carry over).
  std::optional<bool> EndWindow();

  uint32_t shift() const { return shift_; }
  uint64_t live_hot() const { return live_hot_; }
  uint64_t live_other() const { return live_other_; }
  uint64_t threshold() const { return threshold_; }

 private:
  struct Entry {
    uint64_t written = 0;
    bool hot = false;
  };
  void NoteSampled(uint32_t vol, uint64_t lba, uint64_t now);

  uint32_t shift_;
  absl::flat_hash_map<uint64_t, Entry> sampled_;
  SeparationMeter meter_;
  uint64_t live_hot_ = 0, live_other_ = 0;
  uint64_t threshold_ = 0;  // 0: nothing measured yet (all cold)
  uint64_t age_sum_ = 0, age_n_ = 0;
};

}  // namespace ftl::gc
