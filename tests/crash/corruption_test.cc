// Damaged media: a flipped bit in data reads as DataLoss (never wrong data);
// a bad superblock copy falls back to the other; a bad checkpoint falls back
// to the older one plus the log, or to a rebuild from the log alone.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <cstdlib>
#include <cstring>
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

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    media_ = std::make_shared<media::FaultMedia>(32 << 20);
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(media_, SmallFormat(), QuietOpen(false)));
  }
  Volume* vol() { return pool_->PrimaryVolume(); }
  absl::StatusOr<std::unique_ptr<Pool>> Reopen() {
    pool_.reset();
    return Pool::Open(media_, QuietOpen(false));
  }
  // Finds the media offset of a 4 KiB block with exactly this content.
  uint64_t FindBlock(const std::vector<std::byte>& block) {
    std::vector<std::byte> buf(1 << 20);
    for (uint64_t off = 0; off < media_->size(); off += buf.size()) {
      EXPECT_OK(media_->Read(off, buf));
      for (size_t i = 0; i < buf.size(); i += kBlockSize)
        if (std::memcmp(buf.data() + i, block.data(), kBlockSize) == 0) return off + i;
    }
    return UINT64_MAX;
  }
  // Writes `a` then `b` (FUA each: `b`'s record proves `a`'s durable),
  // crashes, and returns the media offset of `a`'s first data block.
  uint64_t TwoDurableWritesThenCrash(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
    EXPECT_OK(vol()->Write(0, a, /*fua=*/true));
    EXPECT_OK(vol()->Write(1 << 20, b, /*fua=*/true));
    pool_.reset();
    uint64_t at = FindBlock(std::vector<std::byte>(a.begin(), a.begin() + 4096));
    EXPECT_NE(at, UINT64_MAX);
    return at;
  }
  // Flips a bit in block 2 of `data` (written at offset 0) on the media and
  // reopens the pool; false (with a test failure) if either fails.
  bool FlipBitInBlock2AndReopen(const std::vector<std::byte>& data) {
    uint64_t at = FindBlock(std::vector<std::byte>(data.begin() + 8192, data.begin() + 12288));
    EXPECT_NE(at, UINT64_MAX);
    if (at == UINT64_MAX) return false;
    media_->FlipBit(at + 100, 3);
    auto p = Pool::Open(media_, QuietOpen(false));
    EXPECT_OK(p);
    if (!p.ok()) return false;
    pool_ = std::move(*p);
    return true;
  }
  void Smash(uint64_t offset, size_t len) {
    std::vector<std::byte> junk(len, std::byte{0x5a});
    ASSERT_OK(media_->Write(offset, junk));
    ASSERT_OK(media_->Sync());
  }
  // Closes the pool uncleanly, smashes both checkpoint slots and reopens:
  // the map must be rebuilt from the log alone.
  void RebuildWithoutCheckpoints(std::unique_ptr<Pool>* out) {
    Geometry g = pool_->geometry();
    pool_.reset();
    Smash(2 * kBlockSize, kBlockSize);
    Smash((2 + uint64_t(g.checkpoint_slot_blocks)) * kBlockSize, kBlockSize);
    auto p = Pool::Open(media_, QuietOpen(false));
    ASSERT_OK(p);
    EXPECT_NE((*p)->OpenReport().find("rebuilt"), std::string::npos) << (*p)->OpenReport();
    *out = std::move(*p);
  }
  std::shared_ptr<media::FaultMedia> media_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(CorruptionTest, FlippedDataBitReadsAsDataLoss) {
  auto data = Pattern(1, 0, 64 << 10);
  ASSERT_OK(vol()->Write(0, data));
  ASSERT_OK(pool_->Close());
  uint64_t at = FindBlock(std::vector<std::byte>(data.begin() + 8192, data.begin() + 12288));
  ASSERT_NE(at, UINT64_MAX);
  media_->FlipBit(at + 100, 3);
  ASSERT_OK_AND_ASSIGN(pool_, Reopen());
  std::vector<std::byte> out(64 << 10);
  absl::Status s = vol()->Read(0, out);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("block 2"), std::string::npos) << s;
  // The neighbours still read fine, and the pool keeps serving.
  std::vector<std::byte> one(kBlockSize);
  ASSERT_OK(vol()->Read(4096, one));
  EXPECT_EQ(0, std::memcmp(one.data(), data.data() + 4096, kBlockSize));
  ASSERT_OK(vol()->Write(8192, Pattern(2, 8192, 4096)));
  ASSERT_OK(vol()->Read(8192, one));
  EXPECT_EQ(one, Pattern(2, 8192, 4096));
  auto report = pool_->Check(true);
  ASSERT_OK(report);
  EXPECT_TRUE(report->problems.empty());  // the bad block was overwritten
}

