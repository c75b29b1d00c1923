// TLS in nbd/ (issue 24): the PSK file parser, loading credentials, the
// option rules of the NBD spec's "TLS support" section (pure), the daemon's
// --tls flags, and the server over real sockets with a gnutls client in the
// test: the handshake timeout covers a client that stalls after STARTTLS or
// inside the handshake, and data of every size survives the record packing
// and the bounded send buffer, also when the client reads its replies late.

#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/daemon_options.h"
#include "nbd/options.h"
#include "nbd/server.h"
#include "nbd/tls_credentials.h"
#include "nbd/transmission.h"
#include "nbd_test_volume.h"
#include "status_asserts.h"

namespace ftl::nbd {
namespace {

using daemon::ParseDaemonArgs;
using testing::TestVolume;
constexpr uint64_t kMiB = 1 << 20;
// Key of user "alice" in the tests' PSK file.
constexpr const char* kAliceHex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

std::vector<std::byte> Bytes(std::string_view s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

uint32_t ReplyType(const OptionResult& r) {
  EXPECT_GE(r.reply.size(), 20u);
  return r.reply.size() >= 20 ? GetBe32(r.reply.data() + 12) : 0;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ftld-tls-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(TlsCredentials, ParsesPsktoolFiles) {
  auto keys = TlsCredentials::ParsePskFile("alice:0a0B\n\nbob:ffff00\n");
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ(keys->at("alice"), (std::vector<uint8_t>{0x0a, 0x0b}));
  EXPECT_EQ(keys->at("bob"), (std::vector<uint8_t>{0xff, 0xff, 0x00}));
  // A user name may hold a colon; the key is after the last one.
  EXPECT_EQ(TlsCredentials::ParsePskFile("a:b:01\n")->count("a:b"), 1u);
  for (const char* bad : {"", "\n\n", "alice\n", ":00\n", "alice:\n", "alice:0\n", "alice:zz\n",
                          "alice:00\nalice:11\n"}) {
    EXPECT_FALSE(TlsCredentials::ParsePskFile(bad).ok()) << bad;
  }
  auto dup = TlsCredentials::ParsePskFile("alice:00\nbob:1\n");
  EXPECT_NE(std::string(dup.status().message()).find("line 2"), std::string::npos);
}

TEST(TlsCredentials, LoadRefusesWhatCannotWork) {
  TempDir dir;
  EXPECT_FALSE(TlsCredentials::Load({}).ok());  // neither
  EXPECT_FALSE(TlsCredentials::Load({.certificates_dir = dir.path(), .psk_file = "x"}).ok());
  auto no_cert = TlsCredentials::Load({.certificates_dir = dir.path()});
  ASSERT_FALSE(no_cert.ok());
  EXPECT_NE(std::string(no_cert.status().message()).find("server-cert.pem"), std::string::npos);
  EXPECT_FALSE(TlsCredentials::Load({.certificates_dir = dir.path() + "/none"}).ok());
  // Not PEM.
  dir.File("server-cert.pem", "not a certificate\n");
  dir.File("server-key.pem", "not a key\n");
  EXPECT_FALSE(TlsCredentials::Load({.certificates_dir = dir.path()}).ok());
  // --tls-verify-peer without ca-cert.pem, and with PSK.
  auto no_ca = TlsCredentials::Load({.certificates_dir = dir.path(), .verify_peer = true});
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(std::string(no_ca.status().message()).find("ca-cert.pem"), std::string::npos);
  std::string psk = dir.File("k.psk", std::string("alice:") + kAliceHex + "\n");
  EXPECT_FALSE(TlsCredentials::Load({.psk_file = psk, .verify_peer = true}).ok());
  auto ok = TlsCredentials::Load({.psk_file = psk});
  ASSERT_OK(ok);
  EXPECT_TRUE((*ok)->psk());
  EXPECT_NE((*ok)->FindPsk("alice"), nullptr);
  EXPECT_EQ((*ok)->FindPsk("bob"), nullptr);
  EXPECT_FALSE(TlsCredentials::Load({.psk_file = dir.File("big.psk", std::string(2 << 20, 'a'))}).ok());
}

class TlsOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(exports_.Add({"", "", &vol_, false, true})); }
  OptionResult Handle(uint32_t option, std::span<const std::byte> data = {}) {
    return HandleOption(option, data, exports_, &n_);
  }
  TestVolume vol_{"vol", 16 * kMiB};
  ExportTable exports_;
  Negotiation n_;
};

TEST_F(TlsOptionsTest, OffRefusesStartTlsByPolicy) {
  EXPECT_EQ(ReplyType(Handle(kOptStartTls)), kRepErrPolicy);
  EXPECT_EQ(ReplyType(Handle(kOptStructuredReply)), kRepAck);
}

TEST_F(TlsOptionsTest, RequireRefusesEverythingButStartTlsAndAbort) {
  n_.tls_mode = TlsMode::kRequire;
  const std::vector<std::byte> go = {std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0},
                                     std::byte{0}, std::byte{0}};
  for (uint32_t opt : {kOptList, kOptStructuredReply, kOptListMetaContext, kOptSetMetaContext,
                       uint32_t(77)}) {
    auto r = Handle(opt);
    EXPECT_EQ(ReplyType(r), kRepErrTlsReqd) << opt;
    EXPECT_EQ(r.outcome, OptionOutcome::kContinue);
    EXPECT_FALSE(r.error.empty());  // logged
  }
  EXPECT_EQ(ReplyType(Handle(kOptInfo, go)), kRepErrTlsReqd);
  EXPECT_EQ(ReplyType(Handle(kOptGo, go)), kRepErrTlsReqd);
  EXPECT_FALSE(n_.structured_replies);
  // EXPORT_NAME cannot be refused with an error: close.
  auto en = Handle(kOptExportName, Bytes(""));
  EXPECT_EQ(en.outcome, OptionOutcome::kClose);
  EXPECT_TRUE(en.reply.empty());
  EXPECT_FALSE(en.error.empty());
  EXPECT_TRUE(TlsRequiredFor(kOptInfo, n_));
  EXPECT_FALSE(TlsRequiredFor(kOptStartTls, n_));
  EXPECT_FALSE(TlsRequiredFor(kOptAbort, n_));
  // STARTTLS with data is invalid; without, acknowledged.
  EXPECT_EQ(ReplyType(Handle(kOptStartTls, Bytes("x"))), kRepErrInvalid);
  auto st = Handle(kOptStartTls);
  EXPECT_EQ(ReplyType(st), kRepAck);
  EXPECT_EQ(st.outcome, OptionOutcome::kStartTls);
  // After the handshake (the connection sets tls_active) all options work,
  // and a second STARTTLS is invalid.
  n_.tls_active = true;
  EXPECT_FALSE(TlsRequiredFor(kOptInfo, n_));
  EXPECT_EQ(ReplyType(Handle(kOptStartTls)), kRepErrInvalid);
  EXPECT_EQ(ReplyType(Handle(kOptStructuredReply)), kRepAck);
  EXPECT_EQ(Handle(kOptGo, go).outcome, OptionOutcome::kTransmission);
  EXPECT_EQ(ReplyType(Handle(kOptAbort)), kRepAck);
}

TEST_F(TlsOptionsTest, StartTlsForgetsWhatWasNegotiatedBefore) {
  n_.tls_mode = TlsMode::kOn;
  n_.no_zeroes = true;
  EXPECT_EQ(ReplyType(Handle(kOptStructuredReply)), kRepAck);
  n_.base_allocation = true;
  n_.meta_volume = &vol_;
  EXPECT_EQ(Handle(kOptStartTls).outcome, OptionOutcome::kStartTls);
  EXPECT_FALSE(n_.structured_replies);
  EXPECT_FALSE(n_.base_allocation);
  EXPECT_EQ(n_.meta_volume, nullptr);
  EXPECT_TRUE(n_.no_zeroes);  // a handshake flag, not an option
  EXPECT_EQ(n_.tls_mode, TlsMode::kOn);
}

TEST(TlsDaemonOptions, Flags) {
  auto o = ParseDaemonArgs({"x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->tls, "off");
  o = ParseDaemonArgs({"--tls=require", "--tls-certificates", "/etc/pki/ftld", "--tls-verify-peer", "x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->tls, "require");
  EXPECT_EQ(o->tls_certificates, "/etc/pki/ftld");
  EXPECT_TRUE(o->tls_verify_peer);
  o = ParseDaemonArgs({"--tls", "on", "--tls-psk=/k.psk", "x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->tls_psk, "/k.psk");
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--tls=yes", "x"},
           {"--tls=on", "x"},
           {"--tls-psk", "/k", "x"},
           {"--tls=on", "--tls-psk", "/k", "--tls-certificates", "/d", "x"},
           {"--tls=on", "--tls-psk", "/k", "--tls-verify-peer", "x"},
           {"--tls=on", "--tls-certificates", "", "x"},
           {"--tls-verify-peer=1", "x"}}) {
    EXPECT_FALSE(ParseDaemonArgs(bad).ok()) << bad[0];
  }
}

// The server with --tls=require and a PSK, and a blocking gnutls client.
class TlsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    psk_path_ = dir_.File("keys.psk", std::string("alice:") + kAliceHex + "\n");
    auto creds = TlsCredentials::Load({.psk_file = psk_path_});
    ASSERT_OK(creds);
    ASSERT_OK(exports_.Add({"", "", &vol_, false, true}));
    ServerOptions o;
    o.port = 0;
    o.tls_mode = TlsMode::kRequire;
    o.tls = std::move(*creds);
    o.handshake_timeout = std::chrono::milliseconds(500);
    server_ = std::make_unique<Server>(&exports_, o);
    ASSERT_OK(server_->Listen());
    server_->Start();
  }
  void TearDown() override {
    for (gnutls_session_t s : sessions_) gnutls_deinit(s);
    for (gnutls_psk_client_credentials_t c : creds_) gnutls_psk_free_client_credentials(c);
    server_->Shutdown(std::chrono::seconds(5));
    server_->Join();
  }

  // Connects, reads the greeting, sends the client flags.
  int Dial(int rcvbuf = 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->tcp_port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{.tv_sec = 20, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::byte greeting[18];
    EXPECT_EQ(::recv(fd, greeting, sizeof greeting, MSG_WAITALL), 18);
    std::vector<std::byte> flags;
    BeWriter(&flags).U32(kClientFixedNewstyle | kClientNoZeroes);
    EXPECT_EQ(::send(fd, flags.data(), flags.size(), MSG_NOSIGNAL), 4);
    return fd;
  }
  // Sends NBD_OPT_STARTTLS in plaintext; the reply type.
  static uint32_t PlainStartTls(int fd) {
    std::vector<std::byte> opt;
    BeWriter w(&opt);
    w.U64(kOptMagic);
    w.U32(kOptStartTls);
    w.U32(0);
    EXPECT_EQ(::send(fd, opt.data(), opt.size(), MSG_NOSIGNAL), 16);
    std::byte reply[20];
    if (::recv(fd, reply, sizeof reply, MSG_WAITALL) != 20) return 0;
    return GetBe32(reply + 12);
  }
  // STARTTLS and a PSK handshake as `user` with `key_hex`; nullptr if it failed.
  gnutls_session_t StartTls(int fd, const char* user = "alice", const char* key_hex = kAliceHex) {
    EXPECT_EQ(PlainStartTls(fd), kRepAck);
    gnutls_psk_client_credentials_t cred;
    gnutls_psk_allocate_client_credentials(&cred);
    creds_.push_back(cred);
    gnutls_datum_t key{reinterpret_cast<unsigned char*>(const_cast<char*>(key_hex)),
                       unsigned(strlen(key_hex))};
    EXPECT_EQ(gnutls_psk_set_client_credentials(cred, user, &key, GNUTLS_PSK_KEY_HEX), 0);
    gnutls_session_t s;
    gnutls_init(&s, GNUTLS_CLIENT);
    sessions_.push_back(s);
    EXPECT_EQ(gnutls_priority_set_direct(s, "NORMAL:+ECDHE-PSK:+PSK", nullptr), 0);
    gnutls_credentials_set(s, GNUTLS_CRD_PSK, cred);
    gnutls_transport_set_int(s, fd);
    int rc;
    do {
      rc = gnutls_handshake(s);
    } while (rc < 0 && !gnutls_error_is_fatal(rc));
    return rc == 0 ? s : nullptr;
  }
  static void Send(gnutls_session_t s, std::span<const std::byte> b) {
    size_t sent = 0;
    while (sent < b.size()) {
      ssize_t r = gnutls_record_send(s, b.data() + sent, b.size() - sent);
      ASSERT_GT(r, 0) << gnutls_strerror(int(r));
      sent += size_t(r);
    }
  }
  static bool Recv(gnutls_session_t s, std::byte* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      ssize_t r = gnutls_record_recv(s, out + got, n - got);
      if (r <= 0) return false;
      got += size_t(r);
    }
    return true;
  }
  // Option replies until the final one; its type.
  static uint32_t FinalReply(gnutls_session_t s) {
    for (;;) {
      std::byte h[20];
      if (!Recv(s, h, 20)) return 0;
      uint32_t type = GetBe32(h + 12);
      std::vector<std::byte> d(GetBe32(h + 16));
      if (!Recv(s, d.data(), d.size())) return 0;
      if (type != kRepInfo && type != kRepServer && type != kRepMetaContext) return type;
    }
  }
  static void SendOption(gnutls_session_t s, uint32_t opt, std::span<const std::byte> data) {
    std::vector<std::byte> out;
    BeWriter w(&out);
    w.U64(kOptMagic);
    w.U32(opt);
    w.U32(uint32_t(data.size()));
    w.Bytes(data);
    Send(s, out);
  }
  static void Go(gnutls_session_t s) {
    std::vector<std::byte> d(6);  // export "", no info items
    SendOption(s, kOptGo, d);
    ASSERT_EQ(FinalReply(s), kRepAck);
  }
  static void Request(gnutls_session_t s, uint16_t type, uint64_t cookie, uint64_t offset,
                      uint32_t length, std::span<const std::byte> payload = {}) {
    std::array<std::byte, kRequestSize> raw;
    EncodeRequest({0, type, cookie, offset, length}, raw);
    std::vector<std::byte> out(raw.begin(), raw.end());
    out.insert(out.end(), payload.begin(), payload.end());
    Send(s, out);
  }
  // Whether the server closes `fd` within `limit`.
  static bool ClosedWithin(int fd, std::chrono::seconds limit) {
    timeval tv{.tv_sec = limit.count(), .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::byte b[4096];
    for (;;) {
      ssize_t r = ::recv(fd, b, sizeof b, 0);
      if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
      if (r < 0) return false;  // timed out
    }
  }

  TempDir dir_;
  std::string psk_path_;
  TestVolume vol_{"vol", 64 * kMiB};
  ExportTable exports_;
  std::unique_ptr<Server> server_;
  std::vector<gnutls_session_t> sessions_;
  std::vector<gnutls_psk_client_credentials_t> creds_;
};

TEST_F(TlsServerTest, HandshakeTimeoutCoversTheTlsHandshake) {
  // Silent after STARTTLS was acknowledged.
  int a = Dial();
  EXPECT_EQ(PlainStartTls(a), kRepAck);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClosedWithin(a, std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  ::close(a);
  // Half a record of a ClientHello, then silence.
  int b = Dial();
  EXPECT_EQ(PlainStartTls(b), kRepAck);
  const unsigned char half[] = {0x16, 0x03, 0x01, 0x01, 0x00, 0x01, 0x00};
  EXPECT_EQ(::send(b, half, sizeof half, MSG_NOSIGNAL), ssize_t(sizeof half));
  EXPECT_TRUE(ClosedWithin(b, std::chrono::seconds(10)));
  ::close(b);
  // The server still serves.
  int c = Dial();
  gnutls_session_t s = StartTls(c);
  ASSERT_NE(s, nullptr);
  Go(s);
  ::close(c);
}

TEST_F(TlsServerTest, WrongKeyIsRefusedAndTheServerServesOn) {
  int a = Dial();
  EXPECT_EQ(StartTls(a, "alice", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"),
            nullptr);
  ::close(a);
  int b = Dial();
  EXPECT_EQ(StartTls(b, "mallory"), nullptr);
  ::close(b);
  int c = Dial();
  ASSERT_NE(StartTls(c), nullptr);
  ::close(c);
}

TEST_F(TlsServerTest, DataOfEverySizeThroughRecordsAndALateReader) {
  // A small receive buffer and a client that sends everything before it
  // reads a reply: the server's sends hit a full socket and must wait.
  int fd = Dial(8 << 10);
  gnutls_session_t s = StartTls(fd);
  ASSERT_NE(s, nullptr);
  // Structured replies after TLS, so reads come back as data chunks.
  SendOption(s, kOptStructuredReply, {});
  ASSERT_EQ(FinalReply(s), kRepAck);
  Go(s);
  std::mt19937_64 rng(24);
  std::vector<std::byte> image(8 * kMiB);
  for (auto& b : image) b = std::byte(rng());
  // Writes of mixed sizes cover the image (sizes cross record boundaries).
  const uint32_t sizes[] = {4096, 512, 131072, 16384, 16896, 1 << 20, 65536, 3584};
  uint64_t off = 0, cookie = 1;
  // All writes first; their replies (16 bytes each) wait in the socket.
  for (size_t i = 0; off < image.size(); ++i) {
    uint32_t len = uint32_t(std::min<uint64_t>(sizes[i % std::size(sizes)], image.size() - off));
    Request(s, kCmdWrite, cookie++, off, len, std::span(image).subspan(off, len));
    off += len;
  }
  const uint64_t writes = cookie - 1;
  for (uint64_t i = 0; i < writes; ++i) {
    std::byte r[16];
    ASSERT_TRUE(Recv(s, r, 16));
    ASSERT_EQ(GetBe32(r), kSimpleReplyMagic);
    ASSERT_EQ(GetBe32(r + 4), 0u);
  }
  // Pipelined reads of the whole image, 64 at a time, read back late.
  std::vector<std::byte> back(image.size());
  uint64_t read_off = 0;
  while (read_off < image.size()) {
    std::vector<std::pair<uint64_t, uint32_t>> batch;
    for (size_t i = 0; i < 64 && read_off < image.size(); ++i) {
      uint32_t len = uint32_t(std::min<uint64_t>(sizes[(i * 3) % std::size(sizes)],
                                                 image.size() - read_off));
      Request(s, kCmdRead, 1000 + batch.size(), read_off, len);
      batch.push_back({read_off, len});
      read_off += len;
    }
    size_t done = 0;
    while (done < batch.size()) {
      std::byte h[20];
      ASSERT_TRUE(Recv(s, h, 20));
      ASSERT_EQ(GetBe32(h), kStructuredReplyMagic);
      uint16_t type = GetBe16(h + 6);
      uint64_t c = GetBe64(h + 8);
      uint32_t len = GetBe32(h + 16);
      ASSERT_LT(c - 1000, batch.size());
      auto [at, n] = batch[c - 1000];
      if (type == kReplyTypeOffsetData) {
        std::byte o[8];
        ASSERT_TRUE(Recv(s, o, 8));
        uint64_t data_off = GetBe64(o);
        ASSERT_GE(data_off, at);
        ASSERT_LE(data_off + len - 8, at + n);
        ASSERT_TRUE(Recv(s, back.data() + data_off, len - 8));
      } else {
        std::vector<std::byte> skip(len);
        ASSERT_TRUE(Recv(s, skip.data(), len));
        ASSERT_EQ(type, kReplyTypeNone) << "chunk type " << type;
      }
      if (GetBe16(h + 4) & kReplyFlagDone) ++done;
    }
  }
  EXPECT_TRUE(back == image);
  Request(s, kCmdDisc, 0, 0, 0);
  gnutls_bye(s, GNUTLS_SHUT_WR);
  ::close(fd);
}

}  // namespace
}  // namespace ftl::nbd
