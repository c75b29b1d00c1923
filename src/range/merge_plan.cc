#include "range/merge_plan.h"

namespace ftl::range {

MergePlan PlanMerge(const std::vector<Bno>& base, const std::vector<std::vector<Bno>>& sources,
                    Policy policy) {
  MergePlan plan;
  plan.taken.assign(sources.size(), 0);
  const size_t n = base.size();
  std::vector<int> pick(n, -1);
  for (size_t i = 0; i < n; ++i) {
    int chosen = -1;
    bool conflict = false;
    for (size_t k = 0; k < sources.size(); ++k) {
      Bno v = sources[k][i];
      if (v == base[i]) continue;
      if (chosen < 0) {
        chosen = int(k);
      } else if (sources[size_t(chosen)][i] != v) {
        conflict = true;
        if (policy == Policy::kLast) chosen = int(k);
      }
    }
    if (conflict) plan.conflicts.push_back(Bno(i));
    pick[i] = chosen;
  }
  if (policy == Policy::kFail && !plan.conflicts.empty()) return plan;
  for (size_t i = 0; i < n; ++i) {
    if (pick[i] < 0) {
      ++plan.unchanged;
    } else {
      ++plan.taken[size_t(pick[i])];
    }
    if (!plan.runs.empty() && plan.runs.back().source == pick[i]) {
      ++plan.runs.back().count;
    } else {
      plan.runs.push_back({Bno(i), 1, pick[i]});
    }
  }
  return plan;
}

}  // namespace ftl::range
