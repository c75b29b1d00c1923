// commit::Committer, RecordWriter and SlotClassifier, assembled as
// core::PoolImpl assembles them (part_test_util.h: Engine) but without
// volumes, a cleaner or a Pool: requests go in, records come out on the
// media and in the map (docs/architecture.md, "An NBD write").

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "commit/committer.h"
#include "commit/record_writer.h"
#include "commit/slot_classifier.h"
#include "part_test_util.h"

namespace ftl::commit {
namespace {

using log::Bno;
using log::kNoBlock;
using parts::Blocks;
using parts::Engine;
using parts::EngineOptions;

// The header blocks of segment `seg` start at its first block.
Bno First(const Engine& e, uint32_t seg) { return seg * e.sb().segment_blocks; }

log::Op SnapshotOp(uint32_t src, const std::string& name) {
  log::Op op;
  op.type = log::OpType::kTree;
  op.tree.src = src;
  op.tree.kind = 1;
  op.tree.flags = 1;
  op.tree.name = name;
  return op;
}

class CommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    e_ = std::make_unique<Engine>(parts::FormattedMem());
    ASSERT_OK(e_->Open());
  }
  std::unique_ptr<Engine> e_;
};

TEST_F(CommitterTest, AWriteLandsInTheLogAndTheMap) {
  Blocks a(1, 4);
  ASSERT_OK(e_->Write(0, 10, a));
  EXPECT_EQ(e_->durability.last_written(), 1u);
  EXPECT_EQ(e_->durability.last_content(), 1u);
  EXPECT_EQ(e_->writer.next_seq(), 2u);
  for (Bno i = 0; i < 4; ++i) EXPECT_TRUE(e_->Holds(0, 10 + i, a, i)) << i;
  EXPECT_EQ(e_->Pba(0, 14), kNoBlock);
  const uint32_t seg = e_->segments.open(gc::Slot::kCold);
  ASSERT_NE(seg, UINT32_MAX);
  EXPECT_EQ(e_->state.map->segments().at(seg).write_ptr, 5u);
  EXPECT_EQ(e_->state.map->segments().at(seg).max_seq, 1u);
  // The record as it is on the media.
  absl::StatusOr<log::RecordHeader> h = e_->HeaderAt(First(*e_, seg));
  ASSERT_OK(h);
  EXPECT_EQ(h->seq, 1u);
  EXPECT_EQ(h->uuid, e_->sb().uuid);
  EXPECT_EQ(h->stream, log::Stream::kUser);
  EXPECT_FALSE(h->joined);
  ASSERT_EQ(h->ops.size(), 1u);
  EXPECT_EQ(h->ops[0].type, log::OpType::kWrite);
  EXPECT_EQ(h->ops[0].write.lba, 10u);
  EXPECT_EQ(h->ops[0].write.csum, a.csums);
  EXPECT_EQ(e_->state.counters.user_bytes.load(), 4u * kBlockSize);
  EXPECT_EQ(e_->catalogue_changes.load(), 0);  // data changes no catalogue
}

TEST_F(CommitterTest, RequestsSubmittedTogetherShareOneRecord) {
  std::vector<std::unique_ptr<Blocks>> data;
  std::vector<Request*> rs;
  absl::BlockingCounter left(10);
  std::atomic<int> ok{0};
  for (int i = 0; i < 10; ++i) {
    data.push_back(std::make_unique<Blocks>(i, 1));
    Request* r = Engine::WriteRequest(0, Bno(100 + 2 * i), *data.back());
    r->done = [&](absl::Status s) {
      ok += s.ok();
      left.DecrementCount();
    };
    rs.push_back(r);
  }
  e_->committer.SubmitMany(rs);  // to the writer thread
  left.Wait();
  EXPECT_EQ(ok.load(), 10);
  EXPECT_EQ(e_->durability.last_written(), 1u);  // one record for all
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(e_->Holds(0, Bno(100 + 2 * i), *data[i], 0)) << i;
  absl::StatusOr<log::RecordHeader> h = e_->HeaderAt(First(*e_, e_->segments.open(gc::Slot::kCold)));
  ASSERT_OK(h);
  EXPECT_EQ(h->ops.size(), 10u);
}

TEST_F(CommitterTest, ASmallSubmissionIsCommittedInlineWhenNobodyCommits) {
  Blocks a(1, 1);
  Request* r = Engine::WriteRequest(0, 5, a);
  std::thread::id ran_on;
  bool done = false;
  r->done = [&](absl::Status s) {
    EXPECT_OK(s);
    ran_on = std::this_thread::get_id();
    done = true;
  };
  e_->committer.SubmitMany({r}, /*allow_inline=*/true);
  EXPECT_TRUE(done);  // before SubmitMany returned
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(e_->Holds(0, 5, a, 0));
}

