#pragma once
// TlsCredentials: what the server proves itself with and checks clients
// against, loaded once at start (ftld --tls-certificates / --tls-psk,
// docs/decisions.md, "Issue 24: TLS"):
//   X.509  DIR/server-cert.pem and DIR/server-key.pem (required),
//          DIR/ca-cert.pem (required with verify_peer: the CA client
//          certificates must be signed by), DIR/ca-crl.pem (optional), the
//          layout qemu-nbd's tls-creds-x509 and nbdkit --tls-certificates use;
//   PSK    a psktool key file: one "username:hexkey" per line, read into
//          memory here, so a handshake never touches the file system.
// It also owns the priority string (TLS 1.3 and 1.2 only, as the NBD spec
// asks) and applies all of it to each new session (Configure).
//
// Owns: the gnutls credentials and priority cache, and the PSK keys.
// Thread-safety: immutable after Load; Configure and the PSK lookup it
// installs run on any thread at once (gnutls credentials are read-only once
// set up). Must outlive every session configured with it.
// gnutls types are opaque here so that nbd/ headers never include gnutls.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct gnutls_session_int;
struct gnutls_certificate_credentials_st;
struct gnutls_psk_server_credentials_st;
struct gnutls_priority_st;

namespace ftl::nbd {

struct TlsSettings {
  std::string certificates_dir;  // X.509 (exactly one of the two)
  std::string psk_file;          // PSK
  bool verify_peer = false;      // X.509 only: clients must show a certificate the CA signed
};

// The file names inside a --tls-certificates directory.
inline constexpr const char* kTlsCaCert = "ca-cert.pem";
inline constexpr const char* kTlsCaCrl = "ca-crl.pem";
inline constexpr const char* kTlsServerCert = "server-cert.pem";
inline constexpr const char* kTlsServerKey = "server-key.pem";
// A PSK file larger than this is refused (psktool writes ~80 bytes a key).
inline constexpr uint64_t kMaxPskFileBytes = 1 << 20;

class TlsCredentials {
 public:
  // InvalidArgument / NotFound naming the file and what is wrong with it.
  static absl::StatusOr<std::unique_ptr<TlsCredentials>> Load(const TlsSettings& settings);
  ~TlsCredentials();
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  // Sets credentials, priorities, client-certificate policy and the session
  // pointer (the PSK lookup finds `this` through it) on a new server session.
  absl::Status Configure(gnutls_session_int* session) const;

  bool psk() const { return psk_ != nullptr; }
  bool verify_peer() const { return settings_.verify_peer; }
  // "X.509 certificates from DIR, client certificates verified" / "PSK from FILE (3 users)".
  std::string Describe() const;

  // The key of a PSK user, or nullptr (the handshake then fails).
  const std::vector<uint8_t>* FindPsk(const std::string& username) const;

  // Parses psktool's format; InvalidArgument naming the line. Exposed for tests.
  static absl::StatusOr<std::map<std::string, std::vector<uint8_t>>> ParsePskFile(
      const std::string& text);

 private:
  explicit TlsCredentials(TlsSettings settings) : settings_(std::move(settings)) {}
  absl::Status LoadX509();
  absl::Status LoadPsk();

  TlsSettings settings_;
  gnutls_certificate_credentials_st* x509_ = nullptr;
  gnutls_psk_server_credentials_st* psk_ = nullptr;
  gnutls_priority_st* priority_ = nullptr;
  std::map<std::string, std::vector<uint8_t>> psk_keys_;
};

}  // namespace ftl::nbd
