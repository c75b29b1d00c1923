#pragma once
// Block addresses (docs/architecture.md, "Addresses"): an LBA is a block of
// a volume, a VBA a virtual block the extent trees map LBAs to, a PBA a
// block of the data area the VBA table maps VBAs to. All are 32-bit counts
// of 4 KiB blocks (log::Bno). The maps store plain Bno for density; these
// distinct types are used where the kinds meet at an interface — a media
// offset is computed from a Pba only, a segment found from a Pba only — so
// passing an LBA or VBA where a physical block is meant does not compile.

#include <compare>
#include <cstdint>

namespace ftl::log {

using Bno = uint32_t;

template <typename Tag>
class BlockAddress {
 public:
  constexpr BlockAddress() = default;
  constexpr explicit BlockAddress(Bno v) : v_(v) {}
  constexpr Bno value() const { return v_; }
  // The block `n` blocks further (same kind).
  friend constexpr BlockAddress operator+(BlockAddress a, Bno n) { return BlockAddress(a.v_ + n); }
  friend constexpr auto operator<=>(BlockAddress, BlockAddress) = default;

 private:
  Bno v_ = 0;
};

using Lba = BlockAddress<struct LbaTag>;
using Vba = BlockAddress<struct VbaTag>;
using Pba = BlockAddress<struct PbaTag>;

}  // namespace ftl::log
