#include "daemon/activation.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ftl::daemon {

absl::StatusOr<InheritedSockets> ParseListenEnv(const char* listen_pid, const char* listen_fds,
                                                const char* listen_fdnames, int64_t pid) {
  InheritedSockets out;
  if (listen_pid == nullptr) return out;
  int64_t for_pid = 0;
  if (!absl::SimpleAtoi(listen_pid, &for_pid) || for_pid <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("LISTEN_PID='", listen_pid, "' is not a pid"));
  }
  if (for_pid != pid) return out;
  int n = 0;
  if (listen_fds == nullptr || !absl::SimpleAtoi(listen_fds, &n) || n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LISTEN_FDS='", listen_fds ? listen_fds : "", "' is not a count"));
  }
  if (n > kMaxListenFds) {
    return absl::InvalidArgumentError(
        absl::StrCat("LISTEN_FDS=", n, ": more than ", kMaxListenFds, " inherited sockets"));
  }
  std::vector<std::string> names;
  if (listen_fdnames != nullptr && *listen_fdnames != '\0')
    names = absl::StrSplit(listen_fdnames, ':');
  for (int i = 0; i < n; ++i) {
    out.fds.push_back(kFirstListenFd + i);
    out.names.push_back(size_t(i) < names.size() ? names[i] : "");
  }
  return out;
}

absl::StatusOr<InheritedSockets> TakeInheritedSockets() {
  auto s = ParseListenEnv(std::getenv("LISTEN_PID"), std::getenv("LISTEN_FDS"),
                          std::getenv("LISTEN_FDNAMES"), int64_t(::getpid()));
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (!s.ok()) return s;
  for (int fd : s->fds) {
    int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("LISTEN_FDS: inherited fd ", fd, " is not open"));
    }
    ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return s;
}

absl::StatusOr<int> TakeStdinSocket() {
  struct stat st;
  if (::fstat(0, &st) != 0) return absl::InvalidArgumentError("--stdin: standard input is closed");
  int type = 0;
  socklen_t len = sizeof type;
  if (!S_ISSOCK(st.st_mode) || ::getsockopt(0, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_STREAM) {
    return absl::InvalidArgumentError(
        "--stdin: standard input is not a stream socket (run ftld --stdin from inetd, "
        "systemd Accept=yes, or libnbd's nbd_connect_command, which pass a socket)");
  }
  int fd = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("--stdin: dup: ", std::strerror(errno)));
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::close(null);
  }
  ::dup2(2, 1);  // stray output goes to the log, never into the NBD stream
  return fd;
}

}  // namespace ftl::daemon
