// state::PoolState and state/resolve.h on their own, over a MapState built
// by hand (records applied with MapState::ApplyRecord, as the committer
// and replay apply them): reader lookups and segment pins, mapped extents,
// immutable ranges; resolving volume names and tree references.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <tuple>

#include "part_test_util.h"
#include "state/pool_state.h"
#include "state/resolve.h"

namespace ftl::state {
namespace {

using parts::ApplyNoteRecord;
using parts::ApplyWriteRecord;

constexpr uint32_t kSegs = 8;
constexpr Bno kSegBlocks = 64;

class PoolStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ps_.map = std::make_unique<MapState>(kSegs, kSegBlocks);
    ps_.InitPins(kSegs);
    ps_.map->AddVolume(0, "ftl0", 1000);
    MapState& m = *ps_.map;
    // Records: header block, then data blocks.
    ApplyWriteRecord(m, 0, 10, 4, /*pba=*/0, 1, 100);    // lba 10-13 -> pba 1-4 (segment 0)
    ApplyWriteRecord(m, 0, 14, 2, /*pba=*/5, 2, 200);    // lba 14-15 -> pba 6-7
    ApplyWriteRecord(m, 0, 20, 2, /*pba=*/128, 3, 300);  // lba 20-21 -> pba 129-130 (segment 2)
    ApplyWriteRecord(m, 0, 30, 1, /*pba=*/64, 4, 400);   // lba 30 -> pba 65 (segment 1)
    ApplyWriteRecord(m, 0, 32, 1, /*pba=*/8, 5, 500);    // lba 32 -> pba 9 (segment 0 again)
  }
  PoolState ps_;
};

TEST_F(PoolStateTest, LookupForReadReturnsPbasAndChecksumsAndPinsTheSegments) {
  std::vector<std::pair<log::Pba, uint32_t>> out;
  std::vector<uint32_t> pinned;
  ps_.LookupForRead(0, 8, 26, &out, &pinned);
  ASSERT_EQ(out.size(), 26u);
  auto at = [&](Bno lba) { return out[lba - 8]; };
  for (Bno k = 0; k < 4; ++k) {
    EXPECT_EQ(at(10 + k).first, log::Pba(1 + k));
    EXPECT_EQ(at(10 + k).second, 100 + k);
  }
  EXPECT_EQ(at(14).first, log::Pba(6));
  EXPECT_EQ(at(15).second, 201u);
  EXPECT_EQ(at(20).first, log::Pba(129));
  EXPECT_EQ(at(21).first, log::Pba(130));
  EXPECT_EQ(at(30).first, log::Pba(65));
  EXPECT_EQ(at(32).first, log::Pba(9));
  EXPECT_EQ(at(32).second, 500u);
  for (Bno lba : {8u, 9u, 16u, 19u, 22u, 29u, 31u, 33u}) {
    EXPECT_EQ(at(lba).first, log::Pba(kNoBlock)) << lba;
    EXPECT_EQ(at(lba).second, 0u) << lba;
  }
  // Every segment read from is pinned, in reading order (segment 0 twice:
  // the pins are counted).
  EXPECT_EQ(pinned, (std::vector<uint32_t>{0, 2, 1, 0}));
  for (uint32_t s = 0; s < kSegs; ++s) EXPECT_EQ(ps_.Pinned(s), s <= 2) << s;
  ps_.Unpin(pinned);
  for (uint32_t s = 0; s < kSegs; ++s) EXPECT_FALSE(ps_.Pinned(s)) << s;
}

TEST_F(PoolStateTest, PinsAreCountedPerReader) {
  std::vector<std::pair<log::Pba, uint32_t>> out;
  std::vector<uint32_t> a, b;
  ps_.LookupForRead(0, 20, 2, &out, &a);
  ps_.LookupForRead(0, 20, 1, &out, &b);
  EXPECT_EQ(a, std::vector<uint32_t>{2});
  EXPECT_EQ(b, std::vector<uint32_t>{2});
  ps_.Unpin(a);
  EXPECT_TRUE(ps_.Pinned(2));  // the second reader still reads it
  ps_.Unpin(b);
  EXPECT_FALSE(ps_.Pinned(2));
}

TEST_F(PoolStateTest, LookupOfHolesAndUnknownTreesPinsNothing) {
  std::vector<std::pair<log::Pba, uint32_t>> out;
  std::vector<uint32_t> pinned;
  ps_.LookupForRead(0, 500, 10, &out, &pinned);
  EXPECT_EQ(out.size(), 10u);
  EXPECT_TRUE(pinned.empty());
  ps_.LookupForRead(7, 10, 4, &out, &pinned);  // no tree 7
  ASSERT_EQ(out.size(), 4u);
  for (const auto& [pba, csum] : out) EXPECT_EQ(pba, log::Pba(kNoBlock));
  EXPECT_TRUE(pinned.empty());
}