TEST_F(CorruptionTest, CheckReportsFlippedBit) {
  auto data = Pattern(3, 0, 16 << 10);
  ASSERT_OK(vol()->Write(0, data));
  ASSERT_OK(vol()->Flush());
  uint64_t at = FindBlock(std::vector<std::byte>(data.begin(), data.begin() + 4096));
  ASSERT_NE(at, UINT64_MAX);
  media_->FlipBit(at, 0);
  auto report = pool_->Check(true);
  ASSERT_OK(report);
  // The block, and who reads it (issue 19: losses by volume and LBA).
  ASSERT_EQ(report->problems.size(), 2u);
  EXPECT_NE(report->problems[0].find("fails its checksum"), std::string::npos);
  EXPECT_NE(report->problems[1].find("volume ftl0 blocks 0-0 read as EIO"), std::string::npos)
      << report->problems[1];
}

TEST_F(CorruptionTest, BadSuperblockCopyFallsBackToTheOther) {
  auto data = Pattern(4, 0, 32 << 10);
  ASSERT_OK(vol()->Write(0, data));
  ASSERT_OK(pool_->Close());
  pool_.reset();
  for (uint64_t copy : {0, 1}) {
    std::vector<std::byte> saved(kBlockSize);
    ASSERT_OK(media_->Read(copy * kBlockSize, saved));
    Smash(copy * kBlockSize + 40, 64);  // a torn copy
    auto p = Pool::Open(media_, QuietOpen(false));
    ASSERT_OK(p) << "copy " << copy;
    std::vector<std::byte> out(data.size());
    ASSERT_OK((*p)->PrimaryVolume()->Read(0, out));
    EXPECT_EQ(out, data);
    ASSERT_OK((*p)->Close());
    p->reset();
    // Restore (the reopen rewrote the other copy).
    ASSERT_OK(media_->Write(copy * kBlockSize, saved));
  }
  Smash(40, 64);
  Smash(kBlockSize + 40, 64);
  auto p = Pool::Open(media_, QuietOpen(false));
  EXPECT_TRUE(absl::IsDataLoss(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("both superblock copies"), std::string::npos);
}

TEST_F(CorruptionTest, BadNewestCheckpointFallsBackToOlderPlusLog) {
  auto a = Pattern(5, 0, 64 << 10), b = Pattern(6, 1 << 20, 64 << 10), c = Pattern(7, 2 << 20, 64 << 10);
  ASSERT_OK(vol()->Write(0, a));
  ASSERT_OK(pool_->Checkpoint());
  ASSERT_OK(vol()->Write(1 << 20, b));
  ASSERT_OK(vol()->Trim(0, 8192));
  ASSERT_OK(pool_->Checkpoint());
  ASSERT_OK(vol()->Write(2 << 20, c));
  ASSERT_OK(vol()->Flush());
  Geometry g = pool_->geometry();
  pool_.reset();  // crash
  // The newest checkpoint went to the slot the previous one did not use;
  // damage both in turn's newest by checking which one fails to load.
  std::vector<std::byte> s0(kBlockSize), s1(kBlockSize);
  uint64_t slot0 = 2 * kBlockSize, slot1 = (2 + uint64_t(g.checkpoint_slot_blocks)) * kBlockSize;
  ASSERT_OK(media_->Read(slot0, s0));
  ASSERT_OK(media_->Read(slot1, s1));
  // Damage slot 0 and slot 1 alternately; either way all data survives.
  for (uint64_t slot : {slot0, slot1}) {
    std::vector<std::byte> saved(64 << 10);
    ASSERT_OK(media_->Read(slot, saved));
    Smash(slot + 200, 100);
    auto p = Pool::Open(media_, QuietOpen(false));
    ASSERT_OK(p);
    Volume* v = (*p)->PrimaryVolume();
    std::vector<std::byte> out(64 << 10);
    ASSERT_OK(v->Read(1 << 20, out));
    EXPECT_EQ(out, b);
    ASSERT_OK(v->Read(2 << 20, out));
    EXPECT_EQ(out, c);
    ASSERT_OK(v->Read(0, out));
    auto expect_a = a;
    std::memset(expect_a.data(), 0, 8192);
    EXPECT_EQ(out, expect_a);
    auto rep = (*p)->Check(true);
    ASSERT_OK(rep);
    EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
    p->reset();  // crash again, leave the recovered checkpoints
    // Undo so the next round starts from the same damaged situation.
    ASSERT_OK(media_->Write(slot, saved));
  }
}

TEST_F(CorruptionTest, NoUsableCheckpointRebuildsFromLog) {
  auto a = Pattern(8, 4096, 200 << 10);
  ASSERT_OK(vol()->Write(4096, a));
  ASSERT_OK(vol()->Write(8192, Pattern(9, 8192, 4096)));  // overwrite one block
  ASSERT_OK(vol()->Flush());
  std::unique_ptr<Pool> p;
  ASSERT_NO_FATAL_FAILURE(RebuildWithoutCheckpoints(&p));
  std::vector<std::byte> out(a.size());
  ASSERT_OK(p->PrimaryVolume()->Read(4096, out));
  std::memcpy(a.data() + 4096, Pattern(9, 8192, 4096).data(), 4096);
  EXPECT_EQ(out, a);
  auto rep = p->Check(true);
  ASSERT_OK(rep);
  EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
}

// The rebuild from the log alone also replays the cleaner's (packed)
// relocation records, and a write after a relocation wins over it.
TEST_F(CorruptionTest, RebuildFromLogReplaysRelocations) {
  const uint64_t kB = kBlockSize, n = 2048;
  std::vector<int> model(n, 1);
  ASSERT_OK(vol()->Write(0, Pattern(1, 0, n * kB)));
  for (uint64_t b = 0; b < n; b += 2) {
    ASSERT_OK(vol()->Write(b * kB, Pattern(2, b * kB, kB)));
    model[b] = 2;
  }
  ASSERT_OK(pool_->RunCleaner(pool_->Stats().segments_total));
  ASSERT_GT(pool_->Stats().gc_relocated_bytes, 0u) << "nothing was relocated";
  for (uint64_t b = 1; b < n; b += 64) {
    ASSERT_OK(vol()->Write(b * kB, Pattern(3, b * kB, kB)));
    model[b] = 3;
  }
  ASSERT_OK(vol()->Flush());
  std::unique_ptr<Pool> p;
  ASSERT_NO_FATAL_FAILURE(RebuildWithoutCheckpoints(&p));
  std::vector<std::byte> out(kB);
  for (uint64_t b = 0; b < n; ++b) {
    ASSERT_OK(p->PrimaryVolume()->Read(b * kB, out));
    ASSERT_EQ(out, Pattern(model[b], b * kB, kB)) << "block " << b;
  }
  auto rep = p->Check(true);
  ASSERT_OK(rep);
  EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
}

TEST_F(CorruptionTest, DamagedDurableRecordRefusesToOpen) {
  auto a = Pattern(10, 0, 16 << 10), b = Pattern(11, 1 << 20, 16 << 10);
  // Damage the header of the record holding `a`: the record after it says
  // `a` was durable, so this is media damage, not a torn write.
  ASSERT_NE(TwoDurableWritesThenCrash(a, b), UINT64_MAX);
  const uint64_t header = testing::FindWriteHeader(*media_, 0, 0);  // a block or a sector header
  ASSERT_NE(header, UINT64_MAX);
  Smash(header + 30, 8);
  auto p = Pool::Open(media_, QuietOpen(false));
  EXPECT_TRUE(absl::IsDataLoss(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("durable"), std::string::npos);
}

// Format 9: a record whose header is a sector of an earlier header block
// (log_format.h, "Sector chains"). Damage to that sector with a later
// durable record is media damage: the open refuses; with accept_loss the
// blocks it names answer EIO and the records after it are served.
TEST_F(CorruptionTest, DamagedSectorHeaderOfADurableRecordRefusesToOpen) {
  const uint64_t kB = kBlockSize;
  ASSERT_OK(vol()->Write(0, Pattern(40, 0, kB), /*fua=*/true));
  ASSERT_OK(vol()->Write(256 * kB, Pattern(41, 256 * kB, 2 * kB), /*fua=*/true));
  ASSERT_OK(vol()->Write(512 * kB, Pattern(42, 512 * kB, kB), /*fua=*/true));
  pool_.reset();
  const uint64_t header = testing::FindWriteHeader(*media_, 0, 256);
  ASSERT_NE(header, UINT64_MAX);
  ASSERT_NE(header % kB, 0u) << "the middle record's header is not a sector header";
  media_->FlipBit(header + 25, 1);  // its durable_seq: the claim stays readable
  auto p = Pool::Open(media_, QuietOpen(false));
  EXPECT_TRUE(absl::IsDataLoss(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("durable"), std::string::npos) << p.status();
  auto open = QuietOpen(false);
  open.accept_loss = true;
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, open));
  std::vector<std::byte> out(kB);
  EXPECT_TRUE(absl::IsDataLoss(vol()->Read(256 * kB, out)));
  EXPECT_TRUE(absl::IsDataLoss(vol()->Read(257 * kB, out)));
  ASSERT_OK(vol()->Read(0, out));
  EXPECT_EQ(out, Pattern(40, 0, kB));
  ASSERT_OK(vol()->Read(512 * kB, out));
  EXPECT_EQ(out, Pattern(42, 512 * kB, kB));
}

// Issue 19 item 2: the last record before a crash was acknowledged as
// durable (FLUSH or FUA answered). Damage to it must be detected, never
// read as the older contents: a durability marker after the sync says so.
class DamagedLastRecordTest : public CorruptionTest,
                              public ::testing::WithParamInterface<bool> {
 protected:
  // Writes and flushes older data, then 64 KiB of `tag` at offset 0,
  // acknowledged durable by FUA or a FLUSH (the test's parameter), then
  // crashes. Returns the new data.
  std::vector<std::byte> WriteAcknowledgedThenCrash(uint64_t tag) {
    auto old_data = Pattern(tag + 100, 0, 64 << 10), new_data = Pattern(tag, 0, 64 << 10);
    EXPECT_OK(vol()->Write(0, old_data));
    EXPECT_OK(vol()->Flush());
    EXPECT_OK(vol()->Write(0, new_data, GetParam()));
    if (!GetParam()) {
      EXPECT_OK(vol()->Flush());
    }
    pool_.reset();  // a crash: nothing after the acknowledgement
    return new_data;
  }
};

TEST_P(DamagedLastRecordTest, DataDamageReadsAsErrorNotOldData) {
  auto new_data = WriteAcknowledgedThenCrash(21);
  ASSERT_TRUE(FlipBitInBlock2AndReopen(new_data));
  std::vector<std::byte> out(4096);
  EXPECT_TRUE(absl::IsDataLoss(vol()->Read(8192, out))) << "the damaged block read without error";
  ASSERT_OK(vol()->Read(0, out));
  EXPECT_TRUE(std::equal(out.begin(), out.end(), new_data.begin())) << "an acknowledged block reads old data";
}

TEST_P(DamagedLastRecordTest, HeaderDamageRefusesToOpen) {
  auto new_data = WriteAcknowledgedThenCrash(23);
  const uint64_t header = testing::FindWriteHeader(*media_, 0, 0);
  ASSERT_NE(header, UINT64_MAX);
  media_->FlipBit(header + 40, 1);  // the record's header (a block or a sector header)
  auto p = Pool::Open(media_, QuietOpen(false));
  EXPECT_TRUE(absl::IsDataLoss(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("durable"), std::string::npos) << p.status();
}

// The same with the pool's default proof_delay: the FLUSH is answered after
// one sync and the marker follows on its own. Once it is durable, damage
// to the flushed record is detected as above.
TEST_F(CorruptionTest, DeferredProofDetectsDamageOnceTheMarkerIsDurable) {
  pool_.reset();
  OpenOptions open = QuietOpen(false);
  open.proof_delay = OpenOptions().proof_delay;
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, open));
  auto old_data = Pattern(131, 0, 64 << 10), new_data = Pattern(31, 0, 64 << 10);
  ASSERT_OK(vol()->Write(0, old_data));
  ASSERT_OK(vol()->Flush());
  const uint64_t seq = pool_->Stats().next_seq;
  ASSERT_OK(vol()->Write(0, new_data));
  ASSERT_OK(vol()->Flush());
  EXPECT_EQ(pool_->Stats().next_seq, seq + 1) << "the flush wrote a marker before its answer";
  // The marker: one more record, synced (bounded wait).
  for (int i = 0; i < 2500 && pool_->Stats().next_seq < seq + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(pool_->Stats().next_seq, seq + 2) << "no deferred marker was written";
  for (int i = 0; i < 2500 && media_->unsynced_writes() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(media_->unsynced_writes(), 0u);
  pool_.reset();  // a crash after the marker
  ASSERT_TRUE(FlipBitInBlock2AndReopen(new_data));
  std::vector<std::byte> out(4096);
  EXPECT_TRUE(absl::IsDataLoss(vol()->Read(8192, out))) << "the damaged block read without error";
  ASSERT_OK(vol()->Read(0, out));
  EXPECT_TRUE(std::equal(out.begin(), out.end(), new_data.begin())) << "an acknowledged block reads old data";
}

INSTANTIATE_TEST_SUITE_P(FlushOrFua, DamagedLastRecordTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fua" : "Flush"; });

// Issue 19 item 3: a damaged durable record need not take the pool
// offline. With accept_loss the open succeeds, the blocks the damaged
// header names answer EIO (also after a plain reopen, until rewritten),
// the rest is served, and Check lists the loss by volume and LBA.
TEST_F(CorruptionTest, AcceptLossOpensWithTheDamagedBlocksAsErrors) {
  auto a = Pattern(30, 0, 16 << 10), b = Pattern(31, 1 << 20, 16 << 10);
  ASSERT_NE(TwoDurableWritesThenCrash(a, b), UINT64_MAX);
  const uint64_t header = testing::FindWriteHeader(*media_, 0, 0);
  ASSERT_NE(header, UINT64_MAX);
  media_->FlipBit(header + 89, 2);  // block 1's checksum in the header
  ASSERT_TRUE(absl::IsDataLoss(Pool::Open(media_, QuietOpen(false)).status()));
  auto open = QuietOpen(false);
  open.accept_loss = true;
  auto p = Pool::Open(media_, open);
  ASSERT_OK(p);
  pool_ = std::move(*p);
  std::vector<std::byte> out(4096);
  for (uint64_t off = 0; off < a.size(); off += 4096)
    EXPECT_TRUE(absl::IsDataLoss(vol()->Read(off, out))) << "lost block at " << off << " read: " << vol()->Read(off, out) << " zero=" << (out[0] == std::byte{0} && out[100] == std::byte{0});
  std::vector<std::byte> later(b.size());
  ASSERT_OK(vol()->Read(1 << 20, later));
  EXPECT_TRUE(later == b);
  auto rep = pool_->Check(true);
  ASSERT_OK(rep);
  bool listed = false;
  for (const auto& pr : rep->problems) listed |= pr.find("ftl0 blocks 0-3") != std::string::npos;
  EXPECT_TRUE(listed) << (rep->problems.empty() ? "no problems" : rep->problems[0]);
  // The loss is durable: a plain reopen works and still answers EIO.
  ASSERT_OK(pool_->Close());
  pool_.reset();
  p = Pool::Open(media_, QuietOpen(false));
  ASSERT_OK(p);
  pool_ = std::move(*p);
  EXPECT_TRUE(absl::IsDataLoss(vol()->Read(4096, out)));
  ASSERT_OK(vol()->Write(0, a));  // rewriting heals
  std::vector<std::byte> back(a.size());
  ASSERT_OK(vol()->Read(0, back));
  EXPECT_TRUE(back == a);
}

TEST_F(CorruptionTest, AcceptLossOfARecordWithoutAHeaderListsItAsUnknown) {
  auto a = Pattern(32, 0, 16 << 10), b = Pattern(33, 1 << 20, 16 << 10);
  // Not the first record of its segment (docs/decisions.md: a damaged
  // magic there hides the segment).
  ASSERT_OK(vol()->Write(2 << 20, Pattern(35, 2 << 20, 4096), /*fua=*/true));
  ASSERT_OK(vol()->Write(0, a, /*fua=*/true));
  ASSERT_OK(vol()->Write(1 << 20, b, /*fua=*/true));
  pool_.reset();
  const uint64_t header = testing::FindWriteHeader(*media_, 0, 0);
  ASSERT_NE(header, UINT64_MAX);
  Smash(header, 8);  // the magic: no header at all
  auto open = QuietOpen(false);
  open.accept_loss = true;
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, open));
  std::vector<std::byte> later(b.size());
  ASSERT_OK(vol()->Read(1 << 20, later));
  EXPECT_TRUE(later == b);
  auto rep = pool_->Check(false);
  ASSERT_OK(rep);
  ASSERT_FALSE(rep->problems.empty());
  EXPECT_NE(rep->problems[0].find("unknown"), std::string::npos) << rep->problems[0];
}

// Issue 19 item 4: redundancy that is gone is reported apart from loss.
TEST_F(CorruptionTest, CheckReportsADamagedCheckpointSlotAsDegraded) {
  ASSERT_OK(vol()->Write(0, Pattern(34, 0, 64 << 10)));
  ASSERT_OK(pool_->Checkpoint());
  ASSERT_OK(pool_->Checkpoint());
  Geometry g = pool_->geometry();
  ASSERT_OK(pool_->Close());
  pool_.reset();
  auto ro = QuietOpen(false);
  ro.read_only = true;
  {
    auto p = Pool::Open(media_, ro);
    ASSERT_OK(p);
    auto rep = (*p)->Check(true);
    ASSERT_OK(rep);
    EXPECT_TRUE(rep->problems.empty());
    EXPECT_TRUE(rep->degraded.empty()) << rep->degraded[0];
  }
  // Both slots were written; damage whichever is older: the open never
  // reads it, the check must still say so.
  for (int slot = 0; slot < 2; ++slot) {
    Smash((2 + uint64_t(slot) * g.checkpoint_slot_blocks) * kBlockSize + 100, 8);
    auto p = Pool::Open(media_, ro);
    ASSERT_OK(p);
    auto rep = (*p)->Check(true);
    ASSERT_OK(rep);
    EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
    ASSERT_FALSE(rep->degraded.empty()) << "slot " << slot;
    EXPECT_NE(rep->degraded[0].find("checkpoint slot"), std::string::npos) << rep->degraded[0];
    if (slot == 0) {
      // Repair the first before damaging the other (a read-write open with
      // two checkpoints rewrites both slots).
      p->reset();
      auto rw = Pool::Open(media_, QuietOpen(false));
      ASSERT_OK(rw);
      ASSERT_OK((*rw)->Checkpoint());
      ASSERT_OK((*rw)->Checkpoint());
      ASSERT_OK((*rw)->Close());
    }
  }
}

TEST_F(CorruptionTest, CheckReportsADamagedSuperblockCopyAsDegraded) {
  ASSERT_OK(pool_->Close());
  pool_.reset();
  Smash(kBlockSize + 50, 8);  // copy B
  auto ro = QuietOpen(false);
  ro.read_only = true;
  auto p = Pool::Open(media_, ro);
  ASSERT_OK(p);
  auto rep = (*p)->Check(true);
  ASSERT_OK(rep);
  EXPECT_TRUE(rep->problems.empty());
  ASSERT_FALSE(rep->degraded.empty());
  EXPECT_NE(rep->degraded[0].find("superblock copy"), std::string::npos) << rep->degraded[0];
}

// An unflushed tail that is damaged is a torn write: it is dropped and the
// older contents read back (the write was never acknowledged as durable).
TEST_F(CorruptionTest, DamagedUnflushedTailIsDropped) {
  auto old_data = Pattern(24, 0, 64 << 10), new_data = Pattern(25, 0, 64 << 10);
  ASSERT_OK(vol()->Write(0, old_data));
  ASSERT_OK(vol()->Flush());
  ASSERT_OK(vol()->Write(0, new_data));
  pool_.reset();
  ASSERT_TRUE(FlipBitInBlock2AndReopen(new_data));
  std::vector<std::byte> out(64 << 10);
  ASSERT_OK(vol()->Read(0, out));
  EXPECT_TRUE(out == old_data);
}

// Fills the whole logical size, then overwrites three times the size at
// random (a fraction `hot` of the writes to the first fifth of the volume);
// nothing may fail and every byte must read back. Returns the pool's stats.
PoolStats FillAndOverwrite(OpenOptions::Placement placement, double hot) {
  auto media = NewMemMedia(48 << 20);
  auto open = QuietOpen(true);
  open.placement = placement;
  auto p = Pool::Format(media, SmallFormat(256 << 10), open);
  EXPECT_OK(p);
  if (!p.ok()) return {};
  Volume* v = (*p)->PrimaryVolume();
  uint64_t size = v->size_bytes();
  std::vector<std::byte> model(size);
  // Fill the whole logical size.
  for (uint64_t off = 0; off < size; off += 1 << 20) {
    auto d = Pattern(1, off, std::min<uint64_t>(1 << 20, size - off));
    if (absl::Status s = v->Write(off, d); !s.ok()) {
      ADD_FAILURE() << "fill at " << off << ": " << s;
      return {};
    }
    std::memcpy(&model[off], d.data(), d.size());
  }
  // Overwrite at random, three times the size, with 4..64 KiB writes.
  std::mt19937_64 rng(3);
  uint64_t written = 0, tag = 2;
  const double passes = std::getenv("FTL_FULL_PASSES") ? std::atof(std::getenv("FTL_FULL_PASSES")) : 3.0;
  while (written < passes * size) {
    uint64_t len = (1 + rng() % 16) * 4096;
    const bool to_hot = double(rng() >> 11) * 0x1.0p-53 < hot;
    const uint64_t span = to_hot ? size / 5 : size;
    uint64_t off = (rng() % ((span - len) / 4096)) * 4096;
    auto d = Pattern(++tag, off, len);
    absl::Status s = v->Write(off, d);
    EXPECT_OK(s) << "after " << written << " bytes";
    if (!s.ok()) return {};
    std::memcpy(&model[off], d.data(), len);
    written += len;
  }
  std::vector<std::byte> out(size);
  EXPECT_OK(v->Read(0, out));
  EXPECT_TRUE(out == model);
  PoolStats st = (*p)->Stats();
  EXPECT_GT(st.gc_segments_cleaned, 0u);
  std::printf("full device: WA %.2f, %llu segments cleaned, %llu checkpoints\n",
              st.write_amplification, (unsigned long long)st.gc_segments_cleaned,
              (unsigned long long)st.checkpoint_count);
  // Beyond the logical size: a clean error, and the pool keeps serving.
  EXPECT_TRUE(absl::IsOutOfRange(v->Write(size, Pattern(1, 0, 4096))));
  EXPECT_OK(v->Write(0, Pattern(99, 0, 4096)));
  auto rep = (*p)->Check(true);
  EXPECT_OK(rep);
  if (rep.ok()) {
    EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
  }
  return st;
}

TEST(FullDeviceTest, FillAndOverwriteManyTimesNeverFails) {
  FillAndOverwrite(OpenOptions::Placement::kAuto, 0);
}

// With placement on and skewed writes the cleaner fills two relocation
// segments (and users leave it two free segments).
TEST(FullDeviceTest, SkewedOverwritesWithPlacementOnNeverFail) {
  PoolStats st = FillAndOverwrite(OpenOptions::Placement::kOn, 0.8);
  EXPECT_GT(st.gc_hot_relocated_bytes, 0u) << "no hot relocation happened";
  EXPECT_GT(st.user_hot_write_bytes, 0u);
}

TEST(FullDeviceTest, HaltedCleanerGivesNoSpaceInsteadOfHanging) {
  auto media = NewMemMedia(48 << 20);
  auto p = Pool::Format(media, SmallFormat(256 << 10), QuietOpen(true));
  ASSERT_OK(p);
  Volume* v = (*p)->PrimaryVolume();
  (*p)->HaltCleaner();
  uint64_t size = v->size_bytes();
  absl::Status s;
  std::mt19937_64 rng(4);
  for (int i = 0; i < 20000 && s.ok(); ++i) {
    uint64_t off = (rng() % (size / 65536)) * 65536;
    s = v->Write(off, Pattern(i, off, 65536));
  }
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  (*p)->ResumeCleaner();
  ASSERT_OK(v->Write(0, Pattern(1, 0, 65536)));  // serving again
  ASSERT_OK((*p)->Close());
}

TEST(FullDeviceTest, NoCleanerGivesNoSpaceInsteadOfHanging) {
  auto media = NewMemMedia(48 << 20);
  auto p = Pool::Format(media, SmallFormat(256 << 10), QuietOpen(/*cleaner=*/false));
  ASSERT_OK(p);
  Volume* v = (*p)->PrimaryVolume();
  uint64_t size = v->size_bytes();
  absl::Status s;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000 && s.ok(); ++i) {
    uint64_t off = (rng() % (size / 4096)) * 4096;
    s = v->Write(off, Pattern(i, off, 4096));
  }
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  // An explicit cleaning run makes room again.
  ASSERT_OK((*p)->RunCleaner(20));
  ASSERT_OK(v->Write(0, Pattern(1, 0, 4096)));
}


