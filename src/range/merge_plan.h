#pragma once
// Three-way block merge against a base range, by VBA identity (docs/architecture.md, "The map"):
// a block is "changed" in a source when the source maps a different VBA (or
// a hole where the base has data, or the reverse) than the base. No data is
// read.
// Pure function of the mappings; the caller turns the plan into CLONE ops.

#include <cstdint>
#include <vector>

#include "log/log_format.h"

namespace ftl::range {

using log::Bno;

enum class Policy { kFail, kFirst, kLast };

struct MergeRun {
  Bno offset = 0;  // block offset in the range
  Bno count = 0;
  int source = -1;  // index into sources, -1 = base
};

struct MergePlan {
  std::vector<MergeRun> runs;       // covers [0, blocks) in order
  std::vector<Bno> conflicts;       // block offsets changed differently in >1 source
  std::vector<uint64_t> taken;      // per source: blocks taken from it
  uint64_t unchanged = 0;
};

// base[i] / sources[k][i]: the VBA at block i (kNoBlock for a hole).
// With kFail, conflicts are listed and runs stay empty.
MergePlan PlanMerge(const std::vector<Bno>& base, const std::vector<std::vector<Bno>>& sources,
                    Policy policy);

}  // namespace ftl::range
