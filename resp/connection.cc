#include "resp/connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <new>

#include "absl/strings/str_cat.h"

namespace ftl::resp {
namespace {

using boost::system::error_code;

// Runs fn() on `workers`; the awaiting coroutine resumes on `home` (its
// own strand) with the result. Plain functions returning the operation,
// not coroutines: GCC 12 destroys by-value arguments of a coroutine called
// inside a co_await expression twice (found with valgrind), so no
// coroutine here takes a non-trivial argument by value.
template <typename T, typename Fn>
asio::awaitable<T> OnWorkers(const asio::any_io_executor& workers,
                             const asio::any_io_executor& home, Fn&& fn) {
  auto initiate = [workers, home, fn = std::forward<Fn>(fn)](auto handler) mutable {
    asio::post(workers, [home, fn = std::move(fn), handler = std::move(handler)]() mutable {
      T result = fn();
      asio::post(home, [handler = std::move(handler), result = std::move(result)]() mutable {
        std::move(handler)(std::move(result));
      });
    });
  };
  return asio::async_initiate<decltype(asio::use_awaitable), void(T)>(std::move(initiate),
                                                                      asio::use_awaitable);
}

// Completes on `home` once `db`'s writes up to `seq` are durable, with the
// flush's status.
asio::awaitable<absl::Status> WaitDurable(const std::shared_ptr<Database>& db, uint64_t seq,
                                          const asio::any_io_executor& home) {
  auto initiate = [db, seq, home](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    db->WhenDurable(seq, [h, home](absl::Status s) {
      asio::post(home, [h, s = std::move(s)]() mutable { std::move(*h)(std::move(s)); });
    });
  };
  return asio::async_initiate<decltype(asio::use_awaitable), void(absl::Status)>(
      std::move(initiate), asio::use_awaitable);
}

// Received bytes: [begin_, end_) of data_ are not parsed yet. Grows to
// hold what the parser waits for; never zero-fills (a std::string resized
// for every read cleared 64 KiB per read).
class InBuffer {
 public:
  std::string_view unparsed() const { return {data_.get() + begin_, end_ - begin_}; }
  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  // Room for at least `n` more bytes at the end.
  asio::mutable_buffer Prepare(size_t n) {
    if (cap_ - end_ < n) {
      size_t live = end_ - begin_;
      if (begin_ > 0 && cap_ - live >= n) {
        std::memmove(data_.get(), data_.get() + begin_, live);
      } else {
        size_t cap = std::max(cap_ * 2, live + n);
        std::unique_ptr<char[]> bigger(new char[cap]);
        if (live) std::memcpy(bigger.get(), data_.get() + begin_, live);
        data_ = std::move(bigger);
        cap_ = cap;
      }
      begin_ = 0;
      end_ = live;
    }
    return asio::buffer(data_.get() + end_, cap_ - end_);
  }
  void Commit(size_t n) { end_ += n; }
  // Gives back memory a large request needed once it is parsed.
  void Shrink(size_t keep) {
    if (cap_ > keep && end_ == begin_) {
      data_.reset();
      cap_ = begin_ = end_ = 0;
    }
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t cap_ = 0, begin_ = 0, end_ = 0;
};

}  // namespace

struct Connection::Piece {
  size_t begin = 0, end = 0;  // of Batch::out
  size_t replies = 1;         // requests answered in [begin, end)
  Outcome outcome;
};

struct Connection::Batch {
  std::string out;
  std::vector<Piece> pieces;
};

Connection::Connection(Socket socket, uint64_t id, std::string peer, ConnectionEnv env)
    : socket_(std::move(socket)), id_(id), peer_(std::move(peer)), env_(std::move(env)) {
  env_.commands->counters->connections_total.fetch_add(1, std::memory_order_relaxed);
  env_.commands->counters->connections_active.fetch_add(1, std::memory_order_relaxed);
  session_.id = id_;
  session_.peer = peer_;
  session_.db = env_.initial_db;
  error_code ec;
  auto local = socket_.local_endpoint(ec);
  if (!ec && local.protocol().family() != AF_UNIX) {
    int one = 1;
    ::setsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
}

Connection::~Connection() {
  env_.commands->counters->connections_active.fetch_sub(1, std::memory_order_relaxed);
}

std::string Connection::Prefix() const {
  return absl::StrCat("RESP client #", id_, " (", peer_, ")");
}

void Connection::Stop() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->CloseSocket(); });
}

void Connection::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
}

asio::awaitable<Connection::Batch> Connection::RunBatch() {
  // The worker has the session and the requests to itself meanwhile: this
  // coroutine is suspended until the batch is back.
  auto run = [this]() {
    Batch b;
    Execute(&b, /*quick_only=*/false);
    return b;
  };
  return OnWorkers<Batch>(env_.workers, socket_.get_executor(), std::move(run));
}

void Connection::Execute(Batch* batch, bool quick_only) {
  Batch& b = *batch;
  bool prefetched = false;
  while (!pending_.empty() && b.out.size() < kMaxBatchReplyBytes && !session_.quit &&
         (!quick_only || IsQuick(session_, pending_.front()))) {
    Piece p;
    p.begin = b.out.size();
    size_t ran = 0;
    try {
      // Leading GETs run together (docs/decisions.md, "A pipelined
      // batch's GETs are answered together"); other requests one by one,
      // their keys prefetched together first ("Prefetching a pipelined
      // batch's keys").
      if (pending_.size() > 1) {
        ran = ExecuteGets(*env_.commands, session_, pending_, kMaxBatchReplyBytes - b.out.size(),
                          &b.out, &p.outcome);
      }
      if (ran == 0 && pending_.size() > 1) {
        ran = ExecuteCounters(*env_.commands, session_, pending_, &b.out, &p.outcome);
      }
      if (ran == 0) {
        if (!prefetched && pending_.size() > 1) Prefetch(*env_.commands, session_, pending_);
        prefetched = true;
        resp::Execute(*env_.commands, session_, pending_.front(), &b.out, &p.outcome);
        ran = 1;
      }
    } catch (const std::bad_alloc&) {
      b.out.resize(p.begin);
      p.outcome = Outcome();
      AppendError(&b.out, "OOM ftld could not allocate memory for this command");
      ran = 1;
    }
    p.end = b.out.size();
    p.replies = ran;
    pending_.erase(pending_.begin(), pending_.begin() + long(ran));
    b.pieces.push_back(std::move(p));
  }
}

