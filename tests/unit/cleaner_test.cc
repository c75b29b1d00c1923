// The gc module: cost-benefit victim choice and its checkpoint gate, and the
// cleaner thread's watermarks, halt/resume and no-progress stop, driven by a
// simulated host (no engine).

#include "gc/cleaner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "status_asserts.h"

namespace ftl::gc {
namespace {

TEST(VictimPolicy, PrefersEmptyThenCostBenefit) {
  VictimInput in;
  in.segment_blocks = 100;
  in.now_seq = 1000;
  in.gate_seq = 1000;
  in.full = {{1, 90, 10, 10}, {2, 50, 900, 900}, {3, 50, 100, 100}};
  // Same live fraction: the older segment wins.
  EXPECT_EQ(PickVictim(in).seg, 3u);
  in.full.push_back({4, 0, 950, 950});
  EXPECT_EQ(PickVictim(in).seg, 4u);  // nothing to copy
  // Full segments are never worth cleaning.
  VictimInput full;
  full.segment_blocks = 100;
  full.gate_seq = 1000;
  full.full = {{1, 100, 5, 5}, {2, 99, 6, 6}};
  VictimChoice c = PickVictim(full);
  EXPECT_FALSE(c.seg.has_value());
  EXPECT_FALSE(c.reclaimable);
}

TEST(VictimPolicy, GateHoldsBackUncheckpointedSegments) {
  VictimInput in;
  in.segment_blocks = 100;
  in.now_seq = 1000;
  in.gate_seq = 500;  // both checkpoints cover only seqs below 500
  in.full = {{1, 10, 800, 790}, {2, 95, 100, 90}};
  VictimChoice c = PickVictim(in);
  EXPECT_EQ(c.seg, 2u);         // the only eligible one
  EXPECT_TRUE(c.gate_blocked);  // a checkpoint would free a far better victim
  in.gate_seq = 801;
  c = PickVictim(in);
  EXPECT_EQ(c.seg, 1u);
  EXPECT_FALSE(c.gate_blocked);
}

// A pool of `total` segments; cleaning a segment frees it and consumes
// `live` blocks of relocation space (as fractions of a segment).
class FakeHost : public CleanerHost {
 public:
  FakeHost(uint32_t total, uint32_t free, uint32_t live) : total_(total), free_(free), live_(live) {}
  uint32_t FreeSegments() override {
    absl::MutexLock l(&mu_);
    return free_;
  }
  VictimInput Candidates() override {
    absl::MutexLock l(&mu_);
    VictimInput in;
    in.segment_blocks = 100;
    in.now_seq = 100;
    in.gate_seq = gate_;
    for (uint32_t s = 0; s < total_ - free_; ++s) in.full.push_back({s, live_, 1, 1});
    return in;
  }
  absl::StatusOr<uint32_t> CleanSegment(uint32_t) override {
    absl::MutexLock l(&mu_);
    ++cleaned_;
    if (steal_) return live_;  // writers take every segment freed at once
    // Net gain: the victim (at release) minus the space its live blocks
    // take now.
    carry_ += live_;
    ++unreleased_;
    while (carry_ >= 100) {
      carry_ -= 100;
      free_ -= 1;
    }
    return live_;
  }
  absl::Status ReleaseCleaned() override {
    absl::MutexLock l(&mu_);
    free_ += unreleased_;
    unreleased_ = 0;
    ++releases_;
    return absl::OkStatus();
  }
  uint32_t DiscardIdle(uint32_t) override { return 0; }
  uint32_t releases() {
    absl::MutexLock l(&mu_);
    return releases_;
  }
  absl::Status CheckpointForCleaner() override {
    absl::MutexLock l(&mu_);
    ++checkpoints_;
    gate_ = 1000;
    return absl::OkStatus();
  }
  void SpaceAvailable() override {}
  uint32_t SlackSegments() override {
    absl::MutexLock l(&mu_);
    return slack_;
  }
  void set_slack(uint32_t v) {
    absl::MutexLock l(&mu_);
    slack_ = v;
  }
  void CleanerFailed(const absl::Status&) override {
    absl::MutexLock l(&mu_);
    ++failures_;
  }
  void Consume(uint32_t n) {
    absl::MutexLock l(&mu_);
    free_ -= n;
  }
  uint32_t cleaned() {
    absl::MutexLock l(&mu_);
    return cleaned_;
  }
  uint32_t checkpoints() {
    absl::MutexLock l(&mu_);
    return checkpoints_;
  }
  void set_steal(bool v) {
    absl::MutexLock l(&mu_);
    steal_ = v;
  }
  void set_gate(uint64_t g) {
    absl::MutexLock l(&mu_);
    gate_ = g;
  }

