#include "metrics/metrics_server.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "ftl/log.h"
#include "nbd/accept_backoff.h"

namespace ftl::metrics {
namespace {

using boost::system::error_code;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Error";
}

std::string ErrorBody(int status) {
  switch (status) {
    case 404: return "not found: ftld serves only /metrics\n";
    case 405: return "only GET and HEAD of /metrics\n";
    case 431: return absl::StrCat("request head longer than ", kMaxRequestHead, " bytes\n");
    case 503: return absl::StrCat("more than ", kMaxClients, " scrapes at once\n");
  }
  return absl::StrCat(status, " ", Reason(status), "\n");
}

using Socket = asio::ip::tcp::socket;

// Takes one off a count of exchanges under way when the exchange ends.
struct Counted {
  std::atomic<int>* n;
  ~Counted() { n->fetch_sub(1); }
};

// Bounds a whole exchange: `timeout` from now the socket closes (the
// pending read or write fails) unless the timer is cancelled first.
void CloseAfter(asio::steady_timer& deadline, std::shared_ptr<Socket> socket,
                std::chrono::steady_clock::duration timeout) {
  deadline.expires_after(timeout);
  deadline.async_wait([socket](error_code ec) {
    if (!ec) socket->close(ec);
  });
}

// Reads a request head (up to kMaxRequestHead bytes); returns its length.
asio::awaitable<size_t> ReadHead(Socket& socket, std::string& head, error_code& ec) {
  co_return co_await asio::async_read_until(socket, asio::dynamic_buffer(head, kMaxRequestHead),
                                            "\r\n\r\n",
                                            asio::redirect_error(asio::use_awaitable, ec));
}

// Sends `response` and closes in order (the peer reads it before the FIN).
asio::awaitable<void> Answer(Socket& socket, std::string response) {
  error_code ec;
  co_await asio::async_write(socket, asio::buffer(response),
                             asio::redirect_error(asio::use_awaitable, ec));
  socket.shutdown(asio::socket_base::shutdown_both, ec);
  socket.close(ec);
}

}  // namespace

HttpRequest ParseRequestHead(std::string_view head) {
  HttpRequest r;
  std::string_view line = head.substr(0, head.find("\r\n"));
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t sp = line.find(' ', start);
    parts.push_back(line.substr(start, sp == std::string_view::npos ? sp : sp - start));
    if (sp == std::string_view::npos) break;
    start = sp + 1;
  }
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty()) {
    r.status = 400;
    return r;
  }
  if (!parts[2].starts_with("HTTP/1.")) {
    r.status = parts[2].starts_with("HTTP/") ? 505 : 400;
    return r;
  }
  std::string_view method = parts[0];
  std::string_view path = parts[1].substr(0, parts[1].find('?'));
  r.head_only = method == "HEAD";
  if (method != "GET" && method != "HEAD") {
    r.status = 405;
  } else if (path != "/metrics") {
    r.status = 404;
  }
  return r;
}

std::string Response(int status, std::string_view body, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ",
                                 status == 200 ? kContentType : "text/plain; charset=utf-8",
                                 "\r\nContent-Length: ", body.size(), "\r\n");
  if (status == 405) out += "Allow: GET, HEAD\r\n";
  out += "Connection: close\r\n\r\n";
  if (!head_only) out.append(body);
  return out;
}

MetricsServer::MetricsServer(asio::io_context& io, asio::any_io_executor render_on,
                             std::function<std::string()> render)
    : io_(io), state_(std::make_shared<State>()) {
  state_->render = std::move(render);
  state_->render_on = std::move(render_on);
  state_->log = Logger("metrics");
}

MetricsServer::~MetricsServer() = default;

absl::Status MetricsServer::Listen(const std::string& address, uint16_t port) {
  error_code ec;
  auto addr = asio::ip::make_address(address, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--metrics: bad address '", address, "'"));
  asio::ip::tcp::endpoint ep(addr, port);
  std::string where = addr.is_v6() ? absl::StrCat("[", address, "]:", port)
                                   : absl::StrCat(address, ":", port);
  acceptor_.emplace(io_);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("metrics ", where, ": ", ec.message()));
  address_ = address;
  port_ = acceptor_->local_endpoint().port();
  return absl::OkStatus();
}

