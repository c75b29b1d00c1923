#pragma once
// Connection: one NBD client from accept to close. It drives the three
// phases (handshake.h, options.h, transmission.h) over a socket.
//
// Concurrency: every member runs on the socket's strand. In the transmission
// phase one coroutine reads requests; each request runs elsewhere (WRITE via
// Volume::WriteAsync, everything else on the shared worker pool) and its
// completion is posted back to the strand, which queues the reply. Replies
// go out in completion order (out of order w.r.t. requests), batched into
// one gather write. What a connection holds is bounded (kMaxHeldRequests,
// kMaxHeldBytes): requests in flight plus replies queued or being written,
// so a client that pipelines reads and never reads the replies cannot make
// the daemon buffer them. When over, the reader stops reading requests
// until replies have left (as nbdkit does).
// Lifetime: owned by shared_ptr; completions hold a reference, so the
// object outlives every request it started.
// TLS: after an acknowledged NBD_OPT_STARTTLS every byte goes through the
// connection's TlsSession (nbd/tls_session.h) instead of the socket; the
// Stream*/Fill/Send paths branch on tls_ once, so a plaintext connection
// runs the code it ran before. The handshake timer covers the TLS
// handshake too (it is part of Negotiate).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "nbd/asio.h"
#include "nbd/exports.h"
#include "nbd/options.h"
#include "nbd/tls_credentials.h"
#include "nbd/request_metrics.h"
#include "nbd/transmission.h"

namespace ftl::nbd {

// Per connection: requests in flight plus replies not yet sent, and their
// bytes (READ/WRITE data in flight, then reply headers and data). The
// reader admits a request while under both, so the bytes may exceed
// kMaxHeldBytes by one request (at most kMaxPayload).
inline constexpr size_t kMaxHeldRequests = 256;
inline constexpr size_t kMaxHeldBytes = 128u << 20;
// Writes collected before they are handed to the volume as one batch.
inline constexpr size_t kMaxPendingWrites = 64;
// Reads up to this size run inline on the connection's strand; larger
// ones on a worker, so the copy overlaps the strand's sends.
inline constexpr uint32_t kInlineReadBytes = 64u << 10;
// On a TLS connection the strand encrypts every reply itself, so a worker
// buys no overlap and its two hand-offs cost more than the copy
// (docs/decisions.md, "Small reads run on the connection's strand").
inline constexpr uint32_t kInlineReadBytesTls = 128u << 10;

// Counters shared by all connections of a server. Relaxed atomics.
struct ServerCounters {
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> connections_active{0};
  std::atomic<uint64_t> protocol_errors{0};  // connections closed for a violation
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> request_errors{0};   // error replies sent
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> write_bytes{0};
};

// What a connection needs from its server. Not owned; outlives connections.
struct ConnectionEnv {
  const ExportTable* exports = nullptr;
  asio::any_io_executor workers;  // blocking Volume calls run here
  ServerCounters* counters = nullptr;
  std::shared_ptr<spdlog::logger> log;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(30)};
  // TLS policy and credentials (credentials required unless kOff).
  TlsMode tls_mode = TlsMode::kOff;
  const TlsCredentials* tls = nullptr;
  // A connection with nothing in flight polls its socket for up to this long
  // before sleeping in the reactor: at queue depth 1 the next request usually
  // arrives within tens of microseconds, and a thread woken from sleep on
  // another CPU pays a cross-CPU wake-up (~40 us in a VM) per request.
  // Polling stops while more connections than poll_connections are open
  // (an io thread serves several then) and backs off after polls that
  // found nothing. Zero turns it off.
  std::chrono::microseconds receive_poll{0};
  uint64_t poll_connections = 1;
  // Per-export request counters and latency histograms (ftld --metrics);
  // none kept when null.
  RequestMetrics* metrics = nullptr;
};

// A snapshot for `ftlctl status`.
struct ConnectionInfo {
  uint64_t id = 0;
  std::string peer;
  std::string export_name;  // empty until transmission (or the "" export)
  bool transmitting = false;
  std::chrono::system_clock::time_point connected_at;
  uint64_t requests = 0;
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  uint64_t inflight = 0;
};

