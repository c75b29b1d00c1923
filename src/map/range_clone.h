#pragma once
// Range clone on copy-on-write extent trees (docs/architecture.md, "The map"): the destination
// range maps the same VBAs as the source range did (holes stay holes); no
// data moves. Source and destination may be the same tree and may overlap:
// the source is read completely before the destination changes, and the
// source's VBAs are held while it changes, so none is freed on the way.
// Not thread-safe: caller holds the map lock exclusively.

#include "map/extent_tree.h"
#include "map/vba_table.h"

namespace ftl::map {

using log::Bno;

// REQUIRES: both ranges inside their trees' volumes.
void CloneRange(const map::ExtentTree& src, Bno src_lba, map::ExtentTree* dst, Bno dst_lba,
                Bno count, map::VbaTable* vbas);

}  // namespace ftl::map
