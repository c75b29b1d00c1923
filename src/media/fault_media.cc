// FaultMedia: see fault_media.h for the model.
//
// Details fixed here:
// - A Discard is recorded as a pending entry like a Write: it counts in
//   unsynced_writes(), in keep_count and for tear_next (a torn discard zeroes
//   a random subset of its sectors). It is not counted by FailNthWrite nor in
//   writes()/bytes_written(); FailWrites ranges do fail it.
// - FailNthWrite counts Write calls that pass the crash and range checks.
// - A failed Write or Discard changes nothing.
// - Zero-length writes and discards succeed and record nothing.
// - Sectors for tearing are the 512-byte sectors of the device (absolute
//   offsets), so an unaligned write's end sectors tear as partial pieces.
// - The control methods (FailReads, FlipBit, ...) work while crashed.

#include "media/fault_media.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "media/io_util.h"
#include "util/logging.h"

namespace ftl::media {
namespace {

constexpr uint64_t kSector = 512;

absl::Status CrashedError() {
  return absl::UnavailableError("fault media: device crashed (call Restart)");
}

// Uniform double in [0, 1) from 53 random bits; defined here rather than with
// std::uniform_real_distribution so results do not depend on the library.
double Unit(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

}  // namespace

FaultMedia::FaultMedia(uint64_t size) : visible_(size), durable_(size) {}

uint64_t FaultMedia::size() const {
  absl::MutexLock lock(&mu_);
  return visible_.size();
}

bool FaultMedia::Overlaps(
    const std::vector<std::pair<uint64_t, uint64_t>>& ranges, uint64_t off,
    uint64_t len) const {
  if (len == 0) return false;
  for (const auto& [start, length] : ranges) {
    if (length > 0 && off < start + length && start < off + len) return true;
  }
  return false;
}

absl::Status FaultMedia::Read(uint64_t offset, std::span<std::byte> out) {
  absl::MutexLock lock(&mu_);
  if (crashed_) return CrashedError();
  if (auto s = CheckRange("fault media", offset, out.size(), visible_.size());
      !s.ok()) {
    return s;
  }
  if (Overlaps(fail_reads_, offset, out.size())) {
    return absl::DataLossError(absl::StrCat(
        "injected I/O error reading fault media at offset ", offset));
  }
  if (!out.empty())
    std::memcpy(out.data(), visible_.data() + offset, out.size());
  return absl::OkStatus();
}

absl::Status FaultMedia::Write(uint64_t offset,
                               std::span<const std::byte> data) {
  absl::MutexLock lock(&mu_);
  if (crashed_) return CrashedError();
  if (auto s = CheckRange("fault media", offset, data.size(), visible_.size());
      !s.ok()) {
    return s;
  }
  if (fail_nth_write_ > 0 && --fail_nth_write_ == 0) {
    return absl::DataLossError(absl::StrCat(
        "injected I/O error (nth write) writing fault media at offset ",
        offset));
  }
  if (Overlaps(fail_writes_, offset, data.size())) {
    return absl::DataLossError(absl::StrCat(
        "injected I/O error writing fault media at offset ", offset));
  }
  ++writes_;
  if (data.empty()) return absl::OkStatus();
  std::memcpy(visible_.data() + offset, data.data(), data.size());
  pending_.push_back(
      Pending{offset, std::vector<std::byte>(data.begin(), data.end())});
  bytes_written_ += data.size();
  return absl::OkStatus();
}

absl::Status FaultMedia::Sync() {
  absl::MutexLock lock(&mu_);
  if (crashed_) return CrashedError();
  for (const Pending& p : pending_) {
    if (p.discard_len > 0) {
      std::fill_n(durable_.begin() + p.offset, p.discard_len, std::byte{0});
    } else {
      std::copy(p.data.begin(), p.data.end(), durable_.begin() + p.offset);
    }
  }
  pending_.clear();
  ++syncs_;
  return absl::OkStatus();
}

absl::Status FaultMedia::Discard(uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&mu_);
  if (crashed_) return CrashedError();
  if (auto s = CheckRange("fault media", offset, length, visible_.size());
      !s.ok()) {
    return s;
  }
  if (Overlaps(fail_writes_, offset, length)) {
    return absl::DataLossError(absl::StrCat(
        "injected I/O error discarding fault media at offset ", offset));
  }
  if (length == 0) return absl::OkStatus();
  std::fill_n(visible_.begin() + offset, length, std::byte{0});
  pending_.push_back(Pending{offset, {}, length});
  return absl::OkStatus();
}

void FaultMedia::Crash() {
  absl::MutexLock lock(&mu_);
  if (!crashed_) {
    util::Logger("media")->debug("fault media: crash with {} unsynced writes",
                                 pending_.size());
  }
  crashed_ = true;
}

void FaultMedia::Restart(const CrashPlan& plan) {
  absl::MutexLock lock(&mu_);
  assert(crashed_ && "Restart() without Crash()");
  std::mt19937_64 rng(plan.seed);
  bool tear_pending = plan.tear_next;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    const uint64_t len = p.discard_len > 0 ? p.discard_len : p.data.size();
    bool keep = false;
    switch (plan.mode) {
      case CrashPlan::Mode::kDropAll:
        keep = false;
        break;
      case CrashPlan::Mode::kKeepPrefix:
        keep = i < plan.keep_count;
        break;
      case CrashPlan::Mode::kKeepRandom:
        keep = Unit(rng) < plan.keep_probability;
        break;
    }
    // Copies [from, to) of this entry (absolute offsets) into durable_.
    auto apply = [&](uint64_t from, uint64_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (p.discard_len > 0) {
        std::fill(durable_.begin() + from, durable_.begin() + to, std::byte{0});
      } else {
        std::copy(p.data.begin() + (from - p.offset),
                  p.data.begin() + (to - p.offset), durable_.begin() + from);
      }
    };
    if (keep) {
      apply(p.offset, p.offset + len);
      ++kept;
    } else if (tear_pending) {
      tear_pending = false;
      for (uint64_t s = p.offset; s < p.offset + len;) {
        uint64_t e = std::min(p.offset + len, (s / kSector + 1) * kSector);
        if (rng() & 1) apply(s, e);
        s = e;
      }
    }
  }
  util::Logger("media")->debug(
      "fault media: restart kept {} of {} unsynced writes", kept,
      pending_.size());
  pending_.clear();
  visible_ = durable_;
  crashed_ = false;
}