// Issue 19 item 1: on a pool filled to the last segment with a snapshot
// holding the old data, everything that frees space must still work: trim,
// punching write-zeroes, snapshot delete, deactivate; the cleaner then
// makes room and writes succeed again. Tested at the tightest point: writes
// are pushed (in single blocks) until the device refuses them.
class FullPoolTest : public ::testing::Test {
 protected:
  void FillToTheLastBlock(bool cleaner) {
    media_ = NewMemMedia(48 << 20);
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(media_, SmallFormat(256 << 10), QuietOpen(cleaner)));
    // Near 100% use, a running cleaner would keep making a block of room
    // at a time from segments with a few dead blocks: halted, the device
    // answers ENOSPC at once (it stays halted until the test resumes it).
    if (cleaner) pool_->HaltCleaner();
    Volume* v = pool_->PrimaryVolume();
    size_ = v->size_bytes();
    for (uint64_t off = 0; off < size_; off += 1 << 20)
      ASSERT_OK(v->Write(off, Pattern(1, off, std::min<uint64_t>(1 << 20, size_ - off))));
    ASSERT_OK(pool_->CreateSnapshot("", "old"));
    // Overwrite until the device is full: big writes first, then single
    // blocks so that the last free block is taken.
    absl::Status s;
    uint64_t off = 0;
    for (; s.ok(); off = (off + (1 << 20)) % size_) s = v->Write(off, Pattern(2, off, 1 << 20));
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
    s = absl::OkStatus();
    for (int i = 0; s.ok() && i < 100000; ++i, off = (off + 4096) % size_)
      s = v->Write(off, Pattern(3, off, 4096));
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  }
  Volume* vol() { return pool_->PrimaryVolume(); }
  std::shared_ptr<Media> media_;
  std::unique_ptr<Pool> pool_;
  uint64_t size_ = 0;
};

