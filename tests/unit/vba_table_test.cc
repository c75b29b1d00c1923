// VbaTable: the chunked run / dense storage against a plain vector model,
// including form changes (runs -> dense when fragmented, dense -> runs on
// load), 16-bit run refcount overflow, validity bookkeeping in the
// SegmentTable and the free-VBA allocator.

#include "map/vba_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "log/segment_table.h"
#include "map_test_util.h"

namespace ftl::map {
namespace {

using Entry = VbaTable::Entry;

struct Fixture {
  log::SegmentTable segs{64, 4096};  // 256 Ki physical blocks
  VbaTable vbas{&segs, 1 << 20};
  std::vector<Entry> model;
  Bno next_pba = 0;

  std::vector<Bno> Fresh(Bno n) {
    std::vector<Bno> out = testing::FreshVbas(&vbas, n);
    if (model.size() < vbas.size()) model.resize(vbas.size());
    return out;
  }
  // Writes n new blocks the way the write path does: allocate, reference,
  // point at the next physical blocks of the log.
  std::vector<Bno> Write(Bno n) {
    auto v = Fresh(n);
    for (Bno x : v) {
      vbas.Incref(x, 1);
      ++model[x].refs;
      Bno pba = FindFreePba();
      vbas.SetPba(x, pba);
      model[x].pba = pba;
    }
    return v;
  }
  // The next free physical block after the last one handed out (a log).
  Bno FindFreePba() {
    for (Bno k = 0; k < 64 * 4096; ++k) {
      Bno p = next_pba++ % (64 * 4096);
      if (!segs.IsValid(p)) return p;
    }
    ADD_FAILURE() << "no free PBA";
    return 0;
  }
  void Decref(Bno v, Bno n) {
    vbas.Decref(v, n);
    for (Bno i = v; i < v + n; ++i) {
      if (--model[i].refs == 0) model[i].pba = kNoBlock;
    }
  }
  void Incref(Bno v, Bno n) {
    vbas.Incref(v, n);
    for (Bno i = v; i < v + n; ++i) ++model[i].refs;
  }
  void ExpectMatches() {
    ASSERT_EQ(vbas.size(), model.size());
    uint64_t live = 0;
    for (Bno v = 0; v < model.size(); ++v) {
      ASSERT_EQ(vbas.Get(v), model[v]) << "vba " << v;
      live += model[v].refs > 0;
      if (model[v].refs > 0 && model[v].pba != kNoBlock) ASSERT_TRUE(segs.IsValid(model[v].pba));
    }
    EXPECT_EQ(vbas.live_vbas(), live);
    // ForEachRun yields the same entries in order, without gaps.
    Bno at = 0;
    vbas.ForEachRun(0, vbas.size(), [&](Bno v, Bno len, Bno pba, uint32_t refs) {
      ASSERT_EQ(v, at);
      for (Bno i = 0; i < len; ++i) {
        Entry e{pba == kNoBlock ? kNoBlock : pba + i, refs};
        ASSERT_EQ(e, model[v + i]) << "vba " << v + i;
      }
      at += len;
    });
    EXPECT_EQ(at, vbas.size());
  }
};

TEST(VbaTableTest, SequentialWritesStayRuns) {
  Fixture f;
  for (int i = 0; i < 256; ++i) f.Write(64);  // 16 Ki blocks, consecutive PBAs
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.dense_chunks(), 0u);
  // Well under 1 byte per VBA (4 chunks of a few runs each).
  EXPECT_LT(f.vbas.memory_bytes(), 16384u / 8);
}

TEST(VbaTableTest, ScatteredPbasGoDenseAndLoadCompactsAgain) {
  Fixture f;
  auto v = f.Write(8192);
  std::mt19937 rng(7);
  // Point every other VBA somewhere else: thousands of runs per chunk.
  for (Bno i = 0; i < v.size(); i += 2) {
    Bno pba = f.FindFreePba();
    f.vbas.SetPba(v[i], pba);
    f.model[v[i]].pba = pba;
  }
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.dense_chunks(), 2u);
  EXPECT_GE(f.vbas.memory_bytes(), 2u * 4096 * 5);
  // Free everything but one run: after a reload the chunks are runs again.
  f.Decref(v[0], 4000);
  f.Decref(v[4100], 8192 - 4100);
  f.ExpectMatches();
  f.vbas.Load(f.model);
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.dense_chunks(), 0u);
}

