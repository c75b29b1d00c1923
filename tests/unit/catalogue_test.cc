// snap::Catalogue and range::RangeOps constructed directly over the
// engine's parts (part_test_util.h: Engine), not through a Pool: their
// documented contracts that tests/snapshot_test.cc and
// tests/range_ops_test.cc do not pin — what a change writes (one note,
// durable, a catalogue change or not), when the metadata room is asked and
// what its refusal leaves, the info returned, validation that happens
// without the map lock, and errors.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "part_test_util.h"
#include "range/range_ops.h"
#include "snap/catalogue.h"
#include "state/resolve.h"

namespace ftl {
namespace {

using log::Bno;
using log::kNoBlock;
using parts::Blocks;

constexpr uint64_t kB = kBlockSize;  // one block, in bytes (as in range_ops_test.cc)

class CatalogueTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(e_.Open()); }
  // The metadata room as the pool would answer, recorded.
  absl::Status Room(uint32_t divisor) {
    absl::MutexLock l(&mu_);
    room_calls_.push_back(divisor);
    return room_;
  }
  std::vector<uint32_t> RoomCalls() {
    absl::MutexLock l(&mu_);
    return room_calls_;
  }
  void RefuseRoom() {
    absl::MutexLock l(&mu_);
    room_ = absl::ResourceExhaustedError("metadata area full (test)");
  }
  // Tree `vol`'s VBA at `lba` (kNoBlock: unmapped).
  Bno Vba(uint32_t vol, Bno lba) {
    absl::ReaderMutexLock l(&e_.state.map_mu);
    const state::VolumeMeta* v = e_.state.map->volume(vol);
    return v ? v->tree.LookupOne(lba) : kNoBlock;
  }
  uint32_t Id(const std::string& ref) {
    absl::ReaderMutexLock l(&e_.state.map_mu);
    absl::StatusOr<uint32_t> id = state::ResolveTree(*e_.state.map, ref, true);
    return id.ok() ? *id : state::kNoTree;
  }
  uint64_t Written() const { return e_.durability.last_written(); }

  parts::Engine e_{parts::FormattedMem()};
  absl::Mutex mu_;
  std::vector<uint32_t> room_calls_;
  absl::Status room_;
  snap::Catalogue cat_{&e_.state, &e_.committer, [this](uint32_t d) { return Room(d); }};
  range::RangeOps ranges_{&e_.state, &e_.committer, [this](uint32_t d) { return Room(d); }};
};

// ---- Catalogue

TEST_F(CatalogueTest, CreateSnapshotWritesOneDurableCatalogueNoteAndDescribesIt) {
  Blocks a(1, 4);
  ASSERT_OK(e_.Write(0, 0, a));
  const uint64_t before_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  const uint64_t seq = e_.writer.next_seq();
  absl::StatusOr<SnapshotInfo> s = cat_.CreateSnapshot("", "s1");
  ASSERT_OK(s);
  EXPECT_EQ(s->name, "s1");
  EXPECT_EQ(s->volume, "ftl0");
  EXPECT_EQ(s->seq, seq);  // the seq of its note
  EXPECT_GE(s->created_unix_ns, before_ns);
  EXPECT_EQ(s->size_bytes, e_.sb().primary_blocks * kB);
  EXPECT_EQ(s->parent, "");
  EXPECT_EQ(s->exclusive_bytes, 0u);  // shares everything with the volume
  EXPECT_TRUE(s->active_volumes.empty());
  EXPECT_EQ(e_.catalogue_changes.load(), 1);
  EXPECT_GE(e_.durability.proven(), seq);  // durable when it returns
  EXPECT_EQ(RoomCalls(), std::vector<uint32_t>{16});
  // It shares the volume's blocks.
  EXPECT_NE(Vba(0, 2), kNoBlock);
  EXPECT_EQ(Vba(Id("@s1"), 2), Vba(0, 2));
  // The next one descends from it.
  absl::StatusOr<SnapshotInfo> s2 = cat_.CreateSnapshot("ftl0", "s2");
  ASSERT_OK(s2);
  EXPECT_EQ(s2->parent, "ftl0@s1");
  EXPECT_GT(s2->seq, s->seq);
}

