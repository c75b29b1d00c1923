// Issue 24 in process: the socket-activation environment, the new ftld
// flags, the NBD server adopting inherited listeners and serving a given
// connection, the per-export request counters, the Prometheus text format,
// the HTTP request parsing of the metrics endpoint, and a whole collection
// over a real pool. The real daemon under real clients: tests/clients/
// ftld_activation.py and ftld_metrics.py.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <chrono>
#include <string>
#include <thread>

#include "daemon/activation.h"
#include "daemon/daemon_options.h"
#include "ftl/media.h"
#include "ftl/pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/collector.h"
#include "metrics/exposition.h"
#include "metrics/metrics_server.h"
#include "nbd/request_metrics.h"
#include "nbd/server.h"
#include "nbd_test_volume.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ListenEnv, OnlyForThisProcess) {
  auto none = daemon::ParseListenEnv(nullptr, "2", nullptr, 42);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->fds.empty());
  auto other = daemon::ParseListenEnv("41", "2", nullptr, 42);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->fds.empty());
  auto two = daemon::ParseListenEnv("42", "2", "nbd", 42);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->fds, (std::vector<int>{3, 4}));
  EXPECT_EQ(two->names, (std::vector<std::string>{"nbd", ""}));
  auto named = daemon::ParseListenEnv("42", "2", "a:b", 42);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->names, (std::vector<std::string>{"a", "b"}));
  auto zero = daemon::ParseListenEnv("42", "0", nullptr, 42);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->fds.empty());
}

TEST(ListenEnv, MalformedIsAnError) {
  EXPECT_FALSE(daemon::ParseListenEnv("x", "1", nullptr, 42).ok());
  EXPECT_FALSE(daemon::ParseListenEnv("0", "1", nullptr, 42).ok());
  EXPECT_FALSE(daemon::ParseListenEnv("42", nullptr, nullptr, 42).ok());
  EXPECT_FALSE(daemon::ParseListenEnv("42", "-1", nullptr, 42).ok());
  EXPECT_FALSE(daemon::ParseListenEnv("42", "1x", nullptr, 42).ok());
  EXPECT_FALSE(daemon::ParseListenEnv("42", "65", nullptr, 42).ok());
  EXPECT_TRUE(daemon::ParseListenEnv("42", "64", nullptr, 42).ok());
}

TEST(DaemonArgs, StdinControlAndMetrics) {
  auto s = daemon::ParseDaemonArgs({"--stdin", "pool.img"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->stdin_mode);
  EXPECT_FALSE(s->control_enabled);  // --stdin: no control socket by default
  EXPECT_FALSE(s->tcp_enabled());
  s = daemon::ParseDaemonArgs({"--stdin", "--control", "/tmp/c.sock", "pool.img"});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->control_enabled);
  EXPECT_FALSE(daemon::ParseDaemonArgs({"--stdin", "--port", "1", "pool.img"}).ok());
  EXPECT_FALSE(daemon::ParseDaemonArgs({"--stdin", "--unix", "/tmp/s", "pool.img"}).ok());
  EXPECT_FALSE(daemon::ParseDaemonArgs({"--no-control", "--control", "/c", "pool.img"}).ok());
  s = daemon::ParseDaemonArgs({"--no-control", "--exit-with-parent", "pool.img"});
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->control_enabled);
  EXPECT_TRUE(s->exit_with_parent);
  EXPECT_FALSE(s->metrics_address.has_value());  // off by default

  struct Case {
    const char* arg;
    const char* address;  // nullptr: refused
    uint16_t port;
  } cases[] = {{"9100", "127.0.0.1", 9100},   {"127.0.0.1:0", "127.0.0.1", 0},
               {"0.0.0.0:9100", "0.0.0.0", 9100}, {"[::1]:9100", "::1", 9100},
               {"::1:9100", nullptr, 0},       {"[::1]", nullptr, 0},
               {"127.0.0.1:65536", nullptr, 0}, {":9100", nullptr, 0},
               {"host:", nullptr, 0},          {"", nullptr, 0}};
  for (const Case& c : cases) {
    auto m = daemon::ParseDaemonArgs({"--metrics", c.arg, "pool.img"});
    if (c.address == nullptr) {
      EXPECT_FALSE(m.ok()) << c.arg;
      continue;
    }
    ASSERT_TRUE(m.ok()) << c.arg << ": " << m.status();
    EXPECT_EQ(*m->metrics_address, c.address) << c.arg;
    EXPECT_EQ(m->metrics_port, c.port) << c.arg;
  }
}

