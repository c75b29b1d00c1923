// Snapshot catalogue through the Pool API (issue 4): content, lineage,
// activation, rollback, delete and space, persistence across clean and
// unclean reopen.

#include <gtest/gtest.h>

#include <random>

#include "ftl/pool.h"
#include "media/fault_media.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using testing::Pattern;
using testing::QuietOpen;
using testing::SmallFormat;

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = NewMemMedia(64 << 20);
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(mem_, SmallFormat(), QuietOpen()));
  }
  void Reopen(bool clean) {
    if (clean) {
      ASSERT_OK(pool_->Close());
    }
    pool_.reset();
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(mem_, QuietOpen()));
  }
  void Put(Volume* v, uint64_t tag, uint64_t off, size_t len) {
    ASSERT_OK(v->Write(off, Pattern(tag, off, len)));
  }
  bool Has(Volume* v, uint64_t tag, uint64_t off, size_t len) {
    std::vector<std::byte> got(len);
    if (!v->Read(off, got).ok()) return false;
    return got == Pattern(tag, off, len);
  }
  bool Zero(Volume* v, uint64_t off, size_t len) {
    std::vector<std::byte> got(len, std::byte{1});
    if (!v->Read(off, got).ok()) return false;
    return got == std::vector<std::byte>(len);
  }
  std::shared_ptr<Media> mem_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(SnapshotTest, SnapshotKeepsOldContentActivationShowsIt) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 1 << 20);  // A
  auto s = pool_->CreateSnapshot("", "s1");
  ASSERT_OK(s);
  EXPECT_EQ(s->name, "s1");
  EXPECT_EQ(s->volume, "ftl0");
  EXPECT_GT(s->seq, 0u);
  Put(v, 2, 0, 1 << 20);  // B
  auto a = pool_->ActivateSnapshot("", "s1", "", false);
  ASSERT_OK(a);
  EXPECT_EQ((*a)->name(), "ftl0-s1");
  EXPECT_TRUE(Has(*a, 1, 0, 1 << 20));
  EXPECT_TRUE(Has(v, 2, 0, 1 << 20));
  // Writes to the activated volume change neither the snapshot nor the volume.
  Put(*a, 3, 4096, 8192);
  EXPECT_TRUE(Has(*a, 3, 4096, 8192));
  EXPECT_TRUE(Has(v, 2, 0, 1 << 20));
  auto b = pool_->ActivateSnapshot("", "s1", "again", true);
  ASSERT_OK(b);
  EXPECT_TRUE(Has(*b, 1, 0, 1 << 20));
  EXPECT_TRUE((*b)->read_only());
  EXPECT_TRUE(absl::IsPermissionDenied((*b)->Write(0, Pattern(9, 0, 4096))));
  EXPECT_EQ(pool_->VolumeOrigin("ftl0-s1"), "ftl0@s1");
  auto names = pool_->VolumeNames();
  EXPECT_EQ(names.size(), 3u);
  auto list = pool_->ListSnapshots("");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_FALSE(list[0].active_as.empty());
}

TEST_F(SnapshotTest, RollbackRestoresSnapshot) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 256 << 10);
  ASSERT_OK(pool_->CreateSnapshot("", "a"));
  Put(v, 2, 0, 128 << 10);
  ASSERT_OK(v->Trim(128 << 10, 64 << 10));
  ASSERT_OK(pool_->Rollback("", "a"));
  EXPECT_TRUE(Has(v, 1, 0, 256 << 10));
  // The volume is writable again and the snapshot is unchanged.
  Put(v, 3, 0, 4096);
  auto a = pool_->ActivateSnapshot("", "a", "", true);
  ASSERT_OK(a);
  EXPECT_TRUE(Has(*a, 1, 0, 256 << 10));
  Reopen(true);
  EXPECT_TRUE(Has(pool_->PrimaryVolume(), 3, 0, 4096));
  EXPECT_TRUE(Has(pool_->PrimaryVolume(), 1, 4096, (256 << 10) - 4096));
}

