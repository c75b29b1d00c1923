// Tests for include/ftl/sched_hint.h: the slice hint changes the slice and
// nothing else.

#include "ftl/sched_hint.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace ftl {
namespace {

// Custom SCHED_OTHER slices came with Linux 6.12.
bool KernelHasCustomSlices() {
  utsname u;
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 12);
}

TEST(SchedHintTest, ShortSliceKeepsPolicyAndNice) {
  // On a thread of its own: the hint must change nothing but the slice.
  std::thread t([] {
    const pid_t tid = gettid();
    const int nice_before = getpriority(PRIO_PROCESS, tid) + 2;
    ASSERT_EQ(setpriority(PRIO_PROCESS, tid, nice_before), 0);  // raising nice needs no privilege
    const unsigned long long before = CurrentSliceNanos();
    const bool took = RequestShortSlice(std::chrono::microseconds(100));
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
    EXPECT_EQ(getpriority(PRIO_PROCESS, tid), nice_before);
    if (KernelHasCustomSlices()) {
      EXPECT_TRUE(took);
      EXPECT_EQ(CurrentSliceNanos(), 100000u);
      EXPECT_TRUE(RequestShortSlice(std::chrono::microseconds(100)));  // again: already so
    } else {
      EXPECT_FALSE(took);
      EXPECT_EQ(CurrentSliceNanos(), before);
    }
  });
  t.join();
}

TEST(SchedHintTest, LeavesOtherPoliciesAlone) {
  std::thread t([] {
    sched_param p{};
    ASSERT_EQ(sched_setscheduler(0, SCHED_BATCH, &p), 0);
    EXPECT_FALSE(RequestShortSlice(std::chrono::microseconds(100)));
    EXPECT_EQ(sched_getscheduler(0), SCHED_BATCH);
  });
  t.join();
}

}  // namespace
}  // namespace ftl
