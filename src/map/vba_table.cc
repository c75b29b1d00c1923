#include "map/vba_table.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ftl::map {

namespace {

// Run k+1 continues run k: same refcount and the PBAs go on (or neither
// has a PBA).
template <typename R>
bool ContinuesRun(const R& a, uint32_t a_len, const R& b) {
  if (a.refs != b.refs) return false;
  if (a.pba == kNoBlock || b.pba == kNoBlock) return a.pba == b.pba;
  return uint64_t(a.pba) + a_len == b.pba;
}

// Index of the run holding offset `off`: the last run starting at or
// before it (runs[0].off is 0). Branch-free halving: run lists of chunks
// edited at random positions would mispredict about every other step.
template <typename R>
size_t RunIndex(const std::vector<R>& runs, uint32_t off) {
  const R* base = runs.data();
  size_t len = runs.size();
  while (len > 1) {
    const size_t half = len / 2;
    base = base[half].off <= off ? base + half : base;
    len -= half;
  }
  return size_t(base - runs.data());
}

}  // namespace

VbaTable::VbaTable(log::SegmentTable* segs, Bno max_vbas)
    : segs_(segs), max_vbas_(max_vbas) {}

VbaTable::~VbaTable() = default;

uint32_t VbaTable::RunEnd(const Chunk& c, size_t k) {
  return k + 1 < c.runs.size() ? c.runs[k + 1].off : kChunkSize;
}

void VbaTable::EnsureSize(Bno n) {
  if (n <= size_) return;
  size_t want = (size_t(n) + kChunkSize - 1) >> kChunkBits;
  if (chunks_.capacity() < want) chunks_.reserve(std::max(want, chunks_.size() * 3 / 2));
  while (chunks_.size() < want) {
    Chunk c;
    c.runs.push_back({kNoBlock, 0, 0});
    chunks_.push_back(std::move(c));
  }
  size_ = n;
}

VbaTable::Entry VbaTable::Get(Bno vba) const {
  const Chunk& c = chunks_[vba >> kChunkBits];
  uint32_t off = vba & (kChunkSize - 1);
  if (c.dense()) return {c.pba[off], DenseRefs(c, vba - off, off)};
  const Run& r = c.runs[RunIndex(c.runs, off)];
  return {r.pba == kNoBlock ? kNoBlock : r.pba + (off - r.off), r.refs};
}

uint32_t VbaTable::Refs(Bno vba) const {
  const Chunk& c = chunks_[vba >> kChunkBits];
  const uint32_t off = vba & (kChunkSize - 1);
  if (c.dense()) return DenseRefs(c, vba - off, off);
  return c.runs[RunIndex(c.runs, off)].refs;
}

void VbaTable::Prefetch(Bno vba) const {
  if (vba >= size_) return;
  const Chunk& c = chunks_[vba >> kChunkBits];
  const uint32_t off = vba & (kChunkSize - 1);
  if (c.dense()) {
    __builtin_prefetch(&c.pba[off]);
    __builtin_prefetch(&c.refs[off]);
  } else {
    __builtin_prefetch(c.runs.data() + c.runs.size() / 2);
  }
}

void VbaTable::PrefetchRefs(Bno vba) const {
  if (vba >= size_) return;
  const Chunk& c = chunks_[vba >> kChunkBits];
  const uint32_t off = vba & (kChunkSize - 1);
  if (c.dense()) {
    __builtin_prefetch(&c.refs[off]);
  } else {
    __builtin_prefetch(c.runs.data() + c.runs.size() / 2);
  }
}

uint32_t VbaTable::DenseRefs(const Chunk& c, Bno chunk_base, uint32_t off) const {
  uint8_t r = c.refs[off];
  if (r != kBigRefs) return r;
  return big_refs_.at(chunk_base + off);
}

void VbaTable::SetDenseRefs(Chunk& c, Bno chunk_base, uint32_t off, uint32_t refs) {
  if (refs >= kBigRefs) {
    c.refs[off] = kBigRefs;
    big_refs_[chunk_base + off] = refs;
    return;
  }
  if (c.refs[off] == kBigRefs) big_refs_.erase(chunk_base + off);
  c.refs[off] = uint8_t(refs);
}

size_t VbaTable::SplitAt(Chunk& c, uint32_t off) {
  const size_t k = RunIndex(c.runs, off);
  const Run r = c.runs[k];
  if (r.off == off) return k;
  Run tail{r.pba == kNoBlock ? kNoBlock : r.pba + (off - r.off), uint16_t(off), r.refs};
  // Grow by a quarter, not double: run lists are most of the table.
  if (c.runs.size() == c.runs.capacity()) c.runs.reserve(c.runs.size() + c.runs.size() / 4 + 4);
  c.runs.insert(c.runs.begin() + ptrdiff_t(k + 1), tail);
  return k + 1;
}

