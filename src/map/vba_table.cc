#include "map/vba_table.h"

#include <cassert>

namespace ftl::map {

VbaTable::VbaTable(log::SegmentTable* segs, Bno max_vbas)
    : segs_(segs), max_vbas_(max_vbas) {}

void VbaTable::EnsureSize(Bno n) {
  if (entries_.size() < n) {
    if (entries_.capacity() < n) entries_.reserve(std::max<size_t>(n, entries_.size() * 3 / 2));
    entries_.resize(n);
  }
}

void VbaTable::Allocate(Bno n, std::vector<std::pair<Bno, Bno>>* runs) {
  // Single blocks reuse the lowest free VBA; multi-block writes take the
  // tail so that sequential data gets one contiguous run (one extent).
  while (n > 0) {
    Bno tail = Bno(entries_.size());
    bool use_tail = free_runs_.empty() || (n > 1 && uint64_t(tail) + n <= max_vbas_);
    if (use_tail) {
      EnsureSize(tail + n);
      runs->push_back({tail, n});
      return;
    }
    auto it = free_runs_.begin();
    Bno start = it->first, len = it->second;
    Bno take = std::min(len, n);
    free_runs_.erase(it);
    if (take < len) free_runs_[start + take] = len - take;
    runs->push_back({start, take});
    n -= take;
  }
}

void VbaTable::Claim(Bno vba) {
  if (vba >= entries_.size()) {
    Bno old = Bno(entries_.size());
    EnsureSize(vba + 1);
    if (vba > old) AddFreeRun(old, vba - old);
    return;
  }
  auto it = free_runs_.upper_bound(vba);
  if (it == free_runs_.begin()) return;
  --it;
  Bno start = it->first, len = it->second;
  if (vba >= start + len) return;  // not free
  free_runs_.erase(it);
  if (vba > start) free_runs_[start] = vba - start;
  if (vba + 1 < start + len) free_runs_[vba + 1] = start + len - vba - 1;
}

void VbaTable::AddFreeRun(Bno start, Bno len) {
  auto next = free_runs_.lower_bound(start);
  if (next != free_runs_.end() && next->first == start + len) {
    len += next->second;
    next = free_runs_.erase(next);
  }
  if (next != free_runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += len;
      return;
    }
  }
  free_runs_[start] = len;
}

void VbaTable::Incref(Bno vba, Bno n) {
  for (Bno v = vba; v < vba + n; ++v) {
    Entry& e = entries_[v];
    if (e.refs++ == 0) ++live_;
  }
}

void VbaTable::Decref(Bno vba, Bno n) {
  for (Bno v = vba; v < vba + n; ++v) {
    Entry& e = entries_[v];
    // Invariant: only referenced VBAs are released.
    assert(e.refs > 0);
    if (--e.refs == 0) Free(v);
  }
}

void VbaTable::Free(Bno vba) {
  Entry& e = entries_[vba];
  if (e.pba != kNoBlock) segs_->ClearValid(e.pba);
  e.pba = kNoBlock;
  --live_;
  AddFreeRun(vba, 1);
}

void VbaTable::SetPba(Bno vba, Bno pba) {
  Entry& e = entries_[vba];
  assert(e.refs > 0);
  if (e.pba != kNoBlock) segs_->ClearValid(e.pba);
  e.pba = pba;
  segs_->SetValid(pba);
}

bool VbaTable::CompareAndSetPba(Bno vba, Bno old_pba, Bno new_pba) {
  if (vba >= entries_.size()) return false;
  Entry& e = entries_[vba];
  if (e.refs == 0 || e.pba != old_pba) return false;
  segs_->ClearValid(old_pba);
  e.pba = new_pba;
  segs_->SetValid(new_pba);
  return true;
}

void VbaTable::Load(std::vector<Entry> entries) {
  entries_ = std::move(entries);
  free_runs_.clear();
  live_ = 0;
  Bno run_start = 0, run_len = 0;
  for (Bno v = 0; v < entries_.size(); ++v) {
    if (entries_[v].refs > 0) {
      ++live_;
      if (run_len) free_runs_[run_start] = run_len;
      run_len = 0;
    } else {
      if (run_len == 0) run_start = v;
      ++run_len;
    }
  }
  if (run_len) free_runs_[run_start] = run_len;
}

}  // namespace ftl::map
