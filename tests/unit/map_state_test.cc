// MapState::PlanWrite with and without LookupWrites' lookups: the plan
// must not depend on whether, or how long ago, the committer looked the
// blocks up first.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "checkpoint/checkpoint_format.h"
#include "state/map_state.h"
#include "map_test_util.h"
#include "status_asserts.h"
#include "util/checksum.h"
#include "util/encoding.h"

namespace ftl::state {
namespace {

using checkpoint::DecodeCheckpoint;
using checkpoint::EncodeCheckpoint;

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

// ApplyRecord with the committer's lookups (single-block writes edit the
// leaf the lookup found, ExtentTree::AssignInLeaf) leaves the same map as
// without them: both trees, and the refcount of every VBA either maps.
// Records mix in trims, which change the tree under the lookups.
TEST(MapStateApply, LeafEditsFromLookupsMatchFullAssigns) {
  auto a = Build(), b = Build();
  std::mt19937 rng(21);
  Bno pba = 2048;  // segment 1 onwards
  for (uint64_t round = 0; round < 60; ++round) {
    std::vector<Write> ws;
    for (int i = 0; i < 64; ++i) ws.push_back({Bno(rng() % kBlocks), 1});
    ws.push_back(ws[5]);  // the same block twice in one record
    if (round % 10 == 9) ws.push_back({Bno(rng() % (kBlocks - 8)), 8});  // a longer one
    std::vector<bool> none(ws.size(), false);
    a->LookupWrites(kVol, Lbas(ws));
    auto pa = Plan(a.get(), ws, none), pb = Plan(b.get(), ws, none);
    ASSERT_EQ(pa, pb) << round;
    log::RecordHeader h;
    h.seq = round + 10;
    for (size_t i = 0; i < ws.size(); ++i) {
      log::Op op;
      op.type = log::OpType::kWrite;
      op.write.vol = kVol;
      op.write.lba = ws[i].lba;
      op.write.vba = pa[i];
      op.write.csum.assign(pa[i].size(), uint32_t(round));
      h.data_blocks += uint32_t(pa[i].size());
      h.ops.push_back(std::move(op));
      if (i % 16 == 8) {
        // A trim in the same record: it may empty and free leaves the
        // remaining writes' lookups went through (the shape moves).
        log::Op trim;
        trim.type = log::OpType::kTrim;
        trim.trim = {kVol, Bno(rng() % (kBlocks - 300)), 1 + Bno(rng() % 300)};
        h.ops.push_back(std::move(trim));
      }
    }
    if (pba % 2048 + 1 + h.data_blocks > 2048) pba = (pba / 2048 + 1) * 2048;
    a->ApplyRecord(h, pba);
    b->ApplyRecord(h, pba);
    pba += 1 + h.data_blocks;
    if (round % 20 == 19) {  // the trees must still agree block by block
      for (uint32_t vol : {kVol, 2u}) {
        for (Bno lba = 0; lba < kBlocks; ++lba) {
          ASSERT_EQ(a->volume(vol)->tree.LookupOne(lba), b->volume(vol)->tree.LookupOne(lba))
              << "vol " << vol << " lba " << lba << " round " << round;
        }
      }
    }
  }
  std::vector<map::Extent> ea, eb;
  for (uint32_t vol : {kVol, 2u}) {
    a->volume(vol)->tree.ForEach([&](const map::Extent& e) { ea.push_back(e); });
    b->volume(vol)->tree.ForEach([&](const map::Extent& e) { eb.push_back(e); });
  }
  ASSERT_EQ(ea, eb);
  for (const map::Extent& e : ea)
    for (Bno k = 0; k < e.len; ++k)
      ASSERT_EQ(a->vbas().Get(e.vba + k).refs, b->vbas().Get(e.vba + k).refs) << e.vba + k;
  EXPECT_GT(a->tree_context()->in_leaf_edits, 500u);  // the fast path ran
  EXPECT_EQ(b->tree_context()->in_leaf_edits, 0u);    // never without lookups
}


// Leaf entries hold at most map::kMaxEntryLen blocks. A long run survives
// a checkpoint as several entries; a checkpoint written by a build whose
// leaves stored longer entries is refused (recovery then rebuilds from the
// log) instead of being cut to 16 bits.
TEST(CheckpointFormat, LongRunsRoundTripAndOlderLongEntriesAreRefused) {
  constexpr Bno kRun = 70000;  // 65535 + 4465: two leaf entries
  MapState s(64, 2048);
  VolumeMeta* v = s.AddVolume(kVol, "v", 2 * kRun);
  auto run = map::testing::FreshVbas(&s.vbas(), kRun);
  ASSERT_EQ(run.back(), run[0] + kRun - 1);
  v->tree.Assign(0, kRun, run[0]);
  ASSERT_EQ(v->tree.extent_count(), 2u);
  const log::Uuid uuid{};
  std::vector<std::byte> bytes = EncodeCheckpoint(s, uuid, 7);

  MapState back(64, 2048);
  ASSERT_OK(DecodeCheckpoint(bytes, uuid, &back));
  const VolumeMeta* bv = back.FindVolume("v");
  ASSERT_NE(bv, nullptr);
  for (Bno lba : {Bno(0), Bno(65534), Bno(65535), kRun - 1})
    EXPECT_EQ(bv->tree.LookupOne(lba), run[0] + lba);
  EXPECT_EQ(bv->tree.LookupOne(kRun), kNoBlock);

  // The same checkpoint as an older build wrote it: one leaf of one entry
  // (lba gap 0, len 70000, vba delta 0) in place of the two.
  auto b = [](std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int x : v) out.push_back(std::byte(x));
    return out;
  };
  const auto two = b({0, 2, 0, 0, 0xFF, 0xFF, 0x03, 0, 0, 0xF1, 0x22, 0});
  const auto one = b({0, 1, 0, 0, 0xF0, 0xA2, 0x04, 0});
  auto at = std::search(bytes.begin(), bytes.end(), two.begin(), two.end());
  ASSERT_NE(at, bytes.end()) << "leaf encoding changed";
  at = bytes.erase(at, at + ptrdiff_t(two.size()));
  bytes.insert(at, one.begin(), one.end());
  constexpr size_t kBodyAt = 8 + 4 + 16 + 8 + 8 + 8;
  std::span<const std::byte> body(bytes.data() + kBodyAt, bytes.size() - kBodyAt);
  util::PutU64(bytes.data() + kBodyAt - 16, body.size());
  util::PutU64(bytes.data() + kBodyAt - 8, util::Xxh3(body));
  MapState old(64, 2048);
  auto loaded = DecodeCheckpoint(bytes, uuid, &old);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("longer than 65535"), std::string::npos)
      << loaded.status();
  EXPECT_EQ(old.tree_context()->leaves, 0u);  // nothing half-built stays
}

