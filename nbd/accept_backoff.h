#pragma once
// AcceptBackoff: what an accept loop does after accept() fails. Shared by
// the NBD listeners (server.cc) and the control socket (control/control.cc).
//
// Out of file descriptors (EMFILE, ENFILE) or kernel memory (ENOBUFS,
// ENOMEM), the pending connection stays queued and the listener stays
// readable, so an accept retried at once fails again at once: a busy loop,
// and a log line per try. Such a failure starts an *episode*: the loop
// waits before the next accept (kFirstDelay, doubling up to kMaxDelay;
// back to kFirstDelay after any success) and logs one warning. The episode
// ends, with one info line (how many accepts failed, for how long), at the
// first accept that works kSettle or more after the last failure: a daemon
// at its descriptor limit while clients come and go alternates successes
// and failures, and that is one episode, not two lines per connection.
// The errors accept(2) says
// to treat like EAGAIN (the network errors of one pending connection:
// ECONNABORTED, EPROTO, ENETDOWN, ...) are retried at once and logged at
// debug level; every other error backs off like a resource error, so no
// error can make the loop spin.
//
// Usage, in an accept coroutine:
//   AcceptBackoff backoff(log, "NBD listener 127.0.0.1:10809");
//   for (;;) {
//     co_await acceptor.async_accept(socket, redirect_error(use_awaitable, ec));
//     if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
//     if (ec) {
//       co_await backoff.Failed(ec);
//       continue;
//     }
//     backoff.Succeeded();
//     ...
//   }
// Thread-safety: one object per accept loop, used by that coroutine only.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "nbd/asio.h"

namespace ftl::nbd {

class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirstDelay{50};
  static constexpr std::chrono::milliseconds kMaxDelay{1000};
  static constexpr std::chrono::milliseconds kSettle{1000};

  // `listener` names the socket in log lines ("control socket /run/x.sock").
  AcceptBackoff(std::shared_ptr<spdlog::logger> log, std::string listener);

  // After a failed accept (not operation_aborted): OnFailure, then waits
  // that long on the calling coroutine's executor.
  asio::awaitable<void> Failed(const boost::system::error_code& ec);
  // After a successful accept: may end an episode (see above).
  void Succeeded(Clock::time_point now = Clock::now());

  // The decision part of Failed, without waiting: logs as above and
  // returns how long to wait before the next accept (zero: at once).
  std::chrono::milliseconds OnFailure(const boost::system::error_code& ec,
                                      Clock::time_point now = Clock::now());
  // True for the errors of one pending connection (retry at once).
  static bool IsTransient(const boost::system::error_code& ec);
  // The wait after the n-th consecutive failure of an episode (n >= 1).
  static std::chrono::milliseconds Delay(uint32_t n);

  bool in_episode() const { return failures_ > 0; }

 private:
  std::shared_ptr<spdlog::logger> log_;
  std::string listener_;
  uint32_t failures_ = 0;     // failed accepts in the current episode
  uint32_t consecutive_ = 0;  // ... since the last successful one
  Clock::time_point episode_start_;
  Clock::time_point last_failure_;
};

}  // namespace ftl::nbd