TEST_F(SnapshotTest, RollbackRefusesToChangeImmutableRanges) {
  Volume* v = pool_->PrimaryVolume();
  auto immutable = [&](uint64_t off, uint64_t len) {
    auto attrs = pool_->RangeAttrs("");
    if (!attrs.ok()) return false;
    for (const AttrExtent& a : *attrs) {
      if (a.immutable && a.offset <= off && off + len <= a.offset + a.length) return true;
    }
    return false;
  };
  Put(v, 1, 0, 64 << 10);
  ASSERT_OK(pool_->SetRangeAttr("", 0, 16 << 10, RangeAttr::kImmutable));
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  // An immutable range the rollback leaves as it is: no refusal, and the
  // attribute stays.
  Put(v, 2, 32 << 10, 16 << 10);
  ASSERT_OK(pool_->Rollback("", "s"));
  EXPECT_TRUE(Has(v, 1, 0, 64 << 10));
  EXPECT_TRUE(immutable(0, 16 << 10));

  // Content changed after the snapshot, then made immutable: refused, and
  // nothing changes.
  Put(v, 3, 32 << 10, 16 << 10);
  ASSERT_OK(pool_->SetRangeAttr("", 32 << 10, 8 << 10, RangeAttr::kImmutable));
  absl::Status st = pool_->Rollback("", "s");
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("immutable"), std::string::npos) << st;
  EXPECT_TRUE(Has(v, 3, 32 << 10, 16 << 10));
  EXPECT_TRUE(immutable(32 << 10, 8 << 10));
  // Mutable again, the rollback goes ahead.
  ASSERT_OK(pool_->SetRangeAttr("", 32 << 10, 8 << 10, RangeAttr::kMutable));
  ASSERT_OK(pool_->Rollback("", "s"));
  EXPECT_TRUE(Has(v, 1, 0, 64 << 10));

  // Same content, but the attribute is newer than the snapshot: the
  // rollback would drop it, so it is refused too.
  ASSERT_OK(pool_->SetRangeAttr("", 16 << 10, 4 << 10, RangeAttr::kImmutable));
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->Rollback("", "s")));
  EXPECT_TRUE(immutable(16 << 10, 4 << 10));

  // A range immutable in the snapshot but not now becomes immutable again.
  ASSERT_OK(pool_->SetRangeAttr("", 0, 64 << 10, RangeAttr::kMutable));
  Put(v, 4, 0, 4096);
  ASSERT_OK(pool_->Rollback("", "s"));
  EXPECT_TRUE(Has(v, 1, 0, 64 << 10));
  EXPECT_TRUE(immutable(0, 16 << 10));
  EXPECT_FALSE(immutable(16 << 10, 4 << 10));
}

TEST_F(SnapshotTest, ForcedRollbackChangesImmutableRanges) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 64 << 10);
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  Put(v, 2, 0, 64 << 10);
  ASSERT_OK(pool_->SetRangeAttr("", 0, 32 << 10, RangeAttr::kImmutable));
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->Rollback("", "s")));
  EXPECT_TRUE(Has(v, 2, 0, 64 << 10));
  // Forced: the snapshot's content and attributes (none) replace the
  // volume's, durably.
  ASSERT_OK(pool_->Rollback("", "s", /*force=*/true));
  EXPECT_TRUE(Has(v, 1, 0, 64 << 10));
  EXPECT_TRUE(pool_->RangeAttrs("")->empty());
  Reopen(false);
  v = pool_->PrimaryVolume();
  EXPECT_TRUE(Has(v, 1, 0, 64 << 10));
  EXPECT_TRUE(pool_->RangeAttrs("")->empty());
  // Errors other than the immutable ranges still win over force.
  EXPECT_TRUE(absl::IsNotFound(pool_->Rollback("", "nope", /*force=*/true)));
}

