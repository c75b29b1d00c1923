// MapState::PlanWrite with and without LookupWrites' lookups: the plan
// must not depend on whether, or how long ago, the committer looked the
// blocks up first.

#include <gtest/gtest.h>

#include <random>

#include "core/map_state.h"
#include "map_test_util.h"

namespace ftl::core {
namespace {

constexpr Bno kBlocks = 40000;
constexpr uint32_t kVol = 1;

// A pool's map without a log: volume kVol, a long sequential run, a
// fragmented stretch and a snapshot sharing all of it, built the same way
// every time.
std::unique_ptr<MapState> Build() {
  auto s = std::make_unique<MapState>(64, 2048);
  VolumeMeta* v = s->AddVolume(kVol, "v", kBlocks);
  auto run = map::testing::FreshVbas(&s->vbas(), 20000);
  v->tree.Assign(0, 20000, run[0]);
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) {
    Bno lba = 20000 + rng() % 15000, n = 1 + rng() % 3;
    auto vbas = map::testing::FreshVbas(&s->vbas(), n);
    EXPECT_EQ(vbas.back(), vbas[0] + n - 1);
    v->tree.Assign(lba, n, vbas[0]);
  }
  VolumeMeta* snap = s->AddVolume(2, "snap", kBlocks);
  snap->tree = v->tree.Share();
  // Part of the volume private again (written since the snapshot).
  for (Bno lba = 0; lba < kBlocks; lba += 37)
    v->tree.Assign(lba, 1, map::testing::FreshVbas(&s->vbas(), 1)[0]);
  return s;
}

struct Write {
  Bno lba, n;
};

std::vector<Write> Batch(uint64_t seed) {
  std::mt19937 rng(seed);
  std::vector<Write> w;
  for (int i = 0; i < 100; ++i) {
    Bno n = rng() % 4 == 0 ? 1 + rng() % 40 : 1;
    Bno lba = rng() % (kBlocks - n);
    w.push_back({lba, n});
  }
  w.push_back(w[3]);  // the same block twice in one batch
  return w;
}

std::vector<std::vector<Bno>> Plan(MapState* s, const std::vector<Write>& ws,
                                   const std::vector<bool>& skip) {
  std::vector<std::vector<Bno>> out;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (skip[i]) continue;
    out.emplace_back();
    s->PlanWrite(kVol, ws[i].lba, ws[i].n, &out.back());
  }
  return out;
}

std::vector<Bno> Lbas(const std::vector<Write>& ws) {
  std::vector<Bno> l;
  for (const Write& w : ws) l.push_back(w.lba);
  return l;
}

TEST(MapStatePlanWrite, LookupsAheadChangeNothing) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto a = Build(), b = Build();
    std::vector<Write> ws = Batch(seed);
    std::vector<bool> none(ws.size(), false), some(ws.size(), false);
    for (size_t i = 0; i < ws.size(); i += 7) some[i] = true;  // refused requests
    for (const auto* skip : {&none, &some}) {
      a->LookupWrites(kVol, Lbas(ws));
      EXPECT_EQ(Plan(a.get(), ws, *skip), Plan(b.get(), ws, *skip)) << seed;
    }
  }
}

TEST(MapStatePlanWrite, LookupsGoStaleWhenTheTreeChanges) {
  auto a = Build(), b = Build();
  std::vector<Write> ws = Batch(9);
  std::vector<bool> none(ws.size(), false);
  a->LookupWrites(kVol, Lbas(ws));
  // Remap every written block to a private VBA in both: a stale lookup
  // would plan a new VBA (or the old one) instead of reusing the new one.
  for (MapState* s : {a.get(), b.get()}) {
    VolumeMeta* v = s->volume(kVol);
    for (const Write& w : ws) {
      auto vbas = map::testing::FreshVbas(&s->vbas(), w.n);
      ASSERT_EQ(vbas.back(), vbas[0] + w.n - 1);
      v->tree.Assign(w.lba, w.n, vbas[0]);
    }
  }
  EXPECT_EQ(Plan(a.get(), ws, none), Plan(b.get(), ws, none));
}

TEST(MapStatePlanWrite, LookupsGoStaleWhenTheTreeIsShared) {
  auto a = Build();
  // Private blocks with refcount 1: planned in place.
  VolumeMeta* v = a->volume(kVol);
  auto vbas = map::testing::FreshVbas(&a->vbas(), 8);
  v->tree.Assign(100, 8, vbas[0]);
  std::vector<Write> ws = {{100, 8}, {104, 1}};
  std::vector<bool> none(ws.size(), false);
  a->LookupWrites(kVol, Lbas(ws));
  auto before = Plan(a.get(), ws, none);
  EXPECT_EQ(before[0], std::vector<Bno>(vbas.begin(), vbas.end()));
  // Looked up again, then a snapshot shares the path: the blocks must get
  // new VBAs, or writing them would change the snapshot.
  a->LookupWrites(kVol, Lbas(ws));
  VolumeMeta* snap = a->AddVolume(3, "snap2", kBlocks);
  snap->tree = v->tree.Share();
  auto after = Plan(a.get(), ws, none);
  for (Bno x : after[0]) EXPECT_EQ(std::find(vbas.begin(), vbas.end(), x), vbas.end()) << x;
  EXPECT_NE(after[1][0], vbas[4]);
}

}  // namespace
}  // namespace ftl::core
