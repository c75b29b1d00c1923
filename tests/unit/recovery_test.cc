// recovery::Recovery on its own, on formatted memory media: a clean open,
// roll-forward of records written by hand (log::EncodeRecordHeader) or by
// a Pool dropped without Close, torn tails, gaps a durable record vouches
// for, joined pairs, fallback to the older checkpoint slot and the rebuild
// from the log alone (docs/architecture.md, "Open and recovery").

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

#include "checkpoint/checkpointer.h"
#include "part_test_util.h"
#include "recovery/recovery.h"

namespace ftl::recovery {
namespace {

using log::Bno;
using log::kNoBlock;
using parts::Blocks;

constexpr uint64_t kJump = uint64_t(1) << 32;  // seqs skipped after a crash

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    media_ = NewMemMedia(16 << 20);
    ASSERT_OK(checkpoint::FormatMedia(*media_, testing::SmallFormat(), false));
    ReadSuperblock();
  }
  void ReadSuperblock() {
    log::Durability d(media_);
    state::PoolState st;
    checkpoint::Checkpointer cp(media_, &d, &st);
    std::vector<std::string> degraded;
    ASSERT_OK(cp.ReadSuperblock(&degraded));
    sb_ = cp.superblock();
  }
  absl::StatusOr<Recovered> Run(bool accept_loss = false) {
    return Recovery(media_, sb_, accept_loss).Run();
  }
  uint64_t Offset(uint32_t seg, uint32_t block) const {
    return sb_.data_offset + (uint64_t(seg) * sb_.segment_blocks + block) * kBlockSize;
  }
  // A WRITE op of `data` to [lba, ...) of volume 0 with the given VBAs.
  static log::Op WriteOp(Bno lba, const Blocks& data, Bno first_vba) {
    log::Op op;
    op.type = log::OpType::kWrite;
    op.write.vol = 0;
    op.write.lba = lba;
    op.write.csum = data.csums;
    for (Bno i = 0; i < data.count(); ++i) op.write.vba.push_back(first_vba + i);
    return op;
  }
  static log::Op TrimOp(Bno lba, Bno n) {
    log::Op op;
    op.type = log::OpType::kTrim;
    op.trim = {0, lba, n};
    return op;
  }
  // Writes a record (header, then `data` if given) at block `block` of
  // segment `seg`; returns the block after it.
  uint32_t Put(uint32_t seg, uint32_t block, uint64_t seq, uint64_t durable_seq,
               std::vector<log::Op> ops, const Blocks* data = nullptr, bool joined = false) {
    log::RecordHeader h;
    h.seq = seq;
    h.durable_seq = durable_seq;
    h.uuid = sb_.uuid;
    h.joined = joined;
    h.ops = std::move(ops);
    media::AlignedBuffer head(size_t(log::kMaxHeaderBlocks) * kBlockSize);
    log::EncodeRecordHeader(h, head.span());
    EXPECT_OK(media_->Write(Offset(seg, block),
                            head.span().subspan(0, size_t(h.header_blocks) * kBlockSize)));
    if (data) {
      EXPECT_OK(media_->Write(Offset(seg, block + h.header_blocks), data->all()));
    }
    return block + h.header_blocks + h.data_blocks;
  }
  // The physical block volume 0's `lba` maps to, or kNoBlock.
  static Bno PbaOf(const state::MapState& m, Bno lba) {
    Bno vba = m.volume(0)->tree.LookupOne(lba);
    return vba == kNoBlock ? kNoBlock : m.vbas().Get(vba).pba;
  }
  Bno Pba(uint32_t seg, uint32_t block) const { return seg * sb_.segment_blocks + block; }

  std::shared_ptr<Media> media_;
  log::Superblock sb_;
};

TEST_F(RecoveryTest, CleanOpenLoadsTheNewestCheckpointAndReplaysNothing) {
  // A record newer than the checkpoint would be replayed after a crash;
  // a clean pool never has one, and a clean open does not look.
  Blocks a(1, 1);
  Put(0, 0, 1, 0, {WriteOp(5, a, 0)}, &a);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_TRUE(r->clean);
  EXPECT_FALSE(r->needs_checkpoints);
  EXPECT_EQ(r->next_seq, 1u);
  EXPECT_EQ(r->report, "clean open from checkpoint (next seq 1)");
  EXPECT_TRUE(r->degraded.empty());
  EXPECT_TRUE(r->losses.empty());
  ASSERT_NE(r->map->volume(0), nullptr);
  EXPECT_EQ(r->map->volume(0)->name, "ftl0");
  EXPECT_EQ(r->map->volume(0)->size_blocks, sb_.primary_blocks);
  EXPECT_EQ(r->map->segments().free_count(), sb_.segment_count);
  EXPECT_EQ(PbaOf(*r->map, 5), kNoBlock);
}

