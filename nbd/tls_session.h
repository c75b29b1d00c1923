#pragma once
// TlsSession: the TLS layer of one NBD connection, from the NBD_REP_ACK of
// NBD_OPT_STARTTLS to the close (docs/architecture.md, "TLS"). The
// connection reads and writes through it instead of through its socket.
//
// gnutls never blocks and never touches the socket on its own: its
// transport functions move ciphertext between two buffers owned here and the
// socket, without waiting.
//   in_   ciphertext received but not yet decrypted. One recv reads as much
//         as the socket holds (up to kTlsReadAhead), so a TLS record costs
//         no recv of its own (gnutls would read a record header and a body
//         with two recvs). During the handshake it is one record's size, so
//         a client stalled in the handshake makes the daemon hold little.
//   out_  ciphertext encrypted but not yet sent. Send() encrypts pieces of
//         plaintext a record at a time (small pieces, such as a reply header
//         and its 4 KiB of data, are packed into full records) and sends
//         whenever kTlsWriteHighWater bytes are waiting, so the memory a
//         connection holds here is bounded whatever it is asked to send.
// When the socket has nothing to read or no room, the awaitables wait in
// the reactor (socket.async_wait); Send() returns false and the caller waits.
//
// Owns: the gnutls session, in_ and out_. Thread-safety: none; every call
// runs on the connection's strand, like Connection's own members. The
// socket and the credentials must outlive the session. A reader and a
// writer may interleave on the strand (gnutls keeps the two directions
// apart); only one of each at a time.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nbd/asio.h"
#include "nbd/tls_credentials.h"

namespace ftl::nbd {

inline constexpr size_t kTlsReadAhead = 256 << 10;
inline constexpr size_t kTlsHandshakeReadAhead = (16 << 10) + 512;
inline constexpr size_t kTlsWriteHighWater = 256 << 10;
// Plaintext per TLS record (the TLS maximum, 2^14).
inline constexpr size_t kTlsRecord = 16 << 10;

class TlsSession {
 public:
  using error_code = boost::system::error_code;

  // A server session over `socket` with `creds`.
  static absl::StatusOr<std::unique_ptr<TlsSession>> Create(const TlsCredentials& creds,
                                                            Socket* socket);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // The server side of the handshake. An error names why ("client closed the
  // connection during the TLS handshake", "client certificate rejected: ...",
  // "the client sent a fatal alert: ...").
  asio::awaitable<absl::Status> Handshake();
  // After the handshake: "TLS1.3 AES-256-GCM, PSK user 'alice'".
  std::string Describe() const;

  // Reads. Errors come as ec: asio::error::eof when the peer closed (with or
  // without close_notify), errc::protocol_error for a TLS failure
  // (last_error() says which).
  //
  // Up to n decrypted bytes without waiting (every whole record already
  // here); 0 and no ec: nothing yet.
  size_t TryRead(std::byte* dst, size_t n, error_code& ec);
  // At least one byte (or an error).
  asio::awaitable<size_t> ReadSome(std::byte* dst, size_t n, error_code& ec);
  // Exactly n bytes (or an error); returns how many arrived.
  asio::awaitable<size_t> Read(std::byte* dst, size_t n, error_code& ec);
  // Bytes held here that a read will return or decrypt without the socket.
  size_t Buffered() const;

  // Writes. Encrypts and sends `pieces` (consumed from the front: a piece
  // sent in part is advanced) without waiting. True when all of it has left;
  // false when the socket is full (wait for it to be writable and call
  // again with what is left) or on an error (ec set).
  bool Send(std::vector<asio::const_buffer>& pieces, error_code& ec);
  // All of `data`, waiting as needed.
  asio::awaitable<void> Write(std::span<const std::byte> data, error_code& ec);

  // Sends close_notify if the socket takes it now; never waits.
  void Close();

  const std::string& last_error() const { return last_error_; }

 private:
  TlsSession(Socket* socket, bool psk);
  // gnutls transport functions (gnutls_transport_set_*_function).
  static ssize_t Pull(void* self, void* data, size_t len);
  static ssize_t VecPush(void* self, const iovec* iov, int count);
  static int PullTimeout(void* self, unsigned int ms);
  // Sends out_ without waiting: true when empty.
  bool FlushOut(error_code& ec);
  // A failed gnutls call: sets ec and last_error_.
  void Fail(long rc, error_code& ec);
  std::string HandshakeError(int rc) const;

  Socket* socket_;
  const bool psk_;  // PSK credentials (for the handshake's error messages)
  gnutls_session_int* session_ = nullptr;
  bool handshake_done_ = false;
  bool eof_seen_ = false;  // a recv returned 0
  error_code read_error_;  // the end or error a read met; sticky
  std::unique_ptr<std::byte[]> in_;
  size_t in_cap_ = 0;
  size_t in_pos_ = 0, in_end_ = 0;
  std::vector<std::byte> out_;
  size_t out_pos_ = 0;
  std::vector<std::byte> stage_;  // small pieces packed into one record
  std::string last_error_;
};

}  // namespace ftl::nbd
