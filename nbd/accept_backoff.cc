#include "nbd/accept_backoff.h"

#include <cerrno>

namespace ftl::nbd {

AcceptBackoff::AcceptBackoff(std::shared_ptr<spdlog::logger> log, std::string listener)
    : log_(std::move(log)), listener_(std::move(listener)) {}

bool AcceptBackoff::IsTransient(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  switch (ec.value()) {
    // accept(2): "treat them like EAGAIN by retrying", plus a connection
    // the peer gave up on before it was accepted.
    case ECONNABORTED:
    case ECONNRESET:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EINTR:
    case EAGAIN:
      return true;
    default:
      return false;
  }
}

std::chrono::milliseconds AcceptBackoff::Delay(uint32_t n) {
  std::chrono::milliseconds d = kFirstDelay;
  for (uint32_t i = 1; i < n && d < kMaxDelay; ++i) d *= 2;
  return std::min(d, kMaxDelay);
}

std::chrono::milliseconds AcceptBackoff::OnFailure(const boost::system::error_code& ec,
                                                   Clock::time_point now) {
  if (IsTransient(ec)) {
    log_->debug("{}: accept failed: {}; retrying", listener_, ec.message());
    return std::chrono::milliseconds(0);
  }
  if (failures_ == 0) {
    episode_start_ = now;
    log_->warn("{}: accept failed: {}; pausing new connections (retrying at least every {} ms) "
               "until it works again",
               listener_, ec.message(), kMaxDelay.count());
  }
  ++failures_;
  last_failure_ = now;
  return Delay(++consecutive_);
}

asio::awaitable<void> AcceptBackoff::Failed(const boost::system::error_code& ec) {
  std::chrono::milliseconds wait = OnFailure(ec);
  if (wait.count() == 0) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor, wait);
  boost::system::error_code ignored;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
}

void AcceptBackoff::Succeeded(Clock::time_point now) {
  consecutive_ = 0;
  if (failures_ == 0 || now - last_failure_ < kSettle) return;
  double seconds = std::chrono::duration<double>(last_failure_ - episode_start_).count();
  log_->info("{}: accepting again after {} failed accept(s) over {:.1f} s", listener_, failures_,
             seconds);
  failures_ = 0;
}

}  // namespace ftl::nbd
