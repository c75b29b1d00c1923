#pragma once
// MetricsServer: the HTTP endpoint of `ftld --metrics ADDR:PORT`. A tiny
// HTTP/1.1 responder on the NBD server's io_context (no thread of its own):
// `GET /metrics` (or HEAD) answers 200 with the Prometheus text format
// (metrics/collector.h), anything else a short error, and every response
// closes the connection (`Connection: close`; Prometheus and curl expect
// nothing more). The body is rendered on the worker pool, never on an io
// thread (a scrape walks the snapshots' exclusive nodes).
//
// Limits (docs/decisions.md, "Issue 24: activation and metrics"): a request
// head (request line and headers) of at most kMaxRequestHead bytes (else
// 431); a whole exchange within kTimeout from accept (else the socket is
// closed); at most kMaxClients exchanges at a time (more get 503 at once),
// so a client can make the daemon hold at most kMaxClients heads plus the
// bodies being sent.
//
// Thread-safety: Listen/Start/Stop from the daemon's main thread; sessions
// run on strands of the io_context. Lifetime: the object must outlive
// Stop() and the io_context's run (sessions share only `state_`, which they
// keep alive themselves).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "nbd/asio.h"

namespace ftl::metrics {

namespace asio = boost::asio;

inline constexpr size_t kMaxRequestHead = 8192;
inline constexpr std::chrono::seconds kTimeout{10};
inline constexpr int kMaxClients = 16;
// Clients being answered 503 at a time (more are closed at once), and how
// long one may take to send its head.
inline constexpr int kMaxRejecting = 16;
inline constexpr std::chrono::seconds kRejectTimeout{1};
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

class MetricsServer {
 public:
  // `render` makes the /metrics body; it runs on `render_on`.
  MetricsServer(asio::io_context& io, asio::any_io_executor render_on,
                std::function<std::string()> render);
  ~MetricsServer();

  // Binds ADDRESS:PORT (port 0: a free one, see port()). Errors name it.
  absl::Status Listen(const std::string& address, uint16_t port);
  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }
  void Start();
  // Closes the listener; exchanges under way finish or time out.
  void Stop();

 private:
  struct State {
    std::function<std::string()> render;
    asio::any_io_executor render_on;
    std::shared_ptr<spdlog::logger> log;
    std::atomic<int> active{0};
    std::atomic<int> rejecting{0};  // 503 exchanges under way (Reject)
    std::atomic<uint64_t> served{0};
  };
  asio::awaitable<void> AcceptLoop();
  static asio::awaitable<void> Session(std::shared_ptr<State> state,
                                       std::shared_ptr<asio::ip::tcp::socket> socket);
  // A client beyond kMaxClients: its head is read (within kRejectTimeout),
  // then 503 and an orderly close, so the reply is not lost to a reset
  // that closing with the request unread would send.
  static asio::awaitable<void> Reject(std::shared_ptr<State> state,
                                      std::shared_ptr<asio::ip::tcp::socket> socket);

  asio::io_context& io_;
  std::shared_ptr<State> state_;
  std::optional<asio::ip::tcp::acceptor> acceptor_;
  std::string address_;
  uint16_t port_ = 0;
};

// What a request head (request line and headers, up to the blank line)
// asks for: status 200 for GET or HEAD of /metrics (a query string is
// ignored); 400 for a malformed request line, 505 for a version other than
// HTTP/1.x, 405 for another method, 404 for another path.
struct HttpRequest {
  int status = 200;
  bool head_only = false;  // HEAD: headers without the body
};
HttpRequest ParseRequestHead(std::string_view head);
// A whole response: status line, Content-Type (kContentType for 200,
// text/plain otherwise), Content-Length, Connection: close, and `body`
// unless head_only.
std::string Response(int status, std::string_view body, bool head_only);

}  // namespace ftl::metrics
