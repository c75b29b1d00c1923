#pragma once
// LBA generators shared by the engine benchmarks and the greedy model.

#include <cstdint>
#include <random>

#include "greedy_sim.h"

namespace ftl::bench {

// Uniform, or hot/cold: hot_write_fraction of the picks land in the lowest
// hot_lba_fraction of [0, blocks), the rest in the other LBAs.
class LbaPicker {
 public:
  LbaPicker(uint64_t blocks, const Workload& w, uint64_t seed)
      : blocks_(blocks),
        hot_p_(w.hot_write_fraction),
        hot_blocks_(w.hot_write_fraction > 0
                        ? std::max<uint64_t>(1, uint64_t(double(blocks) * w.hot_lba_fraction))
                        : 0),
        rng_(seed) {}

  // The hot set is [0, hot_blocks()).
  uint64_t hot_blocks() const { return hot_blocks_; }

  uint64_t Next() {
    if (hot_blocks_ == 0) return Below(blocks_);
    if (Unit() < hot_p_) return Below(hot_blocks_);
    return hot_blocks_ + Below(blocks_ - hot_blocks_);
  }

 private:
  uint64_t Below(uint64_t n) { return uint64_t((unsigned __int128)rng_() * n >> 64); }
  double Unit() { return double(rng_() >> 11) * 0x1.0p-53; }

  uint64_t blocks_;
  double hot_p_;
  uint64_t hot_blocks_;
  std::mt19937_64 rng_;
};

}  // namespace ftl::bench
