// Media backed by a regular file (see include/ftl/media.h).

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ftl/media.h"
#include "media/aio_writer.h"
#include "media/io_util.h"
#include "util/logging.h"

namespace ftl {
namespace media {
namespace {

// Zeros are written in chunks of this size when hole punching is unsupported.
constexpr size_t kZeroChunk = 1 << 20;

// A regular file opened O_RDWR, and with a DirectIo mode other than kOff a
// second time O_RDWR|O_DIRECT: aligned writes (and with kAll aligned reads)
// take the direct descriptor, everything else the buffered one. The kernel
// keeps the two coherent (a direct write writes back and invalidates cached
// pages of its range); the engine never has a buffered and a direct write
// of one block in flight at once. Owns both fds. Its size is fixed at open.
// Thread-safety: all methods may be called concurrently (pread/pwrite).
class FileMedia : public Media {
 public:
  // direct_sectors: the direct descriptor takes 512-byte aligned I/O
  // (statx's DIO alignment).
  FileMedia(int fd, int direct_fd, DirectIo direct, bool direct_sectors, std::string path, uint64_t size)
      : fd_(fd),
        direct_fd_(direct_fd),
        direct_reads_(direct_fd >= 0 && direct == DirectIo::kAll),
        direct_sectors_(direct_fd >= 0 && direct_sectors),
        path_(std::move(path)),
        what_(direct_fd < 0 ? "file " + path_
                            : absl::StrCat("file ", path_, " (direct ",
                                           direct_reads_ ? "reads and writes)" : "writes)")),
        size_(size) {}
  ~FileMedia() override {
    CloseFd(fd_);
    if (direct_fd_ >= 0) CloseFd(direct_fd_);
  }
  FileMedia(const FileMedia&) = delete;
  FileMedia& operator=(const FileMedia&) = delete;

  uint64_t size() const override { return size_; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    if (auto s = CheckRange(what_, offset, out.size(), size_); !s.ok())
      return s;
    const bool direct = direct_reads_ && Aligned(offset, out.size(), out.data());
    return PreadAll(direct ? direct_fd_ : fd_, out, offset, what_);
  }

  absl::Status Write(uint64_t offset,
                     std::span<const std::byte> data) override {
    if (auto s = CheckRange(what_, offset, data.size(), size_); !s.ok())
      return s;
    const bool direct = direct_fd_ >= 0 && (Aligned(offset, data.size(), data.data()) ||
                                            (direct_sectors_ && SectorAligned(offset, data.size(), data.data())));
    return PwriteAll(direct ? direct_fd_ : fd_, data, offset, what_);
  }
  // Buffered: the page cache takes a sector into its cached page. Direct:
  // only if the file system takes 512-byte direct writes (else a sector
  // write would read its block back into the page cache).
  bool writes_sectors() const override { return direct_fd_ < 0 || direct_sectors_; }
  bool writes_lone_sectors() const override { return direct_fd_ >= 0 && direct_sectors_; }

  absl::Status WriteGather(uint64_t offset,
                           std::span<const std::span<const std::byte>> pieces) override {
    size_t total = 0;
    bool direct = direct_fd_ >= 0 && offset % kDirectAlign == 0;
    for (const auto& p : pieces) {
      total += p.size();
      direct = direct && Aligned(0, p.size(), p.data());
    }
    if (auto s = CheckRange(what_, offset, total, size_); !s.ok()) return s;
    return PwritevAll(direct ? direct_fd_ : fd_, pieces, offset, what_);
  }
  bool gathers_writes() const override { return true; }
  // Direct writes go to the device together (AioWriter); buffered ones
  // are copies into the page cache, one after the other.
  absl::Status WriteEach(std::span<const WriteAt> writes) override {
    bool direct = direct_fd_ >= 0 && writes.size() > 1;
    for (const WriteAt& w : writes) {
      size_t total = 0;
      for (const auto& p : w.pieces) {
        total += p.size();
        direct = direct && (Aligned(0, p.size(), p.data()) ||
                            (direct_sectors_ && SectorAligned(0, p.size(), p.data())));
      }
      direct = direct && (w.offset % kDirectAlign == 0 || (direct_sectors_ && w.offset % kSectorAlign == 0));
      if (auto s = CheckRange(what_, w.offset, total, size_); !s.ok()) return s;
    }
    if (!direct) return Media::WriteEach(writes);
    return aio_.WriteEach(direct_fd_, writes, what_);
  }
  bool discard_zeroes() const override { return true; }  // punched holes (or zeros written)

  absl::Status Sync() override {
    // One inode: fdatasync on either descriptor writes back the buffered
    // writes, commits allocations and flushes the device's cache.
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return ErrnoError("fdatasync", what_, 0, errno);
    }
    return absl::OkStatus();
  }

