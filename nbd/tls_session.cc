#include "nbd/tls_session.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ftl::nbd {
namespace {

using boost::system::error_code;
// Non-fatal gnutls results in a row (warning alerts, a refused
// renegotiation) before a read or handshake gives up.
constexpr int kMaxWarnings = 16;

int Fd(const Socket* s) { return s->is_open() ? int(const_cast<Socket*>(s)->native_handle()) : -1; }

}  // namespace

TlsSession::TlsSession(Socket* socket, bool psk)
    : socket_(socket), psk_(psk) {
  stage_.reserve(kTlsRecord);
}

TlsSession::~TlsSession() {
  if (session_ != nullptr) gnutls_deinit(session_);
}

absl::StatusOr<std::unique_ptr<TlsSession>> TlsSession::Create(const TlsCredentials& creds,
                                                               Socket* socket) {
  std::unique_ptr<TlsSession> t(new TlsSession(socket, creds.psk()));
  int rc = gnutls_init(&t->session_, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL);
  if (rc != GNUTLS_E_SUCCESS) {
    t->session_ = nullptr;
    return absl::InternalError(absl::StrCat("gnutls_init: ", gnutls_strerror(rc)));
  }
  if (absl::Status s = creds.Configure(t->session_); !s.ok()) return s;
  gnutls_transport_set_ptr(t->session_, t.get());
  gnutls_transport_set_pull_function(t->session_, &TlsSession::Pull);
  gnutls_transport_set_vec_push_function(t->session_, &TlsSession::VecPush);
  gnutls_transport_set_pull_timeout_function(t->session_, &TlsSession::PullTimeout);
  // The connection's handshake timer bounds the handshake (nbd/connection.h).
  gnutls_handshake_set_timeout(t->session_, 0);
  return t;
}

ssize_t TlsSession::Pull(void* self, void* data, size_t len) {
  auto* t = static_cast<TlsSession*>(self);
  if (t->in_pos_ == t->in_end_) {
    // The buffer is empty here, so it can change size without a copy: a
    // record's worth during the handshake (a connection that stalls in it
    // holds little), the full read-ahead after it.
    const size_t want = t->handshake_done_ ? kTlsReadAhead : kTlsHandshakeReadAhead;
    if (t->in_cap_ != want) {
      t->in_.reset(new std::byte[want]);
      t->in_cap_ = want;
    }
    int fd = Fd(t->socket_);
    if (fd < 0) {
      gnutls_transport_set_errno(t->session_, EBADF);
      return -1;
    }
    ssize_t got = ::recv(fd, t->in_.get(), t->in_cap_, MSG_DONTWAIT);
    if (got < 0) {
      gnutls_transport_set_errno(t->session_, errno == EWOULDBLOCK ? EAGAIN : errno);
      return -1;
    }
    if (got == 0) {
      t->eof_seen_ = true;
      return 0;
    }
    t->in_pos_ = 0;
    t->in_end_ = size_t(got);
  }
  size_t n = std::min(len, t->in_end_ - t->in_pos_);
  std::memcpy(data, t->in_.get() + t->in_pos_, n);
  t->in_pos_ += n;
  return ssize_t(n);
}

ssize_t TlsSession::VecPush(void* self, const iovec* iov, int count) {
  auto* t = static_cast<TlsSession*>(self);
  size_t total = 0;
  for (int i = 0; i < count; ++i) {
    const auto* p = static_cast<const std::byte*>(iov[i].iov_base);
    t->out_.insert(t->out_.end(), p, p + iov[i].iov_len);
    total += iov[i].iov_len;
  }
  return ssize_t(total);
}

int TlsSession::PullTimeout(void* self, unsigned int /*ms*/) {
  // Never waits: the reactor does the waiting.
  auto* t = static_cast<TlsSession*>(self);
  if (t->in_pos_ < t->in_end_) return 1;
  pollfd p{.fd = Fd(t->socket_), .events = POLLIN, .revents = 0};
  if (p.fd < 0) return -1;
  return ::poll(&p, 1, 0);
}

bool TlsSession::FlushOut(error_code& ec) {
  while (out_pos_ < out_.size()) {
    int fd = Fd(socket_);
    if (fd < 0) {
      ec = asio::error::bad_descriptor;
      return false;
    }
    ssize_t n = ::send(fd, out_.data() + out_pos_, out_.size() - out_pos_,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = error_code(errno, boost::system::system_category());
      }
      return false;
    }
    out_pos_ += size_t(n);
  }
  out_.clear();
  out_pos_ = 0;
  return true;
}