TEST_F(CatalogueTest, ABadNameIsRefusedBeforeAnythingElse) {
  const uint64_t w = Written();
  for (const char* bad : {"", "a@b", "a/b", ".."}) {
    absl::StatusOr<SnapshotInfo> s = cat_.CreateSnapshot("", bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad << ": " << s.status();
  }
  EXPECT_TRUE(absl::IsInvalidArgument(cat_.CreateSnapshot("nope", "a b").status()));
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  EXPECT_TRUE(absl::IsInvalidArgument(cat_.ActivateSnapshot("", "s", "x@y", false).status()));
  EXPECT_EQ(RoomCalls().size(), 1u);  // only for the snapshot that was made
  EXPECT_EQ(Written(), w + 2);        // its note and the marker proving it
}

TEST_F(CatalogueTest, NoMetadataRoomRefusesGrowthAndWritesNothing) {
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  RefuseRoom();
  const uint64_t w = Written();
  const int changes = e_.catalogue_changes.load();
  absl::StatusOr<SnapshotInfo> s = cat_.CreateSnapshot("", "t");
  EXPECT_TRUE(absl::IsResourceExhausted(s.status())) << s.status();
  absl::StatusOr<std::string> a = cat_.ActivateSnapshot("", "s", "act", false);
  EXPECT_TRUE(absl::IsResourceExhausted(a.status())) << a.status();
  EXPECT_EQ(Written(), w);
  EXPECT_EQ(e_.catalogue_changes.load(), changes);
  EXPECT_EQ(Id("@t"), state::kNoTree);
  EXPECT_EQ(cat_.ListSnapshots("").size(), 1u);
}

TEST_F(CatalogueTest, FreeingChangesDoNotNeedMetadataRoom) {
  // What the "metadata area full" error advises (delete snapshots) must
  // work while the area is full.
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  ASSERT_OK(cat_.CreateSnapshot("", "r"));
  ASSERT_OK(cat_.ActivateSnapshot("", "s", "act", false));
  RefuseRoom();
  const size_t calls = RoomCalls().size();
  EXPECT_OK(cat_.Rollback("", "r", false));
  EXPECT_OK(cat_.DeactivateVolume("act"));
  EXPECT_OK(cat_.DeleteSnapshot("", "s", false));
  EXPECT_EQ(RoomCalls().size(), calls);
  EXPECT_EQ(cat_.ListSnapshots("").size(), 1u);
}

TEST_F(CatalogueTest, ActivationNamesVolumeOriginAndReadOnly) {
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  absl::StatusOr<std::string> a = cat_.ActivateSnapshot("", "s", "", /*read_only=*/true);
  ASSERT_OK(a);
  EXPECT_EQ(*a, "ftl0-s");  // the default name: VOLUME-SNAPSHOT
  absl::StatusOr<std::string> b = cat_.ActivateSnapshot("ftl0", "s", "rw", false);
  ASSERT_OK(b);
  EXPECT_EQ(*b, "rw");
  EXPECT_EQ(cat_.VolumeOrigin("ftl0-s"), "ftl0@s");
  EXPECT_EQ(cat_.VolumeOrigin("rw"), "ftl0@s");
  EXPECT_EQ(cat_.VolumeOrigin("ftl0"), "");  // the primary comes from no snapshot
  EXPECT_EQ(cat_.VolumeOrigin("nope"), "");
  {
    absl::ReaderMutexLock l(&e_.state.map_mu);
    const state::VolumeMeta* ro = e_.state.map->FindVolume("ftl0-s");
    const state::VolumeMeta* rw = e_.state.map->FindVolume("rw");
    ASSERT_NE(ro, nullptr);
    ASSERT_NE(rw, nullptr);
    EXPECT_TRUE(ro->read_only);
    EXPECT_FALSE(rw->read_only);
  }
  std::vector<SnapshotInfo> list = cat_.ListSnapshots("ftl0");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].active_volumes, (std::vector<std::string>{"ftl0-s", "rw"}));
  EXPECT_EQ(list[0].active_as, "ftl0-s");
  // Writes to the new volume go through the committer like any other.
  Blocks x(9, 1);
  ASSERT_OK(e_.Write(Id("rw"), 3, x));
  EXPECT_TRUE(e_.Holds(Id("rw"), 3, x, 0));
  EXPECT_EQ(e_.Pba(0, 3), kNoBlock);  // not the origin's
}

