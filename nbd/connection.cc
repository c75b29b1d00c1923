// Over 600 lines on purpose: one connection's receive loop, dispatch and
// reply queue share its buffers and counters; the protocol checks are
// apart (nbd/transmission.cc) (docs/decisions.md, "Files over 600 lines").

#include "nbd/connection.h"

#include <cassert>
#include <cerrno>
#include <cstring>
#include <sched.h>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "nbd/errors.h"
#include "nbd/handshake.h"
#include "nbd/tls_session.h"

namespace ftl::nbd {
namespace {

using boost::system::error_code;
constexpr size_t kDiscardChunk = 1 << 20;
// Receive buffer of the transmission phase: room for many small requests
// per recv; larger payloads are read straight into their own buffers.
constexpr size_t kReceiveBuffer = 256 << 10;
constexpr size_t kMaxBatch = 64;

uint64_t SteadyNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

namespace {
// Recycled 4 KiB buffers: most requests of a random 4 KiB workload need
// one, and aligned_alloc/free of them was ~5% of the daemon's time.
class PageBufferPool {
 public:
  std::byte* Get() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!free_.empty()) {
        std::byte* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    return static_cast<std::byte*>(std::aligned_alloc(4096, 4096));
  }
  void Put(std::byte* p) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (free_.size() < kMaxFree) {
        free_.push_back(p);
        return;
      }
    }
    std::free(p);
  }

 private:
  static constexpr size_t kMaxFree = 4096;  // 16 MiB at most
  std::mutex mu_;
  std::vector<std::byte*> free_;
};
PageBufferPool& Pages() {
  static PageBufferPool* pool = new PageBufferPool;  // never destroyed
  return *pool;
}
}  // namespace

std::shared_ptr<std::byte[]> AllocateBuffer(size_t n) {
  if (n <= 4096) {
    std::byte* p = Pages().Get();
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<std::byte[]>(p, [](std::byte* q) { Pages().Put(q); });
  }
  size_t rounded = (n + 4095) & ~size_t(4095);
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<std::byte[]>(p, [](std::byte* q) { std::free(q); });
}

Connection::Connection(Socket socket, uint64_t id, std::string peer, ConnectionEnv env)
    : socket_(std::move(socket)),
      wake_(socket_.get_executor()),
      handshake_timer_(socket_.get_executor()),
      id_(id),
      peer_(std::move(peer)),
      env_(std::move(env)),
      connected_at_(std::chrono::system_clock::now()) {
  env_.counters->connections_total.fetch_add(1, std::memory_order_relaxed);
  env_.counters->connections_active.fetch_add(1, std::memory_order_relaxed);
  if (socket_.local_endpoint().protocol().family() != AF_UNIX) {
    int one = 1;
    ::setsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
}

Connection::~Connection() {
  env_.counters->connections_active.fetch_sub(1, std::memory_order_relaxed);
}

std::string Connection::Prefix() const { return absl::StrCat("client #", id_, " (", peer_, ")"); }

ConnectionInfo Connection::Info() const {
  ConnectionInfo info;
  info.id = id_;
  info.peer = peer_;
  info.transmitting = transmitting_.load();
  if (info.transmitting) info.export_name = export_name_;
  info.connected_at = connected_at_;
  info.requests = requests_.load(std::memory_order_relaxed);
  info.read_bytes = read_bytes_.load(std::memory_order_relaxed);
  info.write_bytes = write_bytes_.load(std::memory_order_relaxed);
  info.inflight = inflight_atomic_.load(std::memory_order_relaxed);
  return info;
}

void Connection::Stop() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->stopping_ = true;
    error_code ec;
    if (!self->negotiated_) {
      self->CloseSocket();
    } else if (self->reading_header_) {
      // Wakes the pending header read with EOF; replies can still be sent.
      self->socket_.shutdown(asio::socket_base::shutdown_receive, ec);
    }
    self->Wake();
  });
}

asio::awaitable<void> Connection::WaitForWake() {
  wake_.expires_at(asio::steady_timer::time_point::max());
  error_code ec;
  co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

void Connection::Wake() { wake_.cancel(); }

void Connection::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  if (tls_) tls_->Close();  // close_notify, if the socket takes it now
  error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
}