TEST_F(RecoveryTest, AnUncleanOpenRollsRecordsForward) {
  sb_.clean = false;  // as MarkDirty leaves it
  Blocks a(1, 2), b(2, 1);
  uint32_t at = Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  EXPECT_EQ(at, 3u);
  at = Put(0, at, 2, 0, {WriteOp(20, b, 2)}, &b);
  Put(1, 0, 3, 2, {TrimOp(11, 1)});
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_FALSE(r->clean);
  EXPECT_TRUE(r->needs_checkpoints);
  EXPECT_EQ(r->next_seq, 3 + 1 + kJump);  // past every seq seen, and more
  EXPECT_EQ(r->report, "recovered: checkpoint seq 1 + 3 records rolled forward");
  const state::MapState& m = *r->map;
  EXPECT_EQ(PbaOf(m, 10), Pba(0, 1));
  EXPECT_EQ(PbaOf(m, 11), kNoBlock);  // trimmed by record 3
  EXPECT_EQ(PbaOf(m, 20), Pba(0, 4));
  EXPECT_EQ(m.block_csum(Pba(0, 1)), a.csums[0]);
  EXPECT_EQ(m.block_csum(Pba(0, 4)), b.csums[0]);
  EXPECT_EQ(m.volume(0)->tree.mapped_blocks(), 2u);
  // Segments holding replayed records are full, dated by their records.
  const log::SegmentInfo& s0 = m.segments().at(0);
  EXPECT_EQ(s0.state, log::SegmentState::kFull);
  EXPECT_EQ(s0.write_ptr, 5u);
  EXPECT_EQ(s0.max_seq, 2u);
  EXPECT_EQ(s0.sealed_seq, 2u);
  EXPECT_EQ(m.segments().at(1).state, log::SegmentState::kFull);
  EXPECT_EQ(m.segments().at(1).max_seq, 3u);
  EXPECT_EQ(m.segments().free_count(), sb_.segment_count - 2);
  EXPECT_EQ(m.segments().at(0).live, 2u);  // lba 10 and 20; 11 was trimmed
}

TEST_F(RecoveryTest, ATornTailIsDropped) {
  sb_.clean = false;
  Blocks a(1, 1), b(2, 1), c(3, 1);
  uint32_t at = Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  Put(0, at, 2, 0, {WriteOp(11, b, 1)}, &b);
  // Record 3 never reached the media; record 4 did, and nothing says 3
  // was durable: the crash came before a sync covered them.
  Put(1, 0, 4, 2, {WriteOp(12, c, 2)}, &c);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_EQ(r->report,
            "recovered: checkpoint seq 1 + 2 records rolled forward (1 unflushed records after "
            "seq 2 discarded)");
  EXPECT_NE(PbaOf(*r->map, 11), kNoBlock);
  EXPECT_EQ(PbaOf(*r->map, 12), kNoBlock);
  EXPECT_EQ(r->next_seq, 4 + 1 + kJump);  // seq 4 is never handed out again
  EXPECT_TRUE(r->losses.empty());
}

TEST_F(RecoveryTest, ARecordWithTornDataAtTheTailIsDropped) {
  sb_.clean = false;
  Blocks a(1, 1), b(2, 2);
  uint32_t at = Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  Put(0, at, 2, 1, {WriteOp(20, b, 1)}, &b);
  Blocks torn(9, 1);
  ASSERT_OK(media_->Write(Offset(0, at + 2), torn.all()));  // its second data block
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_NE(PbaOf(*r->map, 10), kNoBlock);
  EXPECT_EQ(PbaOf(*r->map, 20), kNoBlock);  // all of the record or none
  EXPECT_EQ(PbaOf(*r->map, 21), kNoBlock);
  EXPECT_NE(r->report.find("1 unflushed records after seq 1 discarded"), std::string::npos)
      << r->report;
}