TEST_F(CatalogueTest, AForcedDeleteIsOneNote) {
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  ASSERT_OK(cat_.ActivateSnapshot("", "s", "a1", false));
  ASSERT_OK(cat_.ActivateSnapshot("", "s", "a2", true));
  const uint64_t w = Written();
  const int changes = e_.catalogue_changes.load();
  absl::Status refused = cat_.DeleteSnapshot("", "s", false);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("is active as a1"), std::string::npos) << refused;
  EXPECT_EQ(Written(), w);
  ASSERT_OK(cat_.DeleteSnapshot("", "s", /*force=*/true));
  EXPECT_EQ(e_.catalogue_changes.load(), changes + 1);  // one record drops all three
  EXPECT_EQ(Written(), w + 2);                         // that note and its marker
  EXPECT_EQ(Id("a1"), state::kNoTree);
  EXPECT_EQ(Id("a2"), state::kNoTree);
  EXPECT_EQ(Id("@s"), state::kNoTree);
}

TEST_F(CatalogueTest, RollbackErrors) {
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  ASSERT_OK(cat_.ActivateSnapshot("", "s", "other", false));
  ASSERT_OK(cat_.CreateSnapshot("other", "o"));
  EXPECT_TRUE(absl::IsNotFound(cat_.Rollback("", "nope", false)));
  EXPECT_TRUE(absl::IsNotFound(cat_.Rollback("nope", "s", false)));
  // A snapshot of another volume: "o" is resolved as ftl0@o.
  EXPECT_TRUE(absl::IsNotFound(cat_.Rollback("", "o", false)));
  ASSERT_OK(cat_.ActivateSnapshot("", "s", "ro", true));
  absl::Status s = cat_.Rollback("ro", "s", false);  // s is ftl0's, and ro is read-only
  EXPECT_FALSE(s.ok());
}

TEST_F(CatalogueTest, RollbackMakesTheVolumeShareTheSnapshotAgain) {
  Blocks a(1, 2), b(2, 2);
  ASSERT_OK(e_.Write(0, 0, a));
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  ASSERT_OK(e_.Write(0, 0, b));
  ASSERT_OK(e_.Write(0, 10, b));
  EXPECT_NE(Vba(0, 0), Vba(Id("@s"), 0));
  ASSERT_OK(cat_.Rollback("", "s", false));
  EXPECT_EQ(Vba(0, 0), Vba(Id("@s"), 0));
  EXPECT_EQ(Vba(0, 10), kNoBlock);
  EXPECT_TRUE(e_.Holds(0, 1, a, 1));
  // The snapshot is the volume's base now.
  absl::StatusOr<SnapshotInfo> t = cat_.CreateSnapshot("", "t");
  ASSERT_OK(t);
  EXPECT_EQ(t->parent, "ftl0@s");
}

