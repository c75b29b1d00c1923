// checkpoint::Checkpointer and FormatMedia on their own, on memory media:
// the superblock copies, the two checkpoint slots and which one a
// checkpoint writes, the gate, clean/dirty marks, the metadata-room
// estimate (docs/architecture.md, "Checkpoints").

#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpointer.h"
#include "absl/strings/str_cat.h"
#include "map/extent_tree.h"
#include "map_test_util.h"
#include "part_test_util.h"

namespace ftl::checkpoint {
namespace {

using log::Bno;
using log::kNoBlock;
using parts::ApplyWriteRecord;
using testing::SmallFormat;

constexpr uint64_t kMediaBytes = 16 << 20;

std::vector<std::byte> ReadBytes(Media& m, uint64_t off, size_t len) {
  media::AlignedBuffer b((len + kBlockSize - 1) / kBlockSize * kBlockSize);
  EXPECT_TRUE(m.Read(off, b.span()).ok());
  return std::vector<std::byte>(b.data(), b.data() + len);
}

void WriteBlock(Media& m, uint64_t off, const std::vector<std::byte>& block) {
  media::AlignedBuffer b(kBlockSize);
  std::memset(b.data(), 0, kBlockSize);
  std::memcpy(b.data(), block.data(), std::min<size_t>(block.size(), kBlockSize));
  ASSERT_TRUE(m.Write(off, b.span()).ok());
}

// Flips one byte in the middle of a block (its checksum no longer matches).
void Damage(Media& m, uint64_t off) {
  std::vector<std::byte> b = ReadBytes(m, off, kBlockSize);
  b[100] ^= std::byte{0xff};
  WriteBlock(m, off, b);
}

// What a fresh open would read from the media.
log::Superblock OnMedia(std::shared_ptr<Media> m, std::vector<std::string>* degraded = nullptr) {
  log::Durability d(m);
  state::PoolState st;
  Checkpointer cp(m, &d, &st);
  std::vector<std::string> dummy;
  absl::Status s = cp.ReadSuperblock(degraded ? degraded : &dummy);
  EXPECT_TRUE(s.ok()) << s;
  return cp.superblock();
}

// The checkpoint in slot `slot` as the superblock `sb` names it.
absl::StatusOr<LoadedCheckpoint> LoadSlot(Media& m, const log::Superblock& sb, int slot,
                                          state::MapState* into) {
  std::vector<std::byte> bytes = ReadBytes(m, SlotOffset(sb, slot), sb.slots[slot].bytes);
  if (util::Xxh3(bytes) != sb.slots[slot].xxh3) return absl::DataLossError("slot checksum");
  return DecodeCheckpoint(bytes, sb.uuid, into);
}

TEST(FormatMediaTest, RejectsBadOptionsAndTinyMedia) {
  std::shared_ptr<Media> m = NewMemMedia(kMediaBytes);
  auto bad = [&](FormatOptions f) {
    absl::Status s = FormatMedia(*m, f, false);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  };
  FormatOptions f = SmallFormat();
  f.segment_bytes = 256 * 1024 + 100;
  bad(f);
  f.segment_bytes = 128 * 1024;
  bad(f);
  f.segment_bytes = 512u << 20;
  bad(f);
  f = SmallFormat();
  f.over_provision = 0.01;
  bad(f);
  f.over_provision = 0.95;
  bad(f);
  f = SmallFormat();
  f.volume_name = "";
  bad(f);
  f = SmallFormat();
  f.volume_bytes = kMediaBytes;  // more than the logical capacity
  bad(f);
  std::shared_ptr<Media> tiny = NewMemMedia(4 << 20);  // fewer than 16 segments
  absl::Status s = FormatMedia(*tiny, SmallFormat(), false);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("too small"), std::string::npos) << s;
  // Nothing was written: no superblock.
  log::Durability d(m);
  state::PoolState st;
  Checkpointer cp(m, &d, &st);
  std::vector<std::string> degraded;
  EXPECT_TRUE(absl::IsNotFound(cp.ReadSuperblock(&degraded)));
}

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override { Format(NewMemMedia(kMediaBytes)); }
  void Format(std::shared_ptr<Media> m, FormatOptions f = SmallFormat()) {
    cp_.reset();
    media_ = std::move(m);
    ASSERT_OK(FormatMedia(*media_, f, true));
    durability_ = std::make_unique<log::Durability>(media_);
    cp_ = std::make_unique<Checkpointer>(media_, durability_.get(), &state_);
    ASSERT_OK(cp_->ReadSuperblock(&degraded_));
    const log::Superblock& sb = cp_->superblock();
    state_.map = std::make_unique<state::MapState>(sb.segment_count, sb.segment_blocks);
    state_.map->AddVolume(0, sb.primary_name, sb.primary_blocks);
    state_.InitPins(sb.segment_count);
  }
  std::shared_ptr<Media> media_;
  state::PoolState state_;
  std::unique_ptr<log::Durability> durability_;
  std::unique_ptr<Checkpointer> cp_;
  std::vector<std::string> degraded_;
};

