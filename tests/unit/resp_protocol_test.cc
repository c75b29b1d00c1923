// The RESP parser and the RESP2/RESP3 encoders (resp/resp_protocol.h) and
// the glob matcher of KEYS/SCAN (resp/match.h): framing, limits,
// byte-at-a-time input, inline requests with quotes, the errors Redis
// sends, and each reply type in both protocols.

#include "resp/resp_protocol.h"

#include <gtest/gtest.h>

#include <functional>

#include "resp/match.h"

namespace ftl::resp {
namespace {

// Feeds `wire` in pieces of `step` bytes, as a connection would.
struct Fed {
  std::vector<Argv> requests;
  std::string error;
};
Fed Feed(const std::string& wire, size_t step) {
  Parser p;
  Fed out;
  std::string buf;
  size_t given = 0;
  for (;;) {
    size_t used = 0;
    Argv argv;
    Parser::Result r = p.Parse(buf, &used, &argv);
    buf.erase(0, used);
    if (r == Parser::Result::kRequest) {
      if (!argv.empty()) out.requests.push_back(argv);
      continue;
    }
    if (r == Parser::Result::kProtocolError) {
      out.error = p.error();
      return out;
    }
    if (given == wire.size()) return out;
    size_t n = std::min(step, wire.size() - given);
    buf.append(wire, given, n);
    given += n;
  }
}

TEST(RespParser, MultibulkWholeAndByteAtATime) {
  std::string wire = EncodeRequest({"SET", "key", std::string("a\r\nb\0c", 6)}) +
                     EncodeRequest({"GET", "key"}) + "*0\r\n" + EncodeRequest({"PING"});
  for (size_t step : {size_t(1), size_t(3), size_t(7), wire.size()}) {
    Fed f = Feed(wire, step);
    ASSERT_EQ(f.error, "") << step;
    ASSERT_EQ(f.requests.size(), 3u) << step;
    EXPECT_EQ(f.requests[0], (Argv{"SET", "key", std::string("a\r\nb\0c", 6)}));
    EXPECT_EQ(f.requests[1], (Argv{"GET", "key"}));
    EXPECT_EQ(f.requests[2], (Argv{"PING"}));
  }
}

TEST(RespParser, Inline) {
  Fed f = Feed("PING\r\nset k  \"a b\\x41\\n\"  'it\\'s'\nGET k\n\r\n", 2);
  ASSERT_EQ(f.error, "");
  ASSERT_EQ(f.requests.size(), 3u);
  EXPECT_EQ(f.requests[0], (Argv{"PING"}));
  EXPECT_EQ(f.requests[1], (Argv{"set", "k", "a bA\n", "it's"}));
  EXPECT_EQ(f.requests[2], (Argv{"GET", "k"}));
  EXPECT_EQ(Feed("SET \"a b\n", 100).error, "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(Feed("SET \"a\"b\n", 100).error, "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(Feed(std::string(kMaxInlineBytes + 10, 'x'), 4096).error,
            "Protocol error: too big inline request");
}

TEST(RespParser, Errors) {
  EXPECT_EQ(Feed("*x\r\n", 1).error, "Protocol error: invalid multibulk length");
  EXPECT_EQ(Feed("*1048577\r\n", 100).error, "Protocol error: invalid multibulk length");
  EXPECT_EQ(Feed("*1\r\n$-1\r\n", 100).error, "Protocol error: invalid bulk length");
  EXPECT_EQ(Feed("*1\r\n$2147483648\r\n", 100).error, "Protocol error: invalid bulk length");
  EXPECT_EQ(Feed("*1\r\n$01\r\n", 100).error, "Protocol error: invalid bulk length");
  EXPECT_EQ(Feed("*1\r\n:1\r\n", 100).error, "Protocol error: expected '$', got ':'");
  EXPECT_EQ(Feed("*1\r\n$1\r\nab\r\n", 100).error,
            "Protocol error: bulk string not followed by CRLF");
  EXPECT_EQ(Feed("*" + std::string(40, '1'), 100).error,
            "Protocol error: too big mbulk count string");
  EXPECT_EQ(Feed("*1\r\n$" + std::string(40, '1'), 100).error,
            "Protocol error: too big bulk count string");
}

TEST(RespParser, LimitsOnWhatARequestHolds) {
  // A bulk over kMaxBulkBytes is refused from its header, before its bytes.
  EXPECT_EQ(Feed("*2\r\n$3\r\nGET\r\n$" + std::to_string(kMaxBulkBytes + 1) + "\r\n", 100).error,
            "Protocol error: invalid bulk length");
  // Arguments adding up past kMaxRequestBytes.
  std::string big(kMaxBulkBytes, 'v');
  std::string wire = "*6\r\n";
  for (int i = 0; i < 5; ++i) wire += "$" + std::to_string(big.size()) + "\r\n" + big + "\r\n";
  Fed f = Feed(wire, 1 << 20);
  EXPECT_NE(f.error.find("request larger than"), std::string::npos) << f.error;
  // A partial bulk is not consumed; the parser says how much it waits for.
  Parser p;
  size_t used = 0;
  Argv argv;
  std::string part = "*1\r\n$10\r\nabc";
  EXPECT_EQ(p.Parse(part, &used, &argv), Parser::Result::kNeedMore);
  EXPECT_EQ(used, 4u);  // "*1\r\n"
  EXPECT_EQ(p.want_bytes(), 9u);  // "$10\r\n" + 10 + "\r\n" less the 8 present
}

TEST(RespParser, ParseInt64LikeRedis) {
  int64_t v = 0;
  EXPECT_TRUE(ParseInt64("0", &v) && v == 0);
  EXPECT_TRUE(ParseInt64("-42", &v) && v == -42);
  EXPECT_TRUE(ParseInt64("9223372036854775807", &v) && v == INT64_MAX);
  EXPECT_TRUE(ParseInt64("-9223372036854775808", &v) && v == INT64_MIN);
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "01", "-0", "9223372036854775808", "1e3", "x"})
    EXPECT_FALSE(ParseInt64(bad, &v)) << bad;
}