 private:
  absl::Mutex mu_;
  uint32_t total_, free_, live_;
  uint32_t carry_ = 0, cleaned_ = 0, checkpoints_ = 0, failures_ = 0, unreleased_ = 0,
           releases_ = 0;
  uint64_t gate_ = 1000;
  uint32_t slack_ = 0;
  bool steal_ = false;
};

// Polls (bounded) until pred holds.
template <typename F>
bool Eventually(F pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// With plenty of space the host asks for slack: the cleaner starts that
// many segments earlier and stops twice that many later.
TEST(Cleaner, SlackRaisesBothWatermarks) {
  FakeHost host(100, 20, 50);
  host.set_slack(3);
  CleanerOptions o{.low_watermark = 8, .high_watermark = 12, .critical = 4};
  Cleaner c(&host, o);
  c.Start();
  host.Consume(10);  // 10 free: above 8, below 8 + 3
  c.Kick();
  ASSERT_TRUE(Eventually([&] { return host.FreeSegments() >= 18; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(host.FreeSegments(), 18u);  // 12 + 2 * 3
  c.Stop();
}

TEST(Cleaner, StartsBelowLowWatermarkAndStopsAtHigh) {
  FakeHost host(100, 20, 50);
  CleanerOptions o{.low_watermark = 8, .high_watermark = 12, .critical = 4};
  Cleaner c(&host, o);
  c.Start();
  c.Kick();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(host.cleaned(), 0u);  // 20 free: above the low watermark
  host.Consume(15);               // 5 free
  c.Kick();
  ASSERT_TRUE(Eventually([&] { return host.FreeSegments() >= 12; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(host.FreeSegments(), 12u);  // stopped at the high watermark
  c.Stop();
}

TEST(Cleaner, HaltAndResume) {
  FakeHost host(100, 3, 50);
  Cleaner c(&host, {.low_watermark = 8, .high_watermark = 12, .critical = 4});
  c.Halt();
  c.Start();
  c.Kick();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(host.cleaned(), 0u);
  EXPECT_EQ(c.state(), "halted");
  c.Resume();
  ASSERT_TRUE(Eventually([&] { return host.FreeSegments() >= 12; }));
  c.Stop();
}

TEST(Cleaner, RunUntilCheckpointsPastTheGateAndStopsWithoutProgress) {
  FakeHost host(100, 3, 50);
  host.set_gate(0);  // every segment held back until a checkpoint
  Cleaner c(&host, {});
  auto n = c.RunUntil(10);
  ASSERT_OK(n);
  EXPECT_GE(host.FreeSegments(), 10u);
  EXPECT_GE(host.checkpoints(), 1u);
  // Freed in groups behind one sync each, not one sync per segment.
  EXPECT_LT(host.releases(), *n);
  // Cleaning that never adds free segments ends instead of looping forever.
  FakeHost stuck(100, 3, 50);
  stuck.set_steal(true);
  Cleaner c2(&stuck, {});
  auto m = c2.RunUntil(90);
  ASSERT_OK(m);
  EXPECT_EQ(stuck.FreeSegments(), 3u);
  EXPECT_LE(*m, 100u);
  // Segments that are all live are never cleaned at all.
  FakeHost full(100, 3, 99);
  Cleaner c3(&full, {});
  EXPECT_EQ(*c3.RunUntil(90), 0u);
}

}  // namespace
}  // namespace ftl::gc