// The dataset kind of every tree survives a checkpoint; a version 2
// checkpoint (before kinds) still loads, every tree a block volume.
TEST(CheckpointFormat, DatasetKindsRoundTripAndVersion2Loads) {
  MapState s(64, 2048);
  s.AddVolume(0, "ftl0", 1000);
  log::Op ds;
  ds.type = log::OpType::kDataset;
  ds.dataset = {1, uint8_t(DatasetKind::kKv), 0, uint64_t(1) << 28, 5, "kv"};
  ASSERT_OK(s.ValidateNote(ds));
  log::RecordHeader h;
  h.seq = 1;
  h.ops = {ds};
  s.ApplyRecord(h, 0);
  log::Op snap;
  snap.type = log::OpType::kTree;
  snap.tree = {2, 1, 1, 1, 6, "s"};
  log::Op act;
  act.type = log::OpType::kTree;
  act.tree = {3, 2, 0, 0, 7, "kv2"};
  h.seq = 2;
  h.ops = {snap, act};
  s.ApplyRecord(h, 1);
  ASSERT_NE(s.volume(3), nullptr);
  EXPECT_EQ(s.volume(1)->dataset, DatasetKind::kKv);
  EXPECT_EQ(s.volume(1)->size_blocks, uint64_t(1) << 28);
  EXPECT_EQ(s.volume(2)->dataset, DatasetKind::kKv);
  EXPECT_EQ(s.volume(3)->dataset, DatasetKind::kKv);
  EXPECT_EQ(s.SnapshotCount(1), 1u);
  // A second dataset of a taken name, or a drop of the primary: refused.
  ds.dataset.id = 4;
  EXPECT_TRUE(absl::IsAlreadyExists(s.ValidateNote(ds)));
  ds.dataset.name = "ftl0";
  EXPECT_TRUE(absl::IsAlreadyExists(s.ValidateNote(ds)));
  ds.dataset.name = "bad@name";
  EXPECT_TRUE(absl::IsInvalidArgument(s.ValidateNote(ds)));
  log::Op drop;
  drop.type = log::OpType::kDrop;
  drop.drop = 0;
  EXPECT_TRUE(absl::IsFailedPrecondition(s.ValidateNote(drop)));
  drop.drop = 1;  // a created dataset is no primary
  EXPECT_OK(s.ValidateNote(drop));

  const log::Uuid uuid{};
  std::vector<std::byte> bytes = EncodeCheckpoint(s, uuid, 3);
  MapState back(64, 2048);
  ASSERT_OK(DecodeCheckpoint(bytes, uuid, &back));
  for (uint32_t id : {1u, 2u, 3u}) {
    ASSERT_NE(back.volume(id), nullptr) << id;
    EXPECT_EQ(back.volume(id)->dataset, DatasetKind::kKv) << id;
  }
  EXPECT_EQ(back.volume(0)->dataset, DatasetKind::kBlock);
  EXPECT_EQ(back.next_tree_id(), 4u);

  // Version 2: one volume, no attributes, so its entry ends the volume
  // list: drop its dataset byte (just before next_tree_id) and re-seal.
  MapState one(64, 2048);
  one.AddVolume(0, "ftl0", 1000)->dataset = DatasetKind::kKv;
  bytes = EncodeCheckpoint(one, uuid, 3);
  constexpr size_t kBodyAt = 8 + 4 + 16 + 8 + 8 + 8;
  ASSERT_EQ(uint8_t(bytes[bytes.size() - 5]), uint8_t(DatasetKind::kKv));
  bytes.erase(bytes.end() - 5);
  util::PutU32(bytes.data() + 8, 2);
  std::span<const std::byte> body(bytes.data() + kBodyAt, bytes.size() - kBodyAt);
  util::PutU64(bytes.data() + kBodyAt - 16, body.size());
  util::PutU64(bytes.data() + kBodyAt - 8, util::Xxh3(body));
  MapState old(64, 2048);
  ASSERT_OK(DecodeCheckpoint(bytes, uuid, &old));
  ASSERT_NE(old.volume(0), nullptr);
  EXPECT_EQ(old.volume(0)->dataset, DatasetKind::kBlock);
  // Without the edit the same bytes read as version 3 are short a byte.
  util::PutU32(bytes.data() + 8, 3);
  MapState bad(64, 2048);
  EXPECT_FALSE(DecodeCheckpoint(bytes, uuid, &bad).ok());
}

}  // namespace
}  // namespace ftl::state