void VbaTable::MergeAround(Chunk& c, size_t first, size_t last) {
  last = std::min(last, c.runs.size() - 1);
  for (size_t k = last; k > first; --k) {
    const Run& a = c.runs[k - 1];
    if (ContinuesRun(a, uint32_t(c.runs[k].off - a.off), c.runs[k]))
      c.runs.erase(c.runs.begin() + ptrdiff_t(k));
  }
}

void VbaTable::Densify(Chunk& c) {
  Bno base = Bno(&c - chunks_.data()) << kChunkBits;
  // Every entry is written below (the runs cover the chunk).
  c.pba = std::make_unique_for_overwrite<Bno[]>(kChunkSize);
  c.refs = std::make_unique_for_overwrite<uint8_t[]>(kChunkSize);
  for (size_t k = 0; k < c.runs.size(); ++k) {
    const Run& r = c.runs[k];
    const uint32_t end = RunEnd(c, k);
    if (r.pba == kNoBlock) {
      std::fill(c.pba.get() + r.off, c.pba.get() + end, kNoBlock);
    } else {
      for (uint32_t o = r.off; o < end; ++o) c.pba[o] = r.pba + (o - r.off);
    }
    if (r.refs < kBigRefs) {
      std::memset(c.refs.get() + r.off, r.refs, end - r.off);
    } else {
      for (uint32_t o = r.off; o < end; ++o) SetDenseRefs(c, base, o, r.refs);
    }
  }
  std::vector<Run>().swap(c.runs);
}

template <typename F>
void VbaTable::Edit(Bno vba, Bno n, bool grows_refs, F fn) {
  while (n > 0) {
    Chunk& c = chunks_[vba >> kChunkBits];
    const Bno base = vba & ~(kChunkSize - 1);
    const uint32_t lo = vba - base;
    const uint32_t hi = uint32_t(std::min<uint64_t>(kChunkSize, uint64_t(lo) + n));
    if (!c.dense() && c.runs.size() > (c.mirrors ? kMaxMirrorRunsEditedInside : kMaxRunsEditedInside)) {
      // Long lists are built by appends; an edit further inside would move
      // too much of the list: the chunk goes dense first.
      if (c.runs.size() - RunIndex(c.runs, lo) - 1 > kMaxRunsAfterEdit) Densify(c);
    }
    if (!c.dense() && grows_refs) {
      // A count that would outgrow a run's 16 bits needs the dense form.
      for (size_t k = SplitAt(c, lo); k < c.runs.size() && c.runs[k].off < hi; ++k) {
        if (c.runs[k].refs >= kMaxRunRefs) {
          Densify(c);
          break;
        }
      }
    }
    if (!c.dense()) {
      size_t s = SplitAt(c, lo);
      size_t e = hi == kChunkSize ? c.runs.size() : SplitAt(c, hi);
      for (size_t k = s; k < e; ++k) {
        Run& r = c.runs[k];
        Bno pba = r.pba;
        uint32_t refs = r.refs;
        fn(base + r.off, RunEnd(c, k) - r.off, &pba, &refs);
        r.pba = pba;
        r.refs = uint16_t(refs);
      }
      MergeAround(c, s > 0 ? s - 1 : 0, e);
      if (c.runs.size() > kMaxRuns) Densify(c);
    } else {
      for (uint32_t o = lo; o < hi; ++o) {
        Bno pba = c.pba[o];
        uint32_t refs = DenseRefs(c, base, o);
        fn(base + o, 1, &pba, &refs);
        c.pba[o] = pba;
        SetDenseRefs(c, base, o, refs);
      }
    }
    vba += hi - lo;
    n -= hi - lo;
  }
}