TEST_F(CommitterTest, RequestsToAMissingVolumeAreRefusedAndTheOthersCommitted) {
  Blocks a(1, 1), b(2, 1);
  std::vector<absl::Status> got(3);
  absl::BlockingCounter left(3);
  std::vector<Request*> rs = {Engine::WriteRequest(0, 1, a), Engine::WriteRequest(7, 1, b),
                              new Request};
  rs[2]->frees = true;
  rs[2]->ops.push_back(ReqOp::Trim(7, 0, 4));
  for (int i = 0; i < 3; ++i) {
    rs[i]->done = [&, i](absl::Status s) {
      got[i] = s;
      left.DecrementCount();
    };
  }
  e_->committer.SubmitMany(rs);
  left.Wait();
  EXPECT_OK(got[0]);
  for (int i : {1, 2}) {
    EXPECT_TRUE(absl::IsUnavailable(got[i])) << got[i];
    EXPECT_EQ(got[i].message(), "the volume was removed");
  }
  EXPECT_TRUE(e_->Holds(0, 1, a, 0));
}

TEST_F(CommitterTest, WritesToASnapshotAreRefused) {
  ASSERT_OK(e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s1"))}, /*barrier=*/true));
  uint32_t snap;
  {
    absl::ReaderMutexLock l(&e_->state.map_mu);
    const state::VolumeMeta* s = e_->state.map->FindSnapshot("ftl0", "s1");
    ASSERT_NE(s, nullptr);
    snap = s->id;
  }
  Blocks a(1, 1);
  absl::Status s = e_->Write(snap, 0, a);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::IsUnavailable(e_->Trim(snap, 0, 1)));
}

