#pragma once
// Helpers shared by the media implementations: range checks, errno -> status
// mapping, and pread/pwrite loops that retry EINTR and short transfers.
// Stateless; safe to call from any thread.

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ftl::media {

// OutOfRange unless [offset, offset+length) lies inside [0, size).
inline absl::Status CheckRange(const std::string& what, uint64_t offset,
                               uint64_t length, uint64_t size) {
  if (offset > size || length > size - offset) {
    return absl::OutOfRangeError(
        absl::StrCat(what, ": range [", offset, ", +", length,
                     ") is outside the media (size ", size, ")"));
  }
  return absl::OkStatus();
}

// EIO (and the kernel's checksum/ECC errors) become DataLoss, anything else
// Internal; the message names the operation, the media and the offset.
inline absl::Status ErrnoError(const char* op, const std::string& what,
                               uint64_t offset, int err) {
  std::string msg = absl::StrCat(op, " ", what, " at offset ", offset, ": ",
                                 std::strerror(err));
  if (err == EIO || err == EBADMSG || err == EUCLEAN)
    return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

// Reads exactly out.size() bytes at `offset`; EOF before that is DataLoss.
inline absl::Status PreadAll(int fd, std::span<std::byte> out, uint64_t offset,
                             const std::string& what) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, off_t(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", what, offset + done, errno);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(
          "read ", what, " at offset ", offset + done, ": unexpected end"));
    }
    done += size_t(n);
  }
  return absl::OkStatus();
}

// Writes all of `data` at `offset`.
inline absl::Status PwriteAll(int fd, std::span<const std::byte> data,
                              uint64_t offset, const std::string& what) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                         off_t(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", what, offset + done, errno);
    }
    if (n == 0) {
      return absl::InternalError(absl::StrCat("write ", what, " at offset ",
                                              offset + done, ": no progress"));
    }
    done += size_t(n);
  }
  return absl::OkStatus();
}

// Writes the pieces back to back from `offset` with pwritev, at most
// kMaxIov pieces a call, resuming after short writes (also inside a piece).
inline absl::Status PwritevAll(int fd, std::span<const std::span<const std::byte>> pieces,
                               uint64_t offset, const std::string& what) {
  constexpr size_t kMaxIov = 512;  // under IOV_MAX (1024 on Linux)
  size_t i = 0, skip = 0;  // next piece, bytes of it already written
  while (i < pieces.size()) {
    struct iovec iov[kMaxIov];
    int n_iov = 0;
    for (size_t k = i; k < pieces.size() && n_iov < int(kMaxIov); ++k) {
      const size_t off = k == i ? skip : 0;
      if (pieces[k].size() == off) continue;
      iov[n_iov].iov_base = const_cast<std::byte*>(pieces[k].data() + off);
      iov[n_iov].iov_len = pieces[k].size() - off;
      ++n_iov;
    }
    if (n_iov == 0) break;
    ssize_t n = ::pwritev(fd, iov, n_iov, off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", what, offset, errno);
    }
    if (n == 0) {
      return absl::InternalError(
          absl::StrCat("write ", what, " at offset ", offset, ": no progress"));
    }
    offset += uint64_t(n);
    size_t left = size_t(n);
    while (i < pieces.size() && left >= pieces[i].size() - skip) {
      left -= pieces[i].size() - skip;
      skip = 0;
      ++i;
    }
    skip += left;
  }
  return absl::OkStatus();
}

// Closes fd, retrying nothing (close(2) must not be retried on Linux).
inline void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace ftl::media