TEST_F(RecoveryTest, AGapADurableRecordVouchesForRefusesTheOpen) {
  sb_.clean = false;
  Blocks a(1, 1), c(3, 1);
  Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  Put(1, 0, 3, /*durable_seq=*/2, {WriteOp(12, c, 1)}, &c);  // says 2 was durable
  absl::StatusOr<Recovered> r = Run();
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("log record seq 2 is missing or corrupt"), std::string::npos)
      << r.status();
}

TEST_F(RecoveryTest, AcceptLossOpensPastTheGapAndListsTheLoss) {
  sb_.clean = false;
  Blocks a(1, 1), c(3, 1);
  Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  Put(1, 0, 3, 2, {WriteOp(12, c, 1)}, &c);
  absl::StatusOr<Recovered> r = Run(/*accept_loss=*/true);
  ASSERT_OK(r);
  ASSERT_EQ(r->losses.size(), 1u);
  EXPECT_EQ(r->losses[0],
            "record seq 2 is lost (no readable header): the blocks it changed are unknown");
  EXPECT_NE(PbaOf(*r->map, 10), kNoBlock);
  EXPECT_EQ(PbaOf(*r->map, 12), Pba(1, 1));  // applied after the gap
}

TEST_F(RecoveryTest, DamagedDataOfADurableRecordIsAppliedAndListed) {
  sb_.clean = false;
  Blocks a(1, 2), b(2, 1);
  uint32_t at = Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  Put(0, at, 2, /*durable_seq=*/1, {WriteOp(20, b, 2)}, &b);
  Blocks bad(9, 1);
  ASSERT_OK(media_->Write(Offset(0, 2), bad.all()));  // record 1's second block
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  ASSERT_EQ(r->losses.size(), 1u);
  EXPECT_EQ(r->losses[0],
            "record seq 1: damaged data among volume ftl0 blocks 10-11 (the damaged ones read as "
            "EIO)");
  // Mapped to where it was written: its checksum no longer matches, so a
  // read of it fails instead of returning older data.
  EXPECT_EQ(PbaOf(*r->map, 11), Pba(0, 2));
  EXPECT_EQ(r->map->block_csum(Pba(0, 2)), a.csums[1]);
  EXPECT_NE(PbaOf(*r->map, 20), kNoBlock);
}

TEST_F(RecoveryTest, AJoinedRecordWithoutItsPartnerIsDropped) {
  sb_.clean = false;
  Blocks a(1, 1);
  Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a, /*joined=*/true);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_EQ(PbaOf(*r->map, 10), kNoBlock);
  EXPECT_NE(r->report.find("1 unflushed records after seq 0 discarded"), std::string::npos)
      << r->report;
}

TEST_F(RecoveryTest, AJoinedPairIsAppliedWhole) {
  sb_.clean = false;
  Blocks a(1, 1), b(2, 1);
  Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a, /*joined=*/true);  // e.g. the hot part
  Put(1, 0, 2, 0, {WriteOp(20, b, 1)}, &b);                   // and the cold part
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_EQ(PbaOf(*r->map, 10), Pba(0, 1));
  EXPECT_EQ(PbaOf(*r->map, 20), Pba(1, 1));
  EXPECT_EQ(r->report, "recovered: checkpoint seq 1 + 2 records rolled forward");
}

TEST_F(RecoveryTest, RecordsOfAnotherPoolAreIgnored) {
  sb_.clean = false;
  Blocks a(1, 1);
  log::Superblock ours = sb_;
  sb_.uuid = log::NewUuid();  // Put stamps records with this one
  Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  sb_ = ours;
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_EQ(PbaOf(*r->map, 10), kNoBlock);
  EXPECT_EQ(r->report, "recovered: checkpoint seq 1 + 0 records rolled forward");
}