TEST(RespEncode, Replies) {
  std::string out;
  AppendSimple(&out, "OK");
  AppendError(&out, "ERR bad\r\nthing");
  AppendInteger(&out, -7);
  AppendBulk(&out, "ab");
  AppendNull(&out, Proto::kResp2);
  AppendArrayHeader(&out, 2);
  AppendNullArray(&out, Proto::kResp2);
  EXPECT_EQ(out, "+OK\r\n-ERR bad  thing\r\n:-7\r\n$2\r\nab\r\n$-1\r\n*2\r\n*-1\r\n");
}

// The encoders that differ by protocol: RESP2 keeps Redis 2's forms
// (a map is a flat array, a set an array, text a bulk), RESP3 has its own.
TEST(RespEncode, Resp2AndResp3) {
  struct Case {
    std::function<void(std::string*, Proto)> append;
    std::string resp2, resp3;
  };
  const Case cases[] = {
      {[](std::string* o, Proto p) { AppendNull(o, p); }, "$-1\r\n", "_\r\n"},
      {[](std::string* o, Proto p) { AppendNullArray(o, p); }, "*-1\r\n", "_\r\n"},
      {[](std::string* o, Proto p) { AppendMapHeader(o, 7, p); }, "*14\r\n", "%7\r\n"},
      {[](std::string* o, Proto p) { AppendMapHeader(o, 0, p); }, "*0\r\n", "%0\r\n"},
      {[](std::string* o, Proto p) { AppendSetHeader(o, 3, p); }, "*3\r\n", "~3\r\n"},
      // The verbatim length counts the "txt:" prefix; CRLF inside is kept.
      {[](std::string* o, Proto p) { AppendVerbatim(o, "# Server\r\na:1\r\n", p); },
       "$15\r\n# Server\r\na:1\r\n\r\n", "=19\r\ntxt:# Server\r\na:1\r\n\r\n"},
      {[](std::string* o, Proto p) { AppendVerbatim(o, "", p); }, "$0\r\n\r\n", "=4\r\ntxt:\r\n"},
  };
  for (const Case& c : cases) {
    std::string two = "x", three = "x";  // appended to, never replaced
    c.append(&two, Proto::kResp2);
    c.append(&three, Proto::kResp3);
    EXPECT_EQ(two, "x" + c.resp2);
    EXPECT_EQ(three, "x" + c.resp3);
  }
}

TEST(RespMatch, Glob) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("user:*", "user:17"));
  EXPECT_FALSE(GlobMatch("user:*", "use"));
  EXPECT_TRUE(GlobMatch("h?llo", "hello"));
  EXPECT_FALSE(GlobMatch("h?llo", "hllo"));
  EXPECT_TRUE(GlobMatch("h[ae]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[ae]llo", "hillo"));
  EXPECT_TRUE(GlobMatch("h[^e]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(GlobMatch("h[a-c]llo", "hbllo"));
  EXPECT_TRUE(GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(GlobMatch("*a*b*c*", "xxaxxbxxcxx"));
  EXPECT_FALSE(GlobMatch("*a*b*c*", "xxaxxcxxbxx"));
  // No recursion: a pathological pattern is linear-ish, not a stack overflow.
  EXPECT_FALSE(GlobMatch(std::string(5000, '*') + "b", std::string(100000, 'a')));
  EXPECT_EQ(LiteralPrefix("user:*"), "user:");
  EXPECT_EQ(LiteralPrefix("a?b"), "a");
  EXPECT_EQ(LiteralPrefix("*"), "");
  EXPECT_EQ(PrefixEnd("user:"), "user;");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff", 1)), "");
}

}  // namespace
}  // namespace ftl::resp
