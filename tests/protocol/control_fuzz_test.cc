// Fuzzes the control dispatcher in process (issue 19): every command of the
// daemon (core, snapshot, range, kv) over a real pool on MemMedia, fed deep
// nesting, huge numbers, invalid UTF-8, truncated JSON, wrong types for
// every field of every command and randomly mutated requests. Every reply
// must be one line holding one JSON object with a boolean "ok" (and
// "error"/"code" strings when it is false), echo the request's "id", and
// the process must survive.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "control/control.h"
#include "control/control_commands.h"
#include "control/control_kv.h"
#include "control/control_range.h"
#include "control/control_snapshot.h"
#include "registry/kv_registry.h"
#include "ftl/kv.h"
#include "ftl/pool.h"
#include "nbd/exports.h"
#include "nbd/server.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl::control {
namespace {

using nbd::ExportTable;
using nbd::Server;
using nbd::ServerOptions;
using ftl::testing::QuietOpen;
using ftl::testing::SmallFormat;

class ControlFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(NewMemMedia(64 << 20), SmallFormat(), QuietOpen()));
    Volume* v = pool_->PrimaryVolume();
    ASSERT_OK(exports_.Add({.name = "ftl0", .description = "primary", .volume = v}));
    ASSERT_OK(exports_.Add({.name = "", .description = "default", .volume = v, .listed = false}));
    ServerOptions so;
    so.bind = "";
    so.worker_threads = 1;
    server_ = std::make_unique<Server>(&exports_, so);
    ctx_.pool = pool_.get();
    ctx_.server = server_.get();
    ctx_.exports = &exports_;
    ctx_.backing = "mem";
    ctx_.control_path = "/nonexistent/ctl.sock";
    RegisterCoreCommands(&dispatcher_, &ctx_);
    RegisterSnapshotCommands(&dispatcher_, &ctx_);
    RegisterRangeCommands(&dispatcher_, &ctx_);
    // Small buffers: mutated "create" requests make many datasets, and
    // "list" opens every one.
    ASSERT_OK(KvStore::Create(pool_.get(), "kf"));
    kv_ = std::make_unique<KvRegistry>(pool_.get(), KvOptions{.buffer_pages = 16});
    ctx_.kv = kv_.get();
    RegisterKvCommands(&dispatcher_, &ctx_);
  }
  void TearDown() override {
    if (kv_) {
      EXPECT_OK(kv_->CloseAll());
    }
    server_.reset();
    if (pool_) {
      EXPECT_OK(pool_->Close());
    }
  }

  // Dispatches `line` and checks the reply's shape; returns it parsed.
  Json Send(const std::string& line) {
    std::string reply = dispatcher_.Dispatch(line);
    ++sent_;
    EXPECT_EQ(reply.find('\n'), std::string::npos) << Shown(line);
    Json j = Json::parse(reply, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "reply is not JSON: " << reply << "\nfor " << Shown(line);
    if (j.is_discarded()) return Json::object();
    EXPECT_TRUE(j.is_object()) << reply;
    if (!j.is_object()) return Json::object();
    auto ok = j.find("ok");
    EXPECT_TRUE(ok != j.end() && ok->is_boolean()) << reply << "\nfor " << Shown(line);
    if (ok != j.end() && ok->is_boolean() && !ok->get<bool>()) {
      auto error = j.find("error");
      auto code = j.find("code");
      EXPECT_TRUE(error != j.end() && error->is_string() && !error->get<std::string>().empty())
          << reply;
      EXPECT_TRUE(code != j.end() && code->is_string() && !code->get<std::string>().empty())
          << reply;
    }
    // A request that parses as an object gets its "id" back, unless it was
    // refused for its nesting before being parsed.
    if (j.value("error", "").find("nested") != std::string::npos) return j;
    Json request = Json::parse(line, nullptr, false);
    if (!request.is_discarded() && request.is_object() && request.contains("id")) {
      EXPECT_EQ(j.value("id", Json()), request["id"]) << Shown(line);
    }
    return j;
  }
  static std::string Shown(const std::string& line) {
    return line.size() <= 300 ? line : line.substr(0, 300) + "... (" +
                                           std::to_string(line.size()) + " bytes)";
  }

  std::unique_ptr<Pool> pool_;
  ExportTable exports_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<KvRegistry> kv_;
  DaemonContext ctx_;
  ControlDispatcher dispatcher_;
  size_t sent_ = 0;
};