TEST_F(FullPoolTest, FreeingOperationsSucceedAndSpaceComesBack) {
  FillToTheLastBlock(/*cleaner=*/true);
  // Trims of snapshot-shared blocks free nothing, but must not fail.
  for (int i = 0; i < 50; ++i) ASSERT_OK(vol()->Trim(uint64_t(i) * 8192, 4096, false)) << i;
  ASSERT_OK(vol()->WriteZeroes(1 << 20, 1 << 20, false, /*no_hole=*/false, false));
  auto act = pool_->ActivateSnapshot("", "old", "old-copy", false);
  if (act.ok()) {
    ASSERT_OK(pool_->DeactivateVolume("old-copy"));
  }
  ASSERT_OK(pool_->DeleteSnapshot("", "old", /*force=*/true));
  // The old data is garbage now: the cleaner must make room.
  pool_->ResumeCleaner();
  ASSERT_OK(pool_->RunCleaner(8));
  for (uint64_t off = 0; off < 8 << 20; off += 1 << 20)
    ASSERT_OK(vol()->Write(off, Pattern(4, off, 1 << 20))) << off;
  auto rep = pool_->Check(true);
  ASSERT_OK(rep);
  EXPECT_TRUE(rep->problems.empty()) << rep->problems[0];
}

TEST_F(FullPoolTest, FreeingOperationsSucceedAfterARestart) {
  FillToTheLastBlock(/*cleaner=*/true);
  ASSERT_OK(pool_->Close());
  pool_.reset();
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen(false)));
  EXPECT_TRUE(absl::IsResourceExhausted(vol()->Write(0, Pattern(5, 0, 4096))));
  ASSERT_OK(vol()->Trim(0, 1 << 20, false));
  ASSERT_OK(pool_->DeleteSnapshot("", "old", /*force=*/false));
  ASSERT_OK(pool_->RunCleaner(8));
  ASSERT_OK(vol()->Write(0, Pattern(6, 0, 1 << 20)));
}

