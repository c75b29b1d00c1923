#pragma once
// Parses human sizes: "4096", "64K", "8M", "2G", "1T" (binary units, case
// insensitive, optional trailing "iB"/"B").

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ftl::util {

absl::StatusOr<uint64_t> ParseSize(std::string_view text);
// "4.0 GiB", "512 B": for human output.
std::string FormatSize(uint64_t bytes);

}  // namespace ftl::util
