#include "resp/server.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "ftl/log.h"

namespace ftl::resp {
namespace {

using boost::system::error_code;

std::string PeerName(const Socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  if (ep.protocol().family() == AF_UNIX) return "unix";
  asio::ip::tcp::endpoint tcp;
  if (ep.size() <= tcp.capacity()) {
    std::memcpy(tcp.data(), ep.data(), ep.size());
    tcp.resize(ep.size());
    return absl::StrCat(tcp.address().to_string(), ":", tcp.port());
  }
  return "?";
}

// True if something accepts connections on the Unix socket `path`.
bool SomeoneListens(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

Server::Server(asio::io_context& io, asio::any_io_executor workers, registry::KvRegistry* kv,
               ServerOptions options)
    : io_(io),
      workers_(workers),
      options_(std::move(options)),
      log_(Logger("resp")),
      shared_(std::make_shared<Shared>(kv, workers, io.get_executor(),
                                       std::max<uint32_t>(1, options_.databases))),
      timer_(io) {
  CommandEnv& env = shared_->env;
  env.databases = &shared_->databases;
  env.cursors = &shared_->cursors;
  env.counters = &shared_->counters;
  env.fsync = options_.fsync;
  env.read_only = options_.read_only;
  env.unix_path = options_.unix_path;
  env.max_clients = options_.max_clients;
}

Server::~Server() = default;

absl::Status Server::Listen() {
  error_code ec;
  if (!options_.bind.empty()) {
    auto addr = asio::ip::make_address(options_.bind, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("bad --kv-bind address '", options_.bind, "'"));
    asio::ip::tcp::endpoint ep(addr, options_.port);
    std::string where = absl::StrCat(options_.bind, ":", options_.port);
    tcp_.emplace(io_);
    tcp_->open(ep.protocol(), ec);
    if (!ec) tcp_->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) tcp_->bind(ep, ec);
    if (!ec) tcp_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("RESP listener ", where, ": ", ec.message()));
    tcp_port_ = tcp_->local_endpoint().port();
    shared_->env.tcp_port = tcp_port_;
  }
  if (!options_.unix_path.empty()) {
    if (SomeoneListens(options_.unix_path)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "RESP listener ", options_.unix_path, ": another server answers on this socket"));
    }
    ::unlink(options_.unix_path.c_str());
    asio::local::stream_protocol::endpoint ep(options_.unix_path);
    unix_.emplace(io_);
    unix_->open(ep.protocol(), ec);
    if (!ec) unix_->bind(ep, ec);
    if (!ec) unix_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("RESP listener ", options_.unix_path, ": ", ec.message()));
    }
  }
  if (!tcp_ && !unix_) return absl::InvalidArgumentError("RESP: no listener configured");
  return absl::OkStatus();
}

void Server::Start() {
  if (tcp_) {
    log_->info("RESP listening on {}:{} (--kv-fsync {}, {} numbered databases)", options_.bind,
               tcp_port_, FsyncName(options_.fsync), shared_->databases.numbered());
    asio::co_spawn(io_, AcceptLoop(*tcp_, absl::StrCat("RESP listener ", options_.bind, ":", tcp_port_)),
                   asio::detached);
  }
  if (unix_) {
    log_->info("RESP listening on unix:{} (--kv-fsync {})", options_.unix_path,
               FsyncName(options_.fsync));
    asio::co_spawn(io_, AcceptLoop(*unix_, absl::StrCat("RESP listener unix:", options_.unix_path)),
                   asio::detached);
  }
  if (options_.fsync == Fsync::kEverysec) asio::co_spawn(io_, FlushTimer(), asio::detached);
}

asio::awaitable<void> Server::FlushTimer() {
  for (;;) {
    timer_.expires_after(std::chrono::seconds(1));
    error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;  // cancelled: stopping
    for (const std::shared_ptr<Database>& db : shared_->databases.All()) db->RequestFlush();
  }
}

template <typename Acceptor>
asio::awaitable<void> Server::AcceptLoop(Acceptor& acceptor, std::string name) {
  auto delay = std::chrono::milliseconds(10);
  bool failing = false;
  for (;;) {
    Socket socket(asio::make_strand(io_));
    error_code ec;
    co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors or memory: the connection stays queued, so wait
      // (10 ms doubling to 1 s) instead of spinning; log once per episode.
      if (!failing) log_->warn("{}: accept failed: {}; backing off", name, ec.message());
      failing = true;
      asio::steady_timer t(io_, delay);
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      delay = std::min<std::chrono::milliseconds>(delay * 2, std::chrono::seconds(1));
      continue;
    }
    if (failing) log_->info("{}: accepting again", name);
    failing = false;
    delay = std::chrono::milliseconds(10);
    if (shared_->counters.connections_active.load(std::memory_order_relaxed) >=
        options_.max_clients) {
      shared_->counters.rejected_connections.fetch_add(1, std::memory_order_relaxed);
      static constexpr char kFull[] = "-ERR max number of clients reached\r\n";
      socket.send(asio::buffer(kFull, sizeof kFull - 1), 0, ec);
      socket.close(ec);
      continue;
    }
    std::shared_ptr<Connection> c;
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) continue;
      uint64_t id = next_id_++;
      std::string peer = PeerName(socket);
      auto db0 = shared_->databases.Resolve("0");
      ConnectionEnv env{.owner = shared_,
                        .commands = &shared_->env,
                        .workers = workers_,
                        .log = log_,
                        .initial_db = db0.ok() ? *db0 : nullptr};
      c = std::make_shared<Connection>(std::move(socket), id, std::move(peer), std::move(env));
      connections_[id] = c;
    }
    asio::co_spawn(c->executor(), RunConnection(this, c), asio::detached);
  }
}

asio::awaitable<void> Server::RunConnection(Server* server, std::shared_ptr<Connection> c) {
  co_await c->Run();
  absl::MutexLock lock(&server->mu_);
  server->connections_.erase(c->id());
}

void Server::Stop() {
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
    timer_.cancel();
  });
  if (unix_) ::unlink(options_.unix_path.c_str());
  if (!live.empty()) log_->info("closing {} RESP client(s)", live.size());
  for (auto& c : live) c->Stop();
}

}  // namespace ftl::resp
