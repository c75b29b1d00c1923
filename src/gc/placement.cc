#include "gc/placement.h"

#include <algorithm>

namespace ftl::gc {

const char* SlotName(Slot s) {
  switch (s) {
    case Slot::kHot: return "hot";
    case Slot::kCold: return "cold";
    case Slot::kGc: return "gc";
    case Slot::kHotGc: return "hot-gc";
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
  return active_ && from_hot && Younger(age, kStayHot) ? Slot::kHotGc : Slot::kGc;
}

void Placement::HotSegmentReclaimed(uint64_t lifespan) {
  lifespans_.push_back(lifespan);
  sum_ += lifespan;
  if (lifespans_.size() > kWindow) {
    sum_ -= lifespans_.front();
    lifespans_.pop_front();
  }
}

std::optional<bool> SeparationMeter::EndWindow(uint64_t live_hot, uint64_t live_other) {
  uint64_t hot = hot_, other = other_;
  // Too few samples: keep counting into the next window (the committer
  // samples only probe batches while separation is off).
  if (hot < kMinSamples || other < kMinSamples) return std::nullopt;
  hot_ = other_ = 0;
  if (live_hot == 0 || live_other == 0) return std::nullopt;
  // (hot / live_hot) >= kMinRatio * (other / live_other)
  return double(hot) * double(live_other) >= kMinRatio * double(other) * double(live_hot);
}

SampledSeparation::SampledSeparation(uint64_t blocks) : shift_(0) {
  while (shift_ < 40 && (blocks >> shift_) > kTargetSample) ++shift_;
}

void SampledSeparation::NoteSampled(uint32_t vol, uint64_t lba, uint64_t now) {
  const uint64_t key = (uint64_t(vol) << 48) ^ lba;
  // Many volumes (clones, snapshots made writable) could grow the sample
  // past its size; blocks beyond the cap are not followed.
  if (sampled_.size() >= kMaxSampled && !sampled_.contains(key)) return;
  auto [it, fresh] = sampled_.try_emplace(key);
  Entry& e = it->second;
  bool hot = false;
  if (fresh) {
    ++live_other_;  // a first write is cold
  } else {
    const uint64_t age = now > e.written ? now - e.written : 0;
    meter_.NoteOverwrite(e.hot);
    age_sum_ += age;
    ++age_n_;
    hot = threshold_ != 0 && age < threshold_;
    if (hot != e.hot) {
      if (hot) ++live_hot_, --live_other_;
      else --live_hot_, ++live_other_;
    }
  }
  e = {now, hot};
}

std::optional<bool> SampledSeparation::EndWindow() {
  std::optional<bool> verdict = meter_.EndWindow(live_hot_, live_other_);
  if (age_n_ >= SeparationMeter::kMinSamples) {
    threshold_ = std::max<uint64_t>(1, age_sum_ / age_n_);
    age_sum_ = age_n_ = 0;
  }
  return verdict;
}

}  // namespace ftl::gc