asio::awaitable<std::string> Connection::Settle(Batch& batch) {
  // One wait per database (the highest sequence covers the lower ones).
  std::map<Database*, std::pair<std::shared_ptr<Database>, uint64_t>> waits;
  for (const Piece& p : batch.pieces) {
    if (p.outcome.seq == 0) continue;
    auto& w = waits[p.outcome.db.get()];
    w.first = p.outcome.db;
    w.second = std::max(w.second, p.outcome.seq);
  }
  std::map<Database*, absl::Status> failed;
  for (auto& [key, w] : waits) {
    if (w.first->durable() >= w.second) continue;
    absl::Status s = co_await WaitDurable(w.first, w.second, socket_.get_executor());
    if (!s.ok()) failed[key] = s;
  }
  if (failed.empty()) co_return std::move(batch.out);
  std::string out;
  for (const Piece& p : batch.pieces) {
    auto it = failed.find(p.outcome.db.get());
    if (p.outcome.wrote && it != failed.end()) {
      // (A piece of several replies wrote in every one of them.)
      for (size_t i = 0; i < p.replies; ++i) AppendError(&out, SyncFailedError(it->second));
    } else {
      out.append(batch.out, p.begin, p.end - p.begin);
    }
  }
  co_return out;
}

asio::awaitable<void> Connection::Run() {
  auto self = shared_from_this();
  ServerCounters& counters = *env_.commands->counters;
  env_.log->debug("{}: connected", Prefix());
  Parser parser;
  InBuffer in;
  bool eof = false;
  std::string protocol_error;
  uint64_t requests = 0;
  try {
    for (;;) {
      // Parse what is buffered into the next batch (once the last batch's
      // leftovers, cut by kMaxBatchReplyBytes, have run: so at most one
      // batch of requests is held).
      size_t batch_bytes = 0;
      while (protocol_error.empty() && pending_.size() < kMaxBatchRequests &&
             batch_bytes < kMaxBatchInputBytes && (batch_bytes > 0 || pending_.empty())) {
        size_t used = 0;
        Argv argv;
        Parser::Result r = parser.Parse(in.unparsed(), &used, &argv);
        in.Consume(used);
        batch_bytes += used;
        if (r == Parser::Result::kRequest) {
          if (!argv.empty()) pending_.push_back(std::move(argv));
          continue;
        }
        if (r == Parser::Result::kProtocolError) protocol_error = parser.error();
        break;
      }
      in.Shrink(4 * kReadChunk);
      if (pending_.empty()) {
        if (!protocol_error.empty()) {
          // Requests before the garbage were answered; this one cannot be.
          counters.protocol_errors.fetch_add(1, std::memory_order_relaxed);
          env_.log->warn("{}: {}; closing", Prefix(), protocol_error);
          std::string reply;
          AppendError(&reply, absl::StrCat("ERR ", protocol_error));
          error_code ec;
          co_await asio::async_write(socket_, asio::buffer(reply),
                                     asio::redirect_error(asio::use_awaitable, ec));
          break;
        }
        if (eof || closed_) {
          if (!in.unparsed().empty() || parser.held_bytes() > 0) {
            env_.log->info("{}: closed inside a request ({} bytes unparsed)", Prefix(),
                           in.unparsed().size() + parser.held_bytes());
          }
          break;
        }
        // Read more: at least what the parser waits for (a bulk's rest).
        asio::mutable_buffer room = in.Prepare(std::max(kReadChunk, parser.want_bytes()));
        error_code ec;
        size_t got = co_await socket_.async_read_some(room,
                                                      asio::redirect_error(asio::use_awaitable, ec));
        in.Commit(got);
        counters.net_input_bytes.fetch_add(got, std::memory_order_relaxed);
        if (ec) eof = true;
        continue;
      }
      requests += pending_.size();
      Batch batch;
      if (IsQuick(session_, pending_.front())) {
        Execute(&batch, /*quick_only=*/true);
      } else {
        batch = co_await RunBatch();
      }
      requests -= pending_.size();
      std::string out = co_await Settle(batch);
      if (closed_) break;
      // Let the other connections whose requests are ready run first, so
      // that replies leave in a burst, as Redis's event loop sends them
      // (docs/decisions.md, "RESP replies leave after the ready requests
      // ran"): a reply sent at once wakes a client that has gone back to
      // sleep, one wake-up per batch.
      co_await asio::post(socket_.get_executor(), asio::use_awaitable);
      error_code ec;
      co_await asio::async_write(socket_, asio::buffer(out),
                                 asio::redirect_error(asio::use_awaitable, ec));
      counters.net_output_bytes.fetch_add(out.size(), std::memory_order_relaxed);
      if (ec) {
        if (!closed_) env_.log->info("{}: reply not delivered ({}); closing", Prefix(), ec.message());
        break;
      }
      if (session_.quit) break;
    }
  } catch (const std::exception& e) {
    env_.log->warn("{}: closing after an internal error: {}", Prefix(), e.what());
  }
  CloseSocket();
  env_.log->debug("{}: disconnected after {} requests", Prefix(), requests);
}

}  // namespace ftl::resp