std::string Nest(size_t depth, const std::string& open, const std::string& inner,
                 const std::string& close) {
  std::string s;
  s.reserve(depth * (open.size() + close.size()) + inner.size());
  for (size_t i = 0; i < depth; ++i) s += open;
  s += inner;
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

TEST_F(ControlFuzzTest, DeepNestingIsRefusedNotFollowed) {
  // The request object is level 1: 63 more levels are the most accepted.
  Json r = Send(R"({"cmd":"help","id":)" + Nest(63, "[", "", "]") + "}");
  EXPECT_TRUE(r.value("ok", false)) << r.dump().substr(0, 200);
  r = Send(R"({"cmd":"help","id":)" + Nest(62, R"({"a":)", "1", "}") + "}");
  EXPECT_TRUE(r.value("ok", false));
  for (size_t depth : {64, 65, 100, 1000, 70000, 500000}) {
    for (const auto& [open, inner, close] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"[", "", "]"}, {R"({"a":)", "1", "}"}, {R"([{"b":)", "[]", "}]"}}) {
      for (std::string where : {"id", "name", "ops", "cmd"}) {
        std::string line = R"({"cmd":"snapshot","action":"list",")" + where +
                           "\":" + Nest(depth, open, inner, close) + "}";
        r = Send(line);
        EXPECT_FALSE(r.value("ok", true)) << depth;
        EXPECT_EQ(r.value("code", ""), "INVALID_ARGUMENT") << depth;
        EXPECT_NE(r.value("error", "").find("nest"), std::string::npos) << r.dump();
      }
      // Unbalanced (never closed) and top-level arrays too.
      r = Send(Nest(depth, open, "", ""));
      EXPECT_FALSE(r.value("ok", true));
      r = Send(Nest(depth, "[", "1", "]"));
      EXPECT_FALSE(r.value("ok", true));
    }
  }
  // Brackets inside strings do not count, escaped quotes included.
  std::string id = std::string(100000, '[') + "\\\"" + std::string(1000, '{');
  r = Send(R"({"cmd":"help","id":")" + id + "\"}");
  EXPECT_TRUE(r.value("ok", false));
  // After all that the dispatcher still works.
  EXPECT_TRUE(Send(R"({"cmd":"status","id":1})").value("ok", false));
}

// Values of every JSON type, and the edge cases of each.
std::vector<std::string> OddValues() {
  return {"null", "true", "false", "0", "-0", "-1", "1", "4096", "1.5", "-1.5", "1e300",
          "-1e300", "1e400", "-1e400", "1e-400", "18446744073709551615",
          "18446744073709551616", "-9223372036854775809", "123456789012345678901234567890",
          "4.0e3", "\"\"", "\"x\"", "\"64K\"", "\"-1\"", "\"1Q\"", "\"16E\"", "\"99999999T\"",
          "\"@\"", "\"a@b\"", "\"@s\"", "\"ftl0@\"", "\"..\"", "\"\\u0000\"", "\"\\ud800\"",
          "\"\\udfff\\ud800\"", "\"\xc3\xa9t\xc3\xa9\"", "\"" + std::string(10000, 'n') + "\"",
          "[]", "[1]", "[\"a\"]", "[null]", "[[]]", "{}", "{\"a\":1}",
          "{\"op\":\"clone\",\"src\":0,\"dst\":0,\"len\":4096}",
          Nest(60, "[", "", "]")};
}

// Every command of the daemon with valid arguments, and the fields it reads.
struct CommandShape {
  std::string base;  // a valid request (JSON object text)
  std::vector<std::string> fields;
};

std::vector<CommandShape> Commands() {
  return {
      {R"({"cmd":"status"})", {"cmd", "id"}},
      {R"({"cmd":"stats"})", {"cmd"}},
      {R"({"cmd":"exports"})", {"cmd"}},
      {R"({"cmd":"help"})", {"cmd"}},
      {R"({"cmd":"checkpoint"})", {"cmd"}},
      {R"({"cmd":"gc","min_free_segments":1})", {"min_free_segments"}},
      {R"({"cmd":"snapshot","action":"create","name":"f1"})", {"action", "name", "volume"}},
      {R"({"cmd":"snapshot","action":"list"})", {"action", "volume"}},
      {R"({"cmd":"snapshot","action":"activate","name":"f1","export":"fa"})",
       {"name", "volume", "export", "read_only"}},
      {R"({"cmd":"snapshot","action":"deactivate","export":"fa"})", {"export"}},
      {R"({"cmd":"snapshot","action":"rollback","name":"f1"})", {"name", "volume", "force"}},
      {R"({"cmd":"snapshot","action":"delete","name":"f1"})", {"name", "volume", "force"}},
      {R"({"cmd":"range","action":"clone","src":0,"dst":"64K","len":"4K"})",
       {"action", "src", "dst", "len", "from", "to"}},
      {R"({"cmd":"range","action":"move","src":"64K","dst":"128K","len":4096})",
       {"src", "dst", "len", "from", "to"}},
      {R"({"cmd":"range","action":"batch","ops":[{"op":"clone","src":0,"dst":"8K","len":"4K"}]})",
       {"ops"}},
      {R"({"cmd":"range","action":"merge","base":0,"dst":"1M","len":"4K","sources":["64K"]})",
       {"base", "dst", "len", "sources", "policy", "from", "to"}},
      {R"({"cmd":"range","action":"attr","offset":"2M","length":"4K","attr":"immutable"})",
       {"offset", "length", "attr", "volume"}},
      {R"({"cmd":"range","action":"attr","offset":"2M","length":"4K","attr":"mutable"})",
       {"attr"}},
      {R"({"cmd":"range","action":"attrs"})", {"volume"}},
      {R"({"cmd":"kv","action":"create","name":"kg","geometry":"pages=28"})",
       {"action", "name", "geometry"}},
      {R"({"cmd":"kv","action":"list"})", {"action"}},
      {R"({"cmd":"kv","action":"put","name":"kf","key":"a","value":"b"})",
       {"name", "key", "value", "key_b64", "value_b64", "sync"}},
      {R"({"cmd":"kv","action":"get","name":"kf","key_b64":"YQ=="})", {"name", "key", "key_b64"}},
      {R"({"cmd":"kv","action":"scan","name":"kf","from":"a","to":"z","limit":5})",
       {"name", "from", "to", "from_b64", "to_b64", "limit"}},
      {R"({"cmd":"kv","action":"stats","name":"kf"})", {"name"}},
      {R"({"cmd":"kv","action":"delete","name":"kf","key":"a","sync":false})",
       {"name", "key", "sync"}},
      {R"({"cmd":"kv","action":"destroy","name":"kg"})", {"name", "force"}},
  };
}

