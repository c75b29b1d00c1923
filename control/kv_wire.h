#pragma once
// How keys and values of key-value datasets travel in the control
// protocol's JSON, as both ends compile it (the daemon's "kv" handlers and
// ftlctl). Header-only.
//
// JSON strings are UTF-8 text, keys and values are any bytes. A byte string
// is sent as field F (a JSON string) when it is valid UTF-8, else as F_b64
// (base64, RFC 4648, with padding); a message holds at most one of the two.
// Readers accept either; both at once, a non-string, or base64 that does
// not decode is InvalidArgument naming the field.
//
// Owns nothing; every function is pure and safe from any thread.

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "control/control_protocol.h"

namespace ftl::control {

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points
// past U+10FFFF), which is what a JSON string may carry.
inline bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      unsigned char b = static_cast<unsigned char>(s[i + k]);
      unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (b < l || b > h) return false;
    }
    i += n + 1;
  }
  return true;
}

// Sets `field` (UTF-8) or `field`_b64 of `obj` to `bytes`.
inline void PutBytes(nlohmann::json& obj, const std::string& field, std::string_view bytes) {
  if (IsUtf8(bytes)) {
    obj[field] = std::string(bytes);
  } else {
    obj[field + kBase64Suffix] = absl::Base64Escape(absl::string_view(bytes.data(), bytes.size()));
  }
}

// The bytes in `field` or `field`_b64 of `obj`; nullopt if neither is there
// (or the one there is null).
inline absl::StatusOr<std::optional<std::string>> GetBytes(const nlohmann::json& obj,
                                                           const std::string& field) {
  std::string b64_field = field + kBase64Suffix;
  auto text = obj.find(field);
  auto b64 = obj.find(b64_field);
  bool has_text = text != obj.end() && !text->is_null();
  bool has_b64 = b64 != obj.end() && !b64->is_null();
  if (has_text && has_b64) {
    return absl::InvalidArgumentError(
        absl::StrCat("give \"", field, "\" or \"", b64_field, "\", not both"));
  }
  if (has_text) {
    if (!text->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" must be a string"));
    }
    return std::optional<std::string>(text->get<std::string>());
  }
  if (has_b64) {
    if (!b64->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", b64_field, "\" must be a base64 string"));
    }
    const std::string& in = b64->get_ref<const std::string&>();
    std::string out;
    // Padded base64 only: absl would also take unpadded input; anything
    // outside the alphabet (whitespace, '-', '_') is refused.
    if (in.size() % 4 != 0 ||
        in.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") !=
            std::string::npos ||
        !absl::Base64Unescape(in, &out)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", b64_field, "\" is not valid base64"));
    }
    return std::optional<std::string>(std::move(out));
  }
  return std::optional<std::string>();
}

}  // namespace ftl::control
