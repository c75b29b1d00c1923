// Media backed by a raw block device opened with O_DIRECT (see
// include/ftl/media.h).

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ftl/media.h"
#include "media/aio_writer.h"
#include "media/aligned_buffer.h"
#include "media/io_util.h"
#include "util/logging.h"

namespace ftl {
namespace media {
namespace {

// Bounce buffers are aligned to this (and sized in multiples of it).
constexpr uint64_t kBufferAlign = 4096;
// Largest bounce buffer; unaligned requests larger than this go in pieces.
constexpr uint64_t kMaxBounce = 1 << 20;

uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;

AlignedBuffer NewAlignedBuffer(uint64_t size) {
  size = AlignUp(std::max<uint64_t>(size, 1), kBufferAlign);
  return AlignedBuffer(
      static_cast<std::byte*>(std::aligned_alloc(kBufferAlign, size)));
}

// A block device opened O_RDWR|O_DIRECT. Owns its fd. Requests whose offset,
// length or buffer address are not multiples of the logical block size go
// through a 4096-aligned bounce buffer; unaligned writes become
// read-modify-write of the partial blocks at their ends.
// Thread-safety: all methods may be called concurrently; read-modify-write
// cycles are serialised among themselves by rmw_mu_ so two unaligned writes
// to disjoint bytes of one block do not lose each other's update.
class BlockDeviceMedia : public Media {
 public:
  BlockDeviceMedia(int fd, std::string path, uint64_t size, uint64_t block)
      : fd_(fd), what_("blockdev " + path), size_(size), block_(block) {}
  ~BlockDeviceMedia() override { CloseFd(fd_); }
  BlockDeviceMedia(const BlockDeviceMedia&) = delete;
  BlockDeviceMedia& operator=(const BlockDeviceMedia&) = delete;

  uint64_t size() const override { return size_; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    if (auto s = CheckRange(what_, offset, out.size(), size_); !s.ok())
      return s;
    if (out.empty()) return absl::OkStatus();
    if (Aligned(offset, out.size(), out.data()))
      return PreadAll(fd_, out, offset, what_);
    return BounceRead(offset, out);
  }

  absl::Status Write(uint64_t offset,
                     std::span<const std::byte> data) override {
    if (auto s = CheckRange(what_, offset, data.size(), size_); !s.ok())
      return s;
    if (data.empty()) return absl::OkStatus();
    if (Aligned(offset, data.size(), data.data())) {
      return PwriteAll(fd_, data, offset, what_);
    }
    return BounceWrite(offset, data);
  }

  absl::Status Sync() override {
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return ErrnoError("fdatasync", what_, 0, errno);
    }
    return absl::OkStatus();
  }

