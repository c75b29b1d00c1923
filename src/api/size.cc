// include/ftl/size.h: the engine's own parser (src/util/size_parse.h),
// under its public name.

#include "ftl/size.h"

#include "util/size_parse.h"

namespace ftl {

absl::StatusOr<uint64_t> ParseSize(std::string_view text) { return util::ParseSize(text); }

std::string FormatSize(uint64_t bytes) { return util::FormatSize(bytes); }

}  // namespace ftl
