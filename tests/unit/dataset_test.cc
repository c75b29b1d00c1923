// Datasets (docs/architecture.md, "Datasets"): CreateDataset, ListDatasets,
// DestroyDataset, SnapshotVolume and Volume::WriteAtomic on memory media —
// their results, their errors, and the kind surviving a clean reopen, a
// crash (replay from a checkpoint) and a rebuild from the log alone.

#include "ftl/pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "checkpoint/checkpointer.h"
#include "log/log_format.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using testing::Pattern;
using testing::QuietOpen;
using testing::SmallFormat;

constexpr uint64_t kB = 4096;
constexpr uint64_t kTiB = uint64_t(1) << 40;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    media_ = NewMemMedia(64 << 20);
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(media_, SmallFormat(), QuietOpen()));
  }
  // clean: Close first; otherwise the pool is dropped as in a crash.
  void Reopen(bool clean) {
    if (clean) {
      ASSERT_OK(pool_->Close());
    }
    pool_.reset();
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen()));
  }
  // Makes both checkpoint slots unusable, so that the next open rebuilds
  // the map from the log alone.
  void DamageCheckpoints() {
    std::vector<std::byte> block(kB);
    ASSERT_OK(media_->Read(0, block));
    ASSERT_OK_AND_ASSIGN(log::Superblock sb, log::DecodeSuperblock(block));
    std::vector<std::byte> junk(kB, std::byte{0x5a});
    for (int slot = 0; slot < 2; ++slot) {
      ASSERT_OK(media_->Write(checkpoint::SlotOffset(sb, slot), junk));
    }
  }
  const DatasetInfo* Find(const std::vector<DatasetInfo>& all, const std::string& name) {
    for (const DatasetInfo& d : all)
      if (d.name == name) return &d;
    return nullptr;
  }
  std::vector<std::byte> ReadAll(Volume* v, uint64_t off, size_t len) {
    std::vector<std::byte> out(len);
    EXPECT_OK(v->Read(off, out));
    return out;
  }
  void ExpectNoProblems() {
    ASSERT_OK_AND_ASSIGN(CheckReport rep, pool_->Check(true));
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0];
  }

  std::shared_ptr<Media> media_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(DatasetTest, CreateMakesAnEmptyThinDatasetOfItsKind) {
  ASSERT_OK_AND_ASSIGN(Volume * kv, pool_->CreateDataset("kv1", DatasetKind::kKv, kTiB));
  EXPECT_EQ(kv->name(), "kv1");
  EXPECT_EQ(kv->kind(), DatasetKind::kKv);
  EXPECT_EQ(kv->size_bytes(), kTiB);  // far past the pool: thin
  EXPECT_FALSE(kv->read_only());
  EXPECT_EQ(pool_->GetVolume("kv1"), kv);
  EXPECT_EQ(ReadAll(kv, kTiB - 8 * kB, 8 * kB), std::vector<std::byte>(8 * kB));
  auto data = Pattern(1, 0, 16 * kB);
  ASSERT_OK(kv->Write(kTiB - 16 * kB, data));
  EXPECT_EQ(ReadAll(kv, kTiB - 16 * kB, data.size()), data);
  // A block dataset too; the primary stays a block volume.
  ASSERT_OK_AND_ASSIGN(Volume * blk, pool_->CreateDataset("blk", DatasetKind::kBlock, 1 << 20));
  EXPECT_EQ(blk->kind(), DatasetKind::kBlock);
  EXPECT_EQ(pool_->PrimaryVolume()->kind(), DatasetKind::kBlock);
  ExpectNoProblems();
}

TEST_F(DatasetTest, CreateRefusesBadNamesSizesAndDuplicates) {
  ASSERT_OK(pool_->CreateDataset("kv1", DatasetKind::kKv, 1 << 20).status());
  EXPECT_TRUE(absl::IsAlreadyExists(pool_->CreateDataset("kv1", DatasetKind::kKv, 1 << 20).status()));
  EXPECT_TRUE(absl::IsAlreadyExists(pool_->CreateDataset("ftl0", DatasetKind::kKv, 1 << 20).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("", DatasetKind::kKv, 1 << 20).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("a@b", DatasetKind::kKv, 1 << 20).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("a/b", DatasetKind::kKv, 1 << 20).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("z0", DatasetKind::kKv, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("z1", DatasetKind::kKv, 4095).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("z2", DatasetKind::kKv, 4097).status()));
  // Bno is 32-bit: 2^32 - 2 blocks is the largest size.
  const uint64_t max = (uint64_t(UINT32_MAX) - 1) * kB;
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateDataset("z3", DatasetKind::kKv, max + kB).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->CreateDataset("z4", DatasetKind(7), 1 << 20).status()));
  ASSERT_OK_AND_ASSIGN(Volume * big, pool_->CreateDataset("z5", DatasetKind::kKv, max));
  EXPECT_EQ(big->size_bytes(), max);
  ASSERT_OK(big->Write(max - kB, Pattern(2, 0, kB)));
  EXPECT_EQ(ReadAll(big, max - kB, kB), Pattern(2, 0, kB));
  // None of the refused ones exists.
  for (const char* n : {"z0", "z1", "z2", "z3", "z4"}) EXPECT_EQ(pool_->GetVolume(n), nullptr) << n;
  ExpectNoProblems();
}