TEST_F(PoolStateTest, ATrimmedBlockReadsAsAHole) {
  log::Op trim;
  trim.type = log::OpType::kTrim;
  trim.trim = {0, 11, 2};
  ApplyNoteRecord(*ps_.map, trim, 192, 6);
  std::vector<std::pair<log::Pba, uint32_t>> out;
  std::vector<uint32_t> pinned;
  ps_.LookupForRead(0, 10, 4, &out, &pinned);
  EXPECT_EQ(out[0].first, log::Pba(1));
  EXPECT_EQ(out[1].first, log::Pba(kNoBlock));
  EXPECT_EQ(out[2].first, log::Pba(kNoBlock));
  EXPECT_EQ(out[3].first, log::Pba(4));
  ps_.Unpin(pinned);
}

TEST_F(PoolStateTest, LookupWaitsForTheCommitterHoldingTheMapLock) {
  std::atomic<bool> done{false};
  std::thread reader;
  {
    absl::MutexLock l(&ps_.map_mu);  // the committer applying a record
    reader = std::thread([&] {
      std::vector<std::pair<log::Pba, uint32_t>> out;
      std::vector<uint32_t> pinned;
      ps_.LookupForRead(0, 10, 1, &out, &pinned);
      ps_.Unpin(pinned);
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done.load());
  }
  reader.join();
  EXPECT_TRUE(done.load());
}

TEST_F(PoolStateTest, MappedExtentsJoinAdjacentRunsInBytes) {
  std::vector<BlockExtent> ext = ps_.MappedExtents(0, 8, 26);
  const uint64_t B = kBlockSize;
  std::vector<std::tuple<uint64_t, uint64_t, bool>> got, want = {
      {8 * B, 2 * B, false}, {10 * B, 6 * B, true},  // two records' extents, one run
      {16 * B, 4 * B, false}, {20 * B, 2 * B, true}, {22 * B, 8 * B, false},
      {30 * B, 1 * B, true}, {31 * B, 1 * B, false}, {32 * B, 1 * B, true},
      {33 * B, 1 * B, false}};
  for (const BlockExtent& e : ext) got.emplace_back(e.offset, e.length, e.allocated);
  EXPECT_EQ(got, want);
  // Runs cover the range exactly.
  uint64_t at = 8 * B;
  for (const BlockExtent& e : ext) {
    EXPECT_EQ(e.offset, at);
    at += e.length;
  }
  EXPECT_EQ(at, 34 * B);
}

TEST_F(PoolStateTest, MappedExtentsOfAnUnknownTreeOrAHoleIsOneHole) {
  for (uint32_t vol : {0u, 9u}) {
    std::vector<BlockExtent> ext = ps_.MappedExtents(vol, 600, 50);
    ASSERT_EQ(ext.size(), 1u) << vol;
    EXPECT_EQ(ext[0].offset, 600u * kBlockSize);
    EXPECT_EQ(ext[0].length, 50u * kBlockSize);
    EXPECT_FALSE(ext[0].allocated);
  }
  std::vector<BlockExtent> ext = ps_.MappedExtents(0, 11, 2);  // inside one extent
  ASSERT_EQ(ext.size(), 1u);
  EXPECT_TRUE(ext[0].allocated);
  EXPECT_EQ(ext[0].offset, 11u * kBlockSize);
}

TEST_F(PoolStateTest, MappedBlocks) {
  EXPECT_EQ(ps_.MappedBlocks(0), 10u);
  EXPECT_EQ(ps_.MappedBlocks(3), 0u);
}

TEST_F(PoolStateTest, RangeImmutableSeesOnlyTheImmutableBit) {
  VolumeMeta* v = ps_.map->volume(0);
  v->attrs.Apply(100, 10, log::kAttrImmutable, 0);
  v->attrs.Apply(200, 10, log::kAttrNonPersistent, 0);
  EXPECT_FALSE(ps_.RangeImmutable(0, 95, 5));
  EXPECT_TRUE(ps_.RangeImmutable(0, 95, 6));
  EXPECT_TRUE(ps_.RangeImmutable(0, 109, 1));
  EXPECT_TRUE(ps_.RangeImmutable(0, 0, 1000));
  EXPECT_FALSE(ps_.RangeImmutable(0, 110, 5));
  EXPECT_FALSE(ps_.RangeImmutable(0, 200, 10));  // non-persistent only
  EXPECT_FALSE(ps_.RangeImmutable(4, 100, 10));  // no such tree
}

// ---- Resolving names (state/resolve.h)

class ResolveTest : public ::testing::Test {
 protected:
  // ftl0 (0); ftl0@s1 (1); volume "data" activated from it (2);
  // data@s1 (3), data@only (4). Each note validated, then applied.
  void SetUp() override {
    map_.AddVolume(0, "ftl0", 100);
    Note(Tree(0, 1, "s1"));
    Note(Tree(1, 0, "data"));
    Note(Tree(2, 1, "s1"));
    Note(Tree(2, 1, "only"));
    ASSERT_EQ(map_.volumes().size(), 5u);
  }
  log::Op Tree(uint32_t src, uint8_t kind, const std::string& name) {
    log::Op op;
  op.type = log::OpType::kTree;
    op.tree.id = map_.next_tree_id();
    op.tree.src = src;
    op.tree.kind = kind;
    op.tree.name = name;
    return op;
  }
  void Note(const log::Op& op) {
    ASSERT_TRUE(map_.ValidateNote(op).ok()) << map_.ValidateNote(op);
    ApplyNoteRecord(map_, op, 0, ++seq_);
  }
  MapState map_{4, 64};
  uint64_t seq_ = 0;
};

TEST_F(ResolveTest, VolumesByName) {
  EXPECT_EQ(ResolveVolume(map_, "").value(), 0u);  // "" = the primary
  EXPECT_EQ(ResolveVolume(map_, "ftl0").value(), 0u);
  EXPECT_EQ(ResolveVolume(map_, "data").value(), 2u);
  absl::StatusOr<uint32_t> r = ResolveVolume(map_, "s1");  // a snapshot, not a volume
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  r = ResolveVolume(map_, "nope");
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos) << r.status();
}