TEST_F(CheckpointerTest, FormatWritesTwoEmptyCheckpointsAndTwoSuperblocks) {
  const log::Superblock& sb = cp_->superblock();
  EXPECT_TRUE(degraded_.empty());
  EXPECT_EQ(sb.format_version, log::kFormatVersion);
  EXPECT_EQ(sb.generation, 2u);
  EXPECT_TRUE(sb.clean);
  EXPECT_EQ(sb.newest_slot, 1);
  EXPECT_EQ(sb.segment_blocks, 64u);
  EXPECT_EQ(sb.media_bytes, kMediaBytes);
  EXPECT_EQ(sb.data_offset % (1 << 20), 0u);
  EXPECT_GE(sb.data_offset, (2 + 2 * uint64_t(sb.ckpt_slot_blocks)) * kBlockSize);
  EXPECT_EQ(sb.segment_count, (kMediaBytes - sb.data_offset) / (256 << 10));
  EXPECT_EQ(sb.primary_name, "ftl0");
  EXPECT_EQ(sb.primary_blocks, sb.logical_blocks);
  // Logical capacity leaves the cleaner's reserve and over-provisioning.
  EXPECT_LT(sb.logical_blocks, uint64_t(sb.segment_count - 4) * sb.segment_blocks);
  EXPECT_EQ(cp_->capacity(), uint64_t(sb.ckpt_slot_blocks) * kBlockSize);
  for (int slot = 0; slot < 2; ++slot) {
    EXPECT_EQ(sb.slots[slot].next_seq, 1u);
    EXPECT_GT(sb.slots[slot].bytes, 0u);
    state::MapState m(sb.segment_count, sb.segment_blocks);
    absl::StatusOr<LoadedCheckpoint> c = LoadSlot(*media_, sb, slot, &m);
    ASSERT_OK(c);
    EXPECT_EQ(c->next_seq, 1u);
    ASSERT_NE(m.volume(0), nullptr);
    EXPECT_EQ(m.volume(0)->name, "ftl0");
    EXPECT_EQ(m.volume(0)->size_blocks, sb.logical_blocks);
    EXPECT_EQ(m.segments().free_count(), sb.segment_count);
  }
  EXPECT_EQ(cp_->gate_seq(), 1u);
}

TEST_F(CheckpointerTest, FormatSizesThePrimaryVolume) {
  FormatOptions f = SmallFormat();
  f.volume_bytes = 1 << 20;
  f.volume_name = "data";
  Format(NewMemMedia(kMediaBytes), f);
  EXPECT_EQ(cp_->superblock().primary_blocks, 256u);
  EXPECT_EQ(cp_->superblock().primary_name, "data");
}

TEST_F(CheckpointerTest, ReadSuperblockFindsNoPoolOnBlankOrTinyMedia) {
  for (uint64_t size : {uint64_t(kMediaBytes), uint64_t(kBlockSize)}) {
    std::shared_ptr<Media> blank = NewMemMedia(size);
    log::Durability d(blank);
    Checkpointer cp(blank, &d, &state_);
    std::vector<std::string> degraded;
    absl::Status s = cp.ReadSuperblock(&degraded);
    EXPECT_TRUE(absl::IsNotFound(s)) << size << ": " << s;
  }
}

