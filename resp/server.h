#pragma once
// Server: the Redis-protocol listener of ftld (issue 23; README, "Redis
// protocol"). Accepts clients on TCP and/or a Unix socket and runs one
// Connection per client on the io_context and worker pool it is given
// (the NBD server's: nbd/server.h owns both, and the daemon hands them
// over, so NBD, control and RESP share the same threads). Owns the table
// of databases (databases.h), the SCAN cursors, the counters and, with
// --kv-fsync everysec, the one-second flush timer. The key-value stores
// are the registry's (registry/kv_registry.h), shared with the control
// socket.
//
// Thread safety: Listen/Start/Stop from one thread (the daemon's main
// thread), before the io_context stops; counters() from any thread.
// Lifetime: destroy it before the io_context (it owns listeners and a
// timer on it); connections keep the state they use alive themselves.
// Connections live on their strands; the connection map has its own lock.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "registry/kv_registry.h"
#include "resp/asio.h"
#include "resp/commands.h"
#include "resp/connection.h"
#include "resp/cursors.h"
#include "resp/databases.h"

namespace ftl::resp {

struct ServerOptions {
  // TCP listener; none when bind is empty.
  std::string bind = "127.0.0.1";
  uint16_t port = 6379;  // 0: any free port (see tcp_port())
  // Unix socket listener; none when empty.
  std::string unix_path;
  Fsync fsync = Fsync::kAlways;
  uint32_t databases = 16;   // SELECT 0 .. databases-1
  bool read_only = false;    // ftld --read-only
  uint32_t max_clients = 10000;
};

class Server {
 public:
  Server(asio::io_context& io, asio::any_io_executor workers, registry::KvRegistry* kv,
         ServerOptions options);
  ~Server();

  // Binds the listeners; errors name the address.
  absl::Status Listen();
  uint16_t tcp_port() const { return tcp_port_; }
  // Starts accepting (and the everysec timer).
  void Start();
  // Stops accepting and closes every client: a batch being run finishes
  // (its writes are applied, and flushed by the stores' close), its
  // replies are dropped. Call before the io_context stops.
  void Stop();

  const ServerCounters& counters() const { return shared_->counters; }

 private:
  // What connections use: shared with them, so that a connection whose
  // coroutine outlives the Server (until the io_context goes) still finds it.
  struct Shared {
    Shared(registry::KvRegistry* kv, asio::any_io_executor workers, asio::any_io_executor io,
           uint32_t numbered)
        : databases(kv, std::move(workers), std::move(io), numbered) {}
    ServerCounters counters;
    CursorTable cursors;
    Databases databases;
    CommandEnv env;
  };

  template <typename Acceptor>
  asio::awaitable<void> AcceptLoop(Acceptor& acceptor, std::string name);
  asio::awaitable<void> FlushTimer();
  static asio::awaitable<void> RunConnection(Server* server, std::shared_ptr<Connection> c);

  asio::io_context& io_;
  asio::any_io_executor workers_;
  ServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<Shared> shared_;
  std::optional<asio::ip::tcp::acceptor> tcp_;
  std::optional<asio::local::stream_protocol::acceptor> unix_;
  asio::steady_timer timer_;
  uint16_t tcp_port_ = 0;

  absl::Mutex mu_;
  std::map<uint64_t, std::weak_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace ftl::resp