TEST_F(CatalogueTest, SnapshotsOfARemovedVolumeAreStillListedUnderItsName) {
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  ASSERT_OK(cat_.ActivateSnapshot("", "s", "act", false));
  ASSERT_OK(cat_.CreateSnapshot("act", "a1"));
  ASSERT_OK(cat_.DeactivateVolume("act"));
  std::vector<SnapshotInfo> list = cat_.ListSnapshots("act");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "a1");
  EXPECT_EQ(list[0].volume, "act");
  EXPECT_OK(cat_.DeleteSnapshot("act", "a1", false));
  EXPECT_TRUE(cat_.ListSnapshots("act").empty());
}

TEST_F(CatalogueTest, ListSnapshotsIsOrderedByCreationAndFiltersByVolume) {
  ASSERT_OK(cat_.CreateSnapshot("", "b"));
  ASSERT_OK(cat_.ActivateSnapshot("", "b", "v2", false));
  ASSERT_OK(cat_.CreateSnapshot("v2", "x"));
  ASSERT_OK(cat_.CreateSnapshot("", "a"));
  std::vector<std::string> names;
  for (const SnapshotInfo& s : cat_.ListSnapshots("")) names.push_back(s.volume + "@" + s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ftl0@b", "v2@x", "ftl0@a"}));
  EXPECT_EQ(cat_.ListSnapshots("ftl0").size(), 2u);
  EXPECT_EQ(cat_.ListSnapshots("v2").size(), 1u);
  EXPECT_TRUE(cat_.ListSnapshots("nope").empty());
}

TEST_F(CatalogueTest, RangeAttributes) {
  EXPECT_TRUE(absl::IsInvalidArgument(cat_.SetRangeAttr("", 100, kB, RangeAttr::kImmutable)));
  EXPECT_TRUE(absl::IsInvalidArgument(cat_.SetRangeAttr("", 0, 100, RangeAttr::kImmutable)));
  absl::Status zero = cat_.SetRangeAttr("", 0, 0, RangeAttr::kImmutable);
  EXPECT_TRUE(absl::IsInvalidArgument(zero));
  EXPECT_EQ(zero.message(), "length is zero");
  EXPECT_TRUE(absl::IsNotFound(cat_.SetRangeAttr("nope", 0, kB, RangeAttr::kImmutable)));
  const int changes = e_.catalogue_changes.load();
  ASSERT_OK(cat_.SetRangeAttr("", 4 * kB, 8 * kB, RangeAttr::kImmutable));
  EXPECT_EQ(e_.catalogue_changes.load(), changes + 1);  // the volume objects must learn it
  EXPECT_TRUE(e_.state.RangeImmutable(0, 4, 1));
  // A snapshot takes the attributes with it; they can be listed there but
  // not changed.
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  ASSERT_OK(cat_.SetRangeAttr("", 0, 64 * kB, RangeAttr::kMutable));
  absl::StatusOr<std::vector<AttrExtent>> snap = cat_.RangeAttrs("ftl0@s");
  ASSERT_OK(snap);
  ASSERT_EQ(snap->size(), 1u);
  EXPECT_EQ((*snap)[0].offset, 4 * kB);
  EXPECT_EQ((*snap)[0].length, 8 * kB);
  EXPECT_TRUE((*snap)[0].immutable);
  EXPECT_TRUE(cat_.RangeAttrs("")->empty());
  absl::Status s = cat_.SetRangeAttr("@s", 0, kB, RangeAttr::kImmutable);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(cat_.RangeAttrs("@nope").status()));
}

// ---- RangeOps

RangeOp Op(RangeOp::Kind k, uint64_t src, uint64_t dst, uint64_t len, std::string from = "",
           std::string to = "") {
  RangeOp o;
  o.kind = k;
  o.src = src;
  o.dst = dst;
  o.len = len;
  o.from = std::move(from);
  o.to = std::move(to);
  return o;
}

