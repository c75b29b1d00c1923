#pragma once
// Helpers shared by the map module's tests.

#include <utility>
#include <vector>

#include "map/vba_table.h"

namespace ftl::map::testing {

// Allocates n fresh VBAs (contiguous or not) the way the writer does and
// lists them one by one.
inline std::vector<Bno> FreshVbas(VbaTable* vbas, Bno n) {
  std::vector<std::pair<Bno, Bno>> runs;
  vbas->Allocate(n, &runs);
  std::vector<Bno> out;
  for (auto [s, l] : runs)
    for (Bno k = 0; k < l; ++k) out.push_back(s + k);
  return out;
}

}  // namespace ftl::map::testing
