// The command table of the Redis-protocol server (resp/commands.h) run on
// a real pool (MemMedia) without sockets, for the reply encodings of each
// protocol: HELLO switching a session between RESP2 and RESP3, the RESP3
// forms (null "_", maps, sets, verbatim text) where redis-server 7 uses
// them, and RESP2's bytes unchanged (docs/decisions.md, "RESP3").

#include "resp/commands.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "ftl/pool.h"
#include "registry/kv_registry.h"
#include "resp/asio.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl::resp {
namespace {

class RespCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = Pool::Format(NewMemMedia(64 << 20), testing::SmallFormat(1 << 20),
                          testing::QuietOpen(false));
    ASSERT_OK(p);
    pool_ = std::move(*p);
    kv_ = std::make_unique<registry::KvRegistry>(pool_.get(), KvOptions{});
    databases_ = std::make_unique<Databases>(kv_.get(), workers_.get_executor(),
                                             workers_.get_executor(), 16);
    env_.databases = databases_.get();
    env_.cursors = &cursors_;
    env_.counters = &counters_;
    env_.max_clients = 100;
    env_.tcp_port = 6379;
  }
  void TearDown() override {
    databases_.reset();
    if (kv_) {
      ASSERT_OK(kv_->CloseAll());
    }
    kv_.reset();
    if (pool_) {
      ASSERT_OK(pool_->Close());
    }
  }

  // A new client on database 0.
  Session NewSession(uint64_t id) {
    Session s;
    s.id = id;
    auto db = databases_->Resolve("0");
    EXPECT_TRUE(db.ok()) << db.status();
    if (db.ok()) s.db = *db;
    return s;
  }
  // One request's reply bytes.
  std::string Run(Session& s, std::initializer_list<std::string> args) {
    std::string reply;
    Outcome outcome;
    Execute(env_, s, Argv(args), &reply, &outcome);
    return reply;
  }

  asio::thread_pool workers_{1};
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<registry::KvRegistry> kv_;
  std::unique_ptr<Databases> databases_;
  CursorTable cursors_;
  ServerCounters counters_;
  CommandEnv env_;
};

// HELLO's fields after the header, for client id 7 speaking `proto`.
std::string HelloBody(int proto) {
  return "$6\r\nserver\r\n$4\r\nftld\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n$5\r\nproto\r\n:" +
         std::to_string(proto) +
         "\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n"
         "$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
}