TEST_F(DatasetTest, ListShowsEveryVolumeKindTree) {
  ASSERT_OK_AND_ASSIGN(Volume * kv, pool_->CreateDataset("kv1", DatasetKind::kKv, 1 << 20));
  ASSERT_OK(kv->Write(0, Pattern(3, 0, 3 * kB)));
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s1").status());
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s2").status());
  ASSERT_OK(pool_->CreateSnapshot("", "p1").status());
  ASSERT_OK(pool_->ActivateSnapshot("kv1", "s1", "kv1-copy", true).status());
  std::vector<DatasetInfo> all = pool_->ListDatasets();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(),
                             [](const DatasetInfo& a, const DatasetInfo& b) { return a.name < b.name; }));
  const DatasetInfo* p = Find(all, "ftl0");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->kind, DatasetKind::kBlock);
  EXPECT_EQ(p->snapshots, 1u);
  EXPECT_EQ(p->origin, "");
  const DatasetInfo* k = Find(all, "kv1");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->kind, DatasetKind::kKv);
  EXPECT_EQ(k->size_bytes, 1u << 20);
  EXPECT_EQ(k->mapped_bytes, 3 * kB);
  EXPECT_EQ(k->snapshots, 2u);
  EXPECT_FALSE(k->read_only);
  const DatasetInfo* c = Find(all, "kv1-copy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->kind, DatasetKind::kKv);  // inherited through the snapshot
  EXPECT_EQ(c->origin, "kv1@s1");
  EXPECT_TRUE(c->read_only);
  EXPECT_EQ(c->mapped_bytes, 3 * kB);
  EXPECT_EQ(pool_->GetVolume("kv1-copy")->kind(), DatasetKind::kKv);
}

TEST_F(DatasetTest, DestroyFreesTheTreeAndItsVolumeGoesUnavailable) {
  ASSERT_OK_AND_ASSIGN(Volume * kv, pool_->CreateDataset("kv1", DatasetKind::kKv, 4 << 20));
  ASSERT_OK(kv->Write(0, Pattern(4, 0, 1 << 20)));
  ASSERT_OK(pool_->Checkpoint());
  const uint64_t live_before = pool_->Stats().live_bytes;
  ASSERT_OK(pool_->DestroyDataset("kv1"));
  EXPECT_EQ(pool_->GetVolume("kv1"), nullptr);
  EXPECT_EQ(Find(pool_->ListDatasets(), "kv1"), nullptr);
  // The data is garbage now: the cleaner may take it.
  EXPECT_LE(pool_->Stats().live_bytes + (1 << 20), live_before);
  std::vector<std::byte> buf(kB);
  EXPECT_TRUE(absl::IsUnavailable(kv->Read(0, buf)));
  EXPECT_TRUE(absl::IsUnavailable(kv->Write(0, buf)));
  Volume::Piece piece{0, buf};
  EXPECT_TRUE(absl::IsUnavailable(kv->WriteAtomic({&piece, 1})));
  EXPECT_TRUE(absl::IsNotFound(pool_->DestroyDataset("kv1")));
  ExpectNoProblems();
  // The name is free again, for a fresh empty dataset.
  ASSERT_OK_AND_ASSIGN(Volume * again, pool_->CreateDataset("kv1", DatasetKind::kBlock, 1 << 20));
  EXPECT_NE(again, kv);
  EXPECT_EQ(ReadAll(again, 0, kB), std::vector<std::byte>(kB));
  Reopen(true);
  EXPECT_EQ(pool_->GetVolume("kv1")->kind(), DatasetKind::kBlock);
}

