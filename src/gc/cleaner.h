#pragma once
// Cleaner: the background thread that keeps free segments available. It
// wakes when free segments fall below the low watermark (or on Kick), picks
// victims by cost-benefit, asks its host to relocate their live blocks and
// stops at the high watermark (raised by the host's SlackSegments, the
// high one twice as much).
// Outside emergencies (free <= critical) it
// rate-limits itself so foreground I/O keeps its latency. Halt()/Resume()
// pause it. Thread-safe.

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gc/victim_policy.h"

namespace ftl::gc {

// What the cleaner needs from the pool (implemented by gc::Relocator).
class CleanerHost {
 public:
  virtual ~CleanerHost() = default;
  virtual uint32_t FreeSegments() = 0;
  virtual VictimInput Candidates() = 0;
  // Relocates the live blocks of `seg`; returns blocks moved. The segment
  // becomes free at the next ReleaseCleaned().
  virtual absl::StatusOr<uint32_t> CleanSegment(uint32_t seg) = 0;
  // Frees every segment cleaned so far (one media sync for all of them).
  virtual absl::Status ReleaseCleaned() = 0;
  // Discards up to `max` free segments not discarded yet, if the pool has
  // had no writes for a while; returns how many it discarded.
  virtual uint32_t DiscardIdle(uint32_t max) = 0;
  // Writes a checkpoint (advancing the gate).
  virtual absl::Status CheckpointForCleaner() = 0;
  // The cleaner could not make progress: writers waiting for space should
  // get `why` instead of waiting on.
  virtual void CleanerFailed(const absl::Status& why) = 0;
  // There are free segments above the low watermark: writers that waited
  // for space may go on. (A writer can find the device full just before a
  // release and block just after it; this makes sure it is not left waiting.)
  virtual void SpaceAvailable() = 0;
  // Free segments to keep on top of the watermarks because space is
  // plentiful (little live data): cleaning ahead then costs no write
  // amplification and lets releases share one media sync.
  virtual uint32_t SlackSegments() { return 0; }
};

struct CleanerOptions {
  uint32_t low_watermark = 8;    // start below this many free segments
  uint32_t high_watermark = 12;  // stop at this many
  uint32_t critical = 4;         // no rate limit at or below this
  // Segments per second outside emergencies (0 = unlimited).
  uint32_t max_segments_per_second = 0;
};

class Cleaner {
 public:
  Cleaner(CleanerHost* host, CleanerOptions opts);
  ~Cleaner();
  void Start();
  void Stop();
  void Halt();
  void Resume();
  // Wakes the thread to check the watermarks now.
  void Kick();
  // Cleans in the calling thread until `min_free` segments are free or
  // nothing more can be reclaimed. Returns segments cleaned.
  absl::StatusOr<uint32_t> RunUntil(uint32_t min_free);
  std::string state() const;
  // True while the background thread runs (Start without Stop).
  bool started() const { return thread_.joinable(); }
  uint64_t segments_cleaned() const { return cleaned_.load(); }
  uint64_t blocks_relocated() const { return relocated_.load(); }
  const CleanerOptions& options() const { return opts_; }

 private:
  void Loop();
  // One victim: returns false if nothing could be cleaned. Cleaned
  // segments are released in groups of kReleaseBatch (one sync each).
  absl::StatusOr<bool> CleanOne();
  absl::Status Release();
  uint32_t unreleased_ = 0;  // guarded by run_mu_

  CleanerHost* host_;
  CleanerOptions opts_;
  std::thread thread_;
  absl::Mutex run_mu_;  // one cleaning pass at a time (thread vs RunUntil)
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool halted_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> cleaned_{0};
  std::atomic<uint64_t> relocated_{0};
};

}  // namespace ftl::gc
