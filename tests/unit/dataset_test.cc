// Datasets (docs/architecture.md, "Datasets"): CreateDataset, ListDatasets,
// DestroyDataset, ResizeDataset, SnapshotVolume and Volume::WriteAtomic on
// memory media — their results, their errors, and the kind and size
// surviving a clean reopen, a crash (replay from a checkpoint) and a
// rebuild from the log alone.

#include "ftl/pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

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

// ---- ResizeDataset (issue 22)

TEST_F(DatasetTest, GrowShowsZerosAndKeepsTheData) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 1 << 20));
  auto data = Pattern(20, 0, 64 * kB);
  ASSERT_OK(v->Write((1 << 20) - 64 * kB, data));
  // Past the end before the grow.
  EXPECT_TRUE(absl::IsOutOfRange(v->Write(1 << 20, Pattern(21, 0, kB))));
  ASSERT_OK(pool_->ResizeDataset("vol", 4 << 20));
  EXPECT_EQ(v->size_bytes(), uint64_t(4) << 20);  // the same object, at once
  EXPECT_EQ(pool_->GetVolume("vol"), v);
  EXPECT_EQ(ReadAll(v, (1 << 20) - 64 * kB, data.size()), data);
  EXPECT_EQ(ReadAll(v, 1 << 20, 3 << 20), std::vector<std::byte>(3 << 20));
  auto more = Pattern(22, 0, 8 * kB);
  ASSERT_OK(v->Write((4 << 20) - 8 * kB, more));
  const DatasetInfo* d = Find(pool_->ListDatasets(), "vol");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->size_bytes, uint64_t(4) << 20);
  EXPECT_EQ(d->mapped_bytes, 72 * kB);
  // The same size again is no change.
  ASSERT_OK(pool_->ResizeDataset("vol", 4 << 20));
  for (bool clean : {false, true}) {
    Reopen(clean);
    v = pool_->GetVolume("vol");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->size_bytes(), uint64_t(4) << 20) << clean;
    EXPECT_EQ(ReadAll(v, (1 << 20) - 64 * kB, data.size()), data);
    EXPECT_EQ(ReadAll(v, (4 << 20) - 8 * kB, more.size()), more);
  }
  ExpectNoProblems();
}

TEST_F(DatasetTest, ShrinkIsRefusedWhileDataLiesPastTheNewEnd) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 4 << 20));
  auto head = Pattern(23, 0, 16 * kB);
  auto tail = Pattern(24, 0, 4 * kB);
  ASSERT_OK(v->Write(0, head));
  ASSERT_OK(v->Write(3 << 20, tail));
  absl::Status s = pool_->ResizeDataset("vol", 2 << 20);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("at byte 3145728"), std::string::npos) << s;
  EXPECT_EQ(v->size_bytes(), uint64_t(4) << 20);
  EXPECT_EQ(ReadAll(v, 3 << 20, tail.size()), tail);
  // An immutable range past the new end refuses too.
  ASSERT_OK(v->Trim(3 << 20, 4 * kB));
  ASSERT_OK(pool_->SetRangeAttr("vol", 3 << 20, 64 * kB, RangeAttr::kImmutable));
  s = pool_->ResizeDataset("vol", 2 << 20);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("immutable"), std::string::npos) << s;
  ASSERT_OK(pool_->SetRangeAttr("vol", 3 << 20, 64 * kB, RangeAttr::kMutable));
  // Nothing mapped past the end any more: the shrink goes through.
  ASSERT_OK(pool_->ResizeDataset("vol", 2 << 20));
  EXPECT_EQ(v->size_bytes(), uint64_t(2) << 20);
  EXPECT_EQ(ReadAll(v, 0, head.size()), head);
  EXPECT_TRUE(absl::IsOutOfRange(v->Write(2 << 20, Pattern(25, 0, kB))));
  std::vector<std::byte> one(kB);
  EXPECT_TRUE(absl::IsInvalidArgument(v->Read(2 << 20, one)));
  ExpectNoProblems();
}