TEST_F(CommitterTest, NotesAreValidatedRightBeforeTheyAreWritten) {
  ASSERT_OK(e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s1"))}, true));
  EXPECT_EQ(e_->catalogue_changes.load(), 1);
  const uint64_t written = e_->durability.last_written();
  // A note durable when acknowledged: followed by a marker that proves it.
  EXPECT_EQ(written, 2u);
  EXPECT_GE(e_->durability.proven(), 1u);
  uint32_t id;
  {
    absl::ReaderMutexLock l(&e_->state.map_mu);
    const state::VolumeMeta* s = e_->state.map->FindSnapshot("ftl0", "s1");
    ASSERT_NE(s, nullptr);
    id = s->id;
    EXPECT_TRUE(s->is_snapshot());
    EXPECT_EQ(s->seq, 1u);
  }
  EXPECT_EQ(id, 1u);  // the committer assigns the tree id
  absl::Status s = e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s1"))}, true);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  s = e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "bad name"))}, true);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(9, "x"))}, true);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  // Nothing was written for them.
  EXPECT_EQ(e_->durability.last_written(), written);
  EXPECT_EQ(e_->catalogue_changes.load(), 1);
}

TEST_F(CommitterTest, OpsOfOneNoteAreCheckedTogether) {
  ASSERT_OK(e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s1"))}, true));
  log::Op drop;
  drop.type = log::OpType::kDrop;
  drop.drop = 1;
  // Dropping the same tree twice in one note: the second sees it gone.
  absl::Status s = e_->committer.SubmitNotes({ReqOp::Note(drop), ReqOp::Note(drop)}, true, true);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  absl::ReaderMutexLock l(&e_->state.map_mu);
  EXPECT_NE(e_->state.map->volume(1), nullptr);  // all or nothing
}

TEST_F(CommitterTest, AFuaWriteIsProvenWhenAcknowledged) {
  Blocks a(1, 2);
  ASSERT_OK(e_->Write(0, 0, a, /*fua=*/true));
  EXPECT_GE(e_->durability.durable(), 1u);
  EXPECT_GE(e_->durability.proven(), 1u);
  EXPECT_FALSE(e_->durability.NeedsProof());
  // The proof is a marker: a record without ops whose durable_seq covers 1.
  EXPECT_EQ(e_->durability.last_written(), 2u);
  absl::StatusOr<log::RecordHeader> m =
      e_->HeaderAt(First(*e_, e_->segments.open(gc::Slot::kCold)) + 3);
  ASSERT_OK(m);
  EXPECT_EQ(m->seq, 2u);
  EXPECT_TRUE(m->ops.empty());
  EXPECT_GE(m->durable_seq, 1u);
}

TEST_F(CommitterTest, FlushDurableWritesAMarkerOnlyWhenSomethingNeedsProof) {
  ASSERT_OK(e_->committer.FlushDurable());  // nothing written
  EXPECT_EQ(e_->durability.last_written(), 0u);
  Blocks a(1, 1);
  ASSERT_OK(e_->Write(0, 0, a));
  EXPECT_EQ(e_->durability.proven(), 0u);
  ASSERT_OK(e_->committer.FlushDurable());
  EXPECT_EQ(e_->durability.last_written(), 2u);  // the write and a marker
  EXPECT_GE(e_->durability.proven(), 1u);
  EXPECT_FALSE(e_->durability.NeedsProof());
  ASSERT_OK(e_->committer.FlushDurable());
  EXPECT_EQ(e_->durability.last_written(), 2u);  // already proven: no marker
}

// OpenOptions::proof_delay (the pool's default): a FLUSH is answered after
// one sync; the marker follows within the delay unless a later record
// proves the flushed ones first (docs/decisions.md, "Deferred durability
// proof").
class DeferredProofTest : public ::testing::Test {
 protected:
  void Open(std::chrono::milliseconds delay) {
    media_ = std::make_shared<parts::CountingMedia>(parts::FormattedMem());
    e_ = std::make_unique<Engine>(media_);
    EngineOptions o;
    o.proof_delay = delay;
    ASSERT_OK(e_->Open(o));
  }
  // Waits (bounded) until record `seq` is proven.
  bool ProvenWithin(uint64_t seq, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    while (e_->durability.proven() < seq && absl::Now() < end) absl::SleepFor(absl::Milliseconds(2));
    return e_->durability.proven() >= seq;
  }
  std::shared_ptr<parts::CountingMedia> media_;
  std::unique_ptr<Engine> e_;
};

TEST_F(DeferredProofTest, AFlushIsAnsweredAfterOneSyncAndTheMarkerFollows) {
  Open(std::chrono::milliseconds(30));
  Blocks a(1, 1);
  ASSERT_OK(e_->Write(0, 0, a));
  const int syncs = media_->syncs;
  ASSERT_OK(e_->committer.FlushDurable());
  EXPECT_EQ(media_->syncs, syncs + 1);  // no second sync for a marker
  EXPECT_GE(e_->durability.durable(), 1u);
  EXPECT_EQ(e_->durability.last_written(), 1u);  // no marker yet
  ASSERT_TRUE(ProvenWithin(1, absl::Seconds(5))) << "no marker followed";
  EXPECT_EQ(e_->durability.last_written(), 2u);  // the marker
  EXPECT_FALSE(e_->durability.NeedsProof());
}

TEST_F(DeferredProofTest, ALaterRecordProvesTheFlushedOnesWithoutAMarker) {
  Open(std::chrono::hours(1));  // the marker never comes due in this test
  Blocks a(1, 1), b(2, 1);
  ASSERT_OK(e_->Write(0, 0, a));
  ASSERT_OK(e_->committer.FlushDurable());
  EXPECT_EQ(e_->durability.proven(), 0u);
  ASSERT_OK(e_->Write(0, 1, b));  // its record says 1 is durable
  ASSERT_OK(e_->committer.FlushDurable());
  EXPECT_GE(e_->durability.proven(), 1u);
  EXPECT_EQ(e_->durability.last_written(), 2u);  // two writes, no marker
}

TEST_F(DeferredProofTest, AFuaWriteIsAnsweredDurableAndProvenLater) {
  Open(std::chrono::milliseconds(30));
  Blocks a(1, 2);
  ASSERT_OK(e_->Write(0, 0, a, /*fua=*/true));
  EXPECT_GE(e_->durability.durable(), 1u);
  ASSERT_TRUE(ProvenWithin(1, absl::Seconds(5))) << "no marker followed";
  EXPECT_EQ(e_->durability.last_written(), 2u);
}

TEST_F(DeferredProofTest, NotesAreStillProvenBeforeTheirAnswer) {
  Open(std::chrono::hours(1));
  ASSERT_OK(e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s"))}, /*barrier=*/true));
  EXPECT_GE(e_->durability.proven(), 1u);
  EXPECT_FALSE(e_->durability.NeedsProof());
}

TEST_F(CommitterTest, CheckpointRunsOnTheWriterAndIsDurable) {
  Blocks a(1, 1);
  ASSERT_OK(e_->Write(0, 0, a));
  const uint64_t gen = e_->sb().generation;
  ASSERT_OK(e_->committer.Checkpoint());
  const log::Superblock& sb = e_->sb();
  EXPECT_GT(sb.generation, gen);
  EXPECT_EQ(sb.slots[sb.newest_slot].next_seq, e_->writer.next_seq());
  EXPECT_EQ(e_->checkpointer.gate_seq(), 1u);
  ASSERT_OK(e_->committer.Checkpoint());
  EXPECT_EQ(e_->checkpointer.gate_seq(), 2u);  // both slots past record 1
  EXPECT_EQ(e_->segments.sealed_since_checkpoint(), 0u);
}

TEST_F(CommitterTest, AfterStopSubmissionsAreRefused) {
  e_->committer.Stop();
  Blocks a(1, 1);
  absl::Status s = e_->Write(0, 0, a);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::IsFailedPrecondition(e_->committer.Checkpoint()));
  EXPECT_EQ(e_->durability.last_written(), 0u);
}

TEST_F(CommitterTest, StopWritesWhatIsQueuedFirst) {
  std::vector<std::unique_ptr<Blocks>> data;
  std::vector<Request*> rs;
  std::atomic<int> ok{0};
  for (int i = 0; i < 50; ++i) {
    data.push_back(std::make_unique<Blocks>(i, 8));
    Request* r = Engine::WriteRequest(0, Bno(8 * i), *data.back());
    r->done = [&](absl::Status s) { ok += s.ok(); };
    rs.push_back(r);
  }
  e_->committer.SubmitMany(rs);
  e_->committer.Stop();
  EXPECT_EQ(ok.load(), 50);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(e_->Holds(0, Bno(8 * i + 7), *data[i], 7)) << i;
}

TEST_F(CommitterTest, APoolFullOfUserDataStillTakesRequestsThatFreeSpace) {
  const uint32_t segs = e_->sb().segment_count;
  const Bno per_record = e_->sb().segment_blocks - 1;  // a header block + this fill a segment
  Blocks big(1, per_record);
  uint32_t written = 0;
  absl::Status s;
  while ((s = e_->Write(0, 0, big)).ok()) ++written;
  // Without a cleaner: ENOSPC, not a hang.
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("cleaner halted"), std::string::npos) << s;
  // Plain writes leave one segment for requests that free space and one
  // for the cleaner.
  EXPECT_EQ(written, segs - 2);
  EXPECT_EQ(e_->state.map->segments().free_count(), 2u);
  ASSERT_OK(e_->Trim(0, 0, 8));
  EXPECT_EQ(e_->Pba(0, 0), kNoBlock);
  EXPECT_EQ(e_->state.map->segments().free_count(), 1u);
  // The segment the trim opened is theirs: a one-block write does not get
  // it although it has room ...
  const uint32_t seg = e_->segments.open(gc::Slot::kCold);
  Blocks one(2, 1);
  s = e_->Write(0, 100, one);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(e_->Pba(0, 100), kNoBlock);
  // ... but the next freeing request does.
  ASSERT_OK(e_->Trim(0, 8, 8));
  EXPECT_EQ(e_->segments.open(gc::Slot::kCold), seg);
  EXPECT_EQ(e_->state.map->segments().at(seg).write_ptr, 2u);
  EXPECT_EQ(e_->state.map->segments().free_count(), 1u);
}

// Format 9: records of one small header (here one block each) after a
// block header put their headers into its sectors 1-7, their data at the
// write point; the ninth starts a new header block. A checkpoint encoded
// meanwhile ends the chain.
TEST_F(CommitterTest, SmallRecordsChainTheirHeadersIntoSectors) {
  e_ = std::make_unique<Engine>(parts::FormattedMem());
  EngineOptions o;
  o.sector_headers = true;
  ASSERT_OK(e_->Open(o));
  const uint64_t seq0 = e_->writer.next_seq();
  // Memory writes a lone sector cheaply: the chain's first header is its
  // sector 0 alone (512 bytes), the others a sector each.
  ASSERT_TRUE(e_->media->writes_lone_sectors());
  const uint64_t media0 = e_->state.counters.media_bytes.load();
  for (Bno i = 0; i < 10; ++i) ASSERT_OK(e_->Write(0, i, Blocks(int(i) + 1, 1)));
  EXPECT_EQ(e_->state.counters.media_bytes.load() - media0, 10 * (log::kSectorBytes + kBlockSize));
  const uint32_t seg = e_->segments.open(gc::Slot::kCold);
  const Bno first = First(*e_, seg);
  // Block 0: the first record's header, its data at 1; records 2-8 in
  // sectors 1-7 with their data at 2-8; the ninth a block header at 9.
  absl::StatusOr<log::RecordHeader> h = e_->HeaderAt(first);
  ASSERT_OK(h);
  EXPECT_EQ(h->seq, seq0);
  EXPECT_EQ(h->header_blocks, 1);
  for (uint32_t k = 1; k < log::kSectorsPerBlock; ++k) {
    absl::StatusOr<log::RecordHeader> s = e_->SectorAt(first, k);
    ASSERT_OK(s) << k;
    EXPECT_EQ(s->seq, seq0 + k);
    EXPECT_EQ(s->sector, k);
    EXPECT_EQ(s->data_start, k + 1);
    EXPECT_EQ(s->ops[0].write.lba, Bno(k));
    EXPECT_EQ(e_->Pba(0, Bno(k)), first + k + 1);
  }
  h = e_->HeaderAt(first + 9);
  ASSERT_OK(h);
  EXPECT_EQ(h->seq, seq0 + 8);
  EXPECT_TRUE(e_->SectorAt(first + 9, 1).ok());  // the tenth record
  EXPECT_EQ(e_->state.map->segments().at(seg).write_ptr, 12u);
  for (Bno i = 0; i < 10; ++i) EXPECT_TRUE(e_->Holds(0, i, Blocks(int(i) + 1, 1), 0)) << i;
  // A checkpoint: the next small record starts a header block.
  ASSERT_OK(e_->committer.Checkpoint());
  ASSERT_OK(e_->Write(0, 20, Blocks(30, 1)));
  h = e_->HeaderAt(first + 12);
  ASSERT_OK(h);
  EXPECT_EQ(h->ops[0].write.lba, 20u);
}

// Through the page cache a lone sector would first read its block: there
// a chain's first header is a whole block (sectors 1-7 zero), the chain's
// other headers sectors of it, as before format 10.
TEST_F(CommitterTest, AChainStartsWithAWholeHeaderBlockThroughThePageCache) {
  const std::string path = ::testing::TempDir() + "/ftl-committer-" + std::to_string(::getpid()) + ".img";
  std::remove(path.c_str());
  auto file = OpenFileMedia(path, 16 << 20);
  ASSERT_OK(file);
  std::remove(path.c_str());  // open: gone with the media
  std::shared_ptr<Media> m = *file;
  ASSERT_TRUE(m->writes_sectors());
  ASSERT_FALSE(m->writes_lone_sectors());
  ASSERT_OK(checkpoint::FormatMedia(*m, testing::SmallFormat(), /*discard=*/false));
  e_ = std::make_unique<Engine>(m);
  EngineOptions o;
  o.sector_headers = true;
  ASSERT_OK(e_->Open(o));
  const uint64_t media0 = e_->state.counters.media_bytes.load();
  for (Bno i = 0; i < 3; ++i) ASSERT_OK(e_->Write(0, i, Blocks(int(i) + 1, 1)));
  EXPECT_EQ(e_->state.counters.media_bytes.load() - media0,
            kBlockSize + 3 * kBlockSize + 2 * log::kSectorBytes);
  const Bno first = First(*e_, e_->segments.open(gc::Slot::kCold));
  ASSERT_OK(e_->HeaderAt(first));
  EXPECT_TRUE(e_->SectorAt(first, 2).ok());
  for (Bno i = 0; i < 3; ++i) EXPECT_TRUE(e_->Holds(0, i, Blocks(int(i) + 1, 1), 0)) << i;
}

TEST_F(CommitterTest, ABatchSpanningSlotsIsWrittenAsJoinedRecords) {
  e_ = std::make_unique<Engine>(parts::FormattedMem());
  EngineOptions o;
  o.placement = OpenOptions::Placement::kOn;
  ASSERT_OK(e_->Open(o));
  Blocks a(1, 1), b(2, 1), c(3, 1);
  ASSERT_OK(e_->Write(0, 0, a));  // a first write: cold
  const uint32_t cold = e_->segments.open(gc::Slot::kCold);
  // An overwrite of a young block (hot) and a first write (cold), submitted
  // together.
  absl::BlockingCounter left(2);
  std::atomic<int> ok{0};
  std::vector<Request*> rs = {Engine::WriteRequest(0, 0, b), Engine::WriteRequest(0, 100, c)};
  for (Request* r : rs)
    r->done = [&](absl::Status s) {
      ok += s.ok();
      left.DecrementCount();
    };
  e_->committer.SubmitMany(rs);
  left.Wait();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(e_->durability.last_written(), 3u);
  const uint32_t hot = e_->segments.open(gc::Slot::kHot);
  ASSERT_NE(hot, UINT32_MAX);
  EXPECT_TRUE(e_->state.map->segments().at(hot).hot);
  // The hot part first, joined with the cold part after it.
  absl::StatusOr<log::RecordHeader> h1 = e_->HeaderAt(First(*e_, hot));
  absl::StatusOr<log::RecordHeader> h2 = e_->HeaderAt(First(*e_, cold) + 2);
  ASSERT_OK(h1);
  ASSERT_OK(h2);
  EXPECT_EQ(h1->seq, 2u);
  EXPECT_TRUE(h1->joined);
  EXPECT_EQ(h1->ops[0].write.lba, 0u);
  EXPECT_EQ(h2->seq, 3u);
  EXPECT_FALSE(h2->joined);
  EXPECT_EQ(h2->ops[0].write.lba, 100u);
  EXPECT_TRUE(e_->Holds(0, 0, b, 0));
  EXPECT_TRUE(e_->Holds(0, 100, c, 0));
  EXPECT_EQ(e_->state.counters.user_hot_bytes.load(), uint64_t(kBlockSize));
}

TEST_F(CommitterTest, CloseAndReopenKeepsWhatWasCommitted) {
  Blocks a(1, 3);
  ASSERT_OK(e_->Write(0, 20, a));
  ASSERT_OK(e_->Close());
  std::shared_ptr<Media> m = e_->media;
  e_ = std::make_unique<Engine>(m);
  ASSERT_OK(e_->Open());
  EXPECT_EQ(e_->report, "clean open from checkpoint (next seq 2)");
  for (Bno i = 0; i < 3; ++i) EXPECT_TRUE(e_->Holds(0, 20 + i, a, i));
  // The open segment resumes.
  Blocks b(2, 1);
  const uint32_t seg = e_->segments.open(gc::Slot::kCold);
  ASSERT_NE(seg, UINT32_MAX);
  ASSERT_OK(e_->Write(0, 30, b));
  EXPECT_EQ(e_->segments.open(gc::Slot::kCold), seg);
  EXPECT_EQ(e_->Pba(0, 30), First(*e_, seg) + 5);
}

class ReadOnlyCommitterTest : public ::testing::Test {};

TEST_F(ReadOnlyCommitterTest, EverySubmissionIsRefused) {
  std::shared_ptr<Media> m = parts::FormattedMem();
  Engine e(m);
  EngineOptions o;
  o.read_only = true;
  ASSERT_OK(e.Open(o));
  const uint64_t gen = e.sb().generation;
  Blocks a(1, 1);
  absl::Status s = e.Write(0, 0, a);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsFailedPrecondition(e.committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s"))}, true)));
  EXPECT_TRUE(absl::IsFailedPrecondition(e.committer.Checkpoint()));
  EXPECT_EQ(e.durability.last_written(), 0u);
  EXPECT_EQ(e.Pba(0, 0), kNoBlock);
  // Nothing was written to the media either.
  Engine again(m);
  ASSERT_OK(again.Open(o));
  EXPECT_EQ(again.sb().generation, gen);
}

class FailingMediaCommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fault_ = std::make_shared<media::FaultMedia>(16 << 20);
    ASSERT_OK(checkpoint::FormatMedia(*fault_, testing::SmallFormat(), false));
    e_ = std::make_unique<Engine>(fault_);
    ASSERT_OK(e_->Open());
  }
  std::shared_ptr<media::FaultMedia> fault_;
  std::unique_ptr<Engine> e_;
};

