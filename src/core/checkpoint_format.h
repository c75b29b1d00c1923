#pragma once
// Checkpoint format: a serialised MapState, written into one of the two
// checkpoint slots (log_format.h) and named by the superblock's slot_info.
// Grammar (little-endian):
//
//   checkpoint := magic u64 "FTLDCKPT" | version u32 | uuid 16B | next_seq u64
//                 | body_len u64 | body_xxh3 u64 | body
//   body       := segments vbas csums nodes volumes
//   segments   := count u32 | (state u8 | stream u8 | write_ptr u32
//                 | max_seq u64 | sealed_seq u64){count}
//   vbas       := count u32 | (pba u32 | refs u32){count}
//   csums      := count u32 | u32{count}            (per physical block)
//   nodes      := count u32 | node{count}           (children before parents)
//   node       := kind u8 (0 leaf, 1 inner) | n u16
//                 | leaf: (lba u32 | len u32 | vba u32){n}
//                 | inner: (key u32 | child_index u32){n}
//   volumes    := count u32 | (id u32 | name string | size_blocks u64
//                 | root i32 (-1 empty) | mapped_blocks u64){count}
//
// Nodes shared by several trees are written once, so a checkpoint is
// proportional to distinct nodes. Validity bitmaps and live counts are not
// stored: loading derives them from the VBA table.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/map_state.h"
#include "log/log_format.h"

namespace ftl::core {

inline constexpr uint64_t kCheckpointMagic = 0x54504b43444c5446ull;  // "FTLDCKPT"
inline constexpr uint32_t kCheckpointVersion = 1;

// Serialises `state` as of `next_seq` (the first seq not covered).
std::vector<std::byte> EncodeCheckpoint(const MapState& state, const log::Uuid& uuid,
                                        uint64_t next_seq);

struct LoadedCheckpoint {
  uint64_t next_seq = 0;
};
// Rebuilds `state` (which must be freshly constructed with the pool's
// geometry) from a checkpoint. DataLoss on any inconsistency.
absl::StatusOr<LoadedCheckpoint> DecodeCheckpoint(std::span<const std::byte> bytes,
                                                  const log::Uuid& uuid, MapState* state);

}  // namespace ftl::core
