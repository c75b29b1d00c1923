#include "greedy_sim.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "gc/placement.h"
#include "workload.h"

namespace ftl::bench {
namespace {

constexpr uint64_t kNone = UINT64_MAX;
using gc::Slot;

class Model {
 public:
  Model(const GreedyOptions& o, uint64_t hot_blocks)
      : o_(o),
        hot_blocks_(hot_blocks),
        separation_(o.volume_blocks),
        l2p_(o.volume_blocks, kNone),
        p2l_(uint64_t(o.segment_count) * o.segment_blocks, kNone),
        written_(p2l_.size(), 0),
        live_(o.segment_count, 0),
        opened_at_(o.segment_count, 0),
        sealed_at_(o.segment_count, 0),
        time_sum_(o.segment_count, 0),
        hot_(o.segment_count, false),
        full_(o.segment_count, false),
        sealed_ckpt_(o.segment_count, 0) {
    for (uint32_t s = o.segment_count; s-- > 0;) free_.push_back(s);
  }

  void Write(uint64_t lba) {
    // A batch of user_record_blocks writes is one record per slot.
    if (o_.user_record_blocks && user_ % o_.user_record_blocks == 0)
      rec_left_[int(Slot::kHot)] = rec_left_[int(Slot::kCold)] = 0;
    ++user_;
    if (o_.streams == Streams::kTemperature) Measure(lba);
    Slot slot = UserSlot(lba);
    hot_user_ += slot == Slot::kHot;
    active_writes_ += placement_.active();
    Place(lba, slot, user_, false);
    while (free_.size() < o_.reserve_segments) Clean();
  }

  uint64_t user() const { return user_; }
  uint64_t relocated() const { return relocated_; }
  uint64_t cleaned() const { return cleaned_; }
  uint64_t checkpoints() const { return checkpoints_; }
  uint64_t headers() const { return headers_; }
  uint64_t hot_user() const { return hot_user_; }
  uint64_t active_writes() const { return active_writes_; }
  uint64_t wasted() const { return wasted_; }

 private:
  static constexpr uint32_t kClosed = UINT32_MAX;

  uint32_t Pop() {
    // Invariant: the reserve keeps a free segment for every append (with
    // headers a victim's relocations may take two: keep at least 2).
    if (free_.empty()) {
      std::fprintf(stderr, "greedy_sim: out of free segments (reserve too small)\n");
      std::abort();
    }
    uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }

  // The engine's SampledSeparation, over windows of 16 segments of user
  // writes (commit/segment_allocator.cc).
  void Measure(uint64_t lba) {
    separation_.NoteWrite(0, lba, user_);
    if (user_ % (16 * uint64_t(o_.segment_blocks)) != 0) return;
    if (auto v = separation_.EndWindow()) placement_.set_active(*v);
  }

  bool Temperature() const {
    return o_.streams == Streams::kTemperature || o_.streams == Streams::kOracle;
  }

  Slot UserSlot(uint64_t lba) const {
    switch (o_.streams) {
      case Streams::kOne:
      case Streams::kUserGc:
        return Slot::kCold;
      case Streams::kOracle:
        return lba < hot_blocks_ ? Slot::kHot : Slot::kCold;
      case Streams::kTemperature:
        break;
    }
    std::optional<gc::OldVersion> old;
    if (uint64_t p = l2p_[lba]; p != kNone) {
      // Dated by its segment's mean data time, as the engine does.
      uint32_t s = uint32_t(p / o_.segment_blocks);
      uint32_t n = full_[s] ? o_.segment_blocks : wp_of(s);
      old = gc::OldVersion{n ? time_sum_[s] / n : user_, hot_[s]};
    }
    Slot slot = placement_.ForUserWrite(old, user_);
    if (o_.streams == Streams::kTemperature && !placement_.active()) slot = Slot::kCold;
    return slot;
  }

  Slot RelocSlot(uint64_t pba) const {
    switch (o_.streams) {
      case Streams::kOne:
        return Slot::kCold;
      case Streams::kUserGc:
        return Slot::kGc;
      case Streams::kOracle:
        return p2l_[pba] < hot_blocks_ ? Slot::kHotGc : Slot::kGc;
      case Streams::kTemperature:
        break;
    }
    return placement_.ForRelocation(hot_[pba / o_.segment_blocks], written_[pba], user_);
  }

