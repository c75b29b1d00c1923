#pragma once
// AioWriter: submits several writes to one file descriptor at once with
// Linux native AIO (io_submit; raw syscalls, no libaio) and waits for all
// of them. For O_DIRECT descriptors, where the kernel runs them
// concurrently: Media::WriteEach of file and block-device media (a log
// record's data and its sector header, log/log_format.h "Sector chains").
// A write the kernel completes short, or an AIO setup or submit failure,
// is finished or redone with pwritev: the result is always every write
// done in full, or an error.
// Owns its AIO context (created on first use, destroyed with the object).
// Thread safety: WriteEach may be called from any thread; calls are
// serialized by an internal mutex (the context's completions must not be
// reaped by another caller).

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ftl/media.h"

namespace ftl::media {

class AioWriter {
 public:
  AioWriter() = default;
  ~AioWriter();
  AioWriter(const AioWriter&) = delete;
  AioWriter& operator=(const AioWriter&) = delete;

  // Writes each of `writes` to `fd` (at most kMaxWrites at once, each of at
  // most kMaxPieces pieces; more fall back to one pwritev each). `what`
  // names the media in errors.
  absl::Status WriteEach(int fd, std::span<const Media::WriteAt> writes, const std::string& what);

  static constexpr size_t kMaxWrites = 8;
  static constexpr size_t kMaxPieces = 256;

 private:
  absl::Mutex mu_;
  unsigned long ctx_ ABSL_GUARDED_BY(mu_) = 0;  // aio_context_t; 0: none yet
  bool broken_ ABSL_GUARDED_BY(mu_) = false;    // io_setup failed: pwritev only
  std::vector<struct iovec> iov_ ABSL_GUARDED_BY(mu_);  // reused from call to call
};

}  // namespace ftl::media
