#pragma once
// TestVolume: an in-memory ftl::Volume for NBD protocol tests, so nbd/ can
// be tested without the engine. 4 KiB allocation granularity like the
// engine; WriteAsync completes on a helper thread after an optional delay so
// replies come back out of order. Failures can be injected per offset.
// Thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ftl/pool.h"

namespace ftl::nbd::testing {

class TestVolume : public Volume {
 public:
  TestVolume(std::string name, uint64_t size, bool read_only = false)
      : name_(std::move(name)), data_(size), allocated_(size / kBlockSize), ro_(read_only) {
    worker_ = std::thread([this] { Loop(); });
  }
  ~TestVolume() override {
    {
      std::lock_guard<std::mutex> l(qmu_);
      quit_ = true;
    }
    qcv_.notify_all();
    worker_.join();
  }

  // Writes at `offset` complete only after `delay` (for out-of-order tests).
  void SetWriteDelay(uint64_t offset, std::chrono::milliseconds delay) {
    std::lock_guard<std::mutex> l(mu_);
    delays_[offset] = delay;
  }
  // Reads touching `offset` fail with `status`.
  void FailReadsAt(uint64_t offset, absl::Status status) {
    std::lock_guard<std::mutex> l(mu_);
    read_failures_[offset] = std::move(status);
  }
  uint64_t flushes() const {
    std::lock_guard<std::mutex> l(mu_);
    return flushes_;
  }

  const std::string& name() const override { return name_; }
  uint64_t size_bytes() const override { return data_.size(); }
  bool read_only() const override { return ro_; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = Check(offset, out.size(), false); !s.ok()) return s;
    for (auto& [at, st] : read_failures_) {
      if (at >= offset && at < offset + out.size()) return st;
    }
    std::memcpy(out.data(), data_.data() + offset, out.size());
    ++stats_.reads;
    stats_.read_bytes += out.size();
    return absl::OkStatus();
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> in, bool fua) override {
    std::lock_guard<std::mutex> l(mu_);
    if (ro_) return absl::PermissionDeniedError("read-only");
    if (auto s = Check(offset, in.size(), true); !s.ok()) return s;
    std::memcpy(data_.data() + offset, in.data(), in.size());
    Mark(offset, in.size(), true);
    ++stats_.writes;
    stats_.write_bytes += in.size();
    return absl::OkStatus();
  }
  absl::Status WriteAtomic(std::span<const Piece> pieces, bool fua) override {
    for (const Piece& p : pieces) {
      if (auto s = Write(p.offset, p.data, fua); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  void WriteAsync(uint64_t offset, std::span<const std::byte> in, bool fua,
                  Callback done) override {
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = delays_.find(offset); it != delays_.end()) delay = it->second;
    }
    auto when = std::chrono::steady_clock::now() + delay;
    std::lock_guard<std::mutex> l(qmu_);
    queue_.push_back({when, [this, offset, in, fua, done = std::move(done)] {
                        done(Write(offset, in, fua));
                      }});
    qcv_.notify_all();
  }
  absl::Status Trim(uint64_t offset, uint64_t length, bool fua) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = Check(offset, length, false); !s.ok()) return s;
    uint64_t first = (offset + kBlockSize - 1) / kBlockSize, end = (offset + length) / kBlockSize;
    for (uint64_t b = first; b < end; ++b) {
      allocated_[b] = false;
      std::memset(data_.data() + b * kBlockSize, 0, kBlockSize);
    }
    ++stats_.trims;
    return absl::OkStatus();
  }
  absl::Status WriteZeroes(uint64_t offset, uint64_t length, bool fua, bool no_hole,
                           bool fast_only) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = Check(offset, length, true); !s.ok()) return s;
    if (fast_only && no_hole) return absl::UnimplementedError("cannot zero fast");
    std::memset(data_.data() + offset, 0, length);
    Mark(offset, length, no_hole);
    ++stats_.zeroes;
    return absl::OkStatus();
  }
  absl::Status Flush() override {
    std::lock_guard<std::mutex> l(mu_);
    ++flushes_;
    ++stats_.flushes;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<BlockExtent>> BlockStatus(uint64_t offset,
                                                       uint64_t length) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = Check(offset, length, false); !s.ok()) return s;
    std::vector<BlockExtent> out;
    uint64_t pos = offset, end = offset + length;
    while (pos < end) {
      uint64_t b = pos / kBlockSize;
      uint64_t next = std::min(end, (b + 1) * kBlockSize);
      bool a = allocated_[b];
      if (!out.empty() && out.back().allocated == a) {
        out.back().length += next - pos;
      } else {
        out.push_back({pos, next - pos, a});
      }
      pos = next;
    }
    return out;
  }
  VolumeStats Stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    VolumeStats s = stats_;
    s.name = name_;
    s.size_bytes = data_.size();
    return s;
  }

 private:
  struct Job {
    std::chrono::steady_clock::time_point when;
    std::function<void()> run;
  };
  // Any byte offset and length, as the engine (pool.h).
  absl::Status Check(uint64_t offset, uint64_t length, bool write) const {
    if (offset > data_.size() || length > data_.size() - offset) {
      return write ? absl::OutOfRangeError("past the end") : absl::InvalidArgumentError("past the end");
    }
    return absl::OkStatus();
  }
  void Mark(uint64_t offset, uint64_t length, bool value) {
    for (uint64_t b = offset / kBlockSize; b * kBlockSize < offset + length; ++b) {
      if (value) allocated_[b] = true;
      else if (b * kBlockSize >= offset && (b + 1) * kBlockSize <= offset + length)
        allocated_[b] = false;
    }
  }
  void Loop() {
    std::unique_lock<std::mutex> l(qmu_);
    for (;;) {
      if (quit_ && queue_.empty()) return;
      if (queue_.empty()) {
        qcv_.wait(l);
        continue;
      }
      // Run the earliest-due job.
      auto it = std::min_element(queue_.begin(), queue_.end(),
                                 [](const Job& a, const Job& b) { return a.when < b.when; });
      if (it->when > std::chrono::steady_clock::now()) {
        qcv_.wait_until(l, it->when);
        continue;
      }
      Job job = std::move(*it);
      queue_.erase(it);
      l.unlock();
      job.run();
      l.lock();
    }
  }

  const std::string name_;
  mutable std::mutex mu_;
  std::vector<std::byte> data_;
  std::vector<bool> allocated_;
  bool ro_;
  std::map<uint64_t, std::chrono::milliseconds> delays_;
  std::map<uint64_t, absl::Status> read_failures_;
  uint64_t flushes_ = 0;
  VolumeStats stats_;

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Job> queue_;
  bool quit_ = false;
  std::thread worker_;
};

}  // namespace ftl::nbd::testing
