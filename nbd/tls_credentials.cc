#include "nbd/tls_credentials.h"

#include <gnutls/gnutls.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ftl::nbd {
namespace {

// TLS 1.3 and 1.2 only (NBD spec, "TLS versions": 1.2 MUST, older SHOULD
// NOT by default). PSK adds the PSK key exchanges, (EC)DHE first, and
// decides by the server's order: a TLS 1.3 external PSK is bound to
// SHA-256, which rules out AES-256-GCM, and in gnutls's default order
// ChaCha20 comes next, at a tenth of AES-128-GCM's speed on a CPU with AES
// instructions (docs/decisions.md, "Issue 24: TLS").
constexpr const char* kPriorityX509 = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
constexpr const char* kPriorityPsk =
    "NORMAL:%SERVER_PRECEDENCE:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:+ECDHE-PSK:+DHE-PSK:+PSK:"
    "-CHACHA20-POLY1305:+CHACHA20-POLY1305";

std::string Join(const std::string& dir, const char* name) {
  return dir.empty() || dir.back() == '/' ? dir + name : absl::StrCat(dir, "/", name);
}

absl::Status GnutlsError(const std::string& what, int rc) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", gnutls_strerror(rc)));
}

// NotFound / InvalidArgument if `path` is not a readable regular file.
absl::Status CheckReadable(const std::string& path, const std::string& role) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(role, " ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(role, " ", path, ": not a regular file"));
  }
  std::ifstream f(path);
  if (!f) return absl::InvalidArgumentError(absl::StrCat(role, " ", path, ": cannot be read"));
  return absl::OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// gnutls_psk_server_credentials_function: the key of `username`, copied
// into gnutls-owned memory. -1 (unknown user) fails the handshake.
int LookupPsk(gnutls_session_t session, const char* username, gnutls_datum_t* key) {
  const auto* creds = static_cast<const TlsCredentials*>(gnutls_session_get_ptr(session));
  const std::vector<uint8_t>* k = creds ? creds->FindPsk(username) : nullptr;
  if (k == nullptr) return -1;
  key->data = static_cast<unsigned char*>(gnutls_malloc(k->size()));
  if (key->data == nullptr) return -1;
  std::memcpy(key->data, k->data(), k->size());
  key->size = unsigned(k->size());
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsCredentials>> TlsCredentials::Load(const TlsSettings& settings) {
  if (settings.certificates_dir.empty() == settings.psk_file.empty()) {
    return absl::InvalidArgumentError("TLS needs exactly one of a certificates directory and a PSK file");
  }
  if (settings.verify_peer && settings.certificates_dir.empty()) {
    return absl::InvalidArgumentError("verifying client certificates needs X.509 certificates");
  }
  std::unique_ptr<TlsCredentials> c(new TlsCredentials(settings));
  absl::Status s = settings.psk_file.empty() ? c->LoadX509() : c->LoadPsk();
  if (!s.ok()) return s;
  const char* where = nullptr;
  int rc = gnutls_priority_init(&c->priority_, c->psk() ? kPriorityPsk : kPriorityX509, &where);
  if (rc != GNUTLS_E_SUCCESS) return GnutlsError("TLS priority string", rc);
  return c;
}

TlsCredentials::~TlsCredentials() {
  if (x509_ != nullptr) gnutls_certificate_free_credentials(x509_);
  if (psk_ != nullptr) gnutls_psk_free_server_credentials(psk_);
  if (priority_ != nullptr) gnutls_priority_deinit(priority_);
  for (auto& [user, key] : psk_keys_) std::fill(key.begin(), key.end(), 0);
}

absl::Status TlsCredentials::LoadX509() {
  const std::string& dir = settings_.certificates_dir;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("--tls-certificates ", dir, ": not a directory"));
  }
  const std::string ca = Join(dir, kTlsCaCert), crl = Join(dir, kTlsCaCrl),
                    cert = Join(dir, kTlsServerCert), key = Join(dir, kTlsServerKey);
  for (auto [path, role] : {std::pair{cert, "server certificate"}, {key, "server key"}}) {
    if (absl::Status s = CheckReadable(path, role); !s.ok()) return s;
  }
  if (settings_.verify_peer && !Exists(ca)) {
    return absl::NotFoundError(absl::StrCat(
        "--tls-verify-peer needs the CA that signs client certificates in ", ca));
  }
  int rc = gnutls_certificate_allocate_credentials(&x509_);
  if (rc != GNUTLS_E_SUCCESS) return GnutlsError("TLS credentials", rc);
  if (Exists(ca)) {
    rc = gnutls_certificate_set_x509_trust_file(x509_, ca.c_str(), GNUTLS_X509_FMT_PEM);
    if (rc < 0) return GnutlsError(ca, rc);
    if (rc == 0) return absl::InvalidArgumentError(absl::StrCat(ca, ": no certificate in it"));
  }
  if (Exists(crl)) {
    rc = gnutls_certificate_set_x509_crl_file(x509_, crl.c_str(), GNUTLS_X509_FMT_PEM);
    if (rc < 0) return GnutlsError(crl, rc);
  }
  rc = gnutls_certificate_set_x509_key_file(x509_, cert.c_str(), key.c_str(), GNUTLS_X509_FMT_PEM);
  if (rc < 0) return GnutlsError(absl::StrCat(cert, " with ", key), rc);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::vector<uint8_t>>> TlsCredentials::ParsePskFile(
    const std::string& text) {
  std::map<std::string, std::vector<uint8_t>> keys;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty()) continue;
    auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", what,
                                                      " (psktool's format is username:hexkey)"));
    };
    size_t colon = line.rfind(':');
    if (colon == absl::string_view::npos) return bad("no ':'");
    std::string user(line.substr(0, colon));
    absl::string_view hex = line.substr(colon + 1);
    if (user.empty()) return bad("empty username");
    if (hex.empty() || hex.size() % 2 != 0) return bad("the key is not an even number of hex digits");
    std::vector<uint8_t> key(hex.size() / 2);
    for (size_t i = 0; i < key.size(); ++i) {
      int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) return bad("the key is not hex");
      key[i] = uint8_t(hi << 4 | lo);
    }
    if (!keys.emplace(user, std::move(key)).second) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": user '", user,
                                                     "' appears twice"));
    }
  }
  if (keys.empty()) return absl::InvalidArgumentError("no keys in it");
  return keys;
}