void VbaTable::Allocate(Bno n, std::vector<std::pair<Bno, Bno>>* runs) {
  // Single blocks reuse the lowest free VBA; multi-block writes take the
  // tail so that sequential data gets one contiguous run (one extent).
  // Mirror reservations yield before the table grows past its cap.
  if (mirror_pool_.size() > mirror_free_.size() && uint64_t(size_) + n > max_vbas_) ReleaseMirrors();
  while (n > 0) {
    Bno tail = size_;
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

Bno VbaTable::AllocateMirror(Bno old_vba, bool reserve) {
  const size_t ci = old_vba >> kChunkBits;
  const size_t wi = (old_vba / kMirrorWindow) % kWindowsPerChunk;
  const uint32_t off = old_vba % kMirrorWindow;
  uint32_t slot = chunks_[ci].mirror[wi];
  if (slot == 0) {
    // The limit keeps windows that are never filled from holding much of
    // the VBA space (they yield to Allocate anyway).
    if (!reserve || uint64_t(size_) + kMirrorWindow > max_vbas_ ||
        mirror_reserved_ + kMirrorWindow > max_vbas_ / 4)
      return kNoBlock;
    const Bno base = size_;
    EnsureSize(size_ + kMirrorWindow);  // may move chunks_
    for (Bno v = base; v < size_; v += kChunkSize - (v & (kChunkSize - 1))) chunks_[v >> kChunkBits].mirrors = true;
    if (mirror_free_.empty()) {
      mirror_pool_.emplace_back();
      slot = uint32_t(mirror_pool_.size());
    } else {
      slot = mirror_free_.back() + 1;
      mirror_free_.pop_back();
    }
    Mirror& m = mirror_pool_[slot - 1];
    m.window = old_vba / kMirrorWindow;
    m.base = base;
    m.left = uint32_t(kMirrorWindow);
    m.taken.reset();
    chunks_[ci].mirror[wi] = slot;
    mirror_reserved_ += kMirrorWindow;
  }
  Mirror& m = mirror_pool_[slot - 1];
  if (m.taken[off]) return kNoBlock;
  m.taken[off] = true;
  --mirror_reserved_;
  const Bno vba = m.base + off;
  if (--m.left == 0) DropMirror(slot);
  return vba;
}

void VbaTable::DropMirror(uint32_t slot) {
  Mirror& m = mirror_pool_[slot - 1];
  chunks_[size_t(m.window) * kMirrorWindow >> kChunkBits].mirror[m.window % kWindowsPerChunk] = 0;
  m.left = 0;
  mirror_free_.push_back(slot - 1);
}

void VbaTable::ReleaseMirrors() {
  for (uint32_t i = 0; i < mirror_pool_.size(); ++i) {
    const Mirror& m = mirror_pool_[i];
    if (m.left == 0) continue;
    for (uint32_t o = 0; o < kMirrorWindow;) {
      if (m.taken[o]) {
        ++o;
        continue;
      }
      uint32_t e = o + 1;
      while (e < kMirrorWindow && !m.taken[e]) ++e;
      AddFreeRun(m.base + o, e - o);
      o = e;
    }
    DropMirror(i + 1);
  }
  mirror_reserved_ = 0;
}

void VbaTable::Claim(Bno vba) {
  if (vba >= size_) {
    Bno old = size_;
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
  if (n == 1) {
    // One VBA of a dense chunk: the refcount byte alone.
    Chunk& c = chunks_[vba >> kChunkBits];
    if (c.dense()) {
      uint8_t& r = c.refs[vba & (kChunkSize - 1)];
      if (r < kBigRefs - 1) {
        if (r == 0) ++live_;
        ++r;
        return;
      }
    }
  }
  Edit(vba, n, true, [&](Bno, Bno len, Bno*, uint32_t* refs) {
    if ((*refs)++ == 0) live_ += len;
  });
}

void VbaTable::Decref(Bno vba, Bno n) {
  if (n == 1) {
    // One VBA of a dense chunk that stays referenced: the refcount byte.
    Chunk& c = chunks_[vba >> kChunkBits];
    if (c.dense()) {
      uint8_t& r = c.refs[vba & (kChunkSize - 1)];
      if (r > 1 && r != kBigRefs) {
        --r;
        return;
      }
    }
  }
  Edit(vba, n, false, [&](Bno v, Bno len, Bno* pba, uint32_t* refs) {
    // Invariant: only referenced VBAs are released.
    assert(*refs > 0);
    if (--*refs == 0) {
      Free(v, len, *pba);
      *pba = kNoBlock;
    }
  });
}

void VbaTable::Free(Bno vba, Bno n, Bno pba) {
  if (pba != kNoBlock) {
    for (Bno i = 0; i < n; ++i) segs_->ClearValid(pba + i);
  }
  live_ -= n;
  AddFreeRun(vba, n);
}

void VbaTable::SetPba(Bno vba, Bno pba) {
  {
    // A dense chunk: the PBA word alone.
    Chunk& c = chunks_[vba >> kChunkBits];
    if (c.dense()) {
      const uint32_t off = vba & (kChunkSize - 1);
      assert(DenseRefs(c, vba - off, off) > 0);
      Bno& p = c.pba[off];
      if (p != kNoBlock) segs_->ClearValid(p);
      p = pba;
      segs_->SetValid(pba);
      return;
    }
  }
  Edit(vba, 1, false, [&](Bno, Bno, Bno* p, uint32_t* refs) {
    assert(*refs > 0);
    (void)refs;
    if (*p != kNoBlock) segs_->ClearValid(*p);
    *p = pba;
    segs_->SetValid(pba);
  });
}

bool VbaTable::CompareAndSetPba(Bno vba, Bno old_pba, Bno new_pba) {
  if (vba >= size_) return false;
  Entry e = Get(vba);
  if (e.refs == 0 || e.pba != old_pba) return false;
  SetPba(vba, new_pba);
  return true;
}

void VbaTable::ForEachRun(Bno from, Bno to,
                          const std::function<void(Bno, Bno, Bno, uint32_t)>& fn) const {
  to = std::min(to, size_);
  while (from < to) {
    const Chunk& c = chunks_[from >> kChunkBits];
    const Bno base = from & ~(kChunkSize - 1);
    const uint32_t lo = from - base;
    const uint32_t hi = uint32_t(std::min<uint64_t>(kChunkSize, uint64_t(to) - base));
    if (c.dense()) {
      uint32_t o = lo;
      while (o < hi) {
        Entry first{c.pba[o], DenseRefs(c, base, o)};
        uint32_t len = 1;
        while (o + len < hi) {
          Entry next{c.pba[o + len], DenseRefs(c, base, o + len)};
          if (!ContinuesRun(first, len, next)) break;
          ++len;
        }
        fn(base + o, len, first.pba, first.refs);
        o += len;
      }
    } else {
      auto it = std::upper_bound(c.runs.begin(), c.runs.end(), lo,
                                 [](uint32_t o, const Run& r) { return o < r.off; });
      for (size_t k = size_t(it - c.runs.begin()) - 1; k < c.runs.size(); ++k) {
        const Run& r = c.runs[k];
        if (r.off >= hi) break;
        uint32_t a = std::max<uint32_t>(r.off, lo), b = std::min(RunEnd(c, k), hi);
        fn(base + a, b - a, r.pba == kNoBlock ? kNoBlock : r.pba + (a - r.off), r.refs);
      }
    }
    from = base + hi;
  }
}

uint64_t VbaTable::memory_bytes() const {
  uint64_t bytes = chunks_.capacity() * sizeof(Chunk) + free_runs_.size() * 32 +
                   big_refs_.capacity() * (sizeof(std::pair<Bno, uint32_t>) + 1) +
                   mirror_pool_.capacity() * sizeof(Mirror) +
                   mirror_free_.capacity() * sizeof(uint32_t);
  for (const Chunk& c : chunks_) {
    bytes += c.runs.capacity() * sizeof(Run);
    if (c.dense()) bytes += kChunkSize * (sizeof(Bno) + 1);
  }
  return bytes;
}

uint64_t VbaTable::dense_chunks() const {
  uint64_t n = 0;
  for (const Chunk& c : chunks_) n += c.dense();
  return n;
}

void VbaTable::Load(const std::vector<Entry>& entries) {
  chunks_.clear();
  big_refs_.clear();
  free_runs_.clear();
  mirror_pool_.clear();
  mirror_free_.clear();
  mirror_reserved_ = 0;
  size_ = 0;
  live_ = 0;
  EnsureSize(Bno(entries.size()));
  for (size_t ci = 0; ci < chunks_.size(); ++ci) {
    Chunk& c = chunks_[ci];
    const Bno base = Bno(ci) << kChunkBits;
    const uint32_t end = uint32_t(std::min<uint64_t>(kChunkSize, entries.size() - base));
    // Count the runs first: a chunk that needs too many goes dense.
    size_t runs = 1;
    bool big = entries[base].refs > kMaxRunRefs;
    for (uint32_t o = 1; o < end; ++o) {
      const Entry& a = entries[base + o - 1];
      const Entry& b = entries[base + o];
      big |= b.refs > kMaxRunRefs;
      if (!ContinuesRun(a, 1, b)) ++runs;
    }
    if (runs > kMaxRuns || big) {
      Densify(c);  // from the chunk's one free run; filled below
      for (uint32_t o = 0; o < end; ++o) {
        c.pba[o] = entries[base + o].pba;
        SetDenseRefs(c, base, o, entries[base + o].refs);
      }
    } else {
      c.runs.clear();
      c.runs.reserve(runs + (end < kChunkSize));
      for (uint32_t o = 0; o < end; ++o) {
        const Entry& b = entries[base + o];
        if (o > 0 && ContinuesRun(entries[base + o - 1], 1, b)) continue;
        c.runs.push_back({b.pba, uint16_t(o), uint16_t(b.refs)});
      }
      if (end < kChunkSize) {
        Run tail{kNoBlock, uint16_t(end), 0};
        if (!ContinuesRun(c.runs.back(), end - c.runs.back().off, tail)) c.runs.push_back(tail);
      }
    }
  }
  Bno run_start = 0, run_len = 0;
  for (Bno v = 0; v < entries.size(); ++v) {
    if (entries[v].refs > 0) {
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