bool FaultMedia::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

size_t FaultMedia::unsynced_writes() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

void FaultMedia::FailReads(uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&mu_);
  fail_reads_.emplace_back(offset, length);
}

void FaultMedia::FailWrites(uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&mu_);
  fail_writes_.emplace_back(offset, length);
}

void FaultMedia::FailNthWrite(uint64_t n) {
  absl::MutexLock lock(&mu_);
  fail_nth_write_ = n;
}

void FaultMedia::ClearFailures() {
  absl::MutexLock lock(&mu_);
  fail_reads_.clear();
  fail_writes_.clear();
  fail_nth_write_ = 0;
}

void FaultMedia::FlipBit(uint64_t byte_offset, int bit) {
  absl::MutexLock lock(&mu_);
  assert(byte_offset < visible_.size() && bit >= 0 && bit < 8);
  if (byte_offset >= visible_.size() || bit < 0 || bit >= 8) return;
  const std::byte mask{uint8_t(1u << bit)};
  visible_[byte_offset] ^= mask;
  durable_[byte_offset] ^= mask;
  // Keep the flip when a pending write covering the byte reaches durable_.
  for (Pending& p : pending_) {
    if (p.discard_len == 0 && byte_offset >= p.offset &&
        byte_offset < p.offset + p.data.size()) {
      p.data[byte_offset - p.offset] ^= mask;
    }
  }
}

uint64_t FaultMedia::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

uint64_t FaultMedia::bytes_written() const {
  absl::MutexLock lock(&mu_);
  return bytes_written_;
}

uint64_t FaultMedia::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

}  // namespace ftl::media
