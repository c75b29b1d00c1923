#include "util/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ftl::util {

#if defined(__x86_64__)
// checksum_avx2.cc: the same hash built for AVX2.
uint64_t Xxh3Avx2(const void* data, size_t len);

namespace {
bool HaveAvx2() {
  __builtin_cpu_init();  // may run before libgcc's own constructor does
  return __builtin_cpu_supports("avx2");
}
}  // namespace
#endif

uint64_t Xxh3(std::span<const std::byte> data) {
#if defined(__x86_64__)
  // Inputs that reach xxh3's vector loop (blocks, pages) take the AVX2 build
  // where the CPU has it: 1.6-1.8x the baseline SSE2 build's speed on a
  // 4 KiB block (docs/decisions.md "xxh3 runs its AVX2 build"). The hash is
  // the same.
  static const bool avx2 = HaveAvx2();
  if (data.size() > 240 && avx2) return Xxh3Avx2(data.data(), data.size());
#endif
  return XXH3_64bits(data.data(), data.size());
}

}  // namespace ftl::util
