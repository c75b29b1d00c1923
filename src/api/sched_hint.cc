#include "ftl/sched_hint.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace ftl {
namespace {

// The kernel's struct sched_attr (include/uapi/linux/sched/types.h), declared
// here: glibc 2.36 has no wrapper, and the uapi header clashes with
// <sched.h>'s struct sched_param.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

bool GetAttr(SchedAttr* a) {
  *a = SchedAttr{};
  return syscall(SYS_sched_getattr, 0, a, sizeof(*a), 0) == 0;
}

}  // namespace

bool RequestShortSlice(std::chrono::microseconds slice) {
  SchedAttr a;
  if (!GetAttr(&a) || a.sched_policy != SCHED_OTHER) return false;
  const uint64_t want = uint64_t(slice.count()) * 1000;
  if (a.sched_runtime == want) return true;
  a.size = sizeof(a);
  a.sched_flags = 0;
  a.sched_runtime = want;  // the nice value read above is written back
  if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) return false;
  SchedAttr now;
  return GetAttr(&now) && now.sched_runtime == want;  // older kernels ignore it
}

unsigned long long CurrentSliceNanos() {
  SchedAttr a;
  return GetAttr(&a) ? a.sched_runtime : 0;
}

}  // namespace ftl