  // Discards the whole logical blocks inside the range; partial blocks at the
  // ends are left alone (discard is advisory).
  absl::Status Discard(uint64_t offset, uint64_t length) override {
    if (auto s = CheckRange(what_, offset, length, size_); !s.ok()) return s;
    uint64_t start = AlignUp(offset, block_);
    uint64_t end = AlignDown(offset + length, block_);
    if (start >= end || !discard_supported_.load(std::memory_order_relaxed)) {
      return absl::OkStatus();
    }
    uint64_t range[2] = {start, end - start};
    int rc;
    do {
      rc = ::ioctl(fd_, BLKDISCARD, range);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return absl::OkStatus();
    if (errno == EOPNOTSUPP) {
      if (discard_supported_.exchange(false)) {
        util::Logger("media")->info("{}: device does not support discard",
                                    what_);
      }
      return absl::OkStatus();
    }
    return ErrnoError("discard", what_, start, errno);
  }

  std::string Describe() const override { return what_; }
  // A device of 512-byte logical blocks writes a sector as such (direct).
  bool writes_sectors() const override { return block_ <= 512; }
  bool writes_lone_sectors() const override { return block_ <= 512; }
  // Aligned writes go to the device together (AioWriter).
  absl::Status WriteEach(std::span<const WriteAt> writes) override {
    bool aligned = writes.size() > 1;
    for (const WriteAt& w : writes) {
      size_t total = 0;
      for (const auto& p : w.pieces) {
        total += p.size();
        aligned = aligned && Aligned(0, p.size(), p.data());
      }
      aligned = aligned && w.offset % block_ == 0;
      if (auto s = CheckRange(what_, w.offset, total, size_); !s.ok()) return s;
    }
    if (!aligned) return Media::WriteEach(writes);
    return aio_.WriteEach(fd_, writes, what_);
  }

 private:
  bool Aligned(uint64_t offset, uint64_t length, const void* p) const {
    return offset % block_ == 0 && length % block_ == 0 &&
           reinterpret_cast<uintptr_t>(p) % block_ == 0;
  }

  // Size of the bounce buffer for [offset, offset+length).
  uint64_t BounceSize(uint64_t offset, uint64_t length) const {
    return std::min(kMaxBounce, AlignUp(offset + length, block_) -
                                    AlignDown(offset, block_));
  }

  absl::Status BounceRead(uint64_t offset, std::span<std::byte> out) {
    const uint64_t end = offset + out.size();
    AlignedBuffer buf = NewAlignedBuffer(BounceSize(offset, out.size()));
    if (!buf)
      return absl::ResourceExhaustedError("out of memory for bounce buffer");
    uint64_t pos = offset;
    while (pos < end) {
      uint64_t win_start = AlignDown(pos, block_);
      uint64_t win_end = std::min(AlignUp(end, block_), win_start + kMaxBounce);
      if (auto s = PreadAll(fd_, std::span(buf.get(), win_end - win_start),
                            win_start, what_);
          !s.ok()) {
        return s;
      }
      uint64_t n = std::min(end, win_end) - pos;
      std::memcpy(out.data() + (pos - offset), buf.get() + (pos - win_start),
                  n);
      pos += n;
    }
    return absl::OkStatus();
  }

  absl::Status BounceWrite(uint64_t offset, std::span<const std::byte> data) {
    const uint64_t end = offset + data.size();
    AlignedBuffer buf = NewAlignedBuffer(BounceSize(offset, data.size()));
    if (!buf)
      return absl::ResourceExhaustedError("out of memory for bounce buffer");
    absl::MutexLock lock(&rmw_mu_);
    uint64_t pos = offset;
    while (pos < end) {
      uint64_t win_start = AlignDown(pos, block_);
      uint64_t win_end = std::min(AlignUp(end, block_), win_start + kMaxBounce);
      uint64_t n = std::min(end, win_end) - pos;
      bool head_partial = pos > win_start;
      bool tail_partial = pos + n < win_end;
      if (head_partial) {
        if (auto s =
                PreadAll(fd_, std::span(buf.get(), block_), win_start, what_);
            !s.ok()) {
          return s;
        }
      }
      if (tail_partial && !(head_partial && win_end - block_ == win_start)) {
        if (auto s = PreadAll(
                fd_,
                std::span(buf.get() + (win_end - block_ - win_start), block_),
                win_end - block_, what_);
            !s.ok()) {
          return s;
        }
      }
      std::memcpy(buf.get() + (pos - win_start), data.data() + (pos - offset),
                  n);
      if (auto s = PwriteAll(fd_, std::span(buf.get(), win_end - win_start),
                             win_start, what_);
          !s.ok()) {
        return s;
      }
      pos += n;
    }
    return absl::OkStatus();
  }

  const int fd_;
  const std::string what_;
  const uint64_t size_;
  const uint64_t block_;  // logical block size: offset/length granularity
  std::atomic<bool> discard_supported_{true};
  absl::Mutex rmw_mu_;
  AioWriter aio_;
};

}  // namespace
}  // namespace media

absl::StatusOr<std::shared_ptr<Media>> OpenBlockDeviceMedia(
    const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return absl::NotFoundError(absl::StrCat("no such file: ", path));
    return absl::InternalError(
        absl::StrCat("open ", path, ": ", std::strerror(err)));
  }
  auto fail = [&](absl::Status s) {
    media::CloseFd(fd);
    return s;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return fail(absl::InternalError(
        absl::StrCat("stat ", path, ": ", std::strerror(errno))));
  }
  if (!S_ISBLK(st.st_mode)) {
    return fail(
        absl::InvalidArgumentError(absl::StrCat(path, ": not a block device")));
  }
  uint64_t size = 0;
  if (::ioctl(fd, BLKGETSIZE64, &size) != 0) {
    return fail(absl::InternalError(
        absl::StrCat("BLKGETSIZE64 ", path, ": ", std::strerror(errno))));
  }
  int logical_block = 0;
  if (::ioctl(fd, BLKSSZGET, &logical_block) != 0 || logical_block <= 0 ||
      (logical_block & (logical_block - 1)) != 0 ||
      uint64_t(logical_block) > media::kMaxBounce) {
    logical_block = 4096;  // conservative when the device will not say
  }
  util::Logger("media")->info(
      "opened block device {}: {} bytes, {}-byte blocks", path, size,
      logical_block);
  return std::make_shared<media::BlockDeviceMedia>(fd, path, size,
                                                   uint64_t(logical_block));
}

}  // namespace ftl
