#include "map/attr_map.h"

namespace ftl::map {

void AttrMap::Apply(Bno lba, Bno count, uint8_t set, uint8_t clear) {
  if (count == 0) return;
  const uint64_t lo = lba, hi = uint64_t(lba) + count;
  // Cut the pieces overlapping [lo, hi) out, remembering their bits.
  std::vector<std::pair<uint64_t, std::pair<uint64_t, uint8_t>>> cut;  // start, (end, bits)
  auto it = ranges_.lower_bound(lba);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > lo) it = prev;
  }
  while (it != ranges_.end() && it->first < hi) {
    cut.push_back({it->first, {it->second.end, it->second.bits}});
    it = ranges_.erase(it);
  }
  auto put = [&](uint64_t a, uint64_t b, uint8_t bits) {
    if (a < b && bits != 0) ranges_[Bno(a)] = {Bno(b), bits};
  };
  // Outside parts keep their bits; inside is rebuilt piecewise.
  uint64_t at = lo;
  for (auto& [s, eb] : cut) {
    auto [e, bits] = eb;
    put(s, std::min<uint64_t>(e, lo), bits);  // left remainder
    put(std::max<uint64_t>(s, hi), e, bits);  // right remainder
    uint64_t a = std::max<uint64_t>(s, lo), b = std::min<uint64_t>(e, hi);
    put(at, a, set);                           // gap before this piece
    put(a, b, uint8_t((bits | set) & ~clear));
    at = b;
  }
  put(at, hi, set);
  // Coalesce neighbours with equal bits around the changed range.
  auto first = ranges_.lower_bound(lba);
  if (first != ranges_.begin()) --first;
  while (first != ranges_.end()) {
    auto next = std::next(first);
    if (next == ranges_.end() || next->first > hi) break;
    if (first->second.end == next->first && first->second.bits == next->second.bits) {
      first->second.end = next->second.end;
      ranges_.erase(next);
    } else {
      first = next;
    }
  }
}

bool AttrMap::Any(Bno lba, Bno count, uint8_t bits) const {
  if (ranges_.empty() || count == 0) return false;
  const uint64_t hi = uint64_t(lba) + count;
  auto it = ranges_.upper_bound(lba);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first < hi; ++it) {
    if (it->second.end > lba && (it->second.bits & bits)) return true;
  }
  return false;
}

std::vector<AttrRange> AttrMap::With(uint8_t bits) const {
  std::vector<AttrRange> out;
  for (const auto& [s, p] : ranges_) {
    if (!(p.bits & bits)) continue;
    if (!out.empty() && out.back().lba + out.back().count == s) {
      out.back().count += p.end - s;
    } else {
      out.push_back({s, p.end - s, uint8_t(p.bits & bits)});
    }
  }
  return out;
}

std::vector<AttrRange> AttrMap::All() const {
  std::vector<AttrRange> out;
  for (const auto& [s, p] : ranges_) out.push_back({s, p.end - s, p.bits});
  return out;
}

uint8_t AttrMap::union_bits() const {
  uint8_t b = 0;
  for (const auto& [s, p] : ranges_) b |= p.bits;
  return b;
}

}  // namespace ftl::map
