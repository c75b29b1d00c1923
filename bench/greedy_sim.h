#pragma once
// A tiny reference model of a log-structured store with a plain greedy
// cleaner, used to put ftld's measured write amplification in context
// (issue 2: "uniform no worse than greedy"). It is pure in-memory counters:
// by default one append stream shared by user writes and relocations (no
// hot/cold separation), no record headers (an option adds the engine's), no
// checkpoints, victim = full segment
// with the fewest live blocks. Options turn it into a model of ftld's own
// policy (cost-benefit victims, a separate relocation stream or ftld's
// temperature placement, a larger free reserve) to tell policy effects from
// implementation ones. The clock is the count of user writes.
// Single-threaded; not part of the engine.

#include <cstdint>

namespace ftl::bench {

struct Workload {
  // Fraction of writes that go to the hot set (0 = uniform).
  double hot_write_fraction = 0;
  // Fraction of the LBAs forming the hot set (the lowest LBAs).
  double hot_lba_fraction = 0;
};

enum class VictimPolicy {
  kGreedy,       // fewest live blocks
  kCostBenefit,  // gc/victim_policy.h: max (1 - u) * age / (1 + u)
};

enum class Streams {
  kOne,          // user writes and relocations share one open segment
  kUserGc,       // relocations in their own open segment
  kTemperature,  // gc/placement.h with its SeparationMeter: hot / cold
                 // user / relocation / hot relocation slots; batches of 32
                 // user writes for the passive probe (as wa_bench writes)
  kOracle,       // hot / cold user / relocation / hot relocation slots by
                 // each block's true class (the workload's hot set): the
                 // best any two-class placement can do
};

struct GreedyOptions {
  uint32_t segment_count = 0;
  uint32_t segment_blocks = 0;
  uint64_t volume_blocks = 0;
  // Free segments kept in reserve for relocation (1 is the minimum).
  uint32_t reserve_segments = 1;
  VictimPolicy policy = VictimPolicy::kGreedy;
  Streams streams = Streams::kOne;
  // ftld's checkpoint gate (gc/victim_policy.h): a checkpoint after every
  // `checkpoint_segments` sealed segments (0: no gate), and a segment may be
  // cleaned only once two checkpoints were taken after it was sealed; when
  // the gate hides a victim twice as good as the best eligible one, two
  // checkpoints are taken at once (as ftld's cleaner does).
  uint32_t checkpoint_segments = 0;
  // Record headers as the engine writes them (0: none): one header block
  // before every `user_record_blocks` user writes and before every
  // `reloc_record_blocks` relocated blocks of a victim per slot; a record
  // never spans segments (the tail that does not fit stays unused).
  uint32_t user_record_blocks = 0;
  uint32_t reloc_record_blocks = 0;
  Workload workload;
  // Random overwrites after the sequential fill, in volume sizes: `warmup`
  // are not counted, `measure` are.
  double warmup = 2;
  double measure = 4;
  uint64_t seed = 1;
};

struct GreedyResult {
  uint64_t user_blocks = 0;      // measured phase only
  uint64_t relocated_blocks = 0;
  uint64_t segments_cleaned = 0;
  uint64_t checkpoints = 0;
  uint64_t header_blocks = 0;    // with user_record_blocks > 0
  uint64_t wasted_blocks = 0;    // segment tails no record fitted into
  uint64_t hot_user_blocks = 0;  // user writes to the hot slot
  uint64_t active_writes = 0;    // user writes while placement was active
  double write_amplification() const {
    return user_blocks ? double(user_blocks + relocated_blocks + header_blocks) / double(user_blocks)
                       : 0;
  }
};

// Runs the model. REQUIRES: volume_blocks fits the segments minus the
// reserve and the open segments.
GreedyResult RunGreedy(const GreedyOptions& opts);

// The fluid limit of the model above (infinitely many, infinitely large
// segments, no reserve, no headers): uniform overwrites of a region whose
// live data fills a fraction u of its space. Every segment then decays
// alike, so greedy cleans the oldest: the victim's live fraction x solves
// u = (1 - x) / -ln(x), and write amplification is 1 / (1 - x).
// REQUIRES: 0 < u < 1.
double FluidGreedyWa(double u);

// The same limit for a hot/cold workload with the two classes perfectly
// separated, each in its own region, and the space split between the
// regions in the best way (searched): the least write amplification any
// two-class placement with a greedy cleaner can reach on `fill` (live data
// / space). *hot_space gets the hot region's share of the space.
double FluidTwoClassWa(const Workload& w, double fill, double* hot_space = nullptr);

}  // namespace ftl::bench