TEST_F(SnapshotTest, ListShowsEveryActivation) {
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  ASSERT_OK(pool_->ActivateSnapshot("", "s", "a1", false));
  ASSERT_OK(pool_->ActivateSnapshot("", "s", "a2", true));
  auto list = pool_->ListSnapshots("");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].active_as, "a1");
  EXPECT_EQ(list[0].active_volumes, (std::vector<std::string>{"a1", "a2"}));
  ASSERT_OK(pool_->DeactivateVolume("a1"));
  list = pool_->ListSnapshots("");
  EXPECT_EQ(list[0].active_as, "a2");
  EXPECT_EQ(list[0].active_volumes, (std::vector<std::string>{"a2"}));
  Reopen(false);
  list = pool_->ListSnapshots("");
  EXPECT_EQ(list[0].active_volumes, (std::vector<std::string>{"a2"}));
}

TEST_F(SnapshotTest, NamesAndErrors) {
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateSnapshot("", "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateSnapshot("", "a@b").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateSnapshot("", "a b").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->CreateSnapshot("", std::string(65, 'x')).status()));
  EXPECT_TRUE(absl::IsNotFound(pool_->CreateSnapshot("nope", "a").status()));
  ASSERT_OK(pool_->CreateSnapshot("", "a"));
  EXPECT_TRUE(absl::IsAlreadyExists(pool_->CreateSnapshot("", "a").status()));
  EXPECT_TRUE(absl::IsNotFound(pool_->DeleteSnapshot("", "b")));
  EXPECT_TRUE(absl::IsNotFound(pool_->ActivateSnapshot("", "b", "", false).status()));
  ASSERT_OK(pool_->ActivateSnapshot("", "a", "x", false));
  EXPECT_TRUE(absl::IsAlreadyExists(pool_->ActivateSnapshot("", "a", "x", false).status()));
  EXPECT_TRUE(absl::IsAlreadyExists(pool_->ActivateSnapshot("", "a", "ftl0", false).status()));
  // Active snapshots are not deleted (unless forced); the primary is not
  // deactivated.
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DeleteSnapshot("", "a")));
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DeactivateVolume("ftl0")));
  EXPECT_TRUE(absl::IsNotFound(pool_->DeactivateVolume("zzz")));
  // Snapshots of another volume cannot be rolled back onto this one.
  ASSERT_OK(pool_->CreateSnapshot("x", "xs"));
  EXPECT_FALSE(pool_->Rollback("", "xs").ok());
  EXPECT_OK(pool_->Rollback("x", "xs"));
}

TEST_F(SnapshotTest, DeactivateFailsLaterRequestsAndFreesWrites) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 64 << 10);
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  auto a = pool_->ActivateSnapshot("", "s", "act", false);
  ASSERT_OK(a);
  Put(*a, 2, 0, 1 << 20);
  uint64_t live_before = pool_->Stats().live_bytes;
  ASSERT_OK(pool_->DeactivateVolume("act"));
  std::vector<std::byte> buf(4096);
  EXPECT_TRUE(absl::IsUnavailable((*a)->Read(0, buf)));
  EXPECT_TRUE(absl::IsUnavailable((*a)->Write(0, Pattern(1, 0, 4096))));
  EXPECT_EQ(pool_->GetVolume("act"), nullptr);
  EXPECT_LE(pool_->Stats().live_bytes + (1 << 20), live_before);
  EXPECT_OK(pool_->DeleteSnapshot("", "s"));
  // The name is free again.
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  auto again = pool_->ActivateSnapshot("", "s", "act", false);
  ASSERT_OK(again);
  EXPECT_TRUE(Has(*again, 1, 0, 64 << 10));
}

