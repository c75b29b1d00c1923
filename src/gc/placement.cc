#include "gc/placement.h"

namespace ftl::gc {

const char* SlotName(Slot s) {
  switch (s) {
    case Slot::kHot: return "hot";
    case Slot::kCold: return "cold";
    case Slot::kGc: return "gc";
  }
  return "?";
}

bool Placement::Younger(uint64_t age, uint64_t k) const {
  if (lifespans_.empty()) return true;
  // age < k * sum / n, without dividing.
  return static_cast<unsigned __int128>(age) * lifespans_.size() <
         static_cast<unsigned __int128>(sum_) * k;
}

Slot Placement::ForUserWrite(const std::optional<OldVersion>& old, uint64_t now) const {
  if (!old) return Slot::kCold;
  uint64_t age = now > old->written_seq ? now - old->written_seq : 0;
  if (Younger(age, 1) || (old->in_hot && Younger(age, kStayHot))) return Slot::kHot;
  return Slot::kCold;
}

Slot Placement::ForRelocation(bool from_hot, uint64_t data_seq, uint64_t now) const {
  uint64_t age = now > data_seq ? now - data_seq : 0;
  return from_hot && Younger(age, kStayHot) ? Slot::kHot : Slot::kGc;
}

void Placement::HotSegmentReclaimed(uint64_t lifespan) {
  lifespans_.push_back(lifespan);
  sum_ += lifespan;
  if (lifespans_.size() > kWindow) {
    sum_ -= lifespans_.front();
    lifespans_.pop_front();
  }
}

}  // namespace ftl::gc