TEST_F(ResolveTest, TreeReferences) {
  EXPECT_EQ(ResolveTree(map_, "", false).value(), 0u);
  EXPECT_EQ(ResolveTree(map_, "data", false).value(), 2u);
  EXPECT_EQ(ResolveTree(map_, "data", true).value(), 2u);
  EXPECT_EQ(ResolveTree(map_, "data@s1", true).value(), 3u);
  EXPECT_EQ(ResolveTree(map_, "data@only", true).value(), 4u);
  EXPECT_EQ(ResolveTree(map_, "ftl0@s1", true).value(), 1u);
  EXPECT_EQ(ResolveTree(map_, "@s1", true).value(), 1u);  // "@SNAP": of the primary
}

TEST_F(ResolveTest, SnapshotReferencesRefusedWhereTreesAreChanged) {
  for (const char* ref : {"data@s1", "@s1", "nope@nope"}) {
    absl::StatusOr<uint32_t> r = ResolveTree(map_, ref, /*allow_snapshot=*/false);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << ref << ": " << r.status();
    EXPECT_NE(r.status().message().find("cannot be changed"), std::string::npos) << r.status();
  }
}

TEST_F(ResolveTest, UnknownReferencesAreNotFound) {
  absl::StatusOr<uint32_t> r = ResolveTree(map_, "@only", true);  // only data has it
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  EXPECT_EQ(r.status().message(), "no snapshot 'only' of volume 'ftl0'");
  r = ResolveTree(map_, "data@nope", true);
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  EXPECT_EQ(r.status().message(), "no snapshot 'nope' of volume 'data'");
  r = ResolveTree(map_, "nope@s1", true);
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  r = ResolveTree(map_, "s1", true);  // a bare snapshot name is no volume
  EXPECT_TRUE(absl::IsNotFound(r.status()));
}

TEST_F(ResolveTest, SnapshotsOfARemovedVolumeStayReachableByItsName) {
  log::Op drop;
  drop.type = log::OpType::kDrop;
  drop.drop = 2;
  Note(drop);
  EXPECT_TRUE(absl::IsNotFound(ResolveVolume(map_, "data").status()));
  EXPECT_EQ(ResolveTree(map_, "data@s1", true).value(), 3u);
  EXPECT_EQ(SnapshotRef(*map_.volume(3)), "data@s1");
}

TEST_F(ResolveTest, SnapshotRefNamesVolumeAndSnapshot) {
  EXPECT_EQ(SnapshotRef(*map_.volume(1)), "ftl0@s1");
  EXPECT_EQ(SnapshotRef(*map_.volume(4)), "data@only");
}

TEST(ResolveWithoutPrimaryTest, EmptyNameIsNotFound) {
  MapState map(4, 64);
  map.AddVolume(5, "x", 10);
  absl::StatusOr<uint32_t> r = ResolveVolume(map, "");
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  EXPECT_EQ(r.status().message(), "no primary volume");
  EXPECT_TRUE(absl::IsNotFound(ResolveTree(map, "@s", true).status()));
  EXPECT_EQ(ResolveVolume(map, "x").value(), 5u);
}

TEST(CatalogNameTest, Rules) {
  std::string why;
  for (const std::string& ok : std::vector<std::string>{"a", "ftl0", "A.b_c-9", "..a", std::string(64, 'x')})
    EXPECT_TRUE(ValidCatalogName(ok, &why)) << ok;
  for (const std::string& bad :
       std::vector<std::string>{"", std::string(65, 'x'), "a@b", "a b", "a/b", ".", ".."}) {
    why.clear();
    EXPECT_FALSE(ValidCatalogName(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

}  // namespace
}  // namespace ftl::state
