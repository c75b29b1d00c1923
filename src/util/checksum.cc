#include "util/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ftl::util {

uint64_t Xxh3(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

}  // namespace ftl::util
