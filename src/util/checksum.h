#pragma once
// xxh3 checksums for on-media structures and data blocks. On x86-64 CPUs
// with AVX2, inputs over 240 bytes are hashed by xxh3's AVX2 build
// (checksum_avx2.cc), chosen once at first use; the values are the same.
// Thread safety: pure functions, callable from any thread.

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
