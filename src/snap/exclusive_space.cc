#include "snap/exclusive_space.h"

#include <functional>

#include "absl/container/flat_hash_map.h"

namespace ftl::snap {

uint64_t ExclusiveBlocks(const map::ExtentTree& tree, const map::VbaTable& vbas) {
  const map::Node* root = tree.root();
  if (!root || root->refs > 1) return 0;
  uint64_t blocks = 0;
  // VBAs referenced more than once: how many of the references are ours.
  absl::flat_hash_map<log::Bno, uint32_t> multi;
  std::function<void(const map::Node*)> walk = [&](const map::Node* n) {
    if (n->refs > 1) return;
    if (n->leaf) {
      const auto* l = static_cast<const map::Leaf*>(n);
      for (int i = 0; i < l->count; ++i) {
        for (log::Bno k = 0; k < l->e[i].len; ++k) {
          log::Bno v = l->e[i].vba + k;
          uint32_t refs = vbas.Get(v).refs;
          if (refs == 1) {
            ++blocks;
          } else if (++multi[v] == refs) {
            ++blocks;
          }
        }
      }
      return;
    }
    const auto* in = static_cast<const map::Inner*>(n);
    for (int i = 0; i < in->count; ++i) walk(in->kid[i]);
  };
  walk(root);
  return blocks;
}

}  // namespace ftl::snap
