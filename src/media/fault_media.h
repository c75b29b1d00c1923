#pragma once
// FaultMedia: a test Media that models a device with a volatile write cache.
// Writes are visible to reads at once but become durable only when a later
// Sync() returns. Crash() freezes the device (every later call fails with
// Unavailable and changes nothing) and Restart() turns it back into a working
// device holding only what a power cut would have left: every synced write,
// plus whatever the CrashPlan keeps of the unsynced ones. It can also fail
// chosen reads/writes with an I/O error and flip bits in stored bytes.
// Thread-safety: all methods are safe to call concurrently.

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ftl/media.h"

namespace ftl::media {

struct CrashPlan {
  enum class Mode {
    kDropAll,      // lose every unsynced write
    kKeepPrefix,   // keep the first keep_count unsynced writes (in issue order)
    kKeepRandom,   // keep each unsynced write with probability keep_probability
  };
  Mode mode = Mode::kDropAll;
  size_t keep_count = 0;
  double keep_probability = 0.5;
  // Tear the first unsynced write that is not kept: a random subset of its
  // 512-byte sectors reaches the media.
  bool tear_next = false;
  uint64_t seed = 1;
};

class FaultMedia : public Media {
 public:
  // Wraps a fresh zero-filled memory image of `size` bytes.
  explicit FaultMedia(uint64_t size);

  uint64_t size() const override;
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override;
  // WriteGather is the default (one Write of the concatenation, so every
  // fault applies to the record as a whole); saying it gathers makes the
  // engine take its gather path under the crash tests too.
  bool gathers_writes() const override { return true; }
  // Tears at 512-byte sectors, so sector writes are what it models.
  bool writes_sectors() const override { return true; }
  bool writes_lone_sectors() const override { return true; }
  absl::Status Sync() override;
  absl::Status Discard(uint64_t offset, uint64_t length) override;
  std::string Describe() const override { return "fault-injecting memory"; }

  // Freezes the device; see the class comment.
  void Crash();
  // Applies `plan` to the writes pending at Crash() and unfreezes.
  // REQUIRES: Crash() was called.
  void Restart(const CrashPlan& plan);
  bool crashed() const;
  // Number of writes issued since the last completed Sync().
  size_t unsynced_writes() const;

  // Every Read (or Write) overlapping [offset, offset+length) fails with
  // DataLossError("injected I/O error ...") until cleared.
  void FailReads(uint64_t offset, uint64_t length);
  void FailWrites(uint64_t offset, uint64_t length);
  // The n-th Write from now (1 = the next one) fails; 0 cancels.
  void FailNthWrite(uint64_t n);
  void ClearFailures();
  // Flips one bit in both the visible and the durable image.
  void FlipBit(uint64_t byte_offset, int bit);

  uint64_t writes() const;       // Write calls that succeeded
  uint64_t bytes_written() const;
  uint64_t syncs() const;

 private:
  struct Pending {
    uint64_t offset;
    std::vector<std::byte> data;  // empty + discard_len>0 = a discard
    uint64_t discard_len = 0;
  };
  bool Overlaps(const std::vector<std::pair<uint64_t, uint64_t>>& ranges, uint64_t off,
                uint64_t len) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::byte> visible_ ABSL_GUARDED_BY(mu_);
  std::vector<std::byte> durable_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<uint64_t, uint64_t>> fail_reads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> fail_writes_ ABSL_GUARDED_BY(mu_);
  uint64_t fail_nth_write_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ftl::media