TEST_F(DatasetTest, ForcedShrinkDropsTheDataPastTheEndForGood) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 4 << 20));
  auto head = Pattern(26, 0, 1 << 20);
  ASSERT_OK(v->Write(0, head));
  ASSERT_OK(v->Write(1 << 20, Pattern(27, 0, 3 << 20)));
  ASSERT_OK(pool_->SetRangeAttr("vol", 3 << 20, 64 * kB, RangeAttr::kNonPersistent));
  ASSERT_OK(v->Flush());
  const uint64_t live_before = pool_->Stats().live_bytes;
  ASSERT_OK(pool_->ResizeDataset("vol", 1 << 20, /*force=*/true));
  EXPECT_EQ(v->size_bytes(), uint64_t(1) << 20);
  EXPECT_EQ(Find(pool_->ListDatasets(), "vol")->mapped_bytes, uint64_t(1) << 20);
  EXPECT_EQ(pool_->Stats().live_bytes, live_before - (3 << 20));  // for the cleaner
  ASSERT_OK_AND_ASSIGN(std::vector<AttrExtent> attrs, pool_->RangeAttrs("vol"));
  EXPECT_TRUE(attrs.empty());
  // Growing again shows zeros where the dropped data was, also after the
  // log is replayed (the writes before the shrink are in it).
  ASSERT_OK(pool_->ResizeDataset("vol", 4 << 20));
  EXPECT_EQ(ReadAll(v, 1 << 20, 3 << 20), std::vector<std::byte>(3 << 20));
  Reopen(false);
  EXPECT_NE(pool_->OpenReport().find("recovered"), std::string::npos) << pool_->OpenReport();
  v = pool_->GetVolume("vol");
  EXPECT_EQ(v->size_bytes(), uint64_t(4) << 20);
  EXPECT_EQ(ReadAll(v, 0, head.size()), head);
  EXPECT_EQ(ReadAll(v, 1 << 20, 3 << 20), std::vector<std::byte>(3 << 20));
  ExpectNoProblems();
}

TEST_F(DatasetTest, ResizeSurvivesARebuildFromTheLog) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 4 << 20));
  ASSERT_OK(v->Write(3 << 20, Pattern(28, 0, 8 * kB)));
  ASSERT_OK(pool_->ResizeDataset("vol", 2 << 20, /*force=*/true));
  ASSERT_OK(pool_->ResizeDataset("vol", 8 << 20));
  ASSERT_OK(pool_->ResizeDataset("", 4 << 20, /*force=*/true));  // the primary too
  pool_.reset();  // a crash
  DamageCheckpoints();
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen()));
  EXPECT_NE(pool_->OpenReport().find("rebuilt from the log"), std::string::npos)
      << pool_->OpenReport();
  v = pool_->GetVolume("vol");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->size_bytes(), uint64_t(8) << 20);
  EXPECT_EQ(ReadAll(v, 3 << 20, 8 * kB), std::vector<std::byte>(8 * kB));
  EXPECT_EQ(pool_->PrimaryVolume()->size_bytes(), uint64_t(4) << 20);
  ExpectNoProblems();
}

