#pragma once
// How ftld gets its sockets when another program starts it, as nbdkit and
// qemu-nbd do (docs/decisions.md, "Issue 24: activation and metrics"):
//
// - systemd socket activation (sd_listen_fds(3)): LISTEN_PID names this
//   process and LISTEN_FDS counts listening sockets passed from fd 3 on
//   (LISTEN_FDNAMES, colon-separated, names them). systemd's ftld.socket
//   and libnbd's nbd_connect_systemd_socket_activation (nbdinfo -- [ ftld
//   ... ]) start ftld this way. ftld accepts NBD clients on all of them.
// - --stdin (inetd mode, libnbd's nbd_connect_command): standard input is
//   one connected client socket; ftld serves it and exits.
//
// Parsing the environment is pure (ParseListenEnv) so it is unit tested;
// TakeInheritedSockets and TakeStdinSocket touch the process (environment,
// descriptors) and are called once, by the daemon's main thread, before any
// other thread starts.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ftl::daemon {

// sd_listen_fds(3): SD_LISTEN_FDS_START.
inline constexpr int kFirstListenFd = 3;
// More inherited sockets than this is a mistake (an fd count from
// somewhere else), refused rather than adopted.
inline constexpr int kMaxListenFds = 64;

struct InheritedSockets {
  std::vector<int> fds;            // kFirstListenFd .. kFirstListenFd + n - 1
  std::vector<std::string> names;  // LISTEN_FDNAMES, or "" each
};

// The sockets the environment passes to process `pid`: none (empty) when
// LISTEN_PID is unset or another process's (the variables were meant for a
// parent); InvalidArgument for a malformed LISTEN_PID or LISTEN_FDS, or
// more than kMaxListenFds. Names beyond LISTEN_FDNAMES's count are "".
absl::StatusOr<InheritedSockets> ParseListenEnv(const char* listen_pid, const char* listen_fds,
                                                const char* listen_fdnames, int64_t pid);

// ParseListenEnv on this process's environment; then unsets LISTEN_PID,
// LISTEN_FDS and LISTEN_FDNAMES (children must not take them for theirs)
// and marks the descriptors close-on-exec.
absl::StatusOr<InheritedSockets> TakeInheritedSockets();

// --stdin: a duplicate (close-on-exec, >= 3) of standard input, which must
// be a connected stream socket (InvalidArgument otherwise: a terminal, a
// pipe or a file). Then points fd 0 at /dev/null and fd 1 at fd 2, so that
// nothing but the NBD connection ever writes to the client's socket.
absl::StatusOr<int> TakeStdinSocket();

}  // namespace ftl::daemon