TEST_F(DatasetTest, DestroyRefusesThePrimaryAndSnapshotsWithoutForce) {
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DestroyDataset("ftl0")));
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DestroyDataset("ftl0", true)));
  EXPECT_TRUE(absl::IsNotFound(pool_->DestroyDataset("nope")));
  ASSERT_OK(pool_->CreateDataset("kv1", DatasetKind::kKv, 1 << 20).status());
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s1").status());
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s2").status());
  ASSERT_OK(pool_->CreateSnapshot("", "keep").status());
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DestroyDataset("kv1")));
  EXPECT_NE(pool_->GetVolume("kv1"), nullptr);
  // Force, but a snapshot of it is active: refused, nothing changes.
  ASSERT_OK(pool_->ActivateSnapshot("kv1", "s2", "act", false).status());
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DestroyDataset("kv1", true)));
  EXPECT_EQ(pool_->ListSnapshots("kv1").size(), 2u);
  ASSERT_OK(pool_->DeactivateVolume("act"));
  ASSERT_OK_AND_ASSIGN(Volume * sv, pool_->SnapshotVolume("kv1", "s1"));
  ASSERT_OK(pool_->DestroyDataset("kv1", true));
  EXPECT_EQ(pool_->GetVolume("kv1"), nullptr);
  EXPECT_TRUE(pool_->ListSnapshots("kv1").empty());
  EXPECT_EQ(pool_->ListSnapshots("").size(), 1u);  // others stay
  std::vector<std::byte> buf(kB);
  EXPECT_TRUE(absl::IsUnavailable(sv->Read(0, buf)));
  ExpectNoProblems();
}

TEST_F(DatasetTest, ActivatedVolumesCanBeDestroyed) {
  ASSERT_OK(pool_->CreateSnapshot("", "s").status());
  ASSERT_OK(pool_->ActivateSnapshot("", "s", "act", false).status());
  ASSERT_OK(pool_->DestroyDataset("act"));
  EXPECT_EQ(pool_->GetVolume("act"), nullptr);
  EXPECT_EQ(pool_->ListSnapshots("").size(), 1u);
  ExpectNoProblems();
}

TEST_F(DatasetTest, SnapshotVolumeIsAReadOnlyUnexportedView) {
  ASSERT_OK_AND_ASSIGN(Volume * kv, pool_->CreateDataset("kv1", DatasetKind::kKv, 1 << 20));
  auto before = Pattern(5, 0, 4 * kB);
  ASSERT_OK(kv->Write(0, before));
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s1").status());
  ASSERT_OK(kv->Write(0, Pattern(6, 0, 4 * kB)));
  ASSERT_OK_AND_ASSIGN(Volume * sv, pool_->SnapshotVolume("kv1", "s1"));
  EXPECT_EQ(sv->name(), "kv1@s1");
  EXPECT_TRUE(sv->read_only());
  EXPECT_EQ(sv->kind(), DatasetKind::kKv);
  EXPECT_EQ(sv->size_bytes(), 1u << 20);
  EXPECT_EQ(ReadAll(sv, 0, before.size()), before);
  EXPECT_TRUE(absl::IsPermissionDenied(sv->Write(0, before)));
  Volume::Piece piece{0, before};
  EXPECT_TRUE(absl::IsPermissionDenied(sv->WriteAtomic({&piece, 1})));
  EXPECT_TRUE(absl::IsPermissionDenied(sv->Trim(0, kB)));
  // Asking again gives the same object; it is no volume of the pool.
  ASSERT_OK_AND_ASSIGN(Volume * again, pool_->SnapshotVolume("kv1", "s1"));
  EXPECT_EQ(again, sv);
  std::vector<std::string> names = pool_->VolumeNames();
  EXPECT_EQ(std::count(names.begin(), names.end(), "kv1@s1"), 0);
  EXPECT_EQ(pool_->GetVolume("kv1@s1"), nullptr);
  EXPECT_EQ(pool_->ListDatasets().size(), 2u);
  // Of the primary (a block volume) too, by "" or its name.
  ASSERT_OK(pool_->CreateSnapshot("", "p").status());
  ASSERT_OK_AND_ASSIGN(Volume * pv, pool_->SnapshotVolume("", "p"));
  EXPECT_EQ(pv->kind(), DatasetKind::kBlock);
  EXPECT_TRUE(absl::IsNotFound(pool_->SnapshotVolume("kv1", "nope").status()));
  EXPECT_TRUE(absl::IsNotFound(pool_->SnapshotVolume("nope", "s1").status()));
  // Gone with its snapshot; a new snapshot of the same name is a new view.
  ASSERT_OK(pool_->DeleteSnapshot("kv1", "s1"));
  std::vector<std::byte> buf(kB);
  EXPECT_TRUE(absl::IsUnavailable(sv->Read(0, buf)));
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s1").status());
  ASSERT_OK_AND_ASSIGN(Volume * fresh, pool_->SnapshotVolume("kv1", "s1"));
  EXPECT_NE(fresh, sv);
  EXPECT_EQ(ReadAll(fresh, 0, 4 * kB), Pattern(6, 0, 4 * kB));
}

