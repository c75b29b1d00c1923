#include "map/range_clone.h"

#include <vector>

namespace ftl::map {

void CloneRange(const map::ExtentTree& src, Bno src_lba, map::ExtentTree* dst, Bno dst_lba,
                Bno count, map::VbaTable* vbas) {
  if (count == 0) return;
  std::vector<map::Extent> pieces;
  src.Lookup(src_lba, count, &pieces);
  for (const map::Extent& e : pieces) vbas->Incref(e.vba, e.len);
  Bno at = src_lba;
  for (const map::Extent& e : pieces) {
    if (e.lba > at) dst->Assign(dst_lba + (at - src_lba), e.lba - at, log::kNoBlock);
    dst->Assign(dst_lba + (e.lba - src_lba), e.len, e.vba);
    at = e.end();
  }
  if (src_lba + count > at) dst->Assign(dst_lba + (at - src_lba), src_lba + count - at, log::kNoBlock);
  for (const map::Extent& e : pieces) vbas->Decref(e.vba, e.len);
}

}  // namespace ftl::map