TEST(RequestMetrics, BucketsAndErrnos) {
  nbd::RequestMetrics all;
  nbd::ExportMetrics* m = all.For("", "ftl0");
  EXPECT_EQ(m, all.For("", "ftl0"));
  EXPECT_NE(m, all.For("ftl0", "ftl0"));
  m->Record(nbd::MetricOp::kWrite, 10'000, true, 4096);      // le 10 us (inclusive)
  m->Record(nbd::MetricOp::kWrite, 10'001, true, 4096);      // le 25 us
  m->Record(nbd::MetricOp::kWrite, 50'000'000'000, false, 4096);  // +Inf; error: no bytes
  const nbd::OpMetrics& w = m->op(nbd::MetricOp::kWrite);
  EXPECT_EQ(w.requests.load(), 3u);
  EXPECT_EQ(w.errors.load(), 1u);
  EXPECT_EQ(w.bytes.load(), 8192u);
  EXPECT_EQ(w.latency[0].load(), 1u);
  EXPECT_EQ(w.latency[1].load(), 1u);
  EXPECT_EQ(w.latency[nbd::kLatencyBuckets - 1].load(), 1u);
  EXPECT_EQ(w.latency_sum_ns.load(), 50'000'020'001u);
  m->RecordError(nbd::kENoSpc);
  m->RecordError(12345);
  EXPECT_EQ(m->errors_by_errno(4), 1u);  // kMetricErrnos[4] is ENOSPC
  EXPECT_EQ(nbd::kMetricErrnos[4], nbd::kENoSpc);
  EXPECT_EQ(m->errors_by_errno(nbd::kMetricErrnos.size()), 1u);  // "other"
  EXPECT_EQ(all.All().size(), 2u);
  EXPECT_EQ(nbd::MetricOpOf(nbd::kCmdWriteZeroes), nbd::MetricOp::kWriteZeroes);
  EXPECT_STREQ(nbd::MetricOpName(nbd::MetricOp::kBlockStatus), "block_status");
}

TEST(Exposition, EscapesAndHistograms) {
  EXPECT_EQ(metrics::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  metrics::Exposition e;
  e.Family("x_total", "counter", "help with \\ and\nnewline");
  e.Sample("x_total", {{"export", "we\"ird"}}, uint64_t(7));
  e.Sample("x_total", {}, 0.25);
  e.Family("h_seconds", "histogram", "h");
  uint64_t counts[] = {1, 0, 2};
  uint64_t bounds[] = {10'000, 2'500'000'000};
  e.Histogram("h_seconds", {{"op", "read"}}, counts, bounds, 1.5);
  EXPECT_EQ(e.text(),
            "# HELP x_total help with \\\\ and\\nnewline\n"
            "# TYPE x_total counter\n"
            "x_total{export=\"we\\\"ird\"} 7\n"
            "x_total 0.25\n"
            "# HELP h_seconds h\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{op=\"read\",le=\"1e-05\"} 1\n"
            "h_seconds_bucket{op=\"read\",le=\"2.5\"} 1\n"
            "h_seconds_bucket{op=\"read\",le=\"+Inf\"} 3\n"
            "h_seconds_sum{op=\"read\"} 1.5\n"
            "h_seconds_count{op=\"read\"} 3\n");
}

TEST(MetricsHttp, RequestHeads) {
  auto st = [](std::string_view head) { return metrics::ParseRequestHead(head).status; };
  EXPECT_EQ(st("GET /metrics HTTP/1.1\r\nHost: x\r\n"), 200);
  EXPECT_EQ(st("GET /metrics?name[]=x HTTP/1.0\r\n"), 200);
  EXPECT_TRUE(metrics::ParseRequestHead("HEAD /metrics HTTP/1.1\r\n").head_only);
  EXPECT_EQ(st("GET / HTTP/1.1\r\n"), 404);
  EXPECT_EQ(st("GET /metricsx HTTP/1.1\r\n"), 404);
  EXPECT_EQ(st("POST /metrics HTTP/1.1\r\n"), 405);
  EXPECT_EQ(st("GET /metrics HTTP/2.0\r\n"), 505);
  EXPECT_EQ(st("GET /metrics\r\n"), 400);
  EXPECT_EQ(st("GET  /metrics HTTP/1.1\r\n"), 400);
  EXPECT_EQ(st(""), 400);
  EXPECT_EQ(st("\x16\x03\x01 binary"), 400);
  std::string r = metrics::Response(200, "abc", false);
  EXPECT_THAT(r, HasSubstr("Content-Length: 3\r\n"));
  EXPECT_THAT(r, HasSubstr("Connection: close\r\n\r\nabc"));
  EXPECT_THAT(r, HasSubstr(metrics::kContentType));
  r = metrics::Response(200, "abc", true);
  EXPECT_THAT(r, HasSubstr("Content-Length: 3\r\n"));
  EXPECT_THAT(r, Not(HasSubstr("abc")));
  EXPECT_THAT(metrics::Response(405, "", false), HasSubstr("Allow: GET, HEAD\r\n"));
}

// A listening TCP socket on 127.0.0.1:0, as systemd would pass it.
int ListeningSocket(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

std::string ReadGreeting(int fd) {
  char buf[8] = {};
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = ::recv(fd, buf + got, sizeof buf - got, 0);
    if (n <= 0) break;
    got += size_t(n);
  }
  return std::string(buf, got);
}

class ServerAdoptTest : public ::testing::Test {
 protected:
  nbd::testing::TestVolume volume_{"vol", 1 << 20};
  nbd::ExportTable exports_;
  void SetUp() override {
    ASSERT_TRUE(exports_.Add({.name = "", .volume = &volume_}).ok());
  }
};

TEST_F(ServerAdoptTest, ServesAnInheritedListener) {
  uint16_t port = 0;
  int lfd = ListeningSocket(&port);
  nbd::ServerOptions o;
  o.bind = "";
  o.listen_fds = {lfd};
  nbd::Server server(&exports_, o);
  ASSERT_TRUE(server.Listen().ok());
  EXPECT_EQ(server.ListenerNames(), (std::vector<std::string>{"127.0.0.1:" + std::to_string(port)}));
  server.Start();
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(ReadGreeting(c), "NBDMAGIC");
  ::close(c);
  server.Shutdown(std::chrono::seconds(5));
  server.Join();
}

TEST_F(ServerAdoptTest, RefusesWhatIsNoListener) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  nbd::ServerOptions o;
  o.bind = "";
  o.listen_fds = {sv[0]};
  nbd::Server server(&exports_, o);
  absl::Status s = server.Listen();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a listening socket"));
  ::close(sv[0]);
  ::close(sv[1]);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  nbd::ServerOptions p;
  p.bind = "";
  p.listen_fds = {pipefd[0]};
  nbd::Server server2(&exports_, p);
  s = server2.Listen();
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a socket"));
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST_F(ServerAdoptTest, ServesOneGivenConnectionAndReportsItsEnd) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  nbd::ServerOptions o;
  o.bind = "";
  nbd::Server server(&exports_, o);
  std::atomic<bool> closed{false};
  ASSERT_TRUE(server.AddClient(sv[0], [&] { closed = true; }).ok());
  server.Start();
  EXPECT_EQ(ReadGreeting(sv[1]), "NBDMAGIC");
  EXPECT_FALSE(closed.load());
  ::close(sv[1]);
  for (int i = 0; i < 500 && !closed; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(closed.load());
  EXPECT_EQ(server.counters().connections_total.load(), 1u);
  server.Shutdown(std::chrono::seconds(5));
  server.Join();
  // A listening socket is no client.
  uint16_t port = 0;
  int lfd = ListeningSocket(&port);
  nbd::Server other(&exports_, o);
  EXPECT_FALSE(other.AddClient(lfd, nullptr).ok());
  ::close(lfd);
}

TEST(Collector, WholePoolScrape) {
  auto media = NewMemMedia(64 << 20);
  ASSERT_OK_AND_ASSIGN(auto pool, Pool::Format(media, testing::SmallFormat(), testing::QuietOpen()));
  Volume* v = pool->PrimaryVolume();
  std::vector<std::byte> data(1 << 20, std::byte{7});
  ASSERT_OK(v->Write(0, data));
  ASSERT_OK(pool->CreateSnapshot(v->name(), "s1").status());
  ASSERT_OK(v->Write(0, std::span<const std::byte>(data).first(64 << 10)));
  nbd::RequestMetrics requests;
  requests.For("", v->name())->Record(nbd::MetricOp::kRead, 30'000, true, 4096);
  metrics::Sources sources;
  sources.pool = pool.get();
  sources.requests = &requests;
  sources.started = std::chrono::system_clock::now();
  sources.version = "t";
  std::string text = metrics::Collect(sources);
  EXPECT_THAT(text, HasSubstr("ftld_build_info{version=\"t\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ftld_snapshots 1\n"));
  EXPECT_THAT(text, HasSubstr("ftld_snapshot_exclusive_bytes{volume=\"ftl0\",snapshot=\"s1\"} 65536\n"));
  EXPECT_THAT(text, HasSubstr("ftld_volume_written_bytes_total{volume=\"ftl0\"} 1114112\n"));
  EXPECT_THAT(text, HasSubstr("ftld_nbd_requests_total{export=\"\",volume=\"ftl0\",op=\"read\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ftld_volume_request_duration_seconds_count{volume=\"ftl0\",op=\"read\"} 1\n"));
  PoolStats st = pool->Stats();
  EXPECT_EQ(st.segments_free + st.segments_open + st.segments_full + st.segments_cleaning,
            st.segments_total);
  EXPECT_GT(st.segments_open, 0u);
  EXPECT_GT(st.last_checkpoint_unix_ns, 0);
  // Every family is declared once, before its samples.
  std::set<std::string> declared;
  size_t pos = 0;
  while ((pos = text.find("# TYPE ", pos)) != std::string::npos) {
    size_t end = text.find(' ', pos + 7);
    EXPECT_TRUE(declared.insert(text.substr(pos + 7, end - pos - 7)).second);
    pos = end;
  }
  EXPECT_GT(declared.size(), 30u);
  ASSERT_OK(pool->Close());
}

}  // namespace
}  // namespace ftl