void MetricsServer::Start() {
  std::string host = asio::ip::make_address(address_).is_v6() ? absl::StrCat("[", address_, "]")
                                                               : address_;
  state_->log->info("metrics on http://{}:{}/metrics", host, port_);
  asio::co_spawn(io_, AcceptLoop(), asio::detached);
}

void MetricsServer::Stop() {
  asio::post(io_, [this] {
    error_code ec;
    if (acceptor_) acceptor_->close(ec);
  });
}

asio::awaitable<void> MetricsServer::AcceptLoop() {
  nbd::AcceptBackoff backoff(state_->log, absl::StrCat("metrics listener :", port_));
  for (;;) {
    auto socket = std::make_shared<asio::ip::tcp::socket>(asio::make_strand(io_));
    error_code ec;
    co_await acceptor_->async_accept(*socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
    if (ec) {
      co_await backoff.Failed(ec);
      if (!acceptor_->is_open()) co_return;
      continue;
    }
    backoff.Succeeded();
    if (state_->active.fetch_add(1) >= kMaxClients) {
      state_->active.fetch_sub(1);
      // Too many at once: 503 (Reject), or a plain close while as many
      // are being refused already.
      if (state_->rejecting.fetch_add(1) >= kMaxRejecting) {
        state_->rejecting.fetch_sub(1);
        socket->close(ec);
        continue;
      }
      auto rex = socket->get_executor();
      asio::co_spawn(rex, Reject(state_, std::move(socket)), asio::detached);
      continue;
    }
    auto ex = socket->get_executor();
    asio::co_spawn(ex, Session(state_, std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> MetricsServer::Session(std::shared_ptr<State> state,
                                             std::shared_ptr<asio::ip::tcp::socket> socket) {
  Counted counted{&state->active};
  auto ex = socket->get_executor();
  asio::steady_timer deadline(ex);
  CloseAfter(deadline, socket, kTimeout);
  error_code ec;
  std::string head;
  size_t n = co_await ReadHead(*socket, head, ec);
  int status = 0;
  bool head_only = false;
  if (ec == asio::error::not_found) {
    status = 431;
  } else if (ec) {
    deadline.cancel();
    co_return;  // closed, reset or timed out before a whole head arrived
  } else {
    HttpRequest r = ParseRequestHead(std::string_view(head).substr(0, n));
    status = r.status;
    head_only = r.head_only;
  }

  std::string body;
  if (status == 200) {
    // Rendered on the worker pool; this strand waits on a timer that the
    // worker cancels when done.
    asio::steady_timer done(ex, asio::steady_timer::time_point::max());
    asio::post(state->render_on, [&body, &done, state, ex] {
      try {
        body = state->render();
      } catch (const std::exception& e) {
        body = absl::StrCat("# rendering failed: ", e.what(), "\n");
      }
      asio::post(ex, [&done] { done.cancel(); });
    });
    error_code wait_ec;
    co_await done.async_wait(asio::redirect_error(asio::use_awaitable, wait_ec));
    state->served.fetch_add(1, std::memory_order_relaxed);
  } else {
    body = ErrorBody(status);
    state->log->debug("metrics request answered {}", status);
  }
  co_await Answer(*socket, Response(status, body, head_only));
  deadline.cancel();
}

asio::awaitable<void> MetricsServer::Reject(std::shared_ptr<State> state,
                                            std::shared_ptr<asio::ip::tcp::socket> socket) {
  Counted counted{&state->rejecting};
  asio::steady_timer deadline(socket->get_executor());
  CloseAfter(deadline, socket, kRejectTimeout);
  error_code ec;
  std::string head;
  co_await ReadHead(*socket, head, ec);
  if (socket->is_open()) co_await Answer(*socket, Response(503, ErrorBody(503), false));
  deadline.cancel();
  state->log->debug("metrics request answered 503");
}

}  // namespace ftl::metrics
