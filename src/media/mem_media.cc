// Zero-filled in-memory Media (see include/ftl/media.h).

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ftl/media.h"
#include "media/io_util.h"

namespace ftl {
namespace media {
namespace {

// A byte vector. Discard zeroes the range. Sync does nothing.
// Thread-safety: reads share a reader lock, writes and discards are exclusive.
class MemMedia : public Media {
 public:
  explicit MemMedia(uint64_t size) : size_(size), data_(size) {}

  uint64_t size() const override { return size_; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    if (auto s = CheckRange("memory", offset, out.size(), size_); !s.ok())
      return s;
    absl::ReaderMutexLock lock(&mu_);
    if (!out.empty())
      std::memcpy(out.data(), data_.data() + offset, out.size());
    return absl::OkStatus();
  }

  absl::Status Write(uint64_t offset,
                     std::span<const std::byte> data) override {
    if (auto s = CheckRange("memory", offset, data.size(), size_); !s.ok())
      return s;
    absl::MutexLock lock(&mu_);
    if (!data.empty())
      std::memcpy(data_.data() + offset, data.data(), data.size());
    return absl::OkStatus();
  }

  absl::Status WriteGather(uint64_t offset,
                           std::span<const std::span<const std::byte>> pieces) override {
    size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    if (auto s = CheckRange("memory", offset, total, size_); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    for (const auto& p : pieces) {
      if (!p.empty()) std::memcpy(data_.data() + offset, p.data(), p.size());
      offset += p.size();
    }
    return absl::OkStatus();
  }
  bool gathers_writes() const override { return true; }
  bool writes_sectors() const override { return true; }
  bool writes_lone_sectors() const override { return true; }
  bool discard_zeroes() const override { return true; }

  absl::Status Sync() override { return absl::OkStatus(); }

  absl::Status Discard(uint64_t offset, uint64_t length) override {
    if (auto s = CheckRange("memory", offset, length, size_); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    std::fill_n(data_.begin() + offset, length, std::byte{0});
    return absl::OkStatus();
  }

  std::string Describe() const override { return "memory"; }

 private:
  const uint64_t size_;
  absl::Mutex mu_;
  std::vector<std::byte> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace media

std::shared_ptr<Media> NewMemMedia(uint64_t size) {
  return std::make_shared<media::MemMedia>(size);
}

}  // namespace ftl
