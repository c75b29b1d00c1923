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
//                 | leaf: (lba_gap varint | len varint | vba_delta svarint){n}
//                 | inner: (key_delta svarint | child_back varint){n}
//                 lba_gap = lba - end of the previous extent (0 first);
//                 vba_delta = vba - (previous vba + previous len);
//                 key_delta = key - previous key; child index = this
//                 node's index - child_back. varint = LEB128, svarint =
//                 zigzag LEB128. (Version 1: fixed u32 fields.)
//   volumes    := count u32 | volume{count} | next_tree_id u32
//   volume     := id u32 | name string | size_blocks u64
//                 | root i32 (-1 empty) | mapped_blocks u64
//                 | kind u8 (0 volume, 1 snapshot) | read_only u8
//                 | origin u32 | origin_name string | parent u32
//                 | created_ns u64 | seq u64
//                 | attr_count u32 | (lba u32 | count u32 | bits u8){attr_count}
//                 | dataset u8 (ftl::DatasetKind: 0 block, 1 key-value)
//
// Version 1 (format version 1) lacks everything after mapped_blocks and
// next_tree_id, version 2 (format versions 2-4) the dataset kind (every
// tree a block volume); both still load.
// Nodes shared by several trees are written once, so a checkpoint is
// proportional to distinct nodes. Validity bitmaps and live counts are not
// stored: loading derives them from the VBA table.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "state/map_state.h"
#include "log/log_format.h"

namespace ftl::checkpoint {

using state::MapState;

inline constexpr uint64_t kCheckpointMagic = 0x54504b43444c5446ull;  // "FTLDCKPT"
inline constexpr uint32_t kCheckpointVersion = 3;

// Serialises `state` as of `next_seq` (the first seq not covered).
std::vector<std::byte> EncodeCheckpoint(const MapState& state, const log::Uuid& uuid,
                                        uint64_t next_seq);
// The same into *out (cleared first): a caller that keeps `out` between
// checkpoints reuses its memory (no page faults on a map-sized buffer).
void EncodeCheckpointInto(const MapState& state, const log::Uuid& uuid, uint64_t next_seq,
                          std::vector<std::byte>* out);

struct LoadedCheckpoint {
  uint64_t next_seq = 0;
};
// Rebuilds `state` (which must be freshly constructed with the pool's
// geometry) from a checkpoint. DataLoss on any inconsistency.
absl::StatusOr<LoadedCheckpoint> DecodeCheckpoint(std::span<const std::byte> bytes,
                                                  const log::Uuid& uuid, MapState* state);

}  // namespace ftl::checkpoint