TEST_F(CatalogueTest, ARangeOpIsOneDurableNoteThatIsNoCatalogueChange) {
  Blocks a(1, 4);
  ASSERT_OK(e_.Write(0, 0, a));
  const uint64_t seq = e_.writer.next_seq();
  const int changes = e_.catalogue_changes.load();
  ASSERT_OK(ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, 4 * kB),
                           Op(RangeOp::Kind::kMove, 0, 128 * kB, 2 * kB)}));
  EXPECT_EQ(RoomCalls(), std::vector<uint32_t>{16});
  EXPECT_EQ(e_.catalogue_changes.load(), changes);  // volumes and attributes unchanged
  EXPECT_GE(e_.durability.proven(), seq);
  EXPECT_EQ(Written(), seq + 1);  // the note and a marker: one record for both ops
  absl::StatusOr<log::RecordHeader> h = [&]() -> absl::StatusOr<log::RecordHeader> {
    const uint32_t seg = e_.segments.open(gc::Slot::kCold);
    return e_.HeaderAt(seg * e_.sb().segment_blocks + 5);  // after the 4-block write
  }();
  ASSERT_OK(h);
  EXPECT_EQ(h->seq, seq);
  ASSERT_EQ(h->ops.size(), 3u);  // clone, clone, trim of the moved source
  EXPECT_EQ(h->ops[0].type, log::OpType::kClone);
  EXPECT_EQ(h->ops[1].type, log::OpType::kClone);
  EXPECT_EQ(h->ops[2].type, log::OpType::kTrim);
  // Content by VBA identity, in order: the move saw the clone's effect.
  EXPECT_NE(Vba(0, 64), kNoBlock);
  EXPECT_EQ(Vba(0, 64), Vba(0, 128));
  EXPECT_EQ(Vba(0, 0), kNoBlock);
  EXPECT_NE(Vba(0, 2), kNoBlock);
}

TEST_F(CatalogueTest, ErrorsOfABatchNameTheOperation) {
  absl::Status s = ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, kB),
                                  Op(RangeOp::Kind::kClone, 0, 64 * kB, kB, "nope")});
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message().substr(0, 13), "operation 2: ") << s;
  s = ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, kB, "nope")});
  EXPECT_EQ(s.message().find("operation"), std::string::npos) << s;  // a single op: no prefix
  EXPECT_TRUE(absl::IsInvalidArgument(ranges_.Apply({})));
  EXPECT_TRUE(RoomCalls().empty());  // refused before asking for room
}

TEST_F(CatalogueTest, SnapshotsAreSourcesOfClonesNeverOfMoves) {
  Blocks a(1, 2);
  ASSERT_OK(e_.Write(0, 0, a));
  ASSERT_OK(cat_.CreateSnapshot("", "s"));
  absl::Status s = ranges_.Apply({Op(RangeOp::Kind::kMove, 0, 64 * kB, kB, "@s")});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 0, kB, "", "@s")})));
  ASSERT_OK(ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, 2 * kB, "ftl0@s")}));
  EXPECT_NE(Vba(0, 64), kNoBlock);
  EXPECT_EQ(Vba(0, 64), Vba(Id("@s"), 0));
}

TEST_F(CatalogueTest, NoMetadataRoomRefusesRangeOpsAndWritesNothing) {
  Blocks a(1, 2);
  ASSERT_OK(e_.Write(0, 0, a));
  RefuseRoom();
  const uint64_t w = Written();
  EXPECT_TRUE(absl::IsResourceExhausted(ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, kB)})));
  absl::Notification n;
  absl::Status async;
  ranges_.ApplyAsync({Op(RangeOp::Kind::kClone, 0, 64 * kB, kB)}, [&](absl::Status s) {
    async = s;
    n.Notify();
  });
  ASSERT_TRUE(n.HasBeenNotified());  // refused at once, on this thread
  EXPECT_TRUE(absl::IsResourceExhausted(async)) << async;
  MergeRequest m;
  m.base = 0;
  m.dst = 128 * kB;
  m.len = 2 * kB;
  m.sources = {0};
  absl::StatusOr<MergeResult> r = ranges_.Merge(m);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(Written(), w);
  EXPECT_EQ(Vba(0, 64), kNoBlock);
  EXPECT_EQ(RoomCalls(), (std::vector<uint32_t>{16, 16, 16}));
}