asio::awaitable<void> Connection::Run() {
  auto self = shared_from_this();
  env_.log->debug("{}: connected", Prefix());
  handshake_timer_.expires_after(env_.handshake_timeout);
  handshake_timer_.async_wait([self](error_code ec) {
    if (ec || self->negotiated_ || self->closed_) return;
    self->env_.log->warn("{}: handshake not finished after {} s; closing", self->Prefix(),
                         std::chrono::duration_cast<std::chrono::seconds>(
                             self->env_.handshake_timeout)
                             .count());
    self->env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
    self->CloseSocket();
  });

  bool ok = false;
  try {
    ok = co_await Negotiate();
  } catch (const std::exception& e) {
    env_.log->warn("{}: handshake failed: {}", Prefix(), e.what());
  }
  negotiated_ = true;
  handshake_timer_.cancel();
  if (ok) {
    try {
      co_await Serve();
    } catch (const std::exception& e) {
      env_.log->warn("{}: closing after an internal error: {}", Prefix(), e.what());
    }
    // Finish in-flight requests and send their replies.
    while (!closed_ && (inflight_ > 0 || !writing_.empty() || !queue_.empty())) {
      co_await WaitForWake();
    }
    while (inflight_ > 0) co_await WaitForWake();  // results of a dead socket
  }
  CloseSocket();
  env_.log->info("{}: disconnected after {} requests", Prefix(), requests_.load());
}

asio::awaitable<bool> Connection::Negotiate() {
  error_code ec;
  auto token = asio::redirect_error(asio::use_awaitable, ec);
  auto greeting = EncodeGreeting();
  co_await asio::async_write(socket_, asio::buffer(greeting), token);
  if (ec) co_return false;

  std::array<std::byte, 4> raw_flags;
  size_t got = co_await asio::async_read(socket_, asio::buffer(raw_flags), token);
  if (ec) {
    if (!closed_) {
      env_.log->info("{}: closed during handshake ({} of 4 flag bytes)", Prefix(), got);
    }
    co_return false;
  }
  auto flags = ParseClientFlags(raw_flags);
  if (!flags.ok()) {
    env_.log->warn("{}: bad handshake: {}; closing", Prefix(), StatusMessage(flags.status()));
    env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
    co_return false;
  }
  negotiation_.no_zeroes = flags->no_zeroes;
  negotiation_.tls_mode = env_.tls_mode;

  std::vector<std::byte> data;
  for (;;) {
    std::array<std::byte, kOptionHeaderSize> raw;
    got = co_await StreamRead(raw.data(), raw.size(), ec);
    if (ec) {
      if (!closed_) {
        LogTlsError("during option haggling");
        if (got == 0) {
          env_.log->info("{}: closed during option haggling", Prefix());
        } else {
          env_.log->warn("{}: truncated option header ({} of {} bytes)", Prefix(), got,
                         kOptionHeaderSize);
          env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
        }
      }
      co_return false;
    }
    auto header = DecodeOptionHeader(raw);
    if (!header.ok()) {
      env_.log->warn("{}: bad option: {}; closing", Prefix(), StatusMessage(header.status()));
      env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
      co_return false;
    }
    if (header->length > kMaxDrainedOptionLength) {
      env_.log->warn("{}: {} with {} bytes of data; closing", Prefix(),
                     OptionName(header->option), header->length);
      env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
      co_return false;
    }
    OptionResult result;
    if (header->length > kMaxOptionLength) {
      if (!co_await Discard(header->length)) {
        env_.log->warn("{}: truncated option data", Prefix());
        co_return false;
      }
      if (TlsRequiredFor(header->option, negotiation_)) {
        AppendOptionError(&result.reply, header->option, kRepErrTlsReqd, "TLS is required");
      } else {
        AppendOptionError(&result.reply, header->option, kRepErrTooBig, "option data too long");
      }
      result.error = absl::StrCat(OptionName(header->option), " with ", header->length,
                                  " bytes of data refused");
    } else {
      data.resize(header->length);
      got = co_await StreamRead(data.data(), data.size(), ec);
      if (ec) {
        LogTlsError("during option haggling");
        env_.log->warn("{}: truncated {} ({} of {} data bytes)", Prefix(),
                       OptionName(header->option), got, header->length);
        env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
        co_return false;
      }
      result = HandleOption(header->option, data, *env_.exports, &negotiation_);
    }
    if (!result.error.empty()) env_.log->info("{}: {}", Prefix(), result.error);
    if (!result.reply.empty()) {
      co_await StreamWrite(result.reply, ec);
      if (ec) co_return false;
    }
    if (result.outcome == OptionOutcome::kClose) co_return false;
    if (result.outcome == OptionOutcome::kTransmission) co_return true;
    if (result.outcome == OptionOutcome::kStartTls && !co_await StartTls()) co_return false;
  }
}

