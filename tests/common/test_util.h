#pragma once
// Helpers shared by the engine tests.

#include <cstdint>
#include <random>
#include <vector>

#include "ftl/pool.h"
#include "media/fault_media.h"

namespace ftl::testing {

// Bytes derived from (tag, offset) so that any block's content names where
// and by which write it was written.
inline std::vector<std::byte> Pattern(uint64_t tag, uint64_t offset, size_t len) {
  std::vector<std::byte> out(len);
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = (tag * 0x9E3779B97F4A7C15ull) ^ ((offset + i) * 0xC2B2AE3D27D4EB4Full);
    v ^= v >> 29;
    for (size_t k = 0; k < 8 && i + k < len; ++k) out[i + k] = std::byte(v >> (8 * k));
  }
  return out;
}

inline FormatOptions SmallFormat(uint64_t segment_bytes = 256 << 10) {
  FormatOptions f;
  f.segment_bytes = segment_bytes;
  return f;
}

inline OpenOptions QuietOpen(bool cleaner = true) {
  OpenOptions o;
  o.start_cleaner = cleaner;
  o.checkpoint_interval = std::chrono::milliseconds(0);
  // The proof of a flush is written before its answer, so a test's media
  // writes and syncs happen where it issues them; tests of the deferred
  // proof (the default) set it back.
  o.proof_delay = std::chrono::milliseconds(0);
  return o;
}

// A random crash plan: drop every unsynced write, keep a random prefix of
// them, or keep a random subset; half the time the next write is torn.
inline media::CrashPlan RandomCrashPlan(std::mt19937_64& rng, size_t unsynced_writes) {
  media::CrashPlan plan;
  plan.seed = rng();
  plan.tear_next = rng() % 2;
  switch (rng() % 3) {
    case 0: plan.mode = media::CrashPlan::Mode::kDropAll; break;
    case 1:
      plan.mode = media::CrashPlan::Mode::kKeepPrefix;
      plan.keep_count = unsynced_writes ? rng() % (unsynced_writes + 1) : 0;
      break;
    default: plan.mode = media::CrashPlan::Mode::kKeepRandom; break;
  }
  return plan;
}

}  // namespace ftl::testing
