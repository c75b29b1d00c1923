#include "greedy_sim.h"

#include <cassert>
#include <vector>

#include "workload.h"

namespace ftl::bench {
namespace {

constexpr uint64_t kNone = UINT64_MAX;

class Model {
 public:
  explicit Model(const GreedyOptions& o)
      : o_(o),
        l2p_(o.volume_blocks, kNone),
        p2l_(uint64_t(o.segment_count) * o.segment_blocks, kNone),
        live_(o.segment_count, 0),
        sealed_at_(o.segment_count, 0),
        full_(o.segment_count, false) {
    for (uint32_t s = o.segment_count; s-- > 0;) free_.push_back(s);
    open_[0] = Pop();
    if (o.separate_relocation) open_[1] = Pop();
  }

  void Write(uint64_t lba) {
    ++user_;
    Place(lba, 0);
    while (free_.size() < o_.reserve_segments) Clean();
  }

  uint64_t user() const { return user_; }
  uint64_t relocated() const { return relocated_; }
  uint64_t cleaned() const { return cleaned_; }

 private:
  uint32_t Pop() {
    // Invariant: the reserve keeps a free segment for every append.
    assert(!free_.empty());
    uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }

  // Appends lba's new copy to stream `st` (0 user, 1 relocation).
  void Place(uint64_t lba, int st) {
    if (!o_.separate_relocation) st = 0;
    if (uint64_t old = l2p_[lba]; old != kNone) {
      p2l_[old] = kNone;
      --live_[old / o_.segment_blocks];
    }
    if (wp_[st] == o_.segment_blocks) {
      full_[open_[st]] = true;
      sealed_at_[open_[st]] = user_;
      open_[st] = Pop();
      wp_[st] = 0;
    }
    uint64_t pba = uint64_t(open_[st]) * o_.segment_blocks + wp_[st]++;
    l2p_[lba] = pba;
    p2l_[pba] = lba;
    ++live_[open_[st]];
  }

  double Score(uint32_t s) const {
    if (o_.policy == VictimPolicy::kGreedy) return -double(live_[s]);
    double u = double(live_[s]) / o_.segment_blocks;
    if (live_[s] == 0) return 1e300;
    return (1 - u) * double(user_ - sealed_at_[s] + 1) / (1 + u);
  }

  void Clean() {
    uint32_t victim = UINT32_MAX;
    double best = 0;
    for (uint32_t s = 0; s < o_.segment_count; ++s) {
      if (!full_[s] || live_[s] == o_.segment_blocks) continue;
      double score = Score(s);
      if (victim == UINT32_MAX || score > best) {
        victim = s;
        best = score;
      }
    }
    assert(victim != UINT32_MAX);
    full_[victim] = false;
    uint64_t first = uint64_t(victim) * o_.segment_blocks;
    for (uint64_t p = first; p < first + o_.segment_blocks; ++p) {
      if (p2l_[p] == kNone) continue;
      ++relocated_;
      Place(p2l_[p], 1);
    }
    free_.push_back(victim);
    ++cleaned_;
  }

  const GreedyOptions& o_;
  std::vector<uint64_t> l2p_, p2l_;
  std::vector<uint32_t> live_;
  std::vector<uint64_t> sealed_at_;  // user writes when the segment filled
  std::vector<bool> full_;
  std::vector<uint32_t> free_;
  uint32_t open_[2] = {0, 0};
  uint32_t wp_[2] = {0, 0};
  uint64_t user_ = 0, relocated_ = 0, cleaned_ = 0;
};

}  // namespace

GreedyResult RunGreedy(const GreedyOptions& opts) {
  Model m(opts);
  for (uint64_t lba = 0; lba < opts.volume_blocks; ++lba) m.Write(lba);
  LbaPicker pick(opts.volume_blocks, opts.workload, opts.seed);
  auto n_warm = uint64_t(opts.warmup * double(opts.volume_blocks));
  for (uint64_t i = 0; i < n_warm; ++i) m.Write(pick.Next());
  uint64_t u0 = m.user(), r0 = m.relocated(), c0 = m.cleaned();
  auto n_meas = uint64_t(opts.measure * double(opts.volume_blocks));
  for (uint64_t i = 0; i < n_meas; ++i) m.Write(pick.Next());
  return {m.user() - u0, m.relocated() - r0, m.cleaned() - c0};
}

}  // namespace ftl::bench
