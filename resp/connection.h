#pragma once
// Connection: one Redis-protocol client from accept to close.
//
// One coroutine on the socket's strand reads, parses (resp_protocol.h)
// and answers in order, pipelining included: every request already
// received (up to kMaxBatchRequests / kMaxBatchInputBytes) is run as one
// batch on the shared worker pool (commands.h; store calls block) — a
// leading run of quick reads (commands.h, IsQuick) on the strand itself,
// saving two thread hand-offs per request, as NBD does for small reads —, the
// batch's replies wait until what they acknowledge or show is durable
// (--kv-fsync always: Database::WhenDurable, shared with every other
// client: group commit), then leave in one write. A client that sends
// more meanwhile is read after that write.
//
// What a client can make the daemon hold is bounded: the request being
// parsed (resp_protocol.h: kMaxRequestBytes, kMaxInlineBytes), one batch
// of parsed requests, and one batch of replies: a batch stops running
// requests once its replies pass kMaxBatchReplyBytes (one reply is at
// most commands.h's kMaxReplyBytes), and the next batch is read only
// after the replies went out, so a client that never reads its replies
// stalls only itself. Protocol garbage gets "-ERR Protocol error: ..."
// and closes this client alone, with a log line.
//
// Lifetime: owned by shared_ptr; the coroutine holds one.

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "resp/asio.h"
#include "resp/commands.h"

namespace ftl::resp {

inline constexpr size_t kMaxBatchRequests = 1024;
inline constexpr size_t kMaxBatchInputBytes = 1u << 20;
inline constexpr size_t kMaxBatchReplyBytes = 4u << 20;
// Bytes asked of the socket per read (more when a bulk needs more).
inline constexpr size_t kReadChunk = 64u << 10;

// What a connection needs from its server. `owner` keeps what `commands`
// points to alive as long as the connection (a connection's coroutine
// frame may outlive the Server until the io_context is destroyed).
struct ConnectionEnv {
  std::shared_ptr<const void> owner;
  const CommandEnv* commands = nullptr;
  asio::any_io_executor workers;  // store calls run here
  std::shared_ptr<spdlog::logger> log;
  std::shared_ptr<Database> initial_db;  // database 0
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // REQUIRES: `socket`'s executor is a strand.
  Connection(Socket socket, uint64_t id, std::string peer, ConnectionEnv env);
  ~Connection();

  // Runs the client until it closes; co_spawn it on executor().
  asio::awaitable<void> Run();
  // Thread-safe: closes the socket; a batch being run finishes, its
  // replies are dropped.
  void Stop();
  asio::any_io_executor executor() { return socket_.get_executor(); }
  uint64_t id() const { return id_; }

 private:
  struct Piece;  // one request's reply within a batch
  struct Batch;
  // Runs up to the whole of pending_ on a worker; moves what it ran out.
  // (Not a coroutine: see OnWorkers in connection.cc.)
  asio::awaitable<Batch> RunBatch();
  // Runs requests from pending_ while `quick_only` allows (IsQuick) and
  // the batch's limits do: the body of a batch, on whatever thread calls.
  void Execute(Batch* b, bool quick_only);
  // Waits for the batch's databases to be durable; replaces the replies
  // of writes whose flush failed.
  asio::awaitable<std::string> Settle(Batch& batch);
  void CloseSocket();
  std::string Prefix() const;

  Socket socket_;
  const uint64_t id_;
  const std::string peer_;
  ConnectionEnv env_;
  Session session_;
  bool closed_ = false;  // strand only
  std::deque<Argv> pending_;
};

}  // namespace ftl::resp
