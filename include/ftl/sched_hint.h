#pragma once
// Scheduler hints for threads whose latency is the product's: a thread that
// sleeps on a device sync and must run the moment it returns (the Redis
// protocol's group-commit loop, resp/databases.h). Linux only; it needs no
// privilege.
//
// Linux's EEVDF scheduler (6.6 and later) picks the runnable task with the
// earliest virtual deadline, and since 6.12 a SCHED_OTHER task may ask for
// its own slice (sched_attr::sched_runtime, 0.1-100 ms): a shorter slice
// gives a waking task an earlier deadline, so it preempts a busy one at
// once instead of waiting up to the other's slice (about 3 ms), at the
// same share of the CPU (docs/decisions.md, "The group-commit loop answers
// from the io threads and asks for a short scheduler slice").
//
// Thread safety: acts on the calling thread only.

#include <chrono>

namespace ftl {

// Asks for a slice of `slice` for the calling thread, keeping its policy,
// nice value and everything else. Returns whether the kernel took it; false
// (and no change) on a kernel without custom slices, or a thread that is
// not SCHED_OTHER (one a user made real-time keeps what it has).
bool RequestShortSlice(std::chrono::microseconds slice);

// The calling thread's slice in nanoseconds as the kernel reports it (0 if
// it cannot be read). For tests.
unsigned long long CurrentSliceNanos();

}  // namespace ftl