TEST_F(CheckpointerTest, ADamagedSuperblockCopyIsReportedAndTheOtherUsed) {
  for (int copy = 0; copy < 2; ++copy) {
    SetUp();
    Damage(*media_, uint64_t(copy) * kBlockSize);
    std::vector<std::string> degraded;
    log::Superblock sb = OnMedia(media_, &degraded);
    ASSERT_EQ(degraded.size(), 1u) << copy;
    EXPECT_NE(degraded[0].find(absl::StrCat("superblock copy ", copy, " is unusable")),
              std::string::npos)
        << degraded[0];
    // Format wrote generation 1 to copy 0 and 2 to copy 1.
    EXPECT_EQ(sb.generation, copy == 0 ? 2u : 1u);
    EXPECT_EQ(sb.newest_slot, 1);
  }
}

TEST_F(CheckpointerTest, BothSuperblockCopiesDamagedIsDataLoss) {
  Damage(*media_, 0);
  Damage(*media_, kBlockSize);
  log::Durability d(media_);
  Checkpointer cp(media_, &d, &state_);
  std::vector<std::string> degraded;
  absl::Status s = cp.ReadSuperblock(&degraded);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST_F(CheckpointerTest, ANewerFormatVersionIsRefused) {
  log::Superblock sb = cp_->superblock();
  sb.format_version = log::kFormatVersion + 1;
  for (int copy = 0; copy < 2; ++copy) WriteBlock(*media_, copy * kBlockSize, log::EncodeSuperblock(sb));
  log::Durability d(media_);
  Checkpointer cp(media_, &d, &state_);
  std::vector<std::string> degraded;
  absl::Status s = cp.ReadSuperblock(&degraded);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

TEST_F(CheckpointerTest, MediaSmallerThanThePoolIsRefused) {
  std::shared_ptr<Media> shorter = NewMemMedia(kMediaBytes / 2);
  std::vector<std::byte> head = ReadBytes(*media_, 0, 2 * kBlockSize);
  WriteBlock(*shorter, 0, std::vector<std::byte>(head.begin(), head.begin() + kBlockSize));
  WriteBlock(*shorter, kBlockSize, std::vector<std::byte>(head.begin() + kBlockSize, head.end()));
  log::Durability d(shorter);
  Checkpointer cp(shorter, &d, &state_);
  std::vector<std::string> degraded;
  absl::Status s = cp.ReadSuperblock(&degraded);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

TEST_F(CheckpointerTest, CheckpointsAlternateSlotsAndTheSuperblockNamesTheNewOne) {
  ApplyWriteRecord(*state_.map, 0, 7, 3, /*pba=*/0, /*seq=*/1);
  const log::Superblock before = cp_->superblock();
  const std::vector<std::byte> slot1 =
      ReadBytes(*media_, SlotOffset(before, 1), before.slots[1].bytes);

  ASSERT_OK(cp_->Checkpoint(10));
  log::Superblock sb = cp_->superblock();
  EXPECT_EQ(sb.newest_slot, 0);  // the slot the superblock did not name
  EXPECT_EQ(sb.slots[0].next_seq, 10u);
  EXPECT_EQ(sb.slots[1].next_seq, 1u);
  EXPECT_EQ(sb.generation, before.generation + 1);
  EXPECT_EQ(cp_->gate_seq(), 1u);  // min over the slots
  EXPECT_EQ(cp_->last_seq(), 10u);
  EXPECT_EQ(cp_->last_size(), sb.slots[0].bytes);
  EXPECT_EQ(state_.counters.ckpt_count.load(), 1u);
  // The slot named before was not touched.
  EXPECT_EQ(ReadBytes(*media_, SlotOffset(sb, 1), before.slots[1].bytes), slot1);
  // Durable: what an open reads now, and the checkpoint holds the map.
  log::Superblock media_sb = OnMedia(media_);
  EXPECT_EQ(media_sb.generation, sb.generation);
  EXPECT_EQ(media_sb.newest_slot, 0);
  EXPECT_EQ(media_sb.slots[0].next_seq, 10u);
  state::MapState m(sb.segment_count, sb.segment_blocks);
  absl::StatusOr<LoadedCheckpoint> c = LoadSlot(*media_, media_sb, 0, &m);
  ASSERT_OK(c);
  EXPECT_EQ(c->next_seq, 10u);
  EXPECT_NE(m.volume(0)->tree.LookupOne(8), kNoBlock);
  EXPECT_EQ(m.volume(0)->tree.mapped_blocks(), 3u);
  // What the checkpoint covers is proven.
  EXPECT_GE(durability_->proven(), 9u);

  ASSERT_OK(cp_->Checkpoint(20));
  EXPECT_EQ(cp_->superblock().newest_slot, 1);
  EXPECT_EQ(cp_->gate_seq(), 10u);
  EXPECT_GE(durability_->proven(), 19u);
  ASSERT_OK(cp_->Checkpoint(30));
  EXPECT_EQ(cp_->superblock().newest_slot, 0);
  EXPECT_EQ(cp_->gate_seq(), 20u);
  EXPECT_EQ(OnMedia(media_).slots[1].next_seq, 20u);
  EXPECT_EQ(state_.counters.ckpt_count.load(), 3u);
}

TEST_F(CheckpointerTest, ReadSuperblockSetsTheGateFromBothSlots) {
  ASSERT_OK(cp_->Checkpoint(10));
  ASSERT_OK(cp_->Checkpoint(25));
  log::Durability d(media_);
  state::PoolState st;
  Checkpointer cp(media_, &d, &st);
  std::vector<std::string> degraded;
  ASSERT_OK(cp.ReadSuperblock(&degraded));
  EXPECT_EQ(cp.gate_seq(), 10u);
}

TEST_F(CheckpointerTest, StartAsyncWritesOnItsOwnThreadUntilJoin) {
  ASSERT_OK(cp_->StartAsync(42));
  EXPECT_EQ(cp_->last_seq(), 42u);  // encoded at once
  cp_->Join();
  EXPECT_EQ(cp_->superblock().newest_slot, 0);
  EXPECT_EQ(OnMedia(media_).slots[0].next_seq, 42u);
  // The next one waits for it and takes the other slot.
  ASSERT_OK(cp_->StartAsync(43));
  ASSERT_OK(cp_->Checkpoint(44));
  EXPECT_EQ(OnMedia(media_).newest_slot, 0);
  EXPECT_EQ(OnMedia(media_).slots[1].next_seq, 43u);
  EXPECT_EQ(OnMedia(media_).slots[0].next_seq, 44u);
}

TEST_F(CheckpointerTest, MarkDirtyAndMarkClean) {
  const uint64_t gen = cp_->superblock().generation;
  ASSERT_OK(cp_->MarkDirty());
  EXPECT_FALSE(cp_->superblock().clean);
  EXPECT_EQ(cp_->superblock().generation, gen + 1);
  EXPECT_FALSE(OnMedia(media_).clean);
  ASSERT_OK(cp_->MarkClean());
  EXPECT_TRUE(cp_->superblock().clean);
  EXPECT_TRUE(OnMedia(media_).clean);
  EXPECT_EQ(OnMedia(media_).generation, gen + 2);
  // Two generations later both copies are valid, the newer one wins.
  std::vector<std::string> degraded;
  OnMedia(media_, &degraded);
  EXPECT_TRUE(degraded.empty());
}

TEST_F(CheckpointerTest, MarkDirtyUpgradesAnOlderFormat) {
  log::Superblock sb = cp_->superblock();
  sb.format_version = log::kOldestFormatVersion;
  sb.generation = 7;
  WriteBlock(*media_, 0, log::EncodeSuperblock(sb));
  log::Durability d(media_);
  Checkpointer cp(media_, &d, &state_);
  std::vector<std::string> degraded;
  ASSERT_OK(cp.ReadSuperblock(&degraded));
  EXPECT_EQ(cp.superblock().format_version, log::kOldestFormatVersion);
  ASSERT_OK(cp.MarkDirty());
  EXPECT_EQ(OnMedia(media_).format_version, log::kFormatVersion);
  EXPECT_EQ(OnMedia(media_).generation, 8u);
}

TEST_F(CheckpointerTest, ACheckpointLargerThanItsSlotIsRefusedAndWritesNothing) {
  // Single-block extents with VBAs that never continue each other.
  const log::Superblock before = cp_->superblock();
  state::VolumeMeta* v = state_.map->AddVolume(1, "big", 400000);
  auto vbas = map::testing::FreshVbas(&state_.map->vbas(), 3);
  for (Bno lba = 0; lba < 400000; ++lba) v->tree.Assign(lba, 1, lba % 2 ? vbas[0] : vbas[2]);
  absl::Status s = cp_->Checkpoint(5);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(cp_->superblock().newest_slot, before.newest_slot);
  EXPECT_EQ(cp_->superblock().generation, before.generation);
  EXPECT_EQ(OnMedia(media_).generation, before.generation);
  EXPECT_EQ(state_.counters.ckpt_count.load(), 0u);
}

// ---- CheckRoom: the metadata-room estimate

TEST_F(CheckpointerTest, CheckRoomPassesWhenNothingGrew) {
  cp_->NoteMapSize(1, 0);
  cp_->Started(1);
  int calls = 0;
  EXPECT_OK(cp_->CheckRoom(16, [&] {
    ++calls;
    return absl::OkStatus();
  }));
  EXPECT_EQ(calls, 0);
}

TEST_F(CheckpointerTest, CheckRoomRefusesAnEstimateThatDoesNotFitAndMeasuresAtMostOnce) {
  cp_->NoteMapSize(0, 0);
  cp_->Started(1);
  // The map grew (as the volume registry reports) by more than the slot
  // can take at the estimate's worst case per node.
  const uint64_t leaves = cp_->capacity() / (15 * map::kLeafCap) + 10;
  cp_->NoteMapSize(leaves, 0);
  int calls = 0;
  absl::Status s = cp_->CheckRoom(16, [&] {
    ++calls;
    return absl::OkStatus();  // a "checkpoint" that measured nothing new
  });
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("metadata area full"), std::string::npos) << s;
  EXPECT_EQ(calls, 1);
  // A failing measurement is not retried either.
  calls = 0;
  s = cp_->CheckRoom(16, [&] {
    ++calls;
    return absl::UnavailableError("no");
  });
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(calls, 1);
  // Without a callback: refused.
  EXPECT_TRUE(absl::IsResourceExhausted(cp_->CheckRoom(16, nullptr)));
}

TEST_F(CheckpointerTest, CheckRoomDoesNotMeasureSmallGrowth) {
  cp_->NoteMapSize(0, 0);
  cp_->Started(1);  // the estimate starts at the newest slot's size (> 0)
  cp_->NoteMapSize(1, 0);
  int calls = 0;
  // A reserve of the whole slot never fits; one new leaf is not worth a
  // checkpoint.
  absl::Status s = cp_->CheckRoom(1, [&] {
    ++calls;
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(calls, 0);
}

TEST_F(CheckpointerTest, CheckRoomAcceptsWhatACheckpointMeasures) {
  cp_->NoteMapSize(0, 0);
  cp_->Started(1);
  // A real map whose node count, at the estimate's worst case, overflows
  // the slot, while its checkpoint fits easily.
  state::VolumeMeta* v = state_.map->AddVolume(1, "frag", 60000);
  auto vbas = map::testing::FreshVbas(&state_.map->vbas(), 3);
  for (Bno lba = 0; lba < 40000; ++lba) v->tree.Assign(lba, 1, lba % 2 ? vbas[0] : vbas[2]);
  const uint64_t leaves = state_.map->tree_context()->leaves;
  const uint64_t inners = state_.map->tree_context()->inners;
  ASSERT_GT(leaves * 15 * map::kLeafCap, cp_->capacity());
  cp_->NoteMapSize(leaves, inners);
  int calls = 0;
  absl::Status s = cp_->CheckRoom(16, [&] {
    ++calls;
    return cp_->Checkpoint(2);
  });
  EXPECT_OK(s);
  EXPECT_EQ(calls, 1);
  EXPECT_LT(cp_->last_size() + cp_->capacity() / 16, cp_->capacity());
  // Measured now: no second checkpoint.
  EXPECT_OK(cp_->CheckRoom(16, [&] {
    ++calls;
    return absl::OkStatus();
  }));
  EXPECT_EQ(calls, 1);
}

// ---- Failures

class CheckpointerFaultTest : public CheckpointerTest {
 protected:
  void SetUp() override {
    fault_ = std::make_shared<media::FaultMedia>(kMediaBytes);
    Format(fault_);
  }
  std::shared_ptr<media::FaultMedia> fault_;
};

TEST_F(CheckpointerFaultTest, AFailedSlotWriteLeavesTheSuperblockAsItWas) {
  const log::Superblock before = cp_->superblock();
  fault_->FailNthWrite(1);  // the slot
  absl::Status s = cp_->Checkpoint(10);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(cp_->superblock().newest_slot, before.newest_slot);
  EXPECT_EQ(cp_->superblock().generation, before.generation);
  EXPECT_EQ(cp_->superblock().slots[0].next_seq, 1u);
  EXPECT_EQ(cp_->gate_seq(), 1u);
  EXPECT_EQ(durability_->proven(), 0u);
  // The next one works and goes to the same slot.
  ASSERT_OK(cp_->Checkpoint(11));
  EXPECT_EQ(OnMedia(fault_).newest_slot, 0);
  EXPECT_EQ(OnMedia(fault_).slots[0].next_seq, 11u);
}

TEST_F(CheckpointerFaultTest, TheSlotIsDurableBeforeTheSuperblockNamesIt) {
  ASSERT_OK(cp_->Checkpoint(10));
  // A power cut after the checkpoint: the slot and superblock survive.
  fault_->Crash();
  fault_->Restart({});
  log::Superblock sb = OnMedia(fault_);
  EXPECT_EQ(sb.newest_slot, 0);
  state::MapState m(sb.segment_count, sb.segment_blocks);
  EXPECT_OK(LoadSlot(*fault_, sb, 0, &m));
}

// A failed superblock write must leave the in-memory superblock as the
// media has it. Before the fix, memory named the new slot while the media
// still named the old one; the next checkpoint then wrote into the only
// slot the on-media superblock vouched for, and a crash during that write
// left no usable checkpoint (the map rebuilt from the log alone, losing
// what only the checkpoints held).
TEST_F(CheckpointerFaultTest, AFailedSuperblockWriteDoesNotRedirectTheNextCheckpoint) {
  ASSERT_OK(cp_->Checkpoint(10));  // slot 0 is newest
  fault_->FailNthWrite(2);         // 1: slot 1, 2: the superblock naming it
  EXPECT_FALSE(cp_->Checkpoint(20).ok());
  const log::Superblock on_media = OnMedia(fault_);
  ASSERT_EQ(on_media.newest_slot, 0);  // the media still names slot 0
  // What the pool believes must agree with the media ...
  EXPECT_EQ(cp_->superblock().newest_slot, on_media.newest_slot);
  // ... so that the next checkpoint leaves slot 0 alone until a new
  // superblock names the other one.
  const std::vector<std::byte> slot0 =
      ReadBytes(*fault_, SlotOffset(on_media, 0), on_media.slots[0].bytes);
  fault_->FailNthWrite(2);
  EXPECT_FALSE(cp_->Checkpoint(30).ok());
  EXPECT_EQ(ReadBytes(*fault_, SlotOffset(on_media, 0), on_media.slots[0].bytes), slot0);
  state::MapState m(on_media.segment_count, on_media.segment_blocks);
  EXPECT_OK(LoadSlot(*fault_, OnMedia(fault_), OnMedia(fault_).newest_slot, &m));
  // What an open after a crash here finds: a usable checkpoint.
  const log::Superblock sb = OnMedia(fault_);
  absl::StatusOr<recovery::Recovered> r = recovery::Recovery(fault_, sb, false).Run();
  ASSERT_OK(r);
  for (const std::string& d : r->degraded) ADD_FAILURE() << d;
}

}  // namespace
}  // namespace ftl::checkpoint