class TlsSession;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // REQUIRES: `socket`'s executor is a strand.
  Connection(Socket socket, uint64_t id, std::string peer, ConnectionEnv env);
  ~Connection();

  // Runs the connection until it closes; co_spawn it on the socket's
  // executor and hold a shared_ptr meanwhile.
  asio::awaitable<void> Run();

  // Thread-safe. Stops reading new requests; in-flight requests finish and
  // are answered, then the socket closes.
  void Stop();

  // Thread-safe.
  ConnectionInfo Info() const;
  // The strand everything runs on.
  asio::any_io_executor executor() { return socket_.get_executor(); }

 private:
  // An outgoing message: header bytes and optionally a data buffer.
  struct Out {
    std::vector<std::byte> head;
    std::shared_ptr<std::byte[]> data;
    size_t data_len = 0;
  };

  asio::awaitable<bool> Negotiate();
  // After NBD_OPT_STARTTLS was acknowledged: the handshake; false closes.
  asio::awaitable<bool> StartTls();
  asio::awaitable<void> Serve();
  // The byte stream under the protocol: the socket, or TLS over it.
  // Exactly n bytes (returns how many came) / all of `data`.
  asio::awaitable<size_t> StreamRead(std::byte* dst, size_t n, boost::system::error_code& ec);
  asio::awaitable<void> StreamWrite(std::span<const std::byte> data,
                                    boost::system::error_code& ec);
  // Logs why a TLS read or write failed, if it was TLS (not the peer closing).
  void LogTlsError(const char* when);
  // Reads and discards `n` bytes; false if the stream ended first.
  asio::awaitable<bool> Discard(uint64_t n);
  asio::awaitable<void> WaitForWake();
  void Wake();

  void Dispatch(const Request& r, std::shared_ptr<std::byte[]> payload);
  // Hands the writes collected while more requests were already buffered in
  // the socket to the volume in one batch (group commit without waiting).
  void SubmitPendingWrites();
  // Bytes readable from the socket without waiting.
  size_t SocketAvailable();
  // Completion of a request without reply payload (on the strand).
  void Finish(const Request& r, const absl::Status& status);
  void FinishRead(const Request& r, absl::Status status, std::shared_ptr<std::byte[]> data);
  void FinishBlockStatus(const Request& r, absl::StatusOr<std::vector<Descriptor>> result);
  void Retire(const Request& r);
  // Counts a finished request in export_metrics_ (if kept).
  void Account(const Request& r, const absl::Status& status, uint64_t bytes);
  void Queue(Out out);
  // A queued reply left (or will never leave: the socket closed).
  void Release(const Out& out);
  // True while the connection holds as much as it may (see kMaxHeldBytes).
  bool Full() const {
    return inflight_ + queued_replies_ >= kMaxHeldRequests ||
           inflight_bytes_ + queued_bytes_ >= kMaxHeldBytes;
  }
  void WriteMore();
  // Starts writing queued replies unless a write is under way.
  void FlushReplies();
  bool flush_posted_ = false;
  // Sends gather_ without waiting; true if all of it went, else gather_
  // keeps what is left.
  bool SendNow();
  // TLS: waits until the socket takes more, then goes on sending gather_.
  void ResumeTlsSend();
  void CloseSocket();
  std::string Prefix() const;

  Socket socket_;
  asio::steady_timer wake_;
  asio::steady_timer handshake_timer_;
  const uint64_t id_;
  const std::string peer_;
  ConnectionEnv env_;
  const std::chrono::system_clock::time_point connected_at_;

  // Strand-only state.
  Negotiation negotiation_;
  std::unique_ptr<TlsSession> tls_;  // set once STARTTLS was acknowledged
  Volume* volume_ = nullptr;
  ExportMetrics* export_metrics_ = nullptr;  // set when transmission starts
  bool stopping_ = false;
  bool reading_header_ = false;
  bool closed_ = false;
  bool negotiated_ = false;
  size_t inflight_ = 0;
  size_t inflight_bytes_ = 0;
  // Replies in queue_ and writing_, and their bytes (head + data).
  size_t queued_replies_ = 0;
  size_t queued_bytes_ = 0;
  // The reader waits for Full() to end.
  bool waiting_for_room_ = false;
  std::vector<Volume::AsyncWrite> pending_writes_;
  // Transmission-phase receive buffer: [rpos_, rend_) of rbuf_ is received
  // and not parsed yet. One recv usually brings many requests, so a request
  // costs no syscall of its own.
  std::unique_ptr<std::byte[]> rbuf_;
  size_t rpos_ = 0, rend_ = 0;
  size_t Buffered() const { return rend_ - rpos_; }
  // Receives until at least n (<= kReceiveBuffer) bytes are buffered.
  asio::awaitable<void> FillAtLeast(size_t n, boost::system::error_code& ec);
  // Copies the next n bytes to dst: buffered ones first, then the socket.
  // Returns how many arrived.
  asio::awaitable<size_t> ReadInto(std::byte* dst, size_t n, boost::system::error_code& ec);
  // Polls the socket (non-blocking recv, yielding the CPU between tries) for
  // up to env_.receive_poll when that is likely to pay; true if bytes came.
  bool PollReceive();
  // Consecutive polls that found nothing, and waits left to skip polling.
  uint32_t poll_misses_ = 0;
  uint32_t poll_skip_ = 0;
  std::deque<Out> queue_;
  std::vector<Out> writing_;  // the batch being written; empty when idle
  std::vector<asio::const_buffer> gather_;

  // Read by Info() from other threads.
  std::atomic<bool> transmitting_{false};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> write_bytes_{0};
  std::atomic<uint64_t> inflight_atomic_{0};
  std::string export_name_;  // written once before transmitting_ is set
};

// Buffer for request payloads and read data, 4096-aligned.
std::shared_ptr<std::byte[]> AllocateBuffer(size_t n);

}  // namespace ftl::nbd
