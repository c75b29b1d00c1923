#pragma once
// Human sizes as ftld, ftlctl and ftl-tool read and print them. Parsing
// takes "4096", "64K", "8M", "2G", "1T", "1P" (binary units, case
// insensitive, an optional trailing "iB" or "B", surrounding blanks
// ignored); anything else, or a value over 2^64 - 1, is InvalidArgument
// with a message that quotes the text.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ftl {

absl::StatusOr<uint64_t> ParseSize(std::string_view text);
// "4.0 GiB", "512 B": one decimal in the largest unit that fits, for people.
std::string FormatSize(uint64_t bytes);

}  // namespace ftl
