// xxh3 built with -mavx2 (util/CMakeLists.txt), called by checksum.cc only
// when the CPU has AVX2. Nothing else may live here: any inline function
// this file instantiated (a std:: template, say) could be the copy the
// linker keeps for the whole program, and would then need AVX2 everywhere.
// XXH_INLINE_ALL makes every xxhash function static to this file.

#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace ftl::util {

uint64_t Xxh3Avx2(const void* data, size_t len) { return XXH3_64bits(data, len); }

}  // namespace ftl::util