void TlsSession::Fail(long rc, error_code& ec) {
  if (rc == 0 || rc == GNUTLS_E_PREMATURE_TERMINATION) {
    ec = asio::error::eof;
    return;
  }
  ec = boost::system::errc::make_error_code(boost::system::errc::protocol_error);
  if (!last_error_.empty()) return;  // the first error says why; later ones echo it
  last_error_ = gnutls_strerror(int(rc));
  if (rc == GNUTLS_E_FATAL_ALERT_RECEIVED) {
    absl::StrAppend(&last_error_, " (", gnutls_alert_get_name(gnutls_alert_get(session_)), ")");
  }
}

std::string TlsSession::HandshakeError(int rc) const {
  // The end of the stream explains any error it caused (a record cut short
  // decodes badly). A client that does not trust our certificate often
  // just hangs up, without an alert.
  if (eof_seen_ && rc != GNUTLS_E_FATAL_ALERT_RECEIVED) {
    return "the client closed the connection during the TLS handshake (as a client that "
           "does not trust the server's certificate, or has no key, does)";
  }
  switch (rc) {
    case GNUTLS_E_PREMATURE_TERMINATION:
    case GNUTLS_E_PULL_ERROR:
    case GNUTLS_E_PUSH_ERROR:
      return "the client closed the connection during the TLS handshake";
    case GNUTLS_E_FATAL_ALERT_RECEIVED:
      return absl::StrCat("the client ended the TLS handshake with a fatal alert: ",
                          gnutls_alert_get_name(gnutls_alert_get(session_)));
    case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
    case GNUTLS_E_CERTIFICATE_ERROR: {
      std::string why = gnutls_strerror(rc);
      gnutls_datum_t out{};
      unsigned status = gnutls_session_get_verify_cert_status(session_);
      if (status != 0 &&
          gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) == 0) {
        why.assign(reinterpret_cast<const char*>(out.data), out.size);
        gnutls_free(out.data);
      }
      return absl::StrCat("client certificate rejected: ", why);
    }
    case GNUTLS_E_NO_CERTIFICATE_FOUND:
    case GNUTLS_E_CERTIFICATE_REQUIRED:
      return "the client showed no certificate (--tls-verify-peer requires one)";
  }
  if (psk_ && (rc == GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER || rc == GNUTLS_E_SRP_PWD_ERROR ||
               rc == GNUTLS_E_DECRYPTION_FAILED || rc == GNUTLS_E_INSUFFICIENT_CREDENTIALS)) {
    // An unknown user fails the key lookup; a wrong key fails the binder
    // (TLS 1.3) or the Finished check.
    return absl::StrCat("PSK rejected: an unknown user or a wrong key (", gnutls_strerror(rc), ")");
  }
  return absl::StrCat("TLS handshake failed: ", gnutls_strerror(rc));
}

asio::awaitable<absl::Status> TlsSession::Handshake() {
  auto token = [](error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); };
  for (int warnings = 0;;) {
    int rc = gnutls_handshake(session_);
    // Send the flight it produced first (before a failure: its alert).
    error_code ec;
    const bool failed = rc < 0 && rc != GNUTLS_E_AGAIN && rc != GNUTLS_E_INTERRUPTED &&
                        gnutls_error_is_fatal(rc);
    while (!FlushOut(ec) && !ec && !failed) {
      co_await socket_->async_wait(asio::socket_base::wait_write, token(ec));
    }
    if (failed) co_return absl::UnauthenticatedError(HandshakeError(rc));
    if (ec) {
      co_return absl::UnavailableError(
          absl::StrCat("connection lost during the TLS handshake: ", ec.message()));
    }
    if (rc == GNUTLS_E_SUCCESS) {
      handshake_done_ = true;
      co_return absl::OkStatus();
    }
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) {
      co_await socket_->async_wait(asio::socket_base::wait_read, token(ec));
      if (ec) {
        co_return absl::UnavailableError(
            absl::StrCat("connection closed during the TLS handshake: ", ec.message()));
      }
      continue;
    }
    // A warning alert: go on, within reason.
    if (++warnings >= kMaxWarnings) co_return absl::UnauthenticatedError(HandshakeError(rc));
  }
}

std::string TlsSession::Describe() const {
  std::string out;
  if (char* desc = gnutls_session_get_desc(session_)) {
    out = desc;
    gnutls_free(desc);
  }
  if (gnutls_auth_get_type(session_) == GNUTLS_CRD_PSK) {
    const char* user = gnutls_psk_server_get_username(session_);
    absl::StrAppend(&out, ", PSK user '", user ? user : "", "'");
    return out;
  }
  unsigned n = 0;
  const gnutls_datum_t* peers = gnutls_certificate_get_peers(session_, &n);
  if (peers == nullptr || n == 0) return absl::StrCat(out, ", no client certificate");
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) == 0) {
    gnutls_datum_t dn{};
    if (gnutls_x509_crt_import(crt, &peers[0], GNUTLS_X509_FMT_DER) == 0 &&
        gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
      absl::StrAppend(&out, ", client certificate '",
                      std::string(reinterpret_cast<const char*>(dn.data), dn.size), "'");
      gnutls_free(dn.data);
    }
    gnutls_x509_crt_deinit(crt);
  }
  return out;
}