TEST_F(RecoveryTest, ADamagedNewestSlotFallsBackToTheOther) {
  // Clean superblock, but its newest slot is damaged: the older slot plus
  // the log.
  std::vector<std::byte> junk(kBlockSize, std::byte{0x5a});
  ASSERT_OK(media_->Write(checkpoint::SlotOffset(sb_, sb_.newest_slot), junk));
  Blocks a(1, 1);
  Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_FALSE(r->clean);
  EXPECT_TRUE(r->needs_checkpoints);
  ASSERT_EQ(r->degraded.size(), 1u);
  EXPECT_EQ(r->degraded[0], "checkpoint slot 1 is damaged (checksum mismatch or unreadable)");
  EXPECT_NE(r->report.find("(fell back to checkpoint slot 0)"), std::string::npos) << r->report;
  EXPECT_EQ(PbaOf(*r->map, 10), Pba(0, 1));
}

TEST_F(RecoveryTest, NoUsableCheckpointRebuildsTheMapFromTheLog) {
  std::vector<std::byte> junk(kBlockSize, std::byte{0x5a});
  for (int slot = 0; slot < 2; ++slot)
    ASSERT_OK(media_->Write(checkpoint::SlotOffset(sb_, slot), junk));
  Blocks a(1, 2), b(2, 1);
  uint32_t at = Put(0, 0, 1, 0, {WriteOp(10, a, 0)}, &a);
  Put(0, at, 2, 1, {WriteOp(10, b, 0)}, &b);  // overwrites lba 10 in place (same VBA)
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_TRUE(r->needs_checkpoints);
  EXPECT_FALSE(r->clean);
  ASSERT_EQ(r->degraded.size(), 3u);  // both slots, and the rebuild
  EXPECT_NE(r->degraded[2].find("no usable checkpoint"), std::string::npos) << r->degraded[2];
  EXPECT_EQ(r->report, "rebuilt from the log alone: 2 records applied");
  ASSERT_NE(r->map->volume(0), nullptr);
  EXPECT_EQ(r->map->volume(0)->name, sb_.primary_name);
  EXPECT_EQ(r->map->volume(0)->size_blocks, sb_.primary_blocks);
  EXPECT_EQ(PbaOf(*r->map, 10), Pba(0, 4));  // the newer copy
  EXPECT_EQ(PbaOf(*r->map, 11), Pba(0, 2));
  EXPECT_EQ(r->next_seq, 2 + 1 + kJump);
}

// Checkpoints written by a Checkpointer of the map built here.
class RecoveryFromCheckpointTest : public RecoveryTest {
 protected:
  void Checkpoint(std::unique_ptr<state::MapState> map, uint64_t next_seq, bool clean) {
    log::Durability d(media_);
    state::PoolState st;
    st.map = std::move(map);
    checkpoint::Checkpointer cp(media_, &d, &st);
    std::vector<std::string> degraded;
    ASSERT_OK(cp.ReadSuperblock(&degraded));
    ASSERT_OK(cp.Checkpoint(next_seq));
    ASSERT_OK(clean ? cp.MarkClean() : cp.MarkDirty());
    sb_ = cp.superblock();
  }
  std::unique_ptr<state::MapState> Map() {
    auto m = std::make_unique<state::MapState>(sb_.segment_count, sb_.segment_blocks);
    m->AddVolume(0, sb_.primary_name, sb_.primary_blocks);
    return m;
  }
};

TEST_F(RecoveryFromCheckpointTest, ASegmentBeingCleanedIsFullAgain) {
  auto m = Map();
  m->segments().Load(3, log::SegmentState::kCleaning);
  m->segments().Load(5, log::SegmentState::kOpen);
  Checkpoint(std::move(m), 40, /*clean=*/true);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_TRUE(r->clean);
  EXPECT_EQ(r->next_seq, 40u);
  EXPECT_EQ(r->map->segments().at(3).state, log::SegmentState::kFull);
  // A clean open resumes the open segment (commit::SegmentAllocator).
  EXPECT_EQ(r->map->segments().at(5).state, log::SegmentState::kOpen);
}

TEST_F(RecoveryFromCheckpointTest, AnUncleanOpenSealsTheSegmentsThatWereOpen) {
  auto m = Map();
  m->segments().Load(5, log::SegmentState::kOpen);
  Checkpoint(std::move(m), 40, /*clean=*/false);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_FALSE(r->clean);
  EXPECT_EQ(r->map->segments().at(5).state, log::SegmentState::kFull);
  EXPECT_EQ(r->report, "recovered: checkpoint seq 40 + 0 records rolled forward");
  EXPECT_EQ(r->next_seq, 39 + 1 + kJump);
}

