#pragma once
// AttrMap: per-volume range attributes as bits over LBA ranges
// (log::kAttrImmutable, log::kAttrNonPersistent). Stored as disjoint,
// coalesced intervals with non-zero bits only, so a volume without
// attributes costs nothing.
// Not thread-safe: guarded by the owner's map lock.

#include <cstdint>
#include <map>
#include <vector>

#include "log/log_format.h"

namespace ftl::map {

using log::Bno;

struct AttrRange {
  Bno lba = 0;
  Bno count = 0;
  uint8_t bits = 0;
  bool operator==(const AttrRange&) const = default;
};

class AttrMap {
 public:
  // Sets `set` and clears `clear` bits on [lba, lba+count).
  void Apply(Bno lba, Bno count, uint8_t set, uint8_t clear);
  // True if any block of [lba, lba+count) has any of `bits`.
  bool Any(Bno lba, Bno count, uint8_t bits) const;
  // Ranges having any of `bits`, in order.
  std::vector<AttrRange> With(uint8_t bits) const;
  std::vector<AttrRange> All() const;
  bool empty() const { return ranges_.empty(); }
  size_t size() const { return ranges_.size(); }
  uint8_t union_bits() const;

 private:
  struct Piece {
    Bno end;
    uint8_t bits;
  };
  std::map<Bno, Piece> ranges_;  // start -> (end, bits)
};

}  // namespace ftl::map
