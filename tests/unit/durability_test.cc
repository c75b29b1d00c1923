// log::Durability on its own: the four watermarks (last written, durable,
// proven, last content) and the media sync (docs/architecture.md,
// "Durability").

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "ftl/media.h"
#include "log/durability.h"
#include "media/fault_media.h"

namespace ftl::log {
namespace {

class DurabilityTest : public ::testing::Test {
 protected:
  std::shared_ptr<media::FaultMedia> media_ = std::make_shared<media::FaultMedia>(1 << 20);
  Durability d_{media_};
};

TEST_F(DurabilityTest, StartsAtZero) {
  EXPECT_EQ(d_.last_written(), 0u);
  EXPECT_EQ(d_.durable(), 0u);
  EXPECT_EQ(d_.proven(), 0u);
  EXPECT_EQ(d_.last_content(), 0u);
  EXPECT_FALSE(d_.NeedsProof());
}

TEST_F(DurabilityTest, SyncRecordsSharesASyncThatAlreadyCoversEveryRecord) {
  d_.Reset(1);
  d_.NoteWritten(1, 0, false, true);
  ASSERT_TRUE(d_.SyncRecords().ok());
  EXPECT_EQ(media_->syncs(), 1u);
  EXPECT_EQ(d_.durable(), 1u);
  // Nothing written since: a FLUSH shares the sync that covered record 1.
  ASSERT_TRUE(d_.SyncRecords().ok());
  EXPECT_EQ(media_->syncs(), 1u);
  // Sync (checkpoints, superblocks: writes outside records) always syncs.
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(media_->syncs(), 2u);
  // A new record needs a sync of its own.
  d_.NoteWritten(2, 1, false, true);
  ASSERT_TRUE(d_.SyncRecords().ok());
  EXPECT_EQ(media_->syncs(), 3u);
  EXPECT_EQ(d_.durable(), 2u);
  // ... and so does a claim no sync has proven yet (a marker was written
  // after the sync: its durable_seq is what recovery needs).
  d_.NoteWritten(3, 2, false, false);
  ASSERT_TRUE(d_.SyncRecords().ok());
  EXPECT_EQ(media_->syncs(), 4u);
  EXPECT_EQ(d_.proven(), 2u);
}

TEST_F(DurabilityTest, ResetMakesEverythingBeforeNextSeqDurableAndProven) {
  d_.Reset(100);
  EXPECT_EQ(d_.last_written(), 99u);
  EXPECT_EQ(d_.durable(), 99u);
  EXPECT_EQ(d_.proven(), 99u);
  EXPECT_FALSE(d_.NeedsProof());
  EXPECT_EQ(media_->syncs(), 0u);  // no I/O
}

TEST_F(DurabilityTest, NoteWrittenAdvancesLastWrittenAndContentButNotDurability) {
  d_.Reset(1);
  d_.NoteWritten(1, 0, /*joined=*/false, /*has_ops=*/true);
  EXPECT_EQ(d_.last_written(), 1u);
  EXPECT_EQ(d_.last_content(), 1u);
  EXPECT_EQ(d_.durable(), 0u);
  EXPECT_EQ(d_.proven(), 0u);
  // A marker (no ops) is written but is no content.
  d_.NoteWritten(2, 0, false, /*has_ops=*/false);
  EXPECT_EQ(d_.last_written(), 2u);
  EXPECT_EQ(d_.last_content(), 1u);
}

TEST_F(DurabilityTest, TheFirstOfAJoinedPairDoesNotAdvanceLastWritten) {
  d_.Reset(10);
  d_.NoteWritten(10, 9, /*joined=*/true, true);
  EXPECT_EQ(d_.last_written(), 9u);  // never the first of a pair alone
  EXPECT_EQ(d_.last_content(), 10u);
  // A sync now covers only what was complete before the pair.
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 9u);
  d_.NoteWritten(11, 9, /*joined=*/false, true);  // the partner
  EXPECT_EQ(d_.last_written(), 11u);
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 11u);
}

