#pragma once
// Helpers shared by the engine tests.

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "ftl/pool.h"
#include "log/log_format.h"
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

// The byte offset (in what `read` reads: a media or a file) of the header
// of the newest record whose first op writes block `lba` of volume `vol`:
// a block header, or a sector header inside an earlier header block
// (log/log_format.h, "Sector chains"). UINT64_MAX if none. `read(off, out)`
// fills `out` from byte `off` and returns false past the end.
inline uint64_t FindWriteHeader(const std::function<bool(uint64_t, std::span<std::byte>)>& read, uint32_t vol,
                                uint64_t lba) {
  std::vector<std::byte> block(log::kBlock);
  uint64_t best = UINT64_MAX, best_seq = 0;
  for (uint64_t off = 0; read(off, block); off += log::kBlock) {
    for (uint32_t k = 0; k < log::kSectorsPerBlock; ++k) {
      std::span<const std::byte> at = std::span<const std::byte>(block).subspan(size_t(k) * log::kSectorBytes);
      if (k > 0) at = at.first(log::kSectorBytes);
      auto h = log::DecodeRecordHeader(at);
      if (!h.ok() || h->ops.empty() || h->ops[0].type != log::OpType::kWrite) continue;
      if (h->ops[0].write.vol == vol && h->ops[0].write.lba == lba && h->seq >= best_seq) {
        best = off + uint64_t(k) * log::kSectorBytes;
        best_seq = h->seq;
      }
    }
  }
  return best;
}

// The same over a FaultMedia.
inline uint64_t FindWriteHeader(media::FaultMedia& m, uint32_t vol, uint64_t lba) {
  return FindWriteHeader(
      [&m](uint64_t off, std::span<std::byte> out) { return off + out.size() <= m.size() && m.Read(off, out).ok(); },
      vol, lba);
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