TEST_F(DatasetTest, WriteAtomicWritesEveryPiece) {
  Volume* v = pool_->PrimaryVolume();
  auto a = Pattern(7, 0, 2 * kB), b = Pattern(8, 0, kB), c = Pattern(9, 0, 5 * kB);
  // Given out of order: the engine sorts them.
  std::vector<Volume::Piece> pieces = {{100 * kB, c}, {0, a}, {50 * kB, b}, {10 * kB, {}}};
  ASSERT_OK(v->WriteAtomic(pieces, /*fua=*/true));
  EXPECT_EQ(ReadAll(v, 0, a.size()), a);
  EXPECT_EQ(ReadAll(v, 50 * kB, b.size()), b);
  EXPECT_EQ(ReadAll(v, 100 * kB, c.size()), c);
  EXPECT_EQ(ReadAll(v, 2 * kB, kB), std::vector<std::byte>(kB));
  EXPECT_OK(v->WriteAtomic({}));
  Reopen(false);  // fua: durable
  v = pool_->PrimaryVolume();
  EXPECT_EQ(ReadAll(v, 0, a.size()), a);
  EXPECT_EQ(ReadAll(v, 100 * kB, c.size()), c);
}

TEST_F(DatasetTest, WriteAtomicRefusesBadPieces) {
  Volume* v = pool_->PrimaryVolume();
  const uint64_t atomic = pool_->geometry().max_atomic_bytes;
  auto blk = Pattern(10, 0, 2 * kB);
  auto odd = Pattern(11, 0, kB + 512);
  auto big = Pattern(12, 0, atomic);
  using P = Volume::Piece;
  auto refuse = [&](std::vector<P> ps) { return v->WriteAtomic(ps); };
  // Overlapping (also when given out of order), unaligned, too large.
  EXPECT_TRUE(absl::IsInvalidArgument(refuse({{0, blk}, {kB, blk}})));
  EXPECT_TRUE(absl::IsInvalidArgument(refuse({{10 * kB, blk}, {9 * kB, blk}})));
  EXPECT_TRUE(absl::IsInvalidArgument(refuse({{0, blk}, {0, blk}})));
  EXPECT_TRUE(absl::IsInvalidArgument(refuse({{512, blk}})));
  EXPECT_TRUE(absl::IsInvalidArgument(refuse({{0, odd}})));
  EXPECT_TRUE(absl::IsInvalidArgument(refuse({{0, big}, {atomic, blk}})));
  EXPECT_OK(refuse({{0, big}}));  // exactly the atomic size is fine
  // Past the end: as Write.
  EXPECT_TRUE(absl::IsOutOfRange(refuse({{v->size_bytes() - kB, blk}})));
  // Immutable ranges: as Write; nothing of the write lands.
  ASSERT_OK(pool_->SetRangeAttr("", 64 * kB, kB, RangeAttr::kImmutable));
  auto before = ReadAll(v, 0, 2 * kB);
  EXPECT_TRUE(absl::IsPermissionDenied(refuse({{0, Pattern(13, 0, 2 * kB)}, {63 * kB, blk}})));
  EXPECT_EQ(ReadAll(v, 0, 2 * kB), before);
}

TEST_F(DatasetTest, KindSurvivesCloseAndOpen) {
  ASSERT_OK(pool_->CreateDataset("kv1", DatasetKind::kKv, kTiB).status());
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s").status());
  ASSERT_OK(pool_->ActivateSnapshot("kv1", "s", "kv2", false).status());
  Reopen(true);
  EXPECT_EQ(pool_->GetVolume("kv1")->kind(), DatasetKind::kKv);
  EXPECT_EQ(pool_->GetVolume("kv1")->size_bytes(), kTiB);
  EXPECT_EQ(pool_->GetVolume("kv2")->kind(), DatasetKind::kKv);
  ASSERT_OK_AND_ASSIGN(Volume * sv, pool_->SnapshotVolume("kv1", "s"));
  EXPECT_EQ(sv->kind(), DatasetKind::kKv);
  EXPECT_EQ(pool_->PrimaryVolume()->kind(), DatasetKind::kBlock);
}

