#include "core/range_lock.h"

namespace ftl::core {

bool RangeLock::Conflicts(uint32_t vol, uint64_t lo, uint64_t hi, bool exclusive) const {
  for (const Held& h : held_) {
    if (h.vol == vol && h.lo < hi && lo < h.hi && (exclusive || h.exclusive)) return true;
  }
  return false;
}

uint64_t RangeLock::Lock(uint32_t vol, uint64_t lo, uint64_t hi, bool exclusive) {
  absl::MutexLock l(&mu_);
  auto free = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !Conflicts(vol, lo, hi, exclusive);
  };
  mu_.Await(absl::Condition(&free));
  uint64_t t = next_ticket_++;
  held_.push_back({t, vol, lo, hi, exclusive});
  return t;
}

void RangeLock::Unlock(uint64_t ticket) {
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < held_.size(); ++i) {
    if (held_[i].ticket == ticket) {
      held_[i] = held_.back();
      held_.pop_back();
      return;
    }
  }
}

}  // namespace ftl::core
