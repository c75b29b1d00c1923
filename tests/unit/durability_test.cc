// log::Durability on its own: the four watermarks (last written, durable,
// proven, last content) and the media sync (docs/architecture.md,
// "Durability").

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ftl/media.h"
#include "log/durability.h"
#include "media/fault_media.h"

namespace ftl::log {
namespace {

// FaultMedia whose Sync waits at a gate the test opens, counting the
// syncs in flight (to see two of them run at once).
class GatedMedia : public Media {
 public:
  explicit GatedMedia(std::shared_ptr<media::FaultMedia> inner) : inner_(std::move(inner)) {}
  uint64_t size() const override { return inner_->size(); }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override { return inner_->Read(offset, out); }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override {
    return inner_->Write(offset, data);
  }
  absl::Status Discard(uint64_t offset, uint64_t length) override { return inner_->Discard(offset, length); }
  std::string Describe() const override { return "gated " + inner_->Describe(); }
  absl::Status Sync() override {
    {
      absl::MutexLock l(&mu_);
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      mu_.Await(absl::Condition(&open_));
    }
    absl::Status s = inner_->Sync();
    absl::MutexLock l(&mu_);
    --in_flight_;
    return s;
  }
  void Open() {
    absl::MutexLock l(&mu_);
    open_ = true;
  }
  // Waits (at most 10 s) until `n` syncs wait at the gate.
  bool AwaitInFlight(int n) {
    absl::MutexLock l(&mu_);
    auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }
  int in_flight() {
    absl::MutexLock l(&mu_);
    return in_flight_;
  }
  int max_in_flight() {
    absl::MutexLock l(&mu_);
    return max_in_flight_;
  }

 private:
  std::shared_ptr<media::FaultMedia> inner_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

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

// Durability over GatedMedia, record 1 written.
class DurabilityOverlapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d_.Reset(1);
    d_.NoteWritten(1, 0, false, true);
  }
  std::shared_ptr<media::FaultMedia> fault_ = std::make_shared<media::FaultMedia>(1 << 20);
  std::shared_ptr<GatedMedia> gated_ = std::make_shared<GatedMedia>(fault_);
  Durability d_{gated_};
  absl::Status s1_, s2_;
};

// A sync runs without a lock: a second one starts while the first waits
// on the media (a device takes several cache flushes at once), each
// covering what was written before it began.
TEST_F(DurabilityOverlapTest, SyncsRunAtTheSameTime) {
  std::thread first([&] { s1_ = d_.Sync(); });
  ASSERT_TRUE(gated_->AwaitInFlight(1));
  // Record 2 is written after the first sync began: it does not cover it,
  // so a FLUSH for it starts a sync of its own at once.
  d_.NoteWritten(2, 0, false, true);
  std::thread second([&] { s2_ = d_.SyncRecords(); });
  ASSERT_TRUE(gated_->AwaitInFlight(2)) << "the second sync waited for the first";
  EXPECT_EQ(d_.durable(), 0u);
  gated_->Open();
  first.join();
  second.join();
  ASSERT_TRUE(s1_.ok()) << s1_;
  ASSERT_TRUE(s2_.ok()) << s2_;
  EXPECT_EQ(gated_->max_in_flight(), 2);
  EXPECT_EQ(fault_->syncs(), 2u);
  EXPECT_EQ(d_.durable(), 2u);
}

// A FLUSH that finds a sync in flight covering every record written
// before it waits for that sync instead of starting another.
TEST_F(DurabilityOverlapTest, SyncRecordsSharesASyncInFlightThatCoversIt) {
  std::atomic<bool> second_done{false};
  std::thread first([&] { s1_ = d_.SyncRecords(); });
  ASSERT_TRUE(gated_->AwaitInFlight(1));
  std::thread second([&] {
    s2_ = d_.SyncRecords();
    second_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second_done.load()) << "answered before the sync it needs completed";
  EXPECT_EQ(gated_->in_flight(), 1) << "a second sync started";
  gated_->Open();
  first.join();
  second.join();
  ASSERT_TRUE(s1_.ok()) << s1_;
  ASSERT_TRUE(s2_.ok()) << s2_;
  EXPECT_EQ(fault_->syncs(), 1u);
  EXPECT_EQ(d_.durable(), 1u);
}

// A shared sync that fails is no answer: the caller syncs on its own and
// reports what that sync says.
TEST_F(DurabilityOverlapTest, AFailedSharedSyncIsNotTakenAsSuccess) {
  std::thread first([&] { s1_ = d_.SyncRecords(); });
  ASSERT_TRUE(gated_->AwaitInFlight(1));
  std::thread second([&] { s2_ = d_.SyncRecords(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  fault_->Crash();  // the sync in flight fails, and so does any later one
  gated_->Open();
  first.join();
  second.join();
  EXPECT_FALSE(s1_.ok());
  EXPECT_FALSE(s2_.ok());
  EXPECT_EQ(d_.durable(), 0u);
}

}  // namespace
}  // namespace ftl::log
