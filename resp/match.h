#pragma once
// Glob-style patterns as Redis's KEYS and SCAN MATCH take them:
//   *  any run of bytes      ?  one byte       \x  the byte x
//   [abc] [a-z] [^a-z]  one byte of (not of) a set; \ escapes inside
// Matching is bytewise and case-sensitive, without recursion (one
// backtrack point), so no pattern can exhaust the stack.
// Thread safety: pure functions.

#include <string>
#include <string_view>

namespace ftl::resp {

bool GlobMatch(std::string_view pattern, std::string_view s);

// The bytes every match of `pattern` starts with (up to its first *, ?, [
// or \): SCAN and KEYS read only the keys in that prefix's range.
std::string LiteralPrefix(std::string_view pattern);
// The smallest key after every key that starts with `prefix`; "" if there
// is none (the prefix is all 0xff bytes, or empty).
std::string PrefixEnd(std::string_view prefix);

}  // namespace ftl::resp