TEST(VbaTableTest, RecordsAppendedStayRunsUntilEditedInside) {
  // A random-order fill: records of 12 blocks, one header block between
  // them in the log, so every record is a run of its own (~315 a chunk).
  Fixture f;
  std::vector<Bno> v;
  while (f.vbas.size() < 2 * VbaTable::kChunkSize) {
    auto r = f.Write(12);
    v.insert(v.end(), r.begin(), r.end());
    ++f.next_pba;  // the next record's header
  }
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.dense_chunks(), 0u);
  EXPECT_LT(f.vbas.memory_bytes(), f.vbas.size());  // under 1 B per VBA
  // An edit among the last runs of a list keeps it...
  const Bno last_in_first_chunk = VbaTable::kChunkSize - 1;
  Bno pba = f.FindFreePba();
  f.vbas.SetPba(last_in_first_chunk, pba);
  f.model[last_in_first_chunk].pba = pba;
  EXPECT_EQ(f.vbas.dense_chunks(), 0u);
  // ... one well inside turns that chunk dense, and nothing changes meaning.
  pba = f.FindFreePba();
  f.vbas.SetPba(v[100], pba);
  f.model[v[100]].pba = pba;
  EXPECT_EQ(f.vbas.dense_chunks(), 1u);
  f.ExpectMatches();
  f.vbas.Load(f.model);
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.dense_chunks(), 0u);
}

TEST(VbaTableTest, RefcountsBeyondSixteenBitsAndEightBits) {
  Fixture f;
  auto v = f.Write(100);
  // 70000 references on a run of 10: beyond a run's 16-bit count.
  for (int i = 0; i < 70000; ++i) f.Incref(v[10], 10);
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.dense_chunks(), 1u);
  EXPECT_EQ(f.vbas.Get(v[15]).refs, 70001u);
  for (int i = 0; i < 69800; ++i) f.Decref(v[10], 10);
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.Get(v[15]).refs, 201u);
  for (int i = 0; i < 201; ++i) f.Decref(v[10], 10);
  f.ExpectMatches();
  EXPECT_EQ(f.vbas.Get(v[15]).refs, 0u);
  EXPECT_EQ(f.vbas.Get(v[15]).pba, kNoBlock);
  // Freed VBAs are handed out again (single blocks take the lowest).
  auto again = f.Fresh(1);
  EXPECT_EQ(again[0], v[10]);
}

// Single-VBA edits of a dense chunk take a shortcut (the refcount byte or
// the PBA word alone); counts crossing the byte's limit, frees and PBA
// changes must still match the model.
TEST(VbaTableTest, DenseSingleVbaEditsCrossTheByteLimitAndFree) {
  Fixture f;
  auto v = f.Write(300);
  for (size_t i = 0; i < v.size(); i += 2) f.Decref(v[i], 1);  // ~150 runs edited inside
  for (size_t i = 0; i < 200; ++i) f.Incref(v[1], 1);
  if (f.vbas.dense_chunks() == 0) {
    // Force the dense form the way fragmented PBAs do.
    for (size_t i = 1; i < v.size(); i += 2) {
      Bno pba = f.FindFreePba() + 1;
      f.next_pba = pba + 1;
      f.vbas.SetPba(v[i], pba);
      f.model[v[i]].pba = pba;
    }
  }
  ASSERT_EQ(f.vbas.dense_chunks(), 1u);
  const Bno x = v[3];
  for (int i = 0; i < 300; ++i) {
    f.Incref(x, 1);
    ASSERT_EQ(f.vbas.Refs(x), f.model[x].refs);
  }
  f.ExpectMatches();
  const Bno pba = f.FindFreePba();
  f.vbas.SetPba(x, pba);
  f.model[x].pba = pba;
  f.ExpectMatches();
  while (f.model[x].refs > 0) {
    f.Decref(x, 1);
    ASSERT_EQ(f.vbas.Refs(x), f.model[x].refs);
  }
  f.ExpectMatches();
  EXPECT_FALSE(f.segs.IsValid(pba));
  EXPECT_EQ(f.Fresh(1)[0], std::min(x, v[0]));  // freed VBAs are reused
}

