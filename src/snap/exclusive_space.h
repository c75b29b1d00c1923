#pragma once
// Space held only by one tree (a snapshot): the blocks a delete of that tree
// would free. Walks the nodes only this tree references (a node with more
// than one reference is shared, and so is everything under it) and counts
// the VBAs whose every reference comes from those nodes.
// Not thread-safe: caller holds the map lock (shared is enough).

#include <cstdint>

#include "map/extent_tree.h"
#include "map/vba_table.h"

namespace ftl::snap {

uint64_t ExclusiveBlocks(const map::ExtentTree& tree, const map::VbaTable& vbas);

}  // namespace ftl::snap
