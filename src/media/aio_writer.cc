#include "media/aio_writer.h"

#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <vector>

#include "media/io_util.h"

namespace ftl::media {

AioWriter::~AioWriter() {
  absl::MutexLock l(&mu_);
  if (ctx_ != 0) ::syscall(SYS_io_destroy, aio_context_t(ctx_));
}

absl::Status AioWriter::WriteEach(int fd, std::span<const Media::WriteAt> writes, const std::string& what) {
  auto one_by_one = [&] {
    for (size_t i = 0; i < writes.size(); ++i)
      if (absl::Status s = PwritevAll(fd, writes[i].pieces, writes[i].offset, what); !s.ok()) return s;
    return absl::OkStatus();
  };
  bool fits = writes.size() > 1 && writes.size() <= kMaxWrites;
  for (const auto& w : writes) fits = fits && !w.pieces.empty() && w.pieces.size() <= kMaxPieces;
  absl::MutexLock l(&mu_);
  if (!fits || broken_) return one_by_one();
  if (ctx_ == 0) {
    aio_context_t ctx = 0;
    if (::syscall(SYS_io_setup, unsigned(kMaxWrites), &ctx) != 0) {
      broken_ = true;  // e.g. aio-max-nr reached: plain writes from now on
      return one_by_one();
    }
    ctx_ = ctx;
  }
  // The iovecs of all writes in one reused buffer (no allocation once it
  // has grown); filled first, so that the pointers into it stay valid.
  iov_.clear();
  std::array<size_t, kMaxWrites> first{};
  std::array<struct iocb, kMaxWrites> cbs{};
  std::array<struct iocb*, kMaxWrites> ptrs{};
  std::array<uint64_t, kMaxWrites> want{};
  for (size_t i = 0; i < writes.size(); ++i) {
    first[i] = iov_.size();
    want[i] = 0;
    for (const auto& p : writes[i].pieces) {
      iov_.push_back({const_cast<std::byte*>(p.data()), p.size()});
      want[i] += p.size();
    }
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    cbs[i].aio_fildes = uint32_t(fd);
    cbs[i].aio_lio_opcode = IOCB_CMD_PWRITEV;
    cbs[i].aio_buf = uint64_t(reinterpret_cast<uintptr_t>(iov_.data() + first[i]));
    cbs[i].aio_nbytes = writes[i].pieces.size();
    cbs[i].aio_offset = int64_t(writes[i].offset);
    cbs[i].aio_data = i;
    ptrs[i] = &cbs[i];
  }
  long submitted;
  do {
    submitted = ::syscall(SYS_io_submit, aio_context_t(ctx_), long(writes.size()), ptrs.data());
  } while (submitted < 0 && errno == EINTR);
  if (submitted <= 0) return one_by_one();  // nothing in flight
  std::array<struct io_event, kMaxWrites> events{};
  long done = 0;
  // Written in full; the rest (short, failed, not submitted) once more
  // with pwritev, which reports the error if there is one.
  std::array<bool, kMaxWrites> full{};
  while (done < submitted) {
    long n = ::syscall(SYS_io_getevents, aio_context_t(ctx_), submitted - done, submitted - done,
                       events.data() + done, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The writes may still be in flight and their buffers must outlive
      // them: fail (the pool turns read-only) rather than return.
      broken_ = true;
      return ErrnoError("io_getevents", what, writes[0].offset, errno);
    }
    done += n;
  }
  for (long k = 0; k < done; ++k) {
    const uint64_t i = events[size_t(k)].data;
    if (i < writes.size() && events[size_t(k)].res == int64_t(want[i])) full[i] = true;
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    if (!full[i])
      if (absl::Status s = PwritevAll(fd, writes[i].pieces, writes[i].offset, what); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ftl::media