TEST_F(FailingMediaCommitterTest, AMediaWriteErrorMakesThePoolReadOnly) {
  Blocks a(1, 2), b(2, 1);
  ASSERT_OK(e_->Write(0, 0, a));
  fault_->FailWrites(e_->sb().data_offset, fault_->size() - e_->sb().data_offset);
  absl::Status s = e_->Write(0, 10, b);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("media write failed"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsDataLoss(e_->committer.failure()));
  EXPECT_EQ(e_->Pba(0, 10), kNoBlock);  // not applied
  EXPECT_EQ(e_->writer.next_seq(), 2u);  // its seq is not used up
  EXPECT_EQ(e_->durability.last_written(), 1u);
  // The device works again, the pool does not take writes until reopened.
  fault_->ClearFailures();
  s = e_->Write(0, 10, b);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  s = e_->committer.SubmitNotes({ReqOp::Note(SnapshotOp(0, "s"))}, true);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(e_->Holds(0, 0, a, 0));  // what was committed stays readable
  e_.reset();
  e_ = std::make_unique<Engine>(fault_);
  ASSERT_OK(e_->Open());
  ASSERT_OK(e_->Write(0, 10, b));
  EXPECT_TRUE(e_->Holds(0, 1, a, 1));
}

TEST_F(FailingMediaCommitterTest, ACrashedDeviceFailsAWriteWithDataLoss) {
  Blocks a(1, 1);
  fault_->Crash();  // every call (write, sync) fails from here on
  absl::Status s = e_->Write(0, 0, a, /*fua=*/true);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::IsDataLoss(e_->committer.failure()));
}