// HELLO 3 switches, HELLO alone reports, HELLO 2 switches back; a
// version other than 2 or 3 and a bad option leave the protocol as it was.
TEST_F(RespCommandsTest, HelloSwitchesTheSessionsProtocol) {
  Session s = NewSession(7);
  EXPECT_EQ(s.proto, Proto::kResp2);
  EXPECT_EQ(Run(s, {"HELLO"}), "*14\r\n" + HelloBody(2));
  EXPECT_EQ(Run(s, {"GET", "missing"}), "$-1\r\n");

  EXPECT_EQ(Run(s, {"HELLO", "3"}), "%7\r\n" + HelloBody(3));
  EXPECT_EQ(s.proto, Proto::kResp3);
  EXPECT_EQ(Run(s, {"hello"}), "%7\r\n" + HelloBody(3));
  EXPECT_EQ(Run(s, {"GET", "missing"}), "_\r\n");

  EXPECT_EQ(Run(s, {"HELLO", "4"}),
            "-NOPROTO unsupported protocol version (ftld speaks RESP2 and RESP3)\r\n");
  EXPECT_EQ(Run(s, {"HELLO", "1"}).substr(0, 9), "-NOPROTO ");
  EXPECT_EQ(Run(s, {"HELLO", "three"}),
            "-ERR Protocol version is not an integer or out of range\r\n");
  EXPECT_EQ(s.proto, Proto::kResp3);

  EXPECT_EQ(Run(s, {"HELLO", "2"}), "*14\r\n" + HelloBody(2));
  EXPECT_EQ(s.proto, Proto::kResp2);
  EXPECT_EQ(Run(s, {"GET", "missing"}), "$-1\r\n");
  // A bad option: an error in the old protocol, no switch.
  EXPECT_EQ(Run(s, {"HELLO", "3", "BOGUS"}), "-ERR Syntax error in HELLO option 'BOGUS'\r\n");
  EXPECT_EQ(s.proto, Proto::kResp2);

  EXPECT_EQ(Run(s, {"HELLO", "3", "SETNAME", "app"}), "%7\r\n" + HelloBody(3));
  EXPECT_EQ(Run(s, {"CLIENT", "GETNAME"}), "$3\r\napp\r\n");
  // Inside MULTI HELLO is refused (ftld's rule) and the protocol stays.
  EXPECT_EQ(Run(s, {"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Run(s, {"HELLO", "2"}).substr(0, 5), "-ERR ");
  EXPECT_EQ(Run(s, {"DISCARD"}), "+OK\r\n");
  EXPECT_EQ(s.proto, Proto::kResp3);
}

// RESP2 byte for byte as before RESP3 existed, for every reply that
// RESP3 changes.
TEST_F(RespCommandsTest, Resp2RepliesUnchanged) {
  Session s = NewSession(7);
  EXPECT_EQ(Run(s, {"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(Run(s, {"GET", "missing"}), "$-1\r\n");
  EXPECT_EQ(Run(s, {"SET", "k", "w", "NX"}), "$-1\r\n");
  EXPECT_EQ(Run(s, {"SET", "n", "w", "XX"}), "$-1\r\n");
  EXPECT_EQ(Run(s, {"SET", "n", "w", "GET"}), "$-1\r\n");
  EXPECT_EQ(Run(s, {"SET", "n", "x", "GET"}), "$1\r\nw\r\n");
  EXPECT_EQ(Run(s, {"GETDEL", "missing"}), "$-1\r\n");
  EXPECT_EQ(Run(s, {"CLIENT", "GETNAME"}), "$-1\r\n");
  EXPECT_EQ(Run(s, {"MGET", "k", "missing"}), "*2\r\n$1\r\nv\r\n$-1\r\n");
  EXPECT_EQ(Run(s, {"CONFIG", "GET", "appendonly", "maxclients"}),
            "*4\r\n$10\r\nappendonly\r\n$2\r\nno\r\n$10\r\nmaxclients\r\n$3\r\n100\r\n");
  EXPECT_EQ(Run(s, {"CONFIG", "GET", "nothing"}), "*0\r\n");
  EXPECT_EQ(Run(s, {"COMMAND", "INFO", "get", "nosuch"}),
            "*2\r\n*6\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n*-1\r\n");
  EXPECT_EQ(Run(s, {"COMMAND", "DOCS"}), "*0\r\n");
  std::string info = Run(s, {"INFO", "server"});
  EXPECT_EQ(info.substr(0, 1), "$");
  EXPECT_NE(info.find("\r\n# Server\r\n"), std::string::npos);
  EXPECT_EQ(Run(s, {"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Run(s, {"GET", "missing"}), "+QUEUED\r\n");
  EXPECT_EQ(Run(s, {"EXEC"}), "*1\r\n$-1\r\n");
}

// RESP3: "_" for every null, maps where redis-server 7 answers a map
// (HELLO, CONFIG GET, COMMAND DOCS), COMMAND's flags as a set, INFO as
// verbatim text; the rest as in RESP2.
TEST_F(RespCommandsTest, Resp3Replies) {
  Session s = NewSession(7);
  ASSERT_EQ(Run(s, {"HELLO", "3"}).substr(0, 4), "%7\r\n");
  EXPECT_EQ(Run(s, {"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(Run(s, {"GET", "k"}), "$1\r\nv\r\n");
  EXPECT_EQ(Run(s, {"GET", "missing"}), "_\r\n");
  EXPECT_EQ(Run(s, {"SET", "k", "w", "NX"}), "_\r\n");
  EXPECT_EQ(Run(s, {"SET", "n", "w", "XX"}), "_\r\n");
  EXPECT_EQ(Run(s, {"SET", "n", "w", "GET"}), "_\r\n");
  EXPECT_EQ(Run(s, {"SET", "n", "x", "GET"}), "$1\r\nw\r\n");
  EXPECT_EQ(Run(s, {"GETDEL", "missing"}), "_\r\n");
  EXPECT_EQ(Run(s, {"CLIENT", "GETNAME"}), "_\r\n");
  EXPECT_EQ(Run(s, {"MGET", "k", "missing", "n"}), "*3\r\n$1\r\nv\r\n_\r\n$1\r\nx\r\n");
  EXPECT_EQ(Run(s, {"CONFIG", "GET", "appendonly", "maxclients"}),
            "%2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n$10\r\nmaxclients\r\n$3\r\n100\r\n");
  EXPECT_EQ(Run(s, {"CONFIG", "GET", "save"}), "%1\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(Run(s, {"CONFIG", "GET", "nothing"}), "%0\r\n");
  EXPECT_EQ(Run(s, {"COMMAND", "INFO", "get", "nosuch"}),
            "*2\r\n*6\r\n$3\r\nget\r\n:2\r\n~1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n_\r\n");
  EXPECT_EQ(Run(s, {"COMMAND", "INFO", "set"}),
            "*1\r\n*6\r\n$3\r\nset\r\n:-3\r\n~1\r\n+write\r\n:1\r\n:1\r\n:1\r\n");
  EXPECT_EQ(Run(s, {"COMMAND", "DOCS"}), "%0\r\n");
  std::string info = Run(s, {"INFO", "server"});
  ASSERT_EQ(info.substr(0, 1), "=");
  size_t crlf = info.find("\r\n");
  size_t len = std::stoul(info.substr(1, crlf - 1));
  EXPECT_EQ(info.substr(crlf + 2, 4), "txt:");
  EXPECT_EQ(info.size(), crlf + 2 + len + 2);
  EXPECT_NE(info.find("txt:# Server\r\n"), std::string::npos);
  // EXEC's replies are the session's too.
  EXPECT_EQ(Run(s, {"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Run(s, {"GET", "missing"}), "+QUEUED\r\n");
  EXPECT_EQ(Run(s, {"GET", "k"}), "+QUEUED\r\n");
  EXPECT_EQ(Run(s, {"EXEC"}), "*2\r\n_\r\n$1\r\nv\r\n");
  // Unchanged in RESP3.
  EXPECT_EQ(Run(s, {"PING"}), "+PONG\r\n");
  EXPECT_EQ(Run(s, {"EXISTS", "k", "missing"}), ":1\r\n");
  EXPECT_EQ(Run(s, {"TYPE", "missing"}), "+none\r\n");
  EXPECT_EQ(Run(s, {"SCAN", "0"}), "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nk\r\n$1\r\nn\r\n");
  EXPECT_EQ(Run(s, {"KEYS", "*"}), "*2\r\n$1\r\nk\r\n$1\r\nn\r\n");
  EXPECT_EQ(Run(s, {"GET"}), "-ERR wrong number of arguments for 'get' command\r\n");
}

// Two clients at once: each gets its own protocol's encoding.
TEST_F(RespCommandsTest, EachSessionHasItsOwnProtocol) {
  Session three = NewSession(1), two = NewSession(2);
  ASSERT_EQ(Run(three, {"HELLO", "3"}).substr(0, 4), "%7\r\n");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Run(three, {"GET", "missing"}), "_\r\n");
    EXPECT_EQ(Run(two, {"GET", "missing"}), "$-1\r\n");
    EXPECT_EQ(Run(three, {"CONFIG", "GET", "appendonly"}).substr(0, 4), "%1\r\n");
    EXPECT_EQ(Run(two, {"CONFIG", "GET", "appendonly"}).substr(0, 4), "*2\r\n");
  }
}

}  // namespace
}  // namespace ftl::resp