TEST_F(RecoveryFromCheckpointTest, ReplayStartsAfterWhatTheCheckpointCovers) {
  // Records 1 and 2 are on the media in segment 0; the checkpoint covers
  // seqs < 2: segment 0 open, its write pointer after record 1.
  Blocks a(1, 1), b(2, 1);
  uint32_t at = Put(0, 0, 1, 0, {WriteOp(11, a, 0)}, &a);
  Put(0, at, 2, 1, {WriteOp(20, b, 1)}, &b);
  auto m = Map();
  m->segments().Load(0, log::SegmentState::kOpen);
  m->segments().at(0).write_ptr = at;
  m->segments().at(0).max_seq = 1;
  Checkpoint(std::move(m), 2, /*clean=*/false);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_EQ(PbaOf(*r->map, 11), kNoBlock);  // record 1 is not replayed
  EXPECT_EQ(PbaOf(*r->map, 20), Pba(0, 3));
  EXPECT_EQ(r->map->segments().at(0).state, log::SegmentState::kFull);
  EXPECT_EQ(r->map->segments().at(0).write_ptr, 4u);
  EXPECT_EQ(r->report, "recovered: checkpoint seq 2 + 1 records rolled forward");
}

TEST_F(RecoveryFromCheckpointTest, NonPersistentRangesLoseTheirContentInACrashOnly) {
  for (bool clean : {true, false}) {
    SetUp();
    auto m = Map();
    parts::ApplyWriteRecord(*m, 0, 100, 8, Pba(2, 0), 1);
    parts::ApplyWriteRecord(*m, 0, 200, 2, Pba(2, 9), 2);
    m->segments().Load(2, log::SegmentState::kFull);
    m->volume(0)->attrs.Apply(96, 16, log::kAttrNonPersistent, 0);
    Checkpoint(std::move(m), 3, clean);
    absl::StatusOr<Recovered> r = Run();
    ASSERT_OK(r);
    EXPECT_EQ(r->clean, clean);
    EXPECT_EQ(PbaOf(*r->map, 100) == kNoBlock, !clean) << clean;
    EXPECT_EQ(PbaOf(*r->map, 107) == kNoBlock, !clean) << clean;
    EXPECT_NE(PbaOf(*r->map, 200), kNoBlock);  // outside the range
    if (!clean) {
      EXPECT_NE(r->report.find("; 8 blocks of non-persistent ranges dropped"), std::string::npos)
          << r->report;
    }
    // The attribute itself stays.
    EXPECT_TRUE(r->map->volume(0)->attrs.Any(100, 1, log::kAttrNonPersistent));
  }
}

// The brief's crash: a Pool writes, is dropped without Close, and
// Recovery runs on the same media.
TEST_F(RecoveryTest, APoolDroppedWithoutCloseIsRecoveredFromItsLog) {
  auto pool = Pool::Format(media_, testing::SmallFormat(), testing::QuietOpen(false));
  ASSERT_OK(pool);
  Volume* v = (*pool)->PrimaryVolume();
  for (int i = 0; i < 20; ++i)
    ASSERT_OK(v->Write(uint64_t(i) * 3 * kBlockSize, testing::Pattern(i, 0, 2 * kBlockSize)));
  ASSERT_OK(v->Trim(3 * kBlockSize, kBlockSize));
  ASSERT_OK(v->Flush());
  const uint64_t next = (*pool)->Stats().next_seq;
  pool->reset();  // a crash, as far as the media is concerned
  ReadSuperblock();
  EXPECT_FALSE(sb_.clean);
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_FALSE(r->clean);
  EXPECT_TRUE(r->needs_checkpoints);
  EXPECT_EQ(r->next_seq, next + kJump);
  EXPECT_EQ(r->report,
            absl::StrCat("recovered: checkpoint seq 1 + ", next - 1, " records rolled forward"));
  for (int i = 0; i < 20; ++i) {
    std::vector<std::byte> want = testing::Pattern(i, 0, 2 * kBlockSize);
    for (Bno k = 0; k < 2; ++k) {
      Bno pba = PbaOf(*r->map, Bno(i * 3) + k);
      if (i == 1 && k == 0) {
        EXPECT_EQ(pba, kNoBlock);  // trimmed
        continue;
      }
      ASSERT_NE(pba, kNoBlock) << i << " " << k;
      std::vector<std::byte> got(kBlockSize);
      ASSERT_OK(media_->Read(sb_.data_offset + uint64_t(pba) * kBlockSize, got));
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + k * kBlockSize)) << i;
      EXPECT_EQ(r->map->block_csum(pba), util::BlockChecksum(got));
    }
  }
}

