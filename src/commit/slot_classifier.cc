#include "commit/slot_classifier.h"

#include <algorithm>
#include <optional>
#include <tuple>

namespace ftl::commit {
namespace {
// Whether hot/cold separation pays is judged every this many segments of
// user writes (gc::SeparationMeter).
constexpr uint64_t kMeterWindowSegments = 16;
}  // namespace

void SlotClassifier::Configure(OpenOptions::Placement mode, uint64_t logical_blocks,
                               uint32_t segment_blocks) {
  mode_ = mode;
  segment_blocks_ = segment_blocks;
  separation_ = gc::SampledSeparation(logical_blocks);
}

std::vector<std::vector<Request*>> SlotClassifier::Classify(std::vector<Request*>& batch,
                                                             uint64_t next_seq) {
  struct Range {
    uint32_t vol;
    Bno lo, hi;
    size_t req;
  };
  if (mode_ == OpenOptions::Placement::kAuto) {
    // The meter sees every written block (it keeps a sample of them).
    for (const Request* r : batch)
      for (const ReqOp& op : r->ops) {
        if (op.type() != log::OpType::kWrite) continue;
        const Bno count = op.count();
        for (Bno k = 0; k < count; ++k) separation_.NoteWrite(op.vol(), op.lba() + k, user_clock_ + k);
        user_clock_ += count;
      }
  }
  if (!placement_->active()) {
    // Off, or passive: everything is cold, and the committer spends no
    // lookup on the batch.
    for (Request* r : batch) {
      r->slot = gc::Slot::kCold;
      window_blocks_ += r->data_blocks();
    }
    EndMeterWindowIfDue();
    return {};
  }
  std::vector<Range> ranges;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    const auto& segs = state_->map->segments();
    const auto& vbas = state_->map->vbas();
    for (size_t i = 0; i < batch.size(); ++i) {
      Request* r = batch[i];
      r->slot = gc::Slot::kCold;
      bool classified = false;
      for (const ReqOp& op : r->ops) {
        if (op.type() != log::OpType::kWrite && op.type() != log::OpType::kTrim) continue;
        ranges.push_back({op.vol(), op.lba(), op.lba() + op.count(), i});
        if (classified || op.type() != log::OpType::kWrite) continue;
        classified = true;
        // The request is dated by the version its first block replaces.
        std::optional<gc::OldVersion> old;
        const state::VolumeMeta* v = state_->map->volume(op.vol());
        Bno vba = v && op.lba() < v->size_blocks ? v->tree.LookupOne(op.lba()) : log::kNoBlock;
        const map::VbaTable::Entry e =
            vba != log::kNoBlock && vbas.InRange(vba) ? vbas.Get(vba) : map::VbaTable::Entry{};
        if (e.refs > 0 && e.pba != log::kNoBlock) {
          const auto& si = segs.at(segs.SegmentOf(log::Pba(e.pba)));
          old = gc::OldVersion{si.mean_data_seq(), si.hot};
        }
        r->slot = placement_->ForUserWrite(old, next_seq);
      }
      window_blocks_ += r->data_blocks();
    }
  }
  EndMeterWindowIfDue();
  // The parts of a write larger than the atomic size must reach the log in
  // order (a crash keeps a prefix of its blocks): a part continuing the
  // previous request takes its slot.
  for (size_t i = 1; i < batch.size(); ++i) {
    const Request* a = batch[i - 1];
    Request* r = batch[i];
    if (a->splittable && r->splittable && !a->ops.empty() && !r->ops.empty() &&
        a->ops[0].vol() == r->ops[0].vol() && a->ops[0].lba() + a->ops[0].count() == r->ops[0].lba())
      r->slot = a->slot;
  }
  // Records of different slots may reach the log in either order, so
  // requests that overlap must share one: if any do not, the whole batch
  // takes the first request's slot.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.vol, a.lo) < std::tie(b.vol, b.lo);
  });
  bool mixed = false;
  for (size_t i = 1; i < ranges.size() && !mixed; ++i) {
    Bno hi = ranges[i - 1].hi;
    for (size_t k = i; k < ranges.size() && ranges[k].vol == ranges[i - 1].vol &&
                       ranges[k].lo < hi && !mixed;
         ++k)
      mixed = batch[ranges[k].req]->slot != batch[ranges[i - 1].req]->slot;
  }
  if (mixed)
    for (Request* r : batch) r->slot = batch.front()->slot;
  const gc::Slot first = batch.front()->slot;
  if (std::all_of(batch.begin(), batch.end(), [&](const Request* r) { return r->slot == first; }))
    return {};
  std::vector<std::vector<Request*>> parts(gc::kSlotCount);
  for (Request* r : batch) parts[int(r->slot)].push_back(r);
  std::erase_if(parts, [](const auto& p) { return p.empty(); });
  return parts;
}

void SlotClassifier::EndMeterWindowIfDue() {
  if (window_blocks_ < kMeterWindowSegments * uint64_t(segment_blocks_)) return;
  window_blocks_ = 0;
  if (mode_ != OpenOptions::Placement::kAuto) return;
  if (auto pays = separation_.EndWindow()) {
    absl::MutexLock l(&state_->map_mu);  // the cleaner reads placement under it
    placement_->set_active(*pays);
  }
}

}  // namespace ftl::commit
