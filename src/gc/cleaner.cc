#include "gc/cleaner.h"

#include <chrono>

#include "util/logging.h"

namespace ftl::gc {
namespace {
// Cleanings in a row that may pass without a new high of free segments.
constexpr uint32_t kNoProgressLimit = 64;
// Cleaned segments freed together, behind one media sync.
constexpr uint32_t kReleaseBatch = 4;
}  // namespace

Cleaner::Cleaner(CleanerHost* host, CleanerOptions opts) : host_(host), opts_(opts) {}

Cleaner::~Cleaner() { Stop(); }

void Cleaner::Start() {
  {
    absl::MutexLock l(&mu_);
    stop_ = false;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Cleaner::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Cleaner::Halt() {
  absl::MutexLock l(&mu_);
  halted_ = true;
}

void Cleaner::Resume() {
  absl::MutexLock l(&mu_);
  halted_ = false;
  kicked_ = true;
}

void Cleaner::Kick() {
  absl::MutexLock l(&mu_);
  kicked_ = true;
}

std::string Cleaner::state() const {
  absl::MutexLock l(&mu_);
  if (halted_) return "halted";
  return running_.load() ? "running" : "idle";
}

absl::StatusOr<bool> Cleaner::CleanOne() {
  VictimChoice choice = PickVictim(host_->Candidates());
  if (choice.gate_blocked) {
    // Two checkpoints move both slots past the victim's records.
    for (int i = 0; i < 2 && choice.gate_blocked; ++i) {
      if (absl::Status s = host_->CheckpointForCleaner(); !s.ok()) return s;
      choice = PickVictim(host_->Candidates());
    }
  }
  if (!choice.seg) return false;
  absl::StatusOr<uint32_t> moved = host_->CleanSegment(*choice.seg);
  if (!moved.ok()) return moved.status();
  cleaned_.fetch_add(1);
  relocated_.fetch_add(*moved);
  if (++unreleased_ >= kReleaseBatch || host_->FreeSegments() <= opts_.critical) {
    if (absl::Status s = Release(); !s.ok()) return s;
  }
  return true;
}

absl::Status Cleaner::Release() {
  if (unreleased_ == 0) return absl::OkStatus();
  unreleased_ = 0;
  return host_->ReleaseCleaned();
}

absl::StatusOr<uint32_t> Cleaner::RunUntil(uint32_t min_free) {
  absl::MutexLock run(&run_mu_);
  uint32_t n = 0, best = host_->FreeSegments(), since_best = 0;
  while (host_->FreeSegments() + unreleased_ < min_free) {
    absl::StatusOr<bool> r = CleanOne();
    if (!r.ok()) return r.status();
    if (!*r) break;
    ++n;
    // Stop when cleaning stops adding free segments (everything left is
    // live data).
    uint32_t now = host_->FreeSegments();
    if (now > best) {
      best = now;
      since_best = 0;
    } else if (++since_best >= kNoProgressLimit) {
      break;
    }
  }
  if (absl::Status s = Release(); !s.ok()) return s;
  return n;
}

void Cleaner::Loop() {
  auto log = util::Logger("gc");
  while (true) {
    {
      absl::MutexLock l(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || kicked_; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(50));
      if (stop_) return;
      kicked_ = false;
      if (halted_) continue;
    }
    const uint32_t slack = host_->SlackSegments();
    if (host_->FreeSegments() >= opts_.low_watermark + slack) {
      host_->SpaceAvailable();
      // Idle time: give freed segments back to the device (trim).
      host_->DiscardIdle(2);
      continue;
    }
    running_ = true;
    absl::MutexLock run(&run_mu_);
    while (host_->FreeSegments() + unreleased_ < opts_.high_watermark + 2 * slack) {
      {
        absl::MutexLock l(&mu_);
        if (stop_ || halted_) break;
      }
      auto start = std::chrono::steady_clock::now();
      absl::StatusOr<bool> r = CleanOne();
      if (!r.ok()) {
        log->error("cleaning failed: {}", r.status().ToString());
        host_->CleanerFailed(r.status());
        // Back off before trying again.
        absl::MutexLock l(&mu_);
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
        mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Seconds(1));
        break;
      }
      if (!*r) {
        (void)Release();
        if (host_->FreeSegments() <= opts_.critical)
          host_->CleanerFailed(absl::ResourceExhaustedError("no space left: nothing to reclaim"));
        break;
      }
      bool urgent = host_->FreeSegments() <= opts_.critical;
      if (!urgent && opts_.max_segments_per_second > 0) {
        auto budget = std::chrono::microseconds(1000000 / opts_.max_segments_per_second);
        auto spent = std::chrono::steady_clock::now() - start;
        if (spent < budget) {
          absl::MutexLock l(&mu_);
          auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
          mu_.AwaitWithTimeout(
              absl::Condition(&stop),
              absl::FromChrono(std::chrono::duration_cast<std::chrono::microseconds>(budget - spent)));
        }
      }
    }
    if (absl::Status s = Release(); !s.ok()) log->error("releasing cleaned segments: {}", s.ToString());
    running_ = false;
  }
}

}  // namespace ftl::gc