TEST_F(ControlFuzzTest, WrongTypesForEveryFieldOfEveryCommand) {
  std::vector<std::string> values = OddValues();
  for (const CommandShape& c : Commands()) {
    // The valid request itself works (or fails with an error reply).
    Send(c.base);
    Json base = Json::parse(c.base);
    for (const std::string& field : c.fields) {
      for (const std::string& v : values) {
        // Splice the raw value text in, so numbers nlohmann would not
        // produce itself (1e400, -0, 20-digit integers) reach the parser.
        Json without = base;
        without.erase(field);
        std::string text = without.dump();
        text.pop_back();
        text += std::string(without.empty() ? "" : ",") + "\"" + field + "\":" + v + "}";
        Send(text);
        // The same inside a batch's operation.
        if (c.base.find("\"batch\"") != std::string::npos) {
          Send(R"({"cmd":"range","action":"batch","ops":[{"op":"clone","src":0,"dst":"8K",)" +
               ("\"len\":" + v) + "}]}");
          Send(R"({"cmd":"range","action":"batch","ops":[)" + v + "]}");
        }
      }
      // The field missing.
      Json without = base;
      without.erase(field);
      Send(without.dump());
    }
  }
  // The same values as "id": echoed back as given (the ones nlohmann keeps).
  for (const std::string& v : values) Send(R"({"cmd":"help","id":)" + v + "}");
  EXPECT_GT(sent_, 1000u);
}

TEST_F(ControlFuzzTest, InvalidUtf8AndTruncatedJson) {
  const std::vector<std::string> bad_utf8 = {
      "\xff", "\xc0\x80", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80", "\xe2\x82", "\x80",
      "\xf4\x90\x80\x80", std::string("\x00", 1)};
  for (const std::string& b : bad_utf8) {
    for (std::string field : {"cmd", "name", "volume", "action", "id", "from"}) {
      Send(R"({"cmd":"snapshot","action":"create",")" + field + "\":\"x" + b + "y\"}");
      Send(R"({"cmd":"snapshot","action":"create",")" + field + b + "\":1}");
    }
    Send(b);
    Send("{" + b + "}");
    Send(R"({"cmd":"help"})" + b);
  }
  for (const CommandShape& c : Commands()) {
    for (size_t n = 0; n < c.base.size(); ++n) Send(c.base.substr(0, n));
  }
  for (std::string junk :
       {"", " ", "{", "}", "[", "]", "\"", "{\"", "{\"cmd\"", "{\"cmd\":", "{\"cmd\":\"",
        "{\"cmd\":\"help\"", "{\"cmd\":\"help\",}", "{,}", "{\"cmd\":\"help\"}}",
        "{\"cmd\":\"help\"} {\"cmd\":\"help\"}", "nul", "tru", "1", "\"help\"", "[{\"cmd\":\"help\"}]",
        "{\"cmd\":\"help\",\"cmd\":\"status\"}", "{'cmd':'help'}", "{\"cmd\":\"help\"/*c*/}",
        "\xef\xbb\xbf{\"cmd\":\"help\"}"}) {
    Send(junk);
  }
}

TEST_F(ControlFuzzTest, RandomMutationsOfValidRequests) {
  std::mt19937_64 rng(19);
  std::vector<CommandShape> commands = Commands();
  const std::string alphabet = "{}[]\",:\\0123456789eE+-.truefalsn@KMGT \x80\xff";
  int iterations = 100000;
  if (const char* e = std::getenv("FTL_CONTROL_FUZZ_ITERATIONS")) iterations = std::atoi(e);
  for (int i = 0; i < iterations; ++i) {
    std::string s = commands[rng() % commands.size()].base;
    int edits = 1 + int(rng() % 6);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      size_t at = rng() % s.size();
      switch (rng() % 6) {
        case 0: s[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: s.erase(at, 1 + rng() % 4); break;
        case 3: s.insert(at, s.substr(at, rng() % 16)); break;
        case 4: s[at] = char(rng() & 0xff); break;
        case 5: s.insert(at, std::string(1 + rng() % 200, "[{"[rng() % 2])); break;
      }
    }
    Send(s);
  }
  EXPECT_TRUE(Send(R"({"cmd":"status"})").value("ok", false));
}

}  // namespace
}  // namespace ftl::control
