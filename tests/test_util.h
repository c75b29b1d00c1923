#pragma once
// Helpers shared by the engine tests.

#include <cstdint>
#include <random>
#include <vector>

#include "ftl/pool.h"

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
  return o;
}

}  // namespace ftl::testing
