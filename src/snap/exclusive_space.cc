#include "snap/exclusive_space.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ftl::snap {

uint64_t ExclusiveBlocks(const map::ExtentTree& tree, const map::VbaTable& vbas) {
  const map::Node* root = tree.root();
  if (!root || root->refs > 1) return 0;
  // Coverage events of the VBA runs this tree's private leaves reference:
  // (vba, +1) where a run starts, (vba, -1) where it ends.
  std::vector<std::pair<log::Bno, int>> events;
  std::vector<const map::Node*> stack{root};
  while (!stack.empty()) {
    const map::Node* n = stack.back();
    stack.pop_back();
    if (n->refs > 1) continue;  // shared, and so is everything under it
    if (n->leaf) {
      const auto* l = static_cast<const map::Leaf*>(n);
      for (int i = 0; i < l->count; ++i) {
        events.push_back({l->e[i].vba, +1});
        events.push_back({l->e[i].vba + l->e[i].len, -1});
      }
      continue;
    }
    const auto* in = static_cast<const map::Inner*>(n);
    for (int i = 0; i < in->count; ++i) stack.push_back(in->kid[i]);
  }
  std::sort(events.begin(), events.end());
  // Between two events every VBA is covered by `cover` of our references;
  // it is ours alone when that is all of its references. A sequential scan
  // of the VBA table, no per-block lookup structure.
  uint64_t blocks = 0;
  int cover = 0;
  log::Bno at = 0;
  for (const auto& [vba, delta] : events) {
    if (cover > 0) {
      vbas.ForEachRun(at, vba, [&](log::Bno, log::Bno len, log::Bno, uint32_t refs) {
        if (refs == uint32_t(cover)) blocks += len;
      });
    }
    cover += delta;
    at = vba;
  }
  return blocks;
}

}  // namespace ftl::snap