// Created, written, snapshotted and destroyed after the last checkpoint:
// replay alone brings it all back.
TEST_F(DatasetTest, KindSurvivesACrash) {
  ASSERT_OK_AND_ASSIGN(Volume * kv, pool_->CreateDataset("kv1", DatasetKind::kKv, kTiB));
  auto data = Pattern(14, 0, 8 * kB);
  ASSERT_OK(kv->Write(kTiB / 2, data, /*fua=*/true));
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s").status());
  ASSERT_OK(pool_->ActivateSnapshot("kv1", "s", "kv2", false).status());
  ASSERT_OK(pool_->CreateDataset("gone", DatasetKind::kKv, 1 << 20).status());
  ASSERT_OK(pool_->DestroyDataset("gone"));
  Reopen(false);
  EXPECT_NE(pool_->OpenReport().find("recovered"), std::string::npos) << pool_->OpenReport();
  ASSERT_NE(pool_->GetVolume("kv1"), nullptr);
  EXPECT_EQ(pool_->GetVolume("kv1")->kind(), DatasetKind::kKv);
  EXPECT_EQ(ReadAll(pool_->GetVolume("kv1"), kTiB / 2, data.size()), data);
  EXPECT_EQ(pool_->GetVolume("kv2")->kind(), DatasetKind::kKv);
  EXPECT_EQ(pool_->GetVolume("gone"), nullptr);
  ExpectNoProblems();
  // The recovered checkpoints hold the kinds too.
  Reopen(true);
  EXPECT_EQ(pool_->GetVolume("kv1")->kind(), DatasetKind::kKv);
  EXPECT_EQ(pool_->GetVolume("kv2")->kind(), DatasetKind::kKv);
}

TEST_F(DatasetTest, KindSurvivesARebuildFromTheLog) {
  ASSERT_OK_AND_ASSIGN(Volume * kv, pool_->CreateDataset("kv1", DatasetKind::kKv, kTiB));
  auto data = Pattern(15, 0, 8 * kB);
  ASSERT_OK(kv->Write(kB * 1000, data, /*fua=*/true));
  ASSERT_OK(pool_->CreateSnapshot("kv1", "s").status());
  ASSERT_OK(pool_->ActivateSnapshot("kv1", "s", "kv2", false).status());
  ASSERT_OK(pool_->CreateDataset("blk", DatasetKind::kBlock, 1 << 20).status());
  ASSERT_OK(pool_->CreateDataset("gone", DatasetKind::kKv, 1 << 20).status());
  ASSERT_OK(pool_->DestroyDataset("gone"));
  pool_.reset();  // a crash
  DamageCheckpoints();
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen()));
  EXPECT_NE(pool_->OpenReport().find("rebuilt from the log"), std::string::npos)
      << pool_->OpenReport();
  ASSERT_NE(pool_->GetVolume("kv1"), nullptr);
  EXPECT_EQ(pool_->GetVolume("kv1")->kind(), DatasetKind::kKv);
  EXPECT_EQ(pool_->GetVolume("kv1")->size_bytes(), kTiB);
  EXPECT_EQ(ReadAll(pool_->GetVolume("kv1"), kB * 1000, data.size()), data);
  ASSERT_NE(pool_->GetVolume("kv2"), nullptr);
  EXPECT_EQ(pool_->GetVolume("kv2")->kind(), DatasetKind::kKv);
  EXPECT_EQ(pool_->GetVolume("blk")->kind(), DatasetKind::kBlock);
  EXPECT_EQ(pool_->GetVolume("gone"), nullptr);
  ASSERT_OK_AND_ASSIGN(Volume * sv, pool_->SnapshotVolume("kv1", "s"));
  EXPECT_EQ(sv->kind(), DatasetKind::kKv);
  ExpectNoProblems();
}

TEST_F(DatasetTest, ReadOnlyPoolRefusesDatasetChanges) {
  ASSERT_OK(pool_->CreateDataset("kv1", DatasetKind::kKv, 1 << 20).status());
  ASSERT_OK(pool_->Close());
  pool_.reset();
  OpenOptions ro = QuietOpen();
  ro.read_only = true;
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, ro));
  EXPECT_FALSE(pool_->CreateDataset("kv2", DatasetKind::kKv, 1 << 20).ok());
  EXPECT_FALSE(pool_->DestroyDataset("kv1").ok());
  const DatasetInfo* k = Find(pool_->ListDatasets(), "kv1");
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(k->read_only);
  EXPECT_EQ(k->kind, DatasetKind::kKv);
}

}  // namespace
}  // namespace ftl