TEST_F(DatasetTest, BadResizesChangeNothing) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 1 << 20));
  ASSERT_OK(pool_->CreateDataset("kv1", DatasetKind::kKv, kTiB).status());
  ASSERT_OK(pool_->CreateSnapshot("vol", "s").status());
  ASSERT_OK(pool_->ActivateSnapshot("vol", "s", "ro", /*read_only=*/true).status());
  const uint64_t next_seq = pool_->Stats().next_seq;
  auto code = [&](const std::string& name, uint64_t size, bool force = false) {
    return pool_->ResizeDataset(name, size, force).code();
  };
  using C = absl::StatusCode;
  EXPECT_EQ(code("vol", 0), C::kInvalidArgument);
  EXPECT_EQ(code("vol", 4095), C::kInvalidArgument);
  EXPECT_EQ(code("vol", (1 << 20) + 512), C::kInvalidArgument);
  EXPECT_EQ(code("vol", (log::kMaxDatasetBlocks + 1) * kB), C::kInvalidArgument);
  EXPECT_EQ(code("vol", uint64_t(1) << 62), C::kInvalidArgument);
  EXPECT_EQ(code("nosuch", 1 << 20), C::kNotFound);
  EXPECT_EQ(code("vol@s", 2 << 20), C::kNotFound);
  EXPECT_EQ(code("kv1", 2 << 20), C::kFailedPrecondition);
  EXPECT_EQ(code("kv1", 2 << 20, true), C::kFailedPrecondition);
  EXPECT_EQ(code("ro", 2 << 20), C::kPermissionDenied);
  EXPECT_EQ(pool_->Stats().next_seq, next_seq);  // no note was written
  EXPECT_EQ(v->size_bytes(), uint64_t(1) << 20);
  EXPECT_EQ(pool_->GetVolume("kv1")->size_bytes(), kTiB);
  // The largest size is fine (thin), and is a note.
  ASSERT_OK(pool_->ResizeDataset("vol", log::kMaxDatasetBlocks * kB));
  EXPECT_EQ(v->size_bytes(), log::kMaxDatasetBlocks * kB);
  ExpectNoProblems();
}

TEST_F(DatasetTest, SnapshotsKeepTheirSizeAndRollbackRestoresIt) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 1 << 20));
  auto before = Pattern(29, 0, 8 * kB);
  ASSERT_OK(v->Write(0, before));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo snap, pool_->CreateSnapshot("vol", "small"));
  EXPECT_EQ(snap.size_bytes, uint64_t(1) << 20);
  ASSERT_OK(pool_->ResizeDataset("vol", 3 << 20));
  ASSERT_OK(v->Write(2 << 20, Pattern(30, 0, 8 * kB)));
  ASSERT_OK(v->Write(0, Pattern(31, 0, 8 * kB)));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo big, pool_->CreateSnapshot("vol", "big"));
  EXPECT_EQ(big.size_bytes, uint64_t(3) << 20);
  ASSERT_OK_AND_ASSIGN(Volume * sv, pool_->SnapshotVolume("vol", "small"));
  EXPECT_EQ(sv->size_bytes(), uint64_t(1) << 20);
  ASSERT_OK_AND_ASSIGN(Volume * act, pool_->ActivateSnapshot("vol", "small", "copy", false));
  EXPECT_EQ(act->size_bytes(), uint64_t(1) << 20);
  // An activation is a volume like any other: it resizes on its own.
  ASSERT_OK(pool_->ResizeDataset("copy", 2 << 20));
  EXPECT_EQ(act->size_bytes(), uint64_t(2) << 20);
  EXPECT_EQ(v->size_bytes(), uint64_t(3) << 20);
  // A forced shrink of the volume leaves its snapshot "big" whole.
  ASSERT_OK(pool_->ResizeDataset("vol", 1 << 20, /*force=*/true));
  ASSERT_OK_AND_ASSIGN(Volume * bv, pool_->SnapshotVolume("vol", "big"));
  EXPECT_EQ(ReadAll(bv, 2 << 20, 8 * kB), Pattern(30, 0, 8 * kB));
  // Rollback: the volume reads as the snapshot again, its size included.
  ASSERT_OK(pool_->Rollback("vol", "big"));
  EXPECT_EQ(v->size_bytes(), uint64_t(3) << 20);
  EXPECT_EQ(ReadAll(v, 2 << 20, 8 * kB), Pattern(30, 0, 8 * kB));
  ASSERT_OK(pool_->Rollback("vol", "small"));
  EXPECT_EQ(v->size_bytes(), uint64_t(1) << 20);
  EXPECT_EQ(ReadAll(v, 0, before.size()), before);
  for (bool clean : {false, true}) {
    Reopen(clean);
    EXPECT_EQ(pool_->GetVolume("vol")->size_bytes(), uint64_t(1) << 20) << clean;
    EXPECT_EQ(pool_->GetVolume("copy")->size_bytes(), uint64_t(2) << 20) << clean;
    ASSERT_OK_AND_ASSIGN(Volume * b, pool_->SnapshotVolume("vol", "big"));
    EXPECT_EQ(b->size_bytes(), uint64_t(3) << 20);
  }
  ExpectNoProblems();
}

