#include "util/size_parse.h"

#include <cctype>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ftl::util {

absl::StatusOr<uint64_t> ParseSize(std::string_view text_in) {
  // Debian's abseil does not alias absl::string_view to std::string_view.
  absl::string_view text(text_in.data(), text_in.size());
  std::string s = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (s.ends_with("IB")) s.resize(s.size() - 2);
  else if (s.size() > 1 && s.ends_with("B") && !std::isdigit(s[s.size() - 2]))
    s.resize(s.size() - 1);
  else if (s.ends_with("B") && s.size() > 1) s.resize(s.size() - 1);
  int shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      case 'P': shift = 50; break;
      default: break;
    }
    if (shift) s.pop_back();
  }
  uint64_t n = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "' (expected e.g. 4096, 64K, 8M, 2G)"));
  }
  if (shift && n > (UINT64_MAX >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat("size '", text, "' too large"));
  }
  return n << shift;
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace ftl::util