TEST_F(FullPoolTest, RollbackFreesTooWithoutACleaner) {
  FillToTheLastBlock(/*cleaner=*/false);
  ASSERT_OK(pool_->Rollback("", "old"));
  ASSERT_OK(pool_->DeleteSnapshot("", "old", false));
  ASSERT_OK(pool_->RunCleaner(8));
  ASSERT_OK(vol()->Write(0, Pattern(7, 0, 1 << 20)));
  std::vector<std::byte> out(4096);
  ASSERT_OK(vol()->Read(2 << 20, out));
  EXPECT_TRUE(out == Pattern(1, 2 << 20, 4096));
}

// Thin provisioning (issue 22): volumes created at will may add up to more
// than the pool holds. Filling them answers ResourceExhausted (ENOSPC over
// NBD) like the primary, and the pool keeps serving reads, trims, forced
// shrinks and destroys, also after a restart while full; then the cleaner
// makes room and the volumes take writes again.
class ThinFullPoolTest : public ::testing::Test {
 protected:
  void Fill(bool cleaner) {
    media_ = NewMemMedia(48 << 20);
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(media_, SmallFormat(256 << 10), QuietOpen(cleaner)));
    if (cleaner) pool_->HaltCleaner();
    logical_ = pool_->geometry().logical_blocks * 4096;
    for (const char* name : {"a", "b"}) {
      ASSERT_OK(pool_->CreateDataset(name, DatasetKind::kBlock, logical_).status());
    }
    const PoolStats st = pool_->Stats();
    EXPECT_EQ(st.provisioned_bytes, 3 * logical_);  // the primary and both: 3x over-committed
    EXPECT_EQ(st.logical_bytes, logical_);
    // "a" takes 60% of the capacity, "b" the rest until the pool is full.
    a_bytes_ = logical_ * 6 / 10 / (1 << 20) * (1 << 20);
    Volume* a = pool_->GetVolume("a");
    for (uint64_t off = 0; off < a_bytes_; off += 1 << 20)
      ASSERT_OK(a->Write(off, Pattern(1, off, 1 << 20)));
    Volume* b = pool_->GetVolume("b");
    absl::Status s;
    for (b_full_ = 0; s.ok() && b_full_ < logical_; b_full_ += 1 << 20)
      s = b->Write(b_full_, Pattern(2, b_full_, 1 << 20));
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
    b_full_ -= 1 << 20;  // the write that failed
    for (int i = 0; s.ok() || i == 0; ++i) s = b->Write(b_full_ + uint64_t(i) * 4096, Pattern(3, 0, 4096));
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
    EXPECT_TRUE(absl::IsResourceExhausted(pool_->PrimaryVolume()->Write(0, Pattern(4, 0, 4096))));
    // Notes that free nothing need room too; refused, they change nothing.
    absl::Status created = pool_->CreateDataset("c", DatasetKind::kBlock, 1 << 20).status();
    EXPECT_TRUE(absl::IsResourceExhausted(created)) << created;
    EXPECT_EQ(pool_->GetVolume("c"), nullptr);
    absl::Status grown = pool_->ResizeDataset("a", 2 * logical_);
    EXPECT_TRUE(absl::IsResourceExhausted(grown)) << grown;
    EXPECT_EQ(pool_->GetVolume("a")->size_bytes(), logical_);
  }
  void ExpectReadsServed() {
    std::vector<std::byte> out(1 << 20);
    ASSERT_OK(pool_->GetVolume("a")->Read(0, out));
    EXPECT_TRUE(out == Pattern(1, 0, 1 << 20));
    ASSERT_OK(pool_->GetVolume("b")->Read(0, out));
    EXPECT_TRUE(out == Pattern(2, 0, 1 << 20));
  }
  void FreeAndWriteAgain() {
    // Trims free nothing here in themselves (the cleaner is halted) but must
    // succeed; a forced shrink and a destroy are notes that free.
    ASSERT_OK(pool_->GetVolume("b")->Trim(0, 4 << 20));
    ASSERT_OK(pool_->ResizeDataset("a", 1 << 20, /*force=*/true));
    ASSERT_OK(pool_->DestroyDataset("b"));
    pool_->ResumeCleaner();
    ASSERT_OK(pool_->RunCleaner(8));
    Volume* a = pool_->GetVolume("a");
    for (uint64_t off = 0; off < 8 << 20; off += 1 << 20) {
      if (off == 1 << 20) ASSERT_OK(pool_->ResizeDataset("a", 8 << 20));  // grows again
      ASSERT_OK(a->Write(off, Pattern(5, off, 1 << 20))) << off;
    }
    ASSERT_OK_AND_ASSIGN(CheckReport rep, pool_->Check(true));
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0];
  }
  std::shared_ptr<Media> media_;
  std::unique_ptr<Pool> pool_;
  uint64_t logical_ = 0, a_bytes_ = 0, b_full_ = 0;
};

TEST_F(ThinFullPoolTest, ReadsTrimsShrinksAndDestroysWorkOnAFullPool) {
  Fill(/*cleaner=*/true);
  ExpectReadsServed();
  FreeAndWriteAgain();
}

TEST_F(ThinFullPoolTest, AndAfterARestartWhileFull) {
  Fill(/*cleaner=*/true);
  ASSERT_OK(pool_->Close());
  pool_.reset();
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen(true)));
  pool_->HaltCleaner();
  EXPECT_TRUE(absl::IsResourceExhausted(pool_->GetVolume("b")->Write(b_full_, Pattern(6, 0, 4096))));
  ExpectReadsServed();
  FreeAndWriteAgain();
}

}  // namespace
}  // namespace ftl
