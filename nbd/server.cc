#include "nbd/server.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "ftl/log.h"
#include "nbd/accept_backoff.h"

namespace ftl::nbd {
namespace {

using boost::system::error_code;

std::string PeerName(const Socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  if (ep.protocol().family() == AF_UNIX) return "unix";
  // Re-read as TCP to print it.
  asio::ip::tcp::endpoint tcp;
  if (ep.size() <= tcp.capacity()) {
    std::memcpy(tcp.data(), ep.data(), ep.size());
    tcp.resize(ep.size());
    return absl::StrCat(tcp.address().to_string(), ":", tcp.port());
  }
  return "?";
}

}  // namespace

Server::Server(const ExportTable* exports, ServerOptions options)
    : exports_(exports),
      options_(std::move(options)),
      log_(Logger("nbd")),
      workers_(size_t(std::max(1, options_.worker_threads))) {}

Server::~Server() {
  if (!joined_) {
    Shutdown(std::chrono::seconds(5));
    Join();
  }
}

absl::Status Server::Listen() {
  if (options_.tls_mode != TlsMode::kOff && !options_.tls) {
    return absl::InvalidArgumentError("TLS is on but no credentials were loaded");
  }
  error_code ec;
  if (!options_.bind.empty()) {
    auto addr = asio::ip::make_address(options_.bind, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("bad bind address '", options_.bind, "'"));
    asio::ip::tcp::endpoint ep(addr, options_.port);
    std::string where = absl::StrCat(options_.bind, ":", options_.port);
    tcp_.emplace(io_);
    tcp_->open(ep.protocol(), ec);
    if (!ec) tcp_->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) tcp_->bind(ep, ec);
    if (!ec) tcp_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(absl::StrCat(where, ": ", ec.message()));
    tcp_port_ = tcp_->local_endpoint().port();
  }
  if (!options_.unix_path.empty()) {
    ::unlink(options_.unix_path.c_str());
    asio::local::stream_protocol::endpoint ep(options_.unix_path);
    unix_.emplace(io_);
    unix_->open(ep.protocol(), ec);
    if (!ec) unix_->bind(ep, ec);
    if (!ec) unix_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(absl::StrCat(options_.unix_path, ": ", ec.message()));
  }
  if (!tcp_ && !unix_) return absl::InvalidArgumentError("no listener configured");
  return absl::OkStatus();
}

void Server::Start() {
  work_.emplace(io_.get_executor());
  if (tcp_) {
    log_->info("NBD listening on {}:{}", options_.bind, tcp_port_);
    asio::co_spawn(io_,
                   AcceptLoop(*tcp_, absl::StrCat("NBD listener ", options_.bind, ":", tcp_port_)),
                   asio::detached);
  }
  if (unix_) {
    log_->info("NBD listening on unix:{}", options_.unix_path);
    asio::co_spawn(io_, AcceptLoop(*unix_, absl::StrCat("NBD listener unix:", options_.unix_path)),
                   asio::detached);
  }
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
    threads_.emplace_back([this] { io_.run(); });
  }
}

template <typename Acceptor>
asio::awaitable<void> Server::AcceptLoop(Acceptor& acceptor, std::string name) {
  AcceptBackoff backoff(log_, std::move(name));
  for (;;) {
    Socket socket(asio::make_strand(io_));
    error_code ec;
    co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors or memory: wait, and log once per episode.
      co_await backoff.Failed(ec);
      continue;
    }
    backoff.Succeeded();
    std::shared_ptr<Connection> c;
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) continue;
      uint64_t id = next_id_++;
      std::string peer = PeerName(socket);
      ConnectionEnv env{.exports = exports_,
                        .workers = workers_.get_executor(),
                        .counters = &counters_,
                        .log = log_,
                        .handshake_timeout = options_.handshake_timeout,
                        .tls_mode = options_.tls_mode,
                        .tls = options_.tls.get(),
                        .receive_poll = options_.receive_poll,
                        .poll_connections = uint64_t(std::max(1, options_.io_threads))};
      c = std::make_shared<Connection>(std::move(socket), id, std::move(peer), std::move(env));
      connections_[id] = c;
    }
    uint64_t id = c->Info().id;
    asio::co_spawn(c->executor(), RunConnection(this, c, id), asio::detached);
  }
}

asio::awaitable<void> Server::RunConnection(Server* server, std::shared_ptr<Connection> c,
                                            uint64_t id) {
  co_await c->Run();
  server->Unregister(id);
}

void Server::Unregister(uint64_t id) {
  absl::MutexLock lock(&mu_);
  connections_.erase(id);
}

size_t Server::Shutdown(std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<Connection>> live;
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    for (auto& [id, weak] : connections_) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  asio::post(io_, [this] {
    error_code ec;
    if (tcp_) tcp_->close(ec);
    if (unix_) unix_->close(ec);
  });
  // Unlinked here, not in the posted close: Join may stop the io_context
  // before that runs.
  if (unix_) ::unlink(options_.unix_path.c_str());
  if (!live.empty()) log_->info("waiting for {} client(s) to finish", live.size());
  for (auto& c : live) c->Stop();
  live.clear();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!connections_.empty() && std::chrono::steady_clock::now() < deadline) {
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::map<uint64_t, std::weak_ptr<Connection>>* m) {
                               return m->empty();
                             },
                             &connections_),
                         absl::Milliseconds(50));
  }
  return connections_.size();
}

void Server::Join() {
  if (joined_) return;
  joined_ = true;
  work_.reset();
  io_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  workers_.join();
}

std::vector<ConnectionInfo> Server::Connections() const {
  std::vector<std::shared_ptr<Connection>> live;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, weak] : connections_) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  std::vector<ConnectionInfo> out;
  for (auto& c : live) out.push_back(c->Info());
  return out;
}

}  // namespace ftl::nbd