// ---- RecordWriter, driven by hand (the committer's thread stopped)

class RecordWriterTest : public CommitterTest {
 protected:
  void SetUp() override {
    CommitterTest::SetUp();
    e_->committer.Stop();
    ASSERT_TRUE(e_->segments.EnsureRoom(gc::Slot::kCold, log::Stream::kUser, 32, Claim::kPlain,
                                        e_->writer.next_seq()));
  }
  absl::StatusOr<RecordWriter::Written> Write(std::vector<Request*>& batch, bool joined = false,
                                              bool sync = false, bool sync_fua = true) {
    return e_->writer.Write(batch, log::Stream::kUser, gc::Slot::kCold, joined, sync, sync_fua);
  }
  // What the committer does with the requests written.
  static void Complete(std::vector<Request*>& batch) {
    for (Request* r : batch)
      if (!r->done) r->done = [](absl::Status) {};
    FailRequests(batch, absl::OkStatus());
  }
};

TEST_F(RecordWriterTest, WritesOneRecordAndAppliesIt) {
  Blocks a(1, 2), b(2, 1);
  std::vector<Request*> batch = {Engine::WriteRequest(0, 0, a), Engine::WriteRequest(0, 9, b)};
  absl::StatusOr<RecordWriter::Written> w = Write(batch);
  ASSERT_OK(w);
  EXPECT_EQ(w->seq, 1u);
  EXPECT_TRUE(w->has_ops);
  EXPECT_FALSE(w->synced);
  EXPECT_FALSE(w->catalog);
  EXPECT_EQ(batch.size(), 2u);  // left to the caller to complete
  EXPECT_EQ(e_->writer.next_seq(), 2u);
  EXPECT_EQ(e_->durability.last_written(), 1u);
  EXPECT_EQ(e_->durability.durable(), 0u);
  EXPECT_TRUE(e_->Holds(0, 1, a, 1));
  EXPECT_TRUE(e_->Holds(0, 9, b, 0));
  EXPECT_EQ(e_->state.map->segments().at(e_->segments.open(gc::Slot::kCold)).write_ptr, 4u);
  Complete(batch);
}

