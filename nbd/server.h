#pragma once
// Server: accepts NBD clients on TCP and/or a Unix socket, and on listening
// sockets it inherited (systemd socket activation), and runs one Connection
// per client; or serves one connected socket it was given (ftld --stdin). Owns the io_context threads (network side) and the
// worker pool that runs blocking Volume calls (docs/architecture.md, "Locks"). The control
// server (control/control.h) shares the io_context and the workers.
// Thread-safety: Listen/Start/Shutdown/Join from one thread (the daemon's
// main thread); Connections/Counters from any thread.

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "nbd/asio.h"
#include "nbd/connection.h"
#include "nbd/exports.h"
#include "nbd/request_metrics.h"

namespace ftl::nbd {

struct ServerOptions {
  // TCP listener; no TCP when bind is empty.
  std::string bind = "127.0.0.1";
  uint16_t port = 10809;  // 0: any free port (see tcp_port())
  // Unix socket listener; none when empty.
  std::string unix_path;
  int io_threads = 2;
  int worker_threads = 4;
  // Idle receive polling (see ConnectionEnv::receive_poll); 0 turns it off.
  std::chrono::microseconds receive_poll{50};
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(30)};
  // TLS (nbd/options.h, TlsMode); credentials required unless kOff.
  TlsMode tls_mode = TlsMode::kOff;
  std::shared_ptr<const TlsCredentials> tls;
  // Listening stream sockets to accept on as well, already bound (systemd
  // socket activation: daemon/activation.h). Listen checks and adopts them;
  // the Server then owns them (closes, never unlinks them).
  std::vector<int> listen_fds;
  // Per-export request counters (ftld --metrics); not owned, may be null.
  RequestMetrics* metrics = nullptr;
};

class Server {
 public:
  Server(const ExportTable* exports, ServerOptions options);
  ~Server();  // Shutdown() and Join() if still running

  // Binds the listeners and adopts listen_fds. Errors name the address
  // ("127.0.0.1:10809: Address already in use", "inherited fd 3: not a
  // listening stream socket").
  absl::Status Listen();
  // Serves one connected stream socket (ftld --stdin), owning `fd` from now
  // on; `on_closed` runs on an io thread when that client is gone. Call
  // before Start. InvalidArgument if fd is no connected stream socket.
  absl::Status AddClient(int fd, std::function<void()> on_closed);
  // "127.0.0.1:10809", "unix:/run/x.sock": every listener, own and adopted.
  std::vector<std::string> ListenerNames() const;
  // The bound TCP port (useful with port 0).
  uint16_t tcp_port() const { return tcp_port_; }
  // Starts accepting and the io threads.
  void Start();
  // Stops accepting and asks every connection to finish its in-flight
  // requests; waits until all closed or `timeout` passed. Returns the number
  // of connections still open.
  size_t Shutdown(std::chrono::milliseconds timeout);
  // Stops the io threads and workers and joins them.
  void Join();

  asio::io_context& io_context() { return io_; }
  asio::thread_pool& workers() { return workers_; }
  std::vector<ConnectionInfo> Connections() const;
  const ServerCounters& counters() const { return counters_; }
  const ServerOptions& options() const { return options_; }

 private:
  // `name` labels the listener in log lines.
  template <typename Acceptor>
  asio::awaitable<void> AcceptLoop(Acceptor& acceptor, std::string name);
  static asio::awaitable<void> RunConnection(Server* server, std::shared_ptr<Connection> c,
                                             uint64_t id, std::function<void()> on_closed);
  // Makes and registers the Connection of an accepted or given socket;
  // null once Shutdown began.
  std::shared_ptr<Connection> Register(Socket socket);
  void Unregister(uint64_t id);

  const ExportTable* exports_;
  ServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  asio::io_context io_;
  asio::thread_pool workers_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::optional<asio::ip::tcp::acceptor> tcp_;
  std::optional<asio::local::stream_protocol::acceptor> unix_;
  using GenericAcceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;
  std::vector<std::unique_ptr<GenericAcceptor>> adopted_;
  std::vector<std::string> adopted_names_;
  uint16_t tcp_port_ = 0;
  std::vector<std::thread> threads_;
  ServerCounters counters_;
  bool joined_ = false;

  mutable absl::Mutex mu_;
  std::map<uint64_t, std::weak_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace ftl::nbd