  absl::Status Discard(uint64_t offset, uint64_t length) override {
    if (auto s = CheckRange(what_, offset, length, size_); !s.ok()) return s;
    if (length == 0) return absl::OkStatus();
    if (punch_supported_.load(std::memory_order_relaxed)) {
      int rc;
      do {
        rc = ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                         off_t(offset), off_t(length));
      } while (rc != 0 && errno == EINTR);
      if (rc == 0) return absl::OkStatus();
      if (errno != EOPNOTSUPP && errno != ENOSYS) {
        return ErrnoError("punch hole in", what_, offset, errno);
      }
      if (punch_supported_.exchange(false)) {
        util::Logger("media")->info(
            "{}: hole punching unsupported, discard writes zeros", what_);
      }
    }
    return WriteZeros(offset, length);
  }

  void Prepare(uint64_t offset, uint64_t length) override {
    if (length == 0 || offset + length > size_ || !prepare_supported_.load(std::memory_order_relaxed))
      return;
    int rc;
    do {
      rc = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, off_t(offset), off_t(length));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) prepare_supported_.store(false);
    // ENOSPC and the like: the writes allocate as they go (and report it).
  }

  void StartWriteback(uint64_t offset, uint64_t length) override {
    // Direct writes left nothing to write back (a stray unaligned one is
    // the next Sync's).
    if (length == 0 || offset + length > size_ || direct_fd_ >= 0) return;
    // Errors are left to the next Sync, which reports them.
    while (::sync_file_range(fd_, off64_t(offset), off64_t(length), SYNC_FILE_RANGE_WRITE) != 0 &&
           errno == EINTR) {
    }
  }

  std::string Describe() const override { return what_; }

 private:
  // O_DIRECT's alignment on every file system and device ftld supports
  // (logical blocks of 512 or 4096 bytes); the engine's I/O is all of it.
  static constexpr uint64_t kDirectAlign = 4096;
  static bool Aligned(uint64_t offset, uint64_t length, const void* p) {
    return offset % kDirectAlign == 0 && length % kDirectAlign == 0 &&
           reinterpret_cast<uintptr_t>(p) % kDirectAlign == 0;
  }
  static constexpr uint64_t kSectorAlign = 512;
  static bool SectorAligned(uint64_t offset, uint64_t length, const void* p) {
    return offset % kSectorAlign == 0 && length % kSectorAlign == 0 &&
           reinterpret_cast<uintptr_t>(p) % kSectorAlign == 0;
  }

  absl::Status WriteZeros(uint64_t offset, uint64_t length) {
    std::vector<std::byte> zeros(std::min<uint64_t>(length, kZeroChunk));
    while (length > 0) {
      size_t n = size_t(std::min<uint64_t>(length, zeros.size()));
      if (auto s = PwriteAll(fd_, std::span(zeros.data(), n), offset, what_);
          !s.ok()) {
        return s;
      }
      offset += n;
      length -= n;
    }
    return absl::OkStatus();
  }

  const int fd_;
  const int direct_fd_;  // -1: every I/O takes fd_
  const bool direct_reads_;
  const bool direct_sectors_;
  const std::string path_;
  const std::string what_;
  const uint64_t size_;
  AioWriter aio_;
  std::atomic<bool> prepare_supported_{true};
  std::atomic<bool> punch_supported_{true};
};

}  // namespace
}  // namespace media

absl::StatusOr<std::shared_ptr<Media>> OpenFileMedia(const std::string& path,
                                                     uint64_t create_size, DirectIo direct) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  bool created = false;
  if (fd < 0 && errno == ENOENT && create_size > 0) {
    // Private: the file holds every volume's data, and NBD has no access
    // control of its own.
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      created = true;
    } else if (errno == EEXIST) {  // lost a race with another creator
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    }
  }
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return absl::NotFoundError(absl::StrCat("no such file: ", path));
    return absl::InternalError(
        absl::StrCat("open ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    media::CloseFd(fd);
    return absl::InternalError(
        absl::StrCat("stat ", path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    media::CloseFd(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  uint64_t size = uint64_t(st.st_size);
  if (created) {
    if (::ftruncate(fd, off_t(create_size)) != 0) {
      int err = errno;
      media::CloseFd(fd);
      ::unlink(path.c_str());
      return absl::InternalError(absl::StrCat("resize ", path, " to ",
                                              create_size,
                                              " bytes: ", std::strerror(err)));
    }
    size = create_size;
    util::Logger("media")->info("created sparse file {} of {} bytes", path,
                                size);
  }
  int direct_fd = -1;
  if (direct != DirectIo::kOff) {
    direct_fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_DIRECT);
    if (direct_fd < 0) {
      // EINVAL: the file system has no O_DIRECT (tmpfs before 6.6).
      util::Logger("media")->info("{}: no direct I/O ({}); writes go through the page cache",
                                  path, std::strerror(errno));
    }
  }
  bool direct_sectors = false;
  if (direct_fd >= 0) {
    struct statx sx {};
    direct_sectors = ::statx(direct_fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
                     (sx.stx_mask & STATX_DIOALIGN) != 0 && sx.stx_dio_offset_align > 0 &&
                     sx.stx_dio_offset_align <= 512 && sx.stx_dio_mem_align <= 512;
  }
  return std::make_shared<media::FileMedia>(fd, direct_fd, direct, direct_sectors, path, size);
}

}  // namespace ftl