TEST_F(RecordWriterTest, SyncsWhenAskedOrForFua) {
  Blocks a(1, 1);
  std::vector<Request*> batch = {Engine::WriteRequest(0, 0, a)};
  absl::StatusOr<RecordWriter::Written> w = Write(batch, false, /*sync=*/true);
  ASSERT_OK(w);
  EXPECT_TRUE(w->synced);
  EXPECT_EQ(e_->durability.durable(), 1u);
  Complete(batch);
  batch = {Engine::WriteRequest(0, 1, a, /*fua=*/true)};
  w = Write(batch, false, false, /*sync_fua=*/false);  // a joined part: syncs later
  ASSERT_OK(w);
  EXPECT_FALSE(w->synced);
  EXPECT_EQ(e_->durability.durable(), 1u);
  Complete(batch);
  batch = {Engine::WriteRequest(0, 2, a, /*fua=*/true)};
  w = Write(batch, false, false, /*sync_fua=*/true);
  ASSERT_OK(w);
  EXPECT_TRUE(w->synced);
  EXPECT_EQ(e_->durability.durable(), 3u);
  Complete(batch);
}

TEST_F(RecordWriterTest, RefusedRequestsAreCompletedAndLeaveTheBatch) {
  Blocks a(1, 1);
  absl::Status refused;
  Request* bad = Engine::WriteRequest(5, 0, a);
  bad->done = [&](absl::Status s) { refused = s; };
  std::vector<Request*> batch = {bad, Engine::WriteRequest(0, 0, a)};
  absl::StatusOr<RecordWriter::Written> w = Write(batch);
  ASSERT_OK(w);
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->ops[0].vol(), 0u);
  absl::StatusOr<log::RecordHeader> h = e_->HeaderAt(First(*e_, e_->segments.open(gc::Slot::kCold)));
  ASSERT_OK(h);
  EXPECT_EQ(h->ops.size(), 1u);  // only the accepted request's op
  Complete(batch);
  // All refused: nothing written.
  bad = Engine::WriteRequest(5, 0, a);
  bad->done = [&](absl::Status s) { refused = s; };
  batch = {bad};
  w = Write(batch);
  ASSERT_OK(w);
  EXPECT_EQ(w->seq, 0u);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(e_->writer.next_seq(), 2u);
}