  uint32_t wp_of(uint32_t seg) const {
    for (int k = 0; k < gc::kSlotCount; ++k)
      if (open_[k] == seg) return wp_[k];
    return o_.segment_blocks;
  }

  // Appends lba's new copy, written at `t`, to `slot` (by the cleaner if
  // `reloc`).
  void Place(uint64_t lba, Slot slot, uint64_t t, bool reloc) {
    int k = int(slot);
    if (uint64_t old = l2p_[lba]; old != kNone) {
      p2l_[old] = kNone;
      --live_[old / o_.segment_blocks];
    }
    if (o_.user_record_blocks && (rec_left_[k] == 0 || rec_reloc_[k] != reloc ||
                                  open_[k] == kClosed || wp_[k] == o_.segment_blocks)) {
      // A new record: its header (a dead block) and at least one block of
      // data must fit the open segment, or the segment is sealed.
      if (open_[k] != kClosed && wp_[k] + 2 > o_.segment_blocks) {
        wasted_ += o_.segment_blocks - wp_[k];
        wp_[k] = o_.segment_blocks;
      }
      OpenRoom(k);
      ++wp_[k];
      ++headers_;
      rec_left_[k] = reloc ? o_.reloc_record_blocks : o_.user_record_blocks;
      rec_reloc_[k] = reloc;
    }
    if (rec_left_[k] > 0) --rec_left_[k];
    OpenRoom(k);
    uint32_t s = open_[k];
    uint64_t pba = uint64_t(s) * o_.segment_blocks + wp_[k]++;
    l2p_[lba] = pba;
    p2l_[pba] = lba;
    written_[pba] = t;
    time_sum_[s] += t;
    ++live_[s];
  }

  // Seals slot k's segment if full and opens a new one if none is open.
  void OpenRoom(int k) {
    if (open_[k] != kClosed && wp_[k] == o_.segment_blocks) {
      full_[open_[k]] = true;
      sealed_at_[open_[k]] = user_;
      sealed_ckpt_[open_[k]] = checkpoints_;
      open_[k] = kClosed;
      if (o_.checkpoint_segments && ++sealed_since_ckpt_ >= o_.checkpoint_segments) Checkpoint();
    }
    if (open_[k] == kClosed) {
      uint32_t s = open_[k] = Pop();
      wp_[k] = 0;
      opened_at_[s] = user_;
      time_sum_[s] = 0;
      hot_[s] = gc::IsHot(Slot(k)) && Temperature();
    }
  }

  double Score(uint32_t s) const {
    if (o_.policy == VictimPolicy::kGreedy) return -double(live_[s]);
    double u = double(live_[s]) / o_.segment_blocks;
    if (live_[s] == 0) return 1e300;
    return (1 - u) * double(user_ - sealed_at_[s] + 1) / (1 + u);
  }

  void Checkpoint() {
    ++checkpoints_;
    sealed_since_ckpt_ = 0;
  }

  // Best victim, among the segments the gate lets through (all if
  // `gated` is false).
  uint32_t PickVictim(bool gated, double* score_out) const {
    uint32_t victim = UINT32_MAX;
    double best = 0;
    for (uint32_t s = 0; s < o_.segment_count; ++s) {
      if (!full_[s] || live_[s] == o_.segment_blocks) continue;
      // With headers, cleaning must free more than its records take.
      if (o_.reloc_record_blocks &&
          live_[s] + live_[s] / o_.reloc_record_blocks + 2 > o_.segment_blocks)
        continue;
      if (gated && sealed_ckpt_[s] + 2 > checkpoints_) continue;
      double score = Score(s);
      if (victim == UINT32_MAX || score > best) {
        victim = s;
        best = score;
      }
    }
    *score_out = best;
    return victim;
  }

  void Clean() {
    double best = 0;
    uint32_t victim = PickVictim(o_.checkpoint_segments > 0, &best);
    if (o_.checkpoint_segments > 0) {
      double best_any = 0;
      uint32_t any = PickVictim(false, &best_any);
      // Scores are "higher is better"; greedy's are negative live counts.
      bool better = victim == UINT32_MAX ||
                    (o_.policy == VictimPolicy::kGreedy ? live_[any] * 2 < live_[victim]
                                                        : best_any > 2 * best);
      if (any != victim && better) {
        Checkpoint();
        Checkpoint();
        victim = any;
      }
    }
    assert(victim != UINT32_MAX);
    full_[victim] = false;
    // Each victim's relocations start new records.
    for (int k = 0; k < gc::kSlotCount; ++k)
      if (rec_reloc_[k]) rec_left_[k] = 0;
    if (hot_[victim]) placement_.HotSegmentReclaimed(user_ - opened_at_[victim]);
    uint64_t first = uint64_t(victim) * o_.segment_blocks;
    for (uint64_t p = first; p < first + o_.segment_blocks; ++p) {
      if (p2l_[p] == kNone) continue;
      ++relocated_;
      Place(p2l_[p], RelocSlot(p), written_[p], true);
    }
    free_.push_back(victim);
    ++cleaned_;
  }

