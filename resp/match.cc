#include "resp/match.h"

#include <utility>

namespace ftl::resp {
namespace {

// Whether pattern element at p[*i] matches byte c; advances *i past it.
bool MatchOne(std::string_view p, size_t* i, unsigned char c) {
  char head = p[*i];
  if (head == '?') {
    ++*i;
    return true;
  }
  if (head == '\\' && *i + 1 < p.size()) {
    bool ok = static_cast<unsigned char>(p[*i + 1]) == c;
    *i += 2;
    return ok;
  }
  if (head != '[') {
    ++*i;
    return static_cast<unsigned char>(head) == c;
  }
  size_t j = *i + 1;
  bool negate = j < p.size() && p[j] == '^';
  if (negate) ++j;
  bool hit = false;
  while (j < p.size() && p[j] != ']') {
    if (p[j] == '\\' && j + 1 < p.size()) {
      hit |= static_cast<unsigned char>(p[j + 1]) == c;
      j += 2;
    } else if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      unsigned char lo = p[j], hi = p[j + 2];
      if (lo > hi) std::swap(lo, hi);
      hit |= c >= lo && c <= hi;
      j += 3;
    } else {
      hit |= static_cast<unsigned char>(p[j]) == c;
      ++j;
    }
  }
  *i = j < p.size() ? j + 1 : j;  // an unclosed set runs to the end
  return hit != negate;
}

}  // namespace

bool GlobMatch(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0;
  size_t star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      while (pi < p.size() && p[pi] == '*') ++pi;
      if (pi == p.size()) return true;
      star = pi;
      mark = si;
      continue;
    }
    size_t next = pi;
    if (pi < p.size() && MatchOne(p, &next, static_cast<unsigned char>(s[si]))) {
      pi = next;
      ++si;
      continue;
    }
    if (star == std::string_view::npos) return false;
    pi = star;
    si = ++mark;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string LiteralPrefix(std::string_view pattern) {
  size_t n = pattern.find_first_of("*?[\\");
  return std::string(pattern.substr(0, n));
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) != 0xff) {
      end.back() = char(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return end;
}

}  // namespace ftl::resp