TEST_F(SnapshotTest, ForcedDeleteRemovesActivationsInOneStep) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 4096);
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  auto a = pool_->ActivateSnapshot("", "s", "a1", false);
  auto b = pool_->ActivateSnapshot("", "s", "a2", true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DeleteSnapshot("", "s")));
  ASSERT_OK(pool_->DeleteSnapshot("", "s", /*force=*/true));
  EXPECT_EQ(pool_->GetVolume("a1"), nullptr);
  EXPECT_EQ(pool_->GetVolume("a2"), nullptr);
  EXPECT_TRUE(pool_->ListSnapshots("").empty());
  std::vector<std::byte> buf(4096);
  EXPECT_TRUE(absl::IsUnavailable((*a)->Read(0, buf)));
  Reopen(false);
  EXPECT_EQ(pool_->VolumeNames(), std::vector<std::string>{"ftl0"});
  EXPECT_TRUE(pool_->ListSnapshots("").empty());
}

TEST_F(SnapshotTest, LineageFormsATree) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 4096);
  ASSERT_OK(pool_->CreateSnapshot("", "s1"));
  Put(v, 2, 0, 4096);
  ASSERT_OK(pool_->CreateSnapshot("", "s2"));
  auto a = pool_->ActivateSnapshot("", "s1", "fork", false);
  ASSERT_OK(a);
  Put(*a, 3, 0, 4096);
  ASSERT_OK(pool_->CreateSnapshot("fork", "f1"));
  std::map<std::string, std::string> parent;
  for (const SnapshotInfo& s : pool_->ListSnapshots(""))
    parent[s.volume + "@" + s.name] = s.parent;
  EXPECT_EQ(parent["ftl0@s1"], "");
  EXPECT_EQ(parent["ftl0@s2"], "ftl0@s1");
  EXPECT_EQ(parent["fork@f1"], "ftl0@s1");  // the fork
  // Deleting s2 keeps the rest; deleting... s1 is active (fork), refused.
  EXPECT_OK(pool_->DeleteSnapshot("", "s2"));
  EXPECT_TRUE(absl::IsFailedPrecondition(pool_->DeleteSnapshot("", "s1")));
  ASSERT_OK(pool_->DeactivateVolume("fork"));
  EXPECT_OK(pool_->DeleteSnapshot("", "s1"));
  auto left = pool_->ListSnapshots("");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "f1");
  EXPECT_EQ(left[0].parent, "");  // re-parented past the deleted s1
}

TEST_F(SnapshotTest, CatalogueSurvivesCleanAndUncleanReopen) {
  for (bool clean : {true, false}) {
    SetUp();
    Volume* v = pool_->PrimaryVolume();
    Put(v, 1, 0, 128 << 10);
    ASSERT_OK(pool_->CreateSnapshot("", "s1"));
    Put(v, 2, 0, 64 << 10);
    auto a = pool_->ActivateSnapshot("", "s1", "act", false);
    ASSERT_OK(a);
    Put(*a, 3, 64 << 10, 4096);
    ASSERT_OK((*a)->Flush());
    ASSERT_OK(v->Flush());
    Reopen(clean);
    auto list = pool_->ListSnapshots("");
    ASSERT_EQ(list.size(), 1u) << clean;
    EXPECT_EQ(list[0].active_as, "act");
    Volume* act = pool_->GetVolume("act");
    ASSERT_NE(act, nullptr);
    EXPECT_TRUE(Has(act, 1, 0, 64 << 10));
    EXPECT_TRUE(Has(act, 3, 64 << 10, 4096));
    EXPECT_TRUE(Has(pool_->PrimaryVolume(), 2, 0, 64 << 10));
    EXPECT_TRUE(Has(pool_->PrimaryVolume(), 1, 64 << 10, 64 << 10));
    auto rep = pool_->Check(true);
    ASSERT_OK(rep);
    EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
  }
}

