#pragma once
// xxh3 checksums for on-media structures and data blocks.

#include <cstddef>
#include <cstdint>
#include <span>

namespace ftl::util {

uint64_t Xxh3(std::span<const std::byte> data);
// 32-bit block checksum (low half of xxh3-64) stored per data block.
inline uint32_t BlockChecksum(std::span<const std::byte> block) {
  return uint32_t(Xxh3(block));
}

}  // namespace ftl::util