TEST_F(DurabilityTest, SyncMakesTheWrittenDurableAndProvesTheLastClaim) {
  d_.Reset(1);
  d_.NoteWritten(1, /*claim=*/0, false, true);
  d_.NoteWritten(2, /*claim=*/0, false, true);
  const uint64_t syncs = media_->syncs();
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(media_->syncs(), syncs + 1);
  EXPECT_EQ(d_.durable(), 2u);
  EXPECT_EQ(d_.proven(), 0u);  // no durable record says 1 and 2 are durable
  EXPECT_TRUE(d_.NeedsProof());
  // A record claiming durable_seq 2 (what a marker carries), then a sync:
  // 1 and 2 are proven.
  d_.NoteWritten(3, /*claim=*/2, false, /*has_ops=*/false);
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 3u);
  EXPECT_EQ(d_.proven(), 2u);
  EXPECT_FALSE(d_.NeedsProof());  // the marker itself needs no proof
}

TEST_F(DurabilityTest, NeedsProofOnlyForDurableContent) {
  d_.Reset(1);
  EXPECT_FALSE(d_.NeedsProof());
  d_.NoteWritten(1, 0, false, true);
  EXPECT_FALSE(d_.NeedsProof());  // written, not durable: nothing to prove yet
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_TRUE(d_.NeedsProof());
  d_.NoteWritten(2, 1, false, true);  // a data record that claims 1
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.proven(), 1u);
  EXPECT_TRUE(d_.NeedsProof());  // record 2 is durable content nobody vouches for
  d_.NoteWritten(3, 2, false, false);
  d_.NoteWritten(4, 2, false, false);  // markers only after it
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.proven(), 2u);
  EXPECT_EQ(d_.durable(), 4u);
  EXPECT_FALSE(d_.NeedsProof());  // 3 and 4 are markers
}

TEST_F(DurabilityTest, AFailedSyncChangesNothing) {
  d_.Reset(1);
  d_.NoteWritten(1, 0, false, true);
  d_.NoteWritten(2, 1, false, true);
  media_->Crash();
  absl::Status s = d_.Sync();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(d_.durable(), 0u);
  EXPECT_EQ(d_.proven(), 0u);
  EXPECT_EQ(d_.last_written(), 2u);
  media_->Restart({});
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 2u);
  EXPECT_EQ(d_.proven(), 1u);
}

TEST_F(DurabilityTest, ACheckpointProvesEverythingItCovers) {
  d_.Reset(1);
  for (uint64_t s = 1; s <= 5; ++s) d_.NoteWritten(s, 0, false, true);
  // A checkpoint encoded after record 4 was written, covering seqs < 5.
  d_.CheckpointDurable(/*next_seq=*/5, /*covered=*/4);
  EXPECT_EQ(d_.durable(), 4u);
  EXPECT_EQ(d_.proven(), 4u);
  EXPECT_EQ(d_.last_written(), 5u);
  EXPECT_FALSE(d_.NeedsProof());  // 5 is not durable yet
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 5u);
  EXPECT_TRUE(d_.NeedsProof());
}

TEST_F(DurabilityTest, WatermarksNeverGoBack) {
  d_.Reset(1);
  for (uint64_t s = 1; s <= 8; ++s) d_.NoteWritten(s, s - 1, false, true);
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 8u);
  EXPECT_EQ(d_.proven(), 7u);
  // An older checkpoint finishing late lowers nothing.
  d_.CheckpointDurable(3, 2);
  EXPECT_EQ(d_.durable(), 8u);
  EXPECT_EQ(d_.proven(), 7u);
  // Nor does a sync whose claim is older than what a checkpoint proved.
  d_.CheckpointDurable(9, 8);
  EXPECT_EQ(d_.proven(), 8u);
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.proven(), 8u);
  EXPECT_EQ(d_.durable(), 8u);
}

TEST_F(DurabilityTest, ConcurrentSyncsAreSafeAndCoverWhatWasWrittenBefore) {
  d_.Reset(1);
  std::atomic<uint64_t> written{0};
  std::thread writer([&] {
    for (uint64_t s = 1; s <= 2000; ++s) {
      d_.NoteWritten(s, d_.durable(), false, true);
      written = s;
    }
  });
  std::vector<std::thread> syncers;
  for (int t = 0; t < 3; ++t) {
    syncers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        const uint64_t before = written.load();
        ASSERT_TRUE(d_.Sync().ok());
        // Everything written before the sync began is durable after it.
        EXPECT_GE(d_.durable(), before);
        EXPECT_LE(d_.proven(), d_.durable());
      }
    });
  }
  writer.join();
  for (auto& t : syncers) t.join();
  ASSERT_TRUE(d_.Sync().ok());
  EXPECT_EQ(d_.durable(), 2000u);
  EXPECT_LE(d_.proven(), 2000u);
}

}  // namespace
}  // namespace ftl::log
