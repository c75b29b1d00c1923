#pragma once
// RangeLock: serialises read-modify-write of partial blocks against other
// writes to the same blocks. Whole-block writes take a range shared (they
// may run together); a partial-block write takes its range exclusive while
// it reads the old block, merges and writes. Unlock may happen on another
// thread than Lock (completions run on the writer thread).
// Thread-safe. Cost: O(ranges held) per call; few are held at once.

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ftl::core {

class RangeLock {
 public:
  // Returns a ticket for Unlock.
  uint64_t Lock(uint32_t vol, uint64_t first_block, uint64_t end_block, bool exclusive);
  void Unlock(uint64_t ticket);

 private:
  struct Held {
    uint64_t ticket;
    uint32_t vol;
    uint64_t lo, hi;
    bool exclusive;
  };
  bool Conflicts(uint32_t vol, uint64_t lo, uint64_t hi, bool exclusive) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace ftl::core