TEST_F(RecoveryTest, APoolClosedCleanlyOpensFromItsCheckpoint) {
  auto pool = Pool::Format(media_, testing::SmallFormat(), testing::QuietOpen(false));
  ASSERT_OK(pool);
  ASSERT_OK((*pool)->PrimaryVolume()->Write(0, testing::Pattern(1, 0, kBlockSize)));
  const uint64_t next = (*pool)->Stats().next_seq;
  ASSERT_OK((*pool)->Close());
  pool->reset();
  ReadSuperblock();
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_TRUE(r->clean);
  EXPECT_FALSE(r->needs_checkpoints);
  EXPECT_EQ(r->next_seq, next);
  EXPECT_NE(PbaOf(*r->map, 0), kNoBlock);
}

// Format 9: small records of one segment share a header block (a chain of
// sector headers, log/log_format.h "Sector chains"). A pool that writes
// one block per flush spends a sector on most headers instead of a block,
// and a crash after a checkpoint taken in the middle of such a run
// recovers every flushed write: the chain after the checkpoint starts at a
// block header, where replay starts.
TEST_F(RecoveryTest, SmallRecordsShareHeaderBlocksAndReplayAcrossACheckpoint) {
  auto pool = Pool::Format(media_, testing::SmallFormat(), testing::QuietOpen(false));
  ASSERT_OK(pool);
  ASSERT_TRUE(media_->writes_sectors());
  Volume* v = (*pool)->PrimaryVolume();
  const PoolStats before = (*pool)->Stats();
  constexpr int kWrites = 64;
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_OK(v->Write(uint64_t(i) * kBlockSize, testing::Pattern(i, 0, kBlockSize)));
    ASSERT_OK(v->Flush());
    if (i == kWrites / 2 + 3) ASSERT_OK((*pool)->Checkpoint());  // inside a chain
  }
  const PoolStats after = (*pool)->Stats();
  const uint64_t user = after.user_write_bytes - before.user_write_bytes;
  const uint64_t records = after.media_write_bytes - before.media_write_bytes - user -
                           (after.checkpoint_bytes - before.checkpoint_bytes);
  EXPECT_EQ(user, uint64_t(kWrites) * kBlockSize);
  // Each write and each flush's durability marker is a record (proof_delay
  // 0 here): 2 * kWrites records. With a header block each that is 2
  // blocks per write; a chain spends one block on eight records and a
  // sector on the others: under a third of that.
  EXPECT_LT(records * 3, uint64_t(kWrites) * 2 * kBlockSize) << records;
  const uint64_t next = (*pool)->Stats().next_seq;
  pool->reset();  // a crash
  // Every write is mapped and reads back from where the map says.
  auto ExpectWritten = [&](const Recovered& rec) {
    for (int i = 0; i < kWrites; ++i) {
      Bno pba = PbaOf(*rec.map, Bno(i));
      ASSERT_NE(pba, kNoBlock) << i;
      std::vector<std::byte> got(kBlockSize);
      ASSERT_OK(media_->Read(sb_.data_offset + uint64_t(pba) * kBlockSize, got));
      EXPECT_EQ(got, testing::Pattern(i, 0, kBlockSize)) << i;
    }
  };
  ReadSuperblock();
  absl::StatusOr<Recovered> r = Run();
  ASSERT_OK(r);
  EXPECT_EQ(r->next_seq, next + kJump);
  ExpectWritten(*r);
  // And the rebuild from the log alone reads the chains too.
  std::vector<std::byte> junk(kBlockSize, std::byte{0x5a});
  for (int slot = 0; slot < 2; ++slot)
    ASSERT_OK(media_->Write(checkpoint::SlotOffset(sb_, slot), junk));
  r = Run();
  ASSERT_OK(r);
  EXPECT_NE(r->report.find("rebuilt from the log alone"), std::string::npos) << r->report;
  ExpectWritten(*r);
}

}  // namespace
}  // namespace ftl::recovery