TEST_F(SnapshotTest, ExclusiveSpaceAndReclaimAfterDelete) {
  Volume* v = pool_->PrimaryVolume();
  const size_t mb = 1 << 20;
  Put(v, 1, 0, 4 * mb);
  ASSERT_OK(pool_->Checkpoint());
  uint64_t live_alone = pool_->Stats().live_bytes;
  ASSERT_OK(pool_->CreateSnapshot("", "s"));
  EXPECT_EQ(pool_->ListSnapshots("")[0].exclusive_bytes, 0u);
  Put(v, 2, 0, 2 * mb);  // 2 MiB now held only by the snapshot
  auto list = pool_->ListSnapshots("");
  EXPECT_EQ(list[0].exclusive_bytes, 2 * mb);
  EXPECT_EQ(pool_->Stats().live_bytes, live_alone + 2 * mb);
  ASSERT_OK(pool_->DeleteSnapshot("", "s"));
  EXPECT_EQ(pool_->Stats().live_bytes, live_alone);
  ASSERT_OK(pool_->Checkpoint());
  ASSERT_OK(pool_->RunCleaner(pool_->Stats().segments_total));
  PoolStats st = pool_->Stats();
  EXPECT_EQ(st.live_bytes, live_alone);
  // Media in use is about the live data (plus open segments).
  uint64_t seg = uint64_t(pool_->geometry().segment_blocks) * 4096;
  EXPECT_LE(uint64_t(st.segments_total - st.segments_free) * seg, live_alone + 3 * seg);
}

TEST_F(SnapshotTest, ManySnapshotsShareUnchangedLeaves) {
  Volume* v = pool_->PrimaryVolume();
  Put(v, 1, 0, 8 << 20);
  uint64_t mem0 = pool_->Stats().map_memory_bytes;
  for (int i = 0; i < 100; ++i)
    ASSERT_OK(pool_->CreateSnapshot("", "s" + std::to_string(i)));
  // Nothing changed after them: no tree node was copied.
  EXPECT_EQ(pool_->Stats().map_memory_bytes, mem0);
  EXPECT_EQ(pool_->Stats().snapshots, 100u);
  Put(v, 2, 4096 * 7, 4096);
  EXPECT_GT(pool_->Stats().map_memory_bytes, mem0);
  Reopen(true);
  EXPECT_EQ(pool_->ListSnapshots("ftl0").size(), 100u);
}

TEST_F(SnapshotTest, MetadataAreaFullRefusesSnapshotsAndKeepsThePool) {
  Volume* v = pool_->PrimaryVolume();
  std::mt19937_64 rng(5);
  const uint64_t blocks = v->size_bytes() / 4096;
  absl::Status refused;
  int taken = 0;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    // Scattered writes make every leaf diverge from the last snapshot.
    for (int k = 0; k < 300; ++k) {
      uint64_t off = (rng() % blocks) * 4096;
      absl::Status s = v->Write(off, Pattern(i * 10000 + k, off, 4096));
      if (!s.ok()) {
        refused = s;
        break;
      }
    }
    if (!refused.ok()) break;
    auto snap = pool_->CreateSnapshot("", "s" + std::to_string(i));
    if (!snap.ok()) refused = snap.status();
    else ++taken;
  }
  ASSERT_FALSE(refused.ok()) << "the metadata area never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_NE(refused.message().find("metadata area full"), std::string::npos) << refused;
  EXPECT_GT(taken, 2);
  std::printf("snapshots before the metadata area filled: %d (%s)\n", taken, std::string(refused.message()).c_str());
  PoolStats st = pool_->Stats();
  EXPECT_LE(st.metadata_bytes, st.metadata_capacity);
  // Nothing is lost: checkpoints still fit, the pool closes and reopens.
  ASSERT_OK(pool_->Checkpoint());
  Reopen(true);
  EXPECT_EQ(pool_->ListSnapshots("").size(), size_t(taken));
  auto rep = pool_->Check(false);
  ASSERT_OK(rep);
  EXPECT_TRUE(rep->problems.empty());
  // Deleting snapshots makes room again.
  for (int i = 0; i < taken; ++i) ASSERT_OK(pool_->DeleteSnapshot("", "s" + std::to_string(i)));
  ASSERT_OK(pool_->Checkpoint());
  EXPECT_OK(pool_->CreateSnapshot("", "again"));
}

}  // namespace
}  // namespace ftl