TEST_F(RecordWriterTest, AJoinedRecordDoesNotMoveLastWritten) {
  Blocks a(1, 1);
  std::vector<Request*> batch = {Engine::WriteRequest(0, 0, a)};
  absl::StatusOr<RecordWriter::Written> w = Write(batch, /*joined=*/true);
  ASSERT_OK(w);
  EXPECT_EQ(e_->durability.last_written(), 0u);
  EXPECT_EQ(e_->durability.last_content(), 1u);
  absl::StatusOr<log::RecordHeader> h = e_->HeaderAt(First(*e_, e_->segments.open(gc::Slot::kCold)));
  ASSERT_OK(h);
  EXPECT_TRUE(h->joined);
  Complete(batch);
}

TEST_F(RecordWriterTest, CatalogueNotesAreMarked) {
  std::vector<Request*> batch = {MakeNoteRequest({ReqOp::Note(SnapshotOp(0, "s"))}, true)};
  absl::StatusOr<RecordWriter::Written> w = Write(batch, false, false, /*sync_fua=*/true);
  ASSERT_OK(w);
  EXPECT_TRUE(w->catalog);
  EXPECT_TRUE(w->synced);  // notes are FUA
  Complete(batch);
}

TEST_F(RecordWriterTest, AMediaErrorIsReturnedAndNothingIsApplied) {
  auto fault = std::make_shared<media::FaultMedia>(16 << 20);
  ASSERT_OK(checkpoint::FormatMedia(*fault, testing::SmallFormat(), false));
  e_ = std::make_unique<Engine>(fault);
  ASSERT_OK(e_->Open());
  e_->committer.Stop();
  ASSERT_TRUE(e_->segments.EnsureRoom(gc::Slot::kCold, log::Stream::kUser, 32, Claim::kPlain, 1));
  fault->FailNthWrite(1);
  Blocks a(1, 2);
  std::vector<Request*> batch = {Engine::WriteRequest(0, 0, a)};
  absl::StatusOr<RecordWriter::Written> w = Write(batch);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(batch.size(), 1u);  // left to the caller
  EXPECT_EQ(e_->writer.next_seq(), 1u);
  EXPECT_EQ(e_->durability.last_written(), 0u);
  EXPECT_EQ(e_->Pba(0, 0), kNoBlock);
  EXPECT_EQ(e_->state.map->segments().at(e_->segments.open(gc::Slot::kCold)).write_ptr, 0u);
  Complete(batch);
}

// ---- SlotClassifier, over a hand-built map

class SlotClassifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.map = std::make_unique<state::MapState>(8, 64);
    state_.InitPins(8);
    state_.map->AddVolume(0, "ftl0", 4000);
    // Blocks 0-9 written at seq 1 into segment 1.
    parts::ApplyWriteRecord(*state_.map, 0, 0, 10, 64, 1);
    classifier_.Configure(OpenOptions::Placement::kOn, 4000, 64);
    placement_.set_active(true);
  }
  Request* W(Bno lba, Bno n, bool splittable = false) {
    auto* r = new Request;
    r->splittable = splittable;
    r->ops.push_back(ReqOp::Write(0, lba, std::vector<uint32_t>(n, 1), nullptr));
    own_.emplace_back(r);
    return r;
  }
  state::PoolState state_;
  gc::Placement placement_;
  SlotClassifier classifier_{&state_, &placement_};
  std::vector<std::unique_ptr<Request>> own_;
};

TEST_F(SlotClassifierTest, PassivePlacementSendsEverythingCold) {
  placement_.set_active(false);
  std::vector<Request*> batch = {W(0, 1), W(100, 1)};
  batch[0]->slot = gc::Slot::kHot;
  EXPECT_TRUE(classifier_.Classify(batch, 10).empty());
  for (Request* r : batch) EXPECT_EQ(r->slot, gc::Slot::kCold);
}

TEST_F(SlotClassifierTest, OverwritesOfYoungBlocksAreHotFirstWritesCold) {
  std::vector<Request*> batch = {W(100, 1), W(3, 2), W(200, 1), W(5, 1)};
  auto parts = classifier_.Classify(batch, 10);
  EXPECT_EQ(batch[0]->slot, gc::Slot::kCold);
  EXPECT_EQ(batch[1]->slot, gc::Slot::kHot);
  EXPECT_EQ(batch[3]->slot, gc::Slot::kHot);
  ASSERT_EQ(parts.size(), 2u);
  // Per slot, each in issue order.
  EXPECT_EQ(parts[0], (std::vector<Request*>{batch[1], batch[3]}));
  EXPECT_EQ(parts[1], (std::vector<Request*>{batch[0], batch[2]}));
}

TEST_F(SlotClassifierTest, OldVersionsOutliveTheHotLifespanAndAreCold) {
  placement_.HotSegmentReclaimed(50);  // L = 50 seqs
  std::vector<Request*> batch = {W(3, 1), W(100, 1)};
  EXPECT_TRUE(classifier_.Classify(batch, 1000).empty());  // written at seq 1: old
  EXPECT_EQ(batch[0]->slot, gc::Slot::kCold);
  batch = {W(3, 1)};
  classifier_.Classify(batch, 20);  // 19 seqs old: young
  EXPECT_EQ(batch[0]->slot, gc::Slot::kHot);
}

TEST_F(SlotClassifierTest, OverlappingRequestsShareTheFirstOnesSlot) {
  // Hot and cold requests that overlap only within their own class split.
  std::vector<Request*> apart = {W(200, 1), W(8, 3), W(9, 1)};  // cold; hot 8-10; hot 9
  EXPECT_EQ(classifier_.Classify(apart, 10).size(), 2u);
  // A first write of 10-11 (cold) and an overwrite of 9-10 (hot) would
  // land in records that may reach the log in either order: the whole
  // batch takes the first request's slot.
  std::vector<Request*> clash = {W(10, 2), W(9, 2), W(3, 1)};
  EXPECT_TRUE(classifier_.Classify(clash, 10).empty());
  for (Request* r : clash) EXPECT_EQ(r->slot, gc::Slot::kCold) << r->ops[0].lba();
}

TEST_F(SlotClassifierTest, PartsOfOneLargeWriteKeepTheirOrderInOneSlot) {
  // A large write cut at the atomic size: the parts continue each other.
  std::vector<Request*> batch = {W(5, 5, true), W(10, 20, true), W(30, 10, true)};
  EXPECT_TRUE(classifier_.Classify(batch, 10).empty());
  for (Request* r : batch) EXPECT_EQ(r->slot, gc::Slot::kHot) << r->ops[0].lba();
  // Not splittable: classified each on its own.
  std::vector<Request*> plain = {W(5, 5), W(10, 20)};
  EXPECT_EQ(classifier_.Classify(plain, 10).size(), 2u);
}

TEST_F(SlotClassifierTest, TrimsAreNotClassifiedButCountAsOverlaps) {
  auto* t = new Request;
  t->frees = true;
  t->ops.push_back(ReqOp::Trim(0, 0, 500));
  own_.emplace_back(t);
  std::vector<Request*> batch = {t, W(3, 1), W(300, 1)};
  // The trim overlaps both writes: everything takes its (cold) slot.
  EXPECT_TRUE(classifier_.Classify(batch, 10).empty());
  for (Request* r : batch) EXPECT_EQ(r->slot, gc::Slot::kCold);
}

}  // namespace
}  // namespace ftl::commit