// First writes to shared blocks: the new VBA mirrors the old one inside a
// reserved window, each mirror is handed out once, reserved VBAs are not
// given to Allocate until the table would otherwise pass its cap, and Load
// forgets the windows.
TEST(VbaTableTest, MirrorWindowsForSharedBlocks) {
  constexpr Bno W = VbaTable::kMirrorWindow;
  log::SegmentTable segs{4, 4096};
  VbaTable v(&segs, 16 * W);  // at most 4 W reserved at a time
  std::vector<Bno> old = testing::FreshVbas(&v, 2 * W);
  ASSERT_EQ(old.back(), 2 * W - 1);
  for (Bno x : old) v.Incref(x, 1);
  EXPECT_EQ(v.AllocateMirror(5, /*reserve=*/false), kNoBlock);  // no window yet
  EXPECT_EQ(v.AllocateMirror(5, true), 2 * W + 5);                // reserved at the tail
  EXPECT_EQ(v.AllocateMirror(6, false), 2 * W + 6);
  EXPECT_EQ(v.AllocateMirror(4, false), 2 * W + 4);
  EXPECT_EQ(v.AllocateMirror(5, true), kNoBlock);  // handed out already
  EXPECT_EQ(v.mirror_reserved(), W - 3);
  // Another old window gets its own new window.
  EXPECT_EQ(v.AllocateMirror(W + 7, true), 3 * W + 7);
  EXPECT_EQ(v.mirror_reserved(), 2 * W - 4);
  // Allocate does not hand out reserved VBAs while there is room.
  std::vector<std::pair<Bno, Bno>> runs;
  v.Allocate(1, &runs);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].first, 4 * W);
  // Past the cap the windows yield: their free VBAs join the free list
  // (Allocate takes its lowest run, [2W, 2W + 4), then the tail).
  runs.clear();
  v.Allocate(12 * W, &runs);
  ASSERT_GE(runs.size(), 2u);
  EXPECT_EQ(runs[0], std::make_pair(2 * W, Bno(4)));
  runs.clear();
  v.Allocate(1, &runs);
  EXPECT_EQ(runs[0].first, 2 * W + 7);
  EXPECT_EQ(v.mirror_reserved(), 0u);
  EXPECT_EQ(v.AllocateMirror(9, false), kNoBlock);
  EXPECT_EQ(v.AllocateMirror(10, true), kNoBlock);  // no room left under the cap
  // Load forgets windows (a checkpoint stores reserved VBAs as free).
  v.Load(std::vector<VbaTable::Entry>(2 * W, VbaTable::Entry{kNoBlock, 1}));
  EXPECT_EQ(v.mirror_reserved(), 0u);
  EXPECT_EQ(v.AllocateMirror(3, false), kNoBlock);
  EXPECT_EQ(v.AllocateMirror(3, true), 2 * W + 3);
}

// Windows are found through the old VBA's chunk (several per chunk); a
// window whose VBAs were all handed out is forgotten and its slot reused,
// and windows yield (ReleaseMirrors) with freed slots among them.
TEST(VbaTableTest, MirrorWindowsPerChunkAndReusedSlots) {
  constexpr Bno W = VbaTable::kMirrorWindow;
  log::SegmentTable segs{16, 4096};
  VbaTable v(&segs, 64 * W);
  const Bno n = 2 * VbaTable::kChunkSize;  // 8 windows in two chunks
  std::vector<Bno> old = testing::FreshVbas(&v, n);
  v.Incref(old[0], n);
  Bno tail = n;
  std::vector<Bno> base(n / W);
  for (Bno w : {Bno(1), Bno(0), Bno(7), Bno(4), Bno(3)}) {
    base[w] = tail;
    EXPECT_EQ(v.AllocateMirror(w * W + 9, true), tail + 9) << w;
    tail += W;
  }
  for (Bno w : {Bno(1), Bno(0), Bno(7), Bno(4), Bno(3)})
    EXPECT_EQ(v.AllocateMirror(w * W + 10, false), base[w] + 10) << w;
  EXPECT_EQ(v.mirror_reserved(), 5 * (W - 2));
  // Hand out all of window 0: it is forgotten, so old VBA 0's window
  // gets a new reservation (its first VBAs stay with their owners).
  for (Bno i = 0; i < W; ++i) {
    if (i == 9 || i == 10) continue;
    ASSERT_EQ(v.AllocateMirror(i, false), base[0] + i);
  }
  EXPECT_EQ(v.mirror_reserved(), 4 * (W - 2));
  EXPECT_EQ(v.AllocateMirror(5, false), kNoBlock);
  EXPECT_EQ(v.AllocateMirror(5, true), tail + 5);  // the freed slot, a new window
  EXPECT_EQ(v.AllocateMirror(W + 11, false), base[1] + 11);  // the others are intact
  EXPECT_EQ(v.mirror_reserved(), 4 * (W - 2) + (W - 1) - 1);
  // Yielding gives every reserved, not handed out VBA back: Allocate then
  // fills the holes in the windows before it grows the table.
  std::vector<std::pair<Bno, Bno>> runs;
  v.Allocate(64 * W - v.size() + 1, &runs);
  EXPECT_EQ(v.mirror_reserved(), 0u);
  Bno got = 0;
  for (const auto& r : runs) got += r.second;
  EXPECT_EQ(got, 64 * W - (tail + W) + 1);
  EXPECT_EQ(runs[0].first, base[1]);  // window 1's first free VBA
  for (Bno w = 0; w < n / W; ++w) EXPECT_EQ(v.AllocateMirror(w * W + 12, false), kNoBlock);
}