absl::Status TlsCredentials::LoadPsk() {
  const std::string& path = settings_.psk_file;
  if (absl::Status s = CheckReadable(path, "--tls-psk"); !s.ok()) return s;
  std::ifstream f(path, std::ios::binary);
  f.seekg(0, std::ios::end);
  auto size = uint64_t(std::max<std::streamoff>(0, f.tellg()));
  if (size > kMaxPskFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-psk ", path, ": ", size, " bytes; at most ", kMaxPskFileBytes));
  }
  f.seekg(0);
  std::ostringstream text;
  text << f.rdbuf();
  auto keys = ParsePskFile(text.str());
  if (!keys.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-psk ", path, ": ", keys.status().message()));
  }
  psk_keys_ = std::move(*keys);
  int rc = gnutls_psk_allocate_server_credentials(&psk_);
  if (rc != GNUTLS_E_SUCCESS) return GnutlsError("TLS PSK credentials", rc);
  gnutls_psk_set_server_credentials_function(psk_, LookupPsk);
  // DHE-PSK (TLS 1.2) needs group parameters; the RFC 7919 ones gnutls knows.
  gnutls_psk_set_server_known_dh_params(psk_, GNUTLS_SEC_PARAM_MEDIUM);
  return absl::OkStatus();
}

const std::vector<uint8_t>* TlsCredentials::FindPsk(const std::string& username) const {
  auto it = psk_keys_.find(username);
  return it == psk_keys_.end() ? nullptr : &it->second;
}

absl::Status TlsCredentials::Configure(gnutls_session_t session) const {
  gnutls_session_set_ptr(session, const_cast<TlsCredentials*>(this));
  int rc = gnutls_priority_set(session, priority_);
  if (rc != GNUTLS_E_SUCCESS) return GnutlsError("TLS priorities", rc);
  if (psk_ != nullptr) {
    rc = gnutls_credentials_set(session, GNUTLS_CRD_PSK, psk_);
  } else {
    rc = gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, x509_);
    if (settings_.verify_peer) {
      gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
      // Without the list of CA names a client shows the certificate it has
      // rather than none, so a wrong one is logged as what it is.
      gnutls_certificate_send_x509_rdn_sequence(session, 1);
      // Checked during the handshake against ca-cert.pem (and ca-crl.pem);
      // no host name: a client certificate names a client, not this host.
      gnutls_session_set_verify_cert(session, nullptr, 0);
    }
  }
  if (rc != GNUTLS_E_SUCCESS) return GnutlsError("TLS credentials", rc);
  return absl::OkStatus();
}

std::string TlsCredentials::Describe() const {
  if (psk_ != nullptr) {
    return absl::StrCat("PSK from ", settings_.psk_file, " (", psk_keys_.size(),
                        psk_keys_.size() == 1 ? " user)" : " users)");
  }
  return absl::StrCat("X.509 certificates from ", settings_.certificates_dir,
                      settings_.verify_peer ? ", client certificates verified"
                                            : ", client certificates not asked for");
}

}  // namespace ftl::nbd
