// OpenMedia: picks the file or block-device implementation by stat(2).

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ftl/media.h"

namespace ftl {

absl::Status Media::WriteGather(uint64_t offset,
                                std::span<const std::span<const std::byte>> pieces) {
  size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  std::vector<std::byte> joined(total);
  size_t at = 0;
  for (const auto& p : pieces) {
    if (!p.empty()) std::memcpy(joined.data() + at, p.data(), p.size());
    at += p.size();
  }
  return Write(offset, joined);
}

absl::Status Media::WriteEach(std::span<const WriteAt> writes) {
  for (const WriteAt& w : writes)
    if (absl::Status s = WriteGather(w.offset, w.pieces); !s.ok()) return s;
  return absl::OkStatus();
}

const char* DirectIoName(DirectIo d) {
  switch (d) {
    case DirectIo::kOff: return "off";
    case DirectIo::kWrites: return "writes";
    case DirectIo::kAll: return "on";
  }
  return "?";
}

bool ParseDirectIo(std::string_view name, DirectIo* out) {
  for (DirectIo d : {DirectIo::kOff, DirectIo::kWrites, DirectIo::kAll}) {
    if (name == DirectIoName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::shared_ptr<Media>> OpenMedia(const std::string& path,
                                                 uint64_t create_size, DirectIo direct) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) {
      if (create_size > 0) return OpenFileMedia(path, create_size, direct);
      return absl::NotFoundError(absl::StrCat("no such file: ", path));
    }
    return absl::InternalError(
        absl::StrCat("stat ", path, ": ", std::strerror(err)));
  }
  if (S_ISBLK(st.st_mode)) return OpenBlockDeviceMedia(path);
  if (S_ISREG(st.st_mode)) return OpenFileMedia(path, create_size, direct);
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not a regular file or block device"));
}

}  // namespace ftl