TEST_F(CatalogueTest, AMergeThatChangesNothingWritesNothing) {
  Blocks a(1, 4);
  ASSERT_OK(e_.Write(0, 0, a));
  ASSERT_OK(ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, 4 * kB)}));
  const uint64_t w = Written();
  const size_t calls = RoomCalls().size();
  // Base 0-3 into itself, the only source identical to the base.
  MergeRequest m;
  m.base = 0;
  m.dst = 0;
  m.len = 4 * kB;
  m.sources = {64 * kB};
  absl::StatusOr<MergeResult> r = ranges_.Merge(m);
  ASSERT_OK(r);
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->unchanged, 4u);
  EXPECT_EQ(Written(), w);
  EXPECT_EQ(RoomCalls().size(), calls);
}

TEST_F(CatalogueTest, AMergeWithConflictsUnderKFailWritesNothing) {
  Blocks a(1, 2), b(2, 2), c(3, 2);
  ASSERT_OK(e_.Write(0, 0, a));  // base
  ASSERT_OK(ranges_.Apply({Op(RangeOp::Kind::kClone, 0, 64 * kB, 2 * kB),
                           Op(RangeOp::Kind::kClone, 0, 128 * kB, 2 * kB)}));
  ASSERT_OK(e_.Write(0, 64, b));              // source 1 changes both blocks
  ASSERT_OK(e_.Write(0, 129, Blocks(4, 1)));  // source 2 changes the second
  const uint64_t w = Written();
  MergeRequest m;
  m.base = 0;
  m.dst = 0;
  m.len = 2 * kB;
  m.sources = {64 * kB, 128 * kB};
  m.policy = MergePolicy::kFail;
  absl::StatusOr<MergeResult> r = ranges_.Merge(m);
  ASSERT_OK(r);
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(r->conflicts, std::vector<uint64_t>{kB});
  EXPECT_EQ(Written(), w);
  EXPECT_TRUE(e_.Holds(0, 0, a, 0));
  m.policy = MergePolicy::kLast;
  r = ranges_.Merge(m);
  ASSERT_OK(r);
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(Vba(0, 0), Vba(0, 64));   // only source 1 changed it
  EXPECT_EQ(Vba(0, 1), Vba(0, 129));  // the last source wins the conflict
}

TEST_F(CatalogueTest, RangeOpsAreCheckedWithoutTheMapLock) {
  Blocks a(1, 1);
  ASSERT_OK(e_.Write(0, 0, a));
  std::atomic<bool> refused{false}, queued{false}, done{false};
  absl::Status refused_status, done_status;
  std::thread caller;
  {
    // The committer applying a long batch holds map_mu exclusively.
    absl::MutexLock l(&e_.state.map_mu);
    caller = std::thread([&] {
      ranges_.ApplyAsync({Op(RangeOp::Kind::kClone, 0, 64 * kB, kB, "nope")}, [&](absl::Status s) {
        refused_status = s;
        refused = true;
      });
      ranges_.ApplyAsync({Op(RangeOp::Kind::kClone, 0, 64 * kB, kB)}, [&](absl::Status s) {
        done_status = s;
        done = true;
      });
      queued = true;
    });
    for (int i = 0; i < 500 && !queued; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Both were checked (one refused) and the valid one handed to the
    // committer, all while the map lock was held.
    EXPECT_TRUE(refused.load());
    EXPECT_TRUE(queued.load());
    EXPECT_FALSE(done.load());  // writing it needs the map lock
  }
  caller.join();
  for (int i = 0; i < 500 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(absl::IsNotFound(refused_status)) << refused_status;
  ASSERT_TRUE(done.load());
  EXPECT_OK(done_status);
  EXPECT_EQ(Vba(0, 64), Vba(0, 0));
}

}  // namespace
}  // namespace ftl