// A chunk holding mirror windows turns dense after a few edits inside its
// run list (first writes break sharing in random order), while mirror
// VBAs handed out in order (a clone rewritten sequentially) stay runs.
TEST(VbaTableTest, MirrorChunksGoDenseEarlyOnlyWhenEditedInside) {
  constexpr Bno W = VbaTable::kMirrorWindow;
  for (bool random : {false, true}) {
    SCOPED_TRACE(random ? "random order" : "in order");
    log::SegmentTable segs{8, 4096};
    VbaTable v(&segs, 64 * W);
    std::vector<Bno> old = testing::FreshVbas(&v, VbaTable::kChunkSize);
    v.Incref(old[0], Bno(old.size()));  // shared by two trees
    v.Incref(old[0], Bno(old.size()));
    std::vector<Bno> order(64);  // ~128 runs if kept as runs
    for (Bno i = 0; i < order.size(); ++i) order[i] = i;
    if (random) std::shuffle(order.begin(), order.end(), std::mt19937(3));
    Bno pba = 0;
    std::vector<std::pair<Bno, VbaTable::Entry>> want;
    for (Bno i : order) {
      const Bno m = v.AllocateMirror(old[i], true);
      ASSERT_NE(m, kNoBlock);
      v.Incref(m, 1);
      v.SetPba(m, pba);
      v.Decref(old[i], 1);
      want.push_back({m, {pba, 1}});
      pba += 2;  // never continues a run
    }
    for (const auto& [m, e] : want) EXPECT_EQ(v.Get(m), e) << m;
    for (Bno i = 0; i < 4; ++i) EXPECT_EQ(v.Refs(old[i]), v.Get(old[i]).refs);
    // The old chunk (edited inside far fewer than 256 times) keeps its runs;
    // the mirror chunk goes dense only when edited in random order.
    EXPECT_EQ(v.dense_chunks(), random ? 1u : 0u);
  }
}

TEST(VbaTableTest, RandomOperationsMatchModel) {
  Fixture f;
  std::mt19937 rng(42);
  std::vector<Bno> live;
  for (int step = 0; step < 20000; ++step) {
    int op = int(rng() % 10);
    if (op < 4 || live.empty()) {
      auto v = f.Write(1 + rng() % 40);
      live.insert(live.end(), v.begin(), v.end());
    } else if (op < 6) {
      // Overwrite in place (a private block's new version).
      Bno x = live[rng() % live.size()];
      Bno pba = f.FindFreePba();
      f.vbas.SetPba(x, pba);
      f.model[x].pba = pba;
    } else if (op < 7) {
      // Relocation: compare-and-set, sometimes against a stale PBA.
      Bno x = live[rng() % live.size()];
      Bno old = f.model[x].pba;
      Bno pba = f.FindFreePba();
      bool stale = rng() % 4 == 0;
      bool ok = f.vbas.CompareAndSetPba(x, stale ? old + 1 : old, pba);
      ASSERT_EQ(ok, !stale || old + 1 == old);
      if (ok) f.model[x].pba = pba;
    } else if (op < 8) {
      // Share a range of consecutive VBAs (a leaf copy) ...
      Bno x = live[rng() % live.size()];
      Bno n = 1;
      while (n < 16 && x + n < f.model.size() && f.model[x + n].refs > 0) ++n;
      f.Incref(x, n);
    } else {
      // ... and drop references.
      size_t i = rng() % live.size();
      Bno x = live[i];
      f.Decref(x, 1);
      if (f.model[x].refs == 0) {
        live[i] = live.back();
        live.pop_back();
      }
    }
    if (step % 2000 == 0) f.ExpectMatches();
  }
  f.ExpectMatches();
  // Both forms were exercised.
  EXPECT_GT(f.vbas.dense_chunks(), 0u);
  EXPECT_LT(f.vbas.dense_chunks(), (f.vbas.size() + VbaTable::kChunkSize - 1) / VbaTable::kChunkSize);
  f.vbas.Load(f.model);
  f.ExpectMatches();
}

}  // namespace
}  // namespace ftl::map