  const GreedyOptions& o_;
  const uint64_t hot_blocks_;
  gc::Placement placement_;
  gc::SampledSeparation separation_;
  std::vector<uint64_t> l2p_, p2l_;
  std::vector<uint64_t> written_;  // per PBA: user write count when written
  std::vector<uint32_t> live_;
  std::vector<uint64_t> opened_at_, sealed_at_;  // user writes at open / seal
  std::vector<uint64_t> time_sum_;               // sum of written_ per segment
  std::vector<bool> hot_;                        // written through the hot slot
  std::vector<bool> full_;
  std::vector<uint64_t> sealed_ckpt_;  // checkpoints taken before it was sealed
  uint64_t checkpoints_ = 0;
  uint32_t sealed_since_ckpt_ = 0;
  std::vector<uint32_t> free_;
  uint32_t open_[gc::kSlotCount] = {kClosed, kClosed, kClosed, kClosed};
  uint32_t wp_[gc::kSlotCount] = {0, 0, 0, 0};
  uint32_t rec_left_[gc::kSlotCount] = {0, 0, 0, 0};  // blocks the open record still takes
  bool rec_reloc_[gc::kSlotCount] = {false, false, false, false};  // it is the cleaner's
  uint64_t user_ = 0, relocated_ = 0, cleaned_ = 0, headers_ = 0, wasted_ = 0;
  uint64_t hot_user_ = 0, active_writes_ = 0;
};

}  // namespace

GreedyResult RunGreedy(const GreedyOptions& opts) {
  LbaPicker pick(opts.volume_blocks, opts.workload, opts.seed);
  Model m(opts, pick.hot_blocks());
  for (uint64_t lba = 0; lba < opts.volume_blocks; ++lba) m.Write(lba);
  auto n_warm = uint64_t(opts.warmup * double(opts.volume_blocks));
  for (uint64_t i = 0; i < n_warm; ++i) m.Write(pick.Next());
  uint64_t u0 = m.user(), r0 = m.relocated(), c0 = m.cleaned(), k0 = m.checkpoints(),
           h0 = m.headers(), w0 = m.wasted(), hu0 = m.hot_user(), a0 = m.active_writes();
  auto n_meas = uint64_t(opts.measure * double(opts.volume_blocks));
  for (uint64_t i = 0; i < n_meas; ++i) m.Write(pick.Next());
  return {m.user() - u0,        m.relocated() - r0, m.cleaned() - c0,
          m.checkpoints() - k0, m.headers() - h0,   m.wasted() - w0,
          m.hot_user() - hu0,   m.active_writes() - a0};
}

double FluidGreedyWa(double u) {
  // (1 - x) / -ln(x) rises from 0 to 1 as x goes from 0 to 1: bisect.
  double lo = 1e-12, hi = 1 - 1e-12;
  for (int i = 0; i < 64; ++i) {
    const double x = (lo + hi) / 2;
    if ((1 - x) / -std::log(x) < u) {
      lo = x;
    } else {
      hi = x;
    }
  }
  return 1 / (1 - lo);
}

double FluidTwoClassWa(const Workload& w, double fill, double* hot_space) {
  const double hot_live = fill * w.hot_lba_fraction, cold_live = fill - hot_live;
  double best = 0, best_h = 0;
  // h: the hot region's share of the space; each region must hold its data.
  for (int k = 1; k < 10000; ++k) {
    const double h = k / 10000.0;
    if (hot_live >= h || cold_live >= 1 - h) continue;
    const double wa = w.hot_write_fraction * FluidGreedyWa(hot_live / h) +
                      (1 - w.hot_write_fraction) * FluidGreedyWa(cold_live / (1 - h));
    if (best == 0 || wa < best) best = wa, best_h = h;
  }
  if (hot_space) *hot_space = best_h;
  return best;
}

}  // namespace ftl::bench
