#pragma once
// Scrubber: a pass over the pool that reads every live data block, the
// record headers of full segments holding live data, the superblock
// copies and (offline) the checkpoint slots, and checks each against its
// checksum (docs/decisions.md, "Issue 22: mirrors and scrub"). It reads
// through Media::ReadVerified, so on a mirror a bad copy is rewritten from
// a good one as it is found; what no copy holds intact is reported.
// Rate-limited; reads each segment under a reader pin, so the cleaner does
// not reuse it meanwhile.
//
// Owned by core::PoolImpl. Thread-safety: Start, Stop, Status and Run may
// be called from any thread; one pass runs at a time (Run refuses while
// the background one runs). Locks: mu_ (the status; a leaf) is never held
// while the pass takes the pool's map_mu (shared, to list live blocks).

#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/checkpointer.h"
#include "ftl/pool.h"
#include "state/pool_state.h"

namespace ftl::scrub {

class Scrubber {
 public:
  // checkpointer: its superblock is read only for a pass with
  // ScrubOptions::checkpoints, which nothing may run beside.
  Scrubber(state::PoolState* state, std::shared_ptr<Media> media, const checkpoint::Checkpointer* checkpointer,
           uint64_t data_offset, uint32_t segment_blocks, const log::Uuid& uuid);
  ~Scrubber();
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  // A pass on a thread of its own; FailedPrecondition while one runs.
  absl::Status Start(const ScrubOptions& opts) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the running pass (state "stopped"); waits for its thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  ScrubStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // A whole pass in the calling thread; FailedPrecondition while one runs.
  absl::StatusOr<ScrubStatus> Run(const ScrubOptions& opts) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Pass(const ScrubOptions& opts) ABSL_LOCKS_EXCLUDED(mu_);
  // Sleeps while the pass is ahead of its rate; false if stopped.
  bool Pace(const ScrubOptions& opts, double t0, uint64_t bytes_read);
  void Damage(const std::string& what) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t MediaOffset(uint32_t pba) const { return data_offset_ + uint64_t(pba) * kBlockSize; }

  state::PoolState* const state_;
  const std::shared_ptr<Media> media_;
  const checkpoint::Checkpointer* const checkpointer_;
  const uint64_t data_offset_;
  const uint32_t segment_blocks_;
  const log::Uuid uuid_;

  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  ScrubStatus status_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  double started_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::scrub