asio::awaitable<bool> Connection::StartTls() {
  auto session = TlsSession::Create(*env_.tls, &socket_);
  if (!session.ok()) {
    env_.log->warn("{}: cannot start TLS: {}; closing", Prefix(), StatusMessage(session.status()));
    co_return false;
  }
  tls_ = std::move(*session);
  absl::Status s = co_await tls_->Handshake();
  if (!s.ok()) {
    // After a timeout the timer has said why already.
    if (!closed_) env_.log->warn("{}: TLS refused: {}; closing", Prefix(), StatusMessage(s));
    co_return false;
  }
  negotiation_.tls_active = true;
  env_.log->info("{}: TLS established: {}", Prefix(), tls_->Describe());
  co_return true;
}

asio::awaitable<size_t> Connection::StreamRead(std::byte* dst, size_t n, error_code& ec) {
  if (tls_) co_return co_await tls_->Read(dst, n, ec);
  co_return co_await asio::async_read(socket_, asio::buffer(dst, n),
                                      asio::redirect_error(asio::use_awaitable, ec));
}

asio::awaitable<void> Connection::StreamWrite(std::span<const std::byte> data, error_code& ec) {
  if (tls_) {
    co_await tls_->Write(data, ec);
    co_return;
  }
  co_await asio::async_write(socket_, asio::buffer(data.data(), data.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
}

void Connection::LogTlsError(const char* when) {
  if (tls_ && !tls_->last_error().empty()) {
    env_.log->warn("{}: TLS error {}: {}", Prefix(), when, tls_->last_error());
  }
}

asio::awaitable<void> Connection::FillAtLeast(size_t n, error_code& ec) {
  ec = {};
  if (Buffered() >= n) co_return;
  if (!rbuf_) rbuf_.reset(new std::byte[kReceiveBuffer]);
  if (kReceiveBuffer - rpos_ < n) {  // make room: move the unparsed bytes down
    std::memmove(rbuf_.get(), rbuf_.get() + rpos_, Buffered());
    rend_ -= rpos_;
    rpos_ = 0;
  }
  while (Buffered() < n) {
    FlushReplies();
    if (PollReceive()) continue;
    size_t got = 0;
    if (tls_) {
      got = co_await tls_->ReadSome(rbuf_.get() + rend_, kReceiveBuffer - rend_, ec);
    } else {
      got = co_await socket_.async_read_some(
          asio::buffer(rbuf_.get() + rend_, kReceiveBuffer - rend_),
          asio::redirect_error(asio::use_awaitable, ec));
    }
    rend_ += got;
    if (ec) co_return;
  }
}

bool Connection::PollReceive() {
  if (env_.receive_poll.count() <= 0 || !transmitting_ || inflight_ > 0 ||
      !pending_writes_.empty() || stopping_ || closed_)
    return false;
  if (env_.counters->connections_active.load(std::memory_order_relaxed) > env_.poll_connections)
    return false;
  if (poll_skip_ > 0) {
    --poll_skip_;
    return false;
  }
  const int fd = socket_.native_handle();
  const auto deadline = std::chrono::steady_clock::now() + env_.receive_poll;
  for (;;) {
    if (tls_) {
      error_code ec;
      size_t got = tls_->TryRead(rbuf_.get() + rend_, kReceiveBuffer - rend_, ec);
      if (got > 0) {
        rend_ += got;
        poll_misses_ = 0;
        return true;
      }
      if (ec) return false;  // the reactor path reports it
    } else {
      ssize_t got = ::recv(fd, rbuf_.get() + rend_, kReceiveBuffer - rend_, MSG_DONTWAIT);
      if (got > 0) {
        rend_ += size_t(got);
        poll_misses_ = 0;
        return true;
      }
      // End of stream or an error: the reactor path reports it.
      if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    ::sched_yield();  // a client on this CPU gets to send its request
  }
  // Nothing came: a client that thinks between requests. After a few misses
  // in a row, sleep through the next 2^k waits without polling.
  if (++poll_misses_ >= 4) poll_skip_ = 1u << std::min<uint32_t>(poll_misses_ - 3, 10);
  return false;
}

asio::awaitable<size_t> Connection::ReadInto(std::byte* dst, size_t n, error_code& ec) {
  ec = {};
  size_t have = std::min(n, Buffered());
  std::memcpy(dst, rbuf_.get() + rpos_, have);
  rpos_ += have;
  if (have == n) co_return n;
  size_t rest = n - have;
  if (rest <= kReceiveBuffer / 4) {
    // Small: fill the buffer (it may bring the next requests along).
    co_await FillAtLeast(rest, ec);
    size_t take = std::min(rest, Buffered());
    std::memcpy(dst + have, rbuf_.get() + rpos_, take);
    rpos_ += take;
    co_return have + take;
  }
  size_t got = co_await StreamRead(dst + have, rest, ec);
  co_return have + got;
}

asio::awaitable<bool> Connection::Discard(uint64_t n) {
  error_code ec;
  uint64_t buffered = std::min<uint64_t>(n, Buffered());
  rpos_ += buffered;
  n -= buffered;
  std::vector<std::byte> scratch(std::min<uint64_t>(n, kDiscardChunk));
  while (n > 0) {
    size_t chunk = std::min<uint64_t>(n, scratch.size());
    co_await StreamRead(scratch.data(), chunk, ec);
    if (ec) co_return false;
    n -= chunk;
  }
  co_return true;
}

asio::awaitable<void> Connection::Serve() {
  const Export& e = *negotiation_.chosen;
  volume_ = e.volume;
  export_name_ = e.name;
  if (env_.metrics != nullptr) {
    export_metrics_ = env_.metrics->For(e.name, volume_->name());
    export_metrics_->connections_total.fetch_add(1, std::memory_order_relaxed);
  }
  transmitting_ = true;
  const TransmissionContext ctx{.size = volume_->size_bytes(),
                                .read_only = e.effective_read_only(),
                                .structured_replies = negotiation_.structured_replies,
                                .base_allocation = negotiation_.base_allocation,
                                .min_block_size = negotiation_.min_block_size()};
  env_.log->info("{}: opened export '{}'{}{}{}", Prefix(), e.name,
                 ctx.structured_replies ? " with structured replies" : "",
                 ctx.min_block_size > 1 ? "" : ", byte-granular (no block sizes agreed)",
                 ctx.read_only ? " (read-only)" : "");

  error_code ec;
  std::array<std::byte, kRequestSize> raw;
  for (;;) {
    if (Full()) SubmitPendingWrites();
    // Back-pressure: read no more requests until replies have left.
    while (!stopping_ && !closed_ && Full()) {
      waiting_for_room_ = true;
      co_await WaitForWake();
    }
    waiting_for_room_ = false;
    if (stopping_ || closed_) break;
    // Keep collecting writes only while the next request is already here.
    if (!pending_writes_.empty() &&
        (pending_writes_.size() >= kMaxPendingWrites ||
         (Buffered() < kRequestSize && SocketAvailable() < kRequestSize)))
      SubmitPendingWrites();
    reading_header_ = Buffered() < kRequestSize;
    co_await FillAtLeast(kRequestSize, ec);
    reading_header_ = false;
    size_t got = std::min(Buffered(), kRequestSize);
    if (!ec) {
      std::memcpy(raw.data(), rbuf_.get() + rpos_, kRequestSize);
      rpos_ += kRequestSize;
    }
    if (ec) {
      if (stopping_ || closed_) break;
      LogTlsError("reading a request");
      if (got == 0) {
        env_.log->info("{}: closed the connection without NBD_CMD_DISC", Prefix());
      } else {
        env_.log->warn("{}: vanished inside a request header ({} of {} bytes)", Prefix(), got,
                       kRequestSize);
        env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    }
    Request r;
    if (export_metrics_ != nullptr) r.start_ns = SteadyNs();
    if (!DecodeRequest(raw, &r)) {
      env_.log->warn("{}: request without the NBD request magic; closing", Prefix());
      env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    env_.log->trace("{}: {} flags 0x{:x} offset {} length {} cookie {}", Prefix(),
                    CommandName(r.type), r.flags, r.offset, r.length, r.cookie);
    requests_.fetch_add(1, std::memory_order_relaxed);
    env_.counters->requests.fetch_add(1, std::memory_order_relaxed);
    absl::Status status = ValidateRequest(r, ctx);

    std::shared_ptr<std::byte[]> payload;
    if (HasPayload(r)) {
      if (!status.ok()) {
        if (!co_await Discard(r.length)) {
          env_.log->warn("{}: vanished inside the payload of a refused {} ({} bytes)",
                         Prefix(), CommandName(r.type), r.length);
          env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
          break;
        }
      } else {
        payload = AllocateBuffer(r.length);
        if (!pending_writes_.empty() && Buffered() < r.length &&
            Buffered() + SocketAvailable() < r.length)
          SubmitPendingWrites();
        got = co_await ReadInto(payload.get(), r.length, ec);
        if (ec) {
          LogTlsError("reading a payload");
          env_.log->warn("{}: vanished inside a {} payload ({} of {} bytes)", Prefix(),
                         CommandName(r.type), got, r.length);
          env_.counters->protocol_errors.fetch_add(1, std::memory_order_relaxed);
          break;
        }
      }
    }
    if (r.type == kCmdDisc) {
      env_.log->debug("{}: NBD_CMD_DISC", Prefix());
      break;
    }
    ++inflight_;
    if (r.type == kCmdRead || r.type == kCmdWrite) inflight_bytes_ += r.length;
    inflight_atomic_.store(inflight_, std::memory_order_relaxed);
    if (!status.ok()) {
      env_.log->info("{}: {} refused: {} ({})", Prefix(), CommandName(r.type),
                     StatusMessage(status), NbdErrorName(StatusToNbdError(status)));
      Finish(r, status);
      continue;
    }
    Dispatch(r, std::move(payload));
  }
  SubmitPendingWrites();
}

size_t Connection::SocketAvailable() {
  error_code ec;
  size_t n = socket_.available(ec);
  if (ec) n = 0;
  // TLS: ciphertext waiting counts too (a little more than it will bring).
  return tls_ ? n + tls_->Buffered() : n;
}

void Connection::SubmitPendingWrites() {
  if (pending_writes_.empty()) return;
  std::vector<Volume::AsyncWrite> batch;
  batch.swap(pending_writes_);
  volume_->WriteAsyncBatch(std::move(batch));
}

void Connection::Dispatch(const Request& r, std::shared_ptr<std::byte[]> payload) {
  // Writes may wait in pending_writes_; anything else goes after them.
  if (r.type != kCmdWrite) SubmitPendingWrites();
  auto self = shared_from_this();
  auto strand = socket_.get_executor();
  Volume* v = volume_;
  switch (r.type) {
    case kCmdWrite: {
      auto data = std::span<const std::byte>(payload.get(), r.length);
      pending_writes_.push_back(
          {r.offset, data, (r.flags & kCmdFlagFua) != 0,
           [self, strand, r, payload](absl::Status s) mutable {
             // Inline when committed on this strand's thread (small writes
             // are), so the reader sees the request retired before it waits.
             asio::dispatch(strand, [self, r, s = std::move(s)] { self->Finish(r, s); });
           }});
      return;
    }
    case kCmdRead:
      if (r.length <= (tls_ ? kInlineReadBytesTls : kInlineReadBytes)) {
        // Small reads run on the strand: a page-cache or SSD read costs less
        // than two thread hand-offs.
        std::shared_ptr<std::byte[]> data;
        absl::Status s;
        try {
          data = AllocateBuffer(r.length);
          s = v->Read(r.offset, std::span<std::byte>(data.get(), r.length));
        } catch (const std::bad_alloc&) {
          s = absl::ResourceExhaustedError("out of memory");
        }
        FinishRead(r, std::move(s), std::move(data));
        return;
      }
      asio::post(env_.workers, [self, strand, v, r] {
        std::shared_ptr<std::byte[]> data;
        absl::Status s;
        try {
          data = AllocateBuffer(r.length);
          s = v->Read(r.offset, std::span<std::byte>(data.get(), r.length));
        } catch (const std::bad_alloc&) {
          s = absl::ResourceExhaustedError("out of memory");
        }
        asio::post(strand, [self, r, s = std::move(s), data = std::move(data)]() mutable {
          self->FinishRead(r, std::move(s), std::move(data));
        });
      });
      return;
    case kCmdBlockStatus:
      asio::post(env_.workers, [self, strand, v, r] {
        auto result = ExecuteBlockStatus(*v, r);
        asio::post(strand, [self, r, result = std::move(result)]() mutable {
          self->FinishBlockStatus(r, std::move(result));
        });
      });
      return;
    default:
      asio::post(env_.workers, [self, strand, v, r] {
        absl::Status s = ExecuteSimple(*v, r);
        asio::post(strand, [self, r, s = std::move(s)] { self->Finish(r, s); });
      });
      return;
  }
}

void Connection::Retire(const Request& r) {
  --inflight_;
  inflight_atomic_.store(inflight_, std::memory_order_relaxed);
  if (r.type == kCmdRead || r.type == kCmdWrite) inflight_bytes_ -= r.length;
  Wake();
}

void Connection::Account(const Request& r, const absl::Status& status, uint64_t bytes) {
  if (export_metrics_ == nullptr) return;
  uint64_t now = SteadyNs();
  export_metrics_->Record(MetricOpOf(r.type), now > r.start_ns ? now - r.start_ns : 0,
                          status.ok(), bytes);
  if (!status.ok()) export_metrics_->RecordError(StatusToNbdError(status));
}

void Connection::Finish(const Request& r, const absl::Status& status) {
  Retire(r);
  Account(r, status, r.type == kCmdWrite ? r.length : 0);
  Out out;
  if (status.ok()) {
    if (r.type == kCmdWrite) {
      write_bytes_.fetch_add(r.length, std::memory_order_relaxed);
      env_.counters->write_bytes.fetch_add(r.length, std::memory_order_relaxed);
    }
    EncodeOkReply(&out.head, r, negotiation_.structured_replies);
  } else {
    env_.counters->request_errors.fetch_add(1, std::memory_order_relaxed);
    if (status.code() != absl::StatusCode::kInvalidArgument &&
        status.code() != absl::StatusCode::kOutOfRange &&
        status.code() != absl::StatusCode::kPermissionDenied) {
      // Validation failures were logged already; engine failures are news.
      env_.log->warn("{}: {} of {} bytes at {} failed: {}", Prefix(), CommandName(r.type),
                     r.length, r.offset, status.ToString());
    }
    EncodeErrorReply(&out.head, r, negotiation_.structured_replies, status);
  }
  Queue(std::move(out));
}

void Connection::FinishRead(const Request& r, absl::Status status,
                            std::shared_ptr<std::byte[]> data) {
  if (!status.ok()) {
    Finish(r, status);
    return;
  }
  Retire(r);
  Account(r, status, r.length);
  read_bytes_.fetch_add(r.length, std::memory_order_relaxed);
  env_.counters->read_bytes.fetch_add(r.length, std::memory_order_relaxed);
  Out out;
  if (negotiation_.structured_replies) {
    EncodeReadChunkHeader(&out.head, r.cookie, r.offset, r.length);
  } else {
    EncodeSimpleReply(&out.head, r.cookie, 0);
  }
  out.data = std::move(data);
  out.data_len = r.length;
  Queue(std::move(out));
}

void Connection::FinishBlockStatus(const Request& r,
                                   absl::StatusOr<std::vector<Descriptor>> result) {
  if (!result.ok()) {
    Finish(r, result.status());
    return;
  }
  Retire(r);
  Account(r, absl::OkStatus(), 0);
  Out out;
  EncodeBlockStatusChunk(&out.head, r.cookie, *result);
  Queue(std::move(out));
}

void Connection::Queue(Out out) {
  if (closed_) return;
  ++queued_replies_;
  queued_bytes_ += out.head.size() + out.data_len;
  queue_.push_back(std::move(out));
  // Replies finished together leave in one gather write: the flush runs
  // after the completions already posted to the strand (or earlier, when
  // the reader is about to wait: FlushReplies).
  if (writing_.empty() && !flush_posted_) {
    flush_posted_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->FlushReplies();
    });
  }
}

void Connection::Release(const Out& out) {
  // Invariant: every released reply was counted by Queue.
  assert(queued_replies_ > 0 && queued_bytes_ >= out.head.size() + out.data_len);
  --queued_replies_;
  queued_bytes_ -= out.head.size() + out.data_len;
  if (waiting_for_room_ && !Full()) Wake();
}

void Connection::FlushReplies() {
  if (writing_.empty() && !queue_.empty()) WriteMore();
}

void Connection::WriteMore() {
  for (;;) {
    // The batch in writing_ has been sent (or the socket is closed).
    for (const Out& o : writing_) Release(o);
    writing_.clear();
    gather_.clear();
    if (closed_ || queue_.empty()) {
      for (const Out& o : queue_) Release(o);
      queue_.clear();
      Wake();
      return;
    }
    while (!queue_.empty() && writing_.size() < kMaxBatch) {
      writing_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    for (const Out& o : writing_) {
      gather_.push_back(asio::buffer(o.head));
      if (o.data_len) gather_.push_back(asio::buffer(o.data.get(), o.data_len));
    }
    // Send what the socket takes now; only a remainder waits in the reactor.
    // Replies then leave at once even while this strand is busy reading.
    if (SendNow()) continue;
    if (tls_) {
      ResumeTlsSend();
      return;
    }
    asio::async_write(socket_, gather_, [self = shared_from_this()](error_code ec, size_t) {
      if (ec) {
        if (!self->closed_) {
          self->env_.log->info("{}: reply not delivered ({}); closing", self->Prefix(),
                               ec.message());
        }
        self->CloseSocket();
      }
      self->WriteMore();
    });
    return;
  }
}

void Connection::ResumeTlsSend() {
  socket_.async_wait(asio::socket_base::wait_write, [self = shared_from_this()](error_code ec) {
    if (ec) {
      if (!self->closed_) {
        self->env_.log->info("{}: reply not delivered ({}); closing", self->Prefix(),
                             ec.message());
      }
      self->CloseSocket();
    } else if (!self->closed_ && !self->SendNow()) {
      self->ResumeTlsSend();
      return;
    }
    self->WriteMore();
  });
}

bool Connection::SendNow() {
  if (tls_) {
    error_code ec;
    if (tls_->Send(gather_, ec)) return true;
    if (!ec) return false;
    if (!closed_) {
      env_.log->info("{}: reply not delivered ({}); closing", Prefix(),
                     tls_->last_error().empty() ? ec.message() : tls_->last_error());
    }
    CloseSocket();
    return true;  // nothing more will leave: WriteMore drops the batch
  }
  std::array<iovec, 2 * kMaxBatch> iov;
  size_t n = 0, total = 0;
  for (const asio::const_buffer& b : gather_) {
    iov[n++] = iovec{const_cast<void*>(b.data()), b.size()};
    total += b.size();
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = n;
  ssize_t sent = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent < 0) return false;  // EAGAIN, or an error async_write reports
  if (size_t(sent) == total) return true;
  // Keep the unsent tail in gather_.
  size_t skip = size_t(sent), i = 0;
  while (skip >= gather_[i].size()) skip -= gather_[i++].size();
  gather_.erase(gather_.begin(), gather_.begin() + i);
  gather_[0] += skip;
  return false;
}

}  // namespace ftl::nbd