// Writes past the new end that race with a shrink are either in before
// it (then a shrink without force is refused, a forced one drops them) or
// refused after it (OutOfRange): never mapped past the end, never lost
// silently by a shrink that was told to keep data.
TEST_F(DatasetTest, WritesRacingAShrinkNeverOutliveIt) {
  ASSERT_OK_AND_ASSIGN(Volume * v, pool_->CreateDataset("vol", DatasetKind::kBlock, 8 << 20));
  for (int round = 0; round < 40; ++round) {
    const bool force = round % 2 == 1;
    ASSERT_OK(pool_->ResizeDataset("vol", 8 << 20));
    ASSERT_OK(v->Trim(4 << 20, 4 << 20));
    std::atomic<bool> stop{false};
    std::atomic<int> written{0}, refused{0};
    std::thread writer([&, round] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        const uint64_t off = (4 << 20) + (i * 64 * kB) % (4 << 20);
        absl::Status s = v->Write(off, Pattern(100 + round, off, 16 * kB));
        if (s.ok()) {
          ++written;
        } else {
          ASSERT_TRUE(absl::IsOutOfRange(s)) << s;
          ++refused;
        }
      }
    });
    while (written.load() < 1 + round % 5) std::this_thread::yield();
    absl::Status s = pool_->ResizeDataset("vol", 4 << 20, force);
    stop = true;
    writer.join();
    if (force) {
      ASSERT_OK(s);
    } else {
      ASSERT_TRUE(absl::IsFailedPrecondition(s)) << s;  // data was past the end
    }
    const DatasetInfo* d = Find(pool_->ListDatasets(), "vol");
    if (s.ok()) {
      EXPECT_EQ(d->size_bytes, uint64_t(4) << 20);
      EXPECT_EQ(d->mapped_bytes, 0u) << "round " << round;
      EXPECT_TRUE(absl::IsOutOfRange(v->Write(4 << 20, Pattern(1, 0, kB))));
    } else {
      EXPECT_EQ(d->size_bytes, uint64_t(8) << 20);
      EXPECT_GT(d->mapped_bytes, 0u);
    }
  }
  ExpectNoProblems();
  Reopen(false);
  ExpectNoProblems();
}

TEST_F(DatasetTest, StatsAddUpTheProvisionedSizes) {
  const PoolStats before = pool_->Stats();
  EXPECT_EQ(before.logical_bytes, pool_->geometry().logical_blocks * kB);
  EXPECT_EQ(before.provisioned_bytes, pool_->PrimaryVolume()->size_bytes());
  ASSERT_OK(pool_->CreateDataset("big", DatasetKind::kBlock, kTiB).status());
  ASSERT_OK(pool_->CreateDataset("kv1", DatasetKind::kKv, kTiB).status());  // not counted
  ASSERT_OK(pool_->CreateSnapshot("big", "s").status());                       // nor this
  EXPECT_EQ(pool_->Stats().provisioned_bytes, before.provisioned_bytes + kTiB);
  ASSERT_OK(pool_->ResizeDataset("big", kTiB / 2));
  EXPECT_EQ(pool_->Stats().provisioned_bytes, before.provisioned_bytes + kTiB / 2);
  ASSERT_OK(pool_->DestroyDataset("big", /*force=*/true));
  EXPECT_EQ(pool_->Stats().provisioned_bytes, before.provisioned_bytes);
}

}  // namespace
}  // namespace ftl