size_t TlsSession::TryRead(std::byte* dst, size_t n, error_code& ec) {
  ec = {};
  size_t got = 0;
  // Every record already received is decrypted in one call: clients send a
  // record per request, and the reader should get all of them at once, as
  // one recv brings them without TLS. It stops before a recv that would
  // only find the socket empty.
  for (int warnings = 0; got < n && !read_error_;) {
    if (got > 0 && Buffered() == 0) break;
    ssize_t r = gnutls_record_recv(session_, dst + got, n - got);
    if (r > 0) {
      got += size_t(r);
      continue;
    }
    if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
      // gnutls may have answered something (a key update) while reading.
      if (out_pos_ < out_.size()) {
        error_code ignored;
        FlushOut(ignored);
      }
      break;
    }
    if (r < 0 && !gnutls_error_is_fatal(int(r)) && ++warnings < kMaxWarnings) continue;
    // The end or an error: reported now if nothing came, else next time.
    // It sticks, since gnutls has invalidated the session and would call
    // anything later an "invalid session".
    Fail(r, read_error_);
  }
  if (got == 0) ec = read_error_;
  return got;
}

asio::awaitable<size_t> TlsSession::ReadSome(std::byte* dst, size_t n, error_code& ec) {
  for (;;) {
    size_t got = TryRead(dst, n, ec);
    if (got > 0 || ec) co_return got;
    co_await socket_->async_wait(asio::socket_base::wait_read,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return 0;
  }
}

asio::awaitable<size_t> TlsSession::Read(std::byte* dst, size_t n, error_code& ec) {
  size_t got = 0;
  ec = {};
  while (got < n && !ec) got += co_await ReadSome(dst + got, n - got, ec);
  co_return got;
}

size_t TlsSession::Buffered() const {
  return gnutls_record_check_pending(session_) + (in_end_ - in_pos_);
}

bool TlsSession::Send(std::vector<asio::const_buffer>& pieces, error_code& ec) {
  ec = {};
  size_t i = 0;  // pieces before i are encrypted
  auto done = [&](bool all) {
    pieces.erase(pieces.begin(), pieces.begin() + i);
    return all;
  };
  for (;;) {
    if (out_.size() - out_pos_ >= kTlsWriteHighWater || (i == pieces.size() && out_pos_ < out_.size())) {
      if (!FlushOut(ec)) return done(false);
    }
    if (i == pieces.size()) return done(true);
    // One record: straight from a large piece, else small pieces packed.
    const void* p;
    size_t len;
    bool direct = pieces[i].size() >= kTlsRecord;
    if (direct) {
      p = pieces[i].data();
      len = kTlsRecord;
    } else {
      stage_.clear();
      while (i < pieces.size() && stage_.size() < kTlsRecord) {
        size_t take = std::min(pieces[i].size(), kTlsRecord - stage_.size());
        const auto* b = static_cast<const std::byte*>(pieces[i].data());
        stage_.insert(stage_.end(), b, b + take);
        pieces[i] += take;
        if (pieces[i].size() == 0) ++i;
      }
      p = stage_.data();
      len = stage_.size();
    }
    ssize_t r = gnutls_record_send(session_, p, len);
    // The push never blocks, so a record is taken whole or not at all.
    if (r != ssize_t(len)) {
      Fail(r < 0 ? r : GNUTLS_E_INTERNAL_ERROR, ec);
      return done(false);
    }
    if (direct) {
      pieces[i] += len;
      if (pieces[i].size() == 0) ++i;
    }
  }
}

asio::awaitable<void> TlsSession::Write(std::span<const std::byte> data, error_code& ec) {
  std::vector<asio::const_buffer> pieces{asio::buffer(data.data(), data.size())};
  while (!Send(pieces, ec) && !ec) {
    co_await socket_->async_wait(asio::socket_base::wait_write,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
  }
}

void TlsSession::Close() {
  if (!handshake_done_) return;
  handshake_done_ = false;
  gnutls_bye(session_, GNUTLS_SHUT_WR);  // queues close_notify in out_
  error_code ignored;
  FlushOut(ignored);
}

}  // namespace ftl::nbd
