#include "nbd/server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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

// "ADDR:PORT" or "unix:PATH" of a socket's own address (getsockname).
std::string LocalName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  if (ss.ss_family == AF_UNIX) {
    const auto* un = reinterpret_cast<const sockaddr_un*>(&ss);
    size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    std::string path(un->sun_path, strnlen(un->sun_path, n));
    return path.empty() ? "unix:(unnamed)" : absl::StrCat("unix:", path);
  }
  if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
    asio::ip::tcp::endpoint ep;
    std::memcpy(ep.data(), &ss, std::min<size_t>(len, ep.capacity()));
    ep.resize(std::min<size_t>(len, ep.capacity()));
    return absl::StrCat(ep.address().to_string(), ":", ep.port());
  }
  return absl::StrCat("family ", ss.ss_family);
}

// OK if fd is a stream socket, listening or connected as `listening` says.
absl::Status CheckStreamSocket(int fd, bool listening, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::InvalidArgumentError(absl::StrCat(what, ": not open"));
  if (!S_ISSOCK(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(what, ": not a socket"));
  int type = 0, accepting = 0;
  socklen_t len = sizeof type;
  ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
  len = sizeof accepting;
  ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len);
  if (type != SOCK_STREAM) return absl::InvalidArgumentError(absl::StrCat(what, ": not a stream socket"));
  if (listening && !accepting) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a listening socket"));
  }
  if (!listening && accepting) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a listening socket, not a connection"));
  }
  return absl::OkStatus();
}

int Family(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return AF_UNSPEC;
  return ss.ss_family;
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
  for (int fd : options_.listen_fds) {
    std::string what = absl::StrCat("inherited fd ", fd);
    if (absl::Status s = CheckStreamSocket(fd, /*listening=*/true, what); !s.ok()) return s;
    auto a = std::make_unique<GenericAcceptor>(io_);
    a->assign(asio::generic::stream_protocol(Family(fd), 0), fd, ec);
    if (ec) return absl::UnavailableError(absl::StrCat(what, ": ", ec.message()));
    adopted_names_.push_back(LocalName(fd));
    adopted_.push_back(std::move(a));
  }
  if (!tcp_ && !unix_ && adopted_.empty())
    return absl::InvalidArgumentError("no listener configured");
  return absl::OkStatus();
}

absl::Status Server::AddClient(int fd, std::function<void()> on_closed) {
  if (absl::Status s = CheckStreamSocket(fd, /*listening=*/false, absl::StrCat("fd ", fd));
      !s.ok())
    return s;
  Socket socket(asio::make_strand(io_));
  error_code ec;
  socket.assign(asio::generic::stream_protocol(Family(fd), 0), fd, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("fd ", fd, ": ", ec.message()));
  std::shared_ptr<Connection> c = Register(std::move(socket));
  if (!c) return absl::UnavailableError("server is shutting down");
  uint64_t id = c->Info().id;
  asio::co_spawn(c->executor(), RunConnection(this, c, id, std::move(on_closed)), asio::detached);
  return absl::OkStatus();
}

std::vector<std::string> Server::ListenerNames() const {
  std::vector<std::string> out;
  if (tcp_) out.push_back(absl::StrCat(options_.bind, ":", tcp_port_));
  if (unix_) out.push_back(absl::StrCat("unix:", options_.unix_path));
  for (const std::string& n : adopted_names_) out.push_back(n);
  return out;
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
  for (size_t i = 0; i < adopted_.size(); ++i) {
    log_->info("NBD listening on {} (inherited)", adopted_names_[i]);
    asio::co_spawn(io_,
                   AcceptLoop(*adopted_[i], absl::StrCat("NBD listener ", adopted_names_[i])),
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
    std::shared_ptr<Connection> c = Register(std::move(socket));
    if (!c) continue;
    uint64_t id = c->Info().id;
    asio::co_spawn(c->executor(), RunConnection(this, c, id, nullptr), asio::detached);
  }
}

std::shared_ptr<Connection> Server::Register(Socket socket) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) return nullptr;
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
                    .poll_connections = uint64_t(std::max(1, options_.io_threads)),
                    .metrics = options_.metrics};
  auto c = std::make_shared<Connection>(std::move(socket), id, std::move(peer), std::move(env));
  connections_[id] = c;
  return c;
}

asio::awaitable<void> Server::RunConnection(Server* server, std::shared_ptr<Connection> c,
                                            uint64_t id, std::function<void()> on_closed) {
  co_await c->Run();
  c.reset();
  server->Unregister(id);
  if (on_closed) on_closed();
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
    for (auto& a : adopted_) a->close(ec);
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
