// Unit tests of nbd/: the pure phases (options, validation, encoding, the
// status mapping; also daemon/'s command line and control/'s dispatcher)
// and the server over an in-memory TestVolume with a hand-rolled client
// (out-of-order replies, drained oversize payloads, structured replies).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "control/control.h"
#include "daemon/backing.h"
#include "daemon/daemon.h"
#include "daemon/daemon_options.h"
#include "nbd/accept_backoff.h"
#include "nbd/errors.h"
#include "nbd/handshake.h"
#include "nbd/options.h"
#include "nbd/server.h"
#include "nbd/transmission.h"
#include "nbd_test_volume.h"
#include "status_asserts.h"

namespace ftl::nbd {
namespace {

using control::ControlDispatcher;
using control::Json;
using control::U64Arg;
using daemon::BackingAction;
using daemon::DaemonOptions;
using daemon::DecideBackingAction;
using daemon::FillExports;
using daemon::ParseDaemonArgs;
using testing::TestVolume;
constexpr uint64_t kMiB = 1 << 20;

std::vector<std::byte> Bytes(std::string_view s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

// Splits option replies: (type, payload) pairs.
std::vector<std::pair<uint32_t, std::vector<std::byte>>> Replies(std::span<const std::byte> in) {
  std::vector<std::pair<uint32_t, std::vector<std::byte>>> out;
  BeReader r(in);
  while (r.remaining() > 0) {
    EXPECT_EQ(r.U64(), kOptReplyMagic);
    r.U32();
    uint32_t type = r.U32();
    uint32_t len = r.U32();
    std::string payload = r.Str(len);
    out.push_back({type, Bytes(payload)});
    if (!r.ok()) break;
  }
  return out;
}

TEST(BigEndian, WritesAndReadsMostSignificantByteFirst) {
  std::vector<std::byte> out;
  BeWriter w(&out);
  w.U16(0x0102);
  w.U32(0x03040506);
  w.U64(0x0708090a0b0c0d0e);
  w.Str("ab");
  w.Zeroes(2);
  ASSERT_EQ(out.size(), 2u + 4 + 8 + 2 + 2);
  for (size_t i = 0; i < 14; ++i) EXPECT_EQ(uint8_t(out[i]), i + 1) << i;
  EXPECT_EQ(GetBe16(&out[0]), 0x0102);
  EXPECT_EQ(GetBe32(&out[2]), 0x03040506u);
  EXPECT_EQ(GetBe64(&out[6]), 0x0708090a0b0c0d0eu);
  BeReader r(out);
  EXPECT_EQ(r.U16(), 0x0102);
  EXPECT_EQ(r.U32(), 0x03040506u);
  EXPECT_EQ(r.U64(), 0x0708090a0b0c0d0eu);
  EXPECT_EQ(r.Str(2), "ab");
  EXPECT_EQ(r.remaining(), 2u);
  EXPECT_EQ(r.U32(), 0u);  // past the end: zero, and the error sticks
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.U8(), 0u);
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(Errors, MapsEveryStatusOnce) {
  EXPECT_EQ(StatusToNbdError(absl::OkStatus()), 0u);
  EXPECT_EQ(StatusToNbdError(absl::PermissionDeniedError("")), kEPerm);
  EXPECT_EQ(StatusToNbdError(absl::OutOfRangeError("")), kENoSpc);
  EXPECT_EQ(StatusToNbdError(absl::ResourceExhaustedError("")), kENoSpc);
  EXPECT_EQ(StatusToNbdError(absl::InvalidArgumentError("")), kEInval);
  EXPECT_EQ(StatusToNbdError(absl::UnimplementedError("")), kENotSup);
  EXPECT_EQ(StatusToNbdError(absl::UnavailableError("")), kEShutdown);
  EXPECT_EQ(StatusToNbdError(absl::DataLossError("")), kEIo);
  EXPECT_EQ(StatusToNbdError(absl::InternalError("")), kEIo);
  EXPECT_EQ(StatusToNbdError(absl::UnknownError("")), kEIo);
}

TEST(AcceptBackoff, WaitsAndLogsOncePerEpisode) {
  std::ostringstream out;
  auto log = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  log->set_level(spdlog::level::info);
  auto lines = [&] {
    std::string s = out.str();
    return std::count(s.begin(), s.end(), '\n');
  };
  using std::chrono::milliseconds;
  auto t = AcceptBackoff::Clock::now();
  AcceptBackoff b(log, "listener x");
  const boost::system::error_code emfile(EMFILE, boost::system::system_category());
  const boost::system::error_code aborted(ECONNABORTED, boost::system::system_category());
  // One pending connection's error: at once, quietly (debug level).
  EXPECT_EQ(b.OnFailure(aborted, t).count(), 0);
  EXPECT_FALSE(b.in_episode());
  EXPECT_EQ(lines(), 0);
  // Out of descriptors: 50, 100, 200, ... up to 1000 ms; one warning.
  std::vector<int64_t> waits;
  for (int i = 0; i < 8; ++i) {
    if (i > 0) t += milliseconds(waits.back());  // the loop waited that long
    waits.push_back(b.OnFailure(emfile, t).count());
  }
  EXPECT_EQ(waits, (std::vector<int64_t>{50, 100, 200, 400, 800, 1000, 1000, 1000}));
  EXPECT_TRUE(b.in_episode());
  EXPECT_EQ(lines(), 1);
  EXPECT_NE(out.str().find("listener x: accept failed: Too many open files"), std::string::npos)
      << out.str();
  // At the limit while clients come and go: successes and failures
  // alternate. The back-off restarts after each success, the episode goes
  // on, and nothing more is logged.
  for (int i = 0; i < 20; ++i) {
    t += milliseconds(100);
    b.Succeeded(t);
    EXPECT_EQ(b.OnFailure(emfile, t).count(), 50);
  }
  EXPECT_TRUE(b.in_episode());
  EXPECT_EQ(lines(), 1);
  // An accept that works a second after the last failure ends it: one line.
  b.Succeeded(t + milliseconds(999));
  EXPECT_EQ(lines(), 1);
  b.Succeeded(t + milliseconds(1000));
  EXPECT_FALSE(b.in_episode());
  EXPECT_EQ(lines(), 2);
  EXPECT_NE(out.str().find("accepting again after 28 failed accept(s)"), std::string::npos)
      << out.str();
  b.Succeeded(t + milliseconds(2000));  // nothing to end
  EXPECT_EQ(lines(), 2);
  // Unknown errors back off too, so nothing can spin.
  EXPECT_EQ(b.OnFailure(boost::system::error_code(EINVAL, boost::system::system_category()),
                        t + milliseconds(3000))
                .count(),
            50);
  EXPECT_EQ(lines(), 3);

  // Failed() waits that long on the caller's executor.
  asio::io_context io;
  AcceptBackoff waiter(log, "listener y");
  auto t0 = std::chrono::steady_clock::now();
  asio::co_spawn(io, waiter.Failed(emfile), asio::detached);
  io.run();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, AcceptBackoff::kFirstDelay);
}

TEST(Handshake, GreetingAndFlags) {
  auto g = EncodeGreeting();
  EXPECT_EQ(GetBe64(&g[0]), kNbdMagic);
  EXPECT_EQ(GetBe64(&g[8]), kOptMagic);
  EXPECT_EQ(GetBe16(&g[16]), kFlagFixedNewstyle | kFlagNoZeroes);
  std::array<std::byte, 4> f{};
  PutBe32(f.data(), 3);
  ASSERT_OK(ParseClientFlags(f));
  EXPECT_TRUE(ParseClientFlags(f)->no_zeroes);
  PutBe32(f.data(), 4);
  EXPECT_FALSE(ParseClientFlags(f).ok());
}

class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(exports_.Add({"vol", "the volume", &vol_, false, true}));
    ASSERT_OK(exports_.Add({"", "", &vol_, false, false}));
    ASSERT_OK(exports_.Add({"ro", "", &ro_, true, true}));
  }
  std::vector<std::byte> Go(std::string_view name, std::vector<uint16_t> items) {
    std::vector<std::byte> d;
    BeWriter w(&d);
    w.U32(uint32_t(name.size()));
    w.Str(name);
    w.U16(uint16_t(items.size()));
    for (auto i : items) w.U16(i);
    return d;
  }
  std::vector<std::byte> Meta(std::string_view name, std::vector<std::string> queries) {
    std::vector<std::byte> d;
    BeWriter w(&d);
    w.U32(uint32_t(name.size()));
    w.Str(name);
    w.U32(uint32_t(queries.size()));
    for (auto& q : queries) {
      w.U32(uint32_t(q.size()));
      w.Str(q);
    }
    return d;
  }
  TestVolume vol_{"vol", 16 * kMiB};
  TestVolume ro_{"ro", 8 * kMiB};
  ExportTable exports_;
  Negotiation n_;
};

TEST_F(OptionsTest, ListShowsListedExportsOnly) {
  auto r = HandleOption(kOptList, {}, exports_, &n_);
  auto replies = Replies(r.reply);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].first, kRepServer);
  EXPECT_EQ(replies[1].first, kRepServer);
  EXPECT_EQ(replies[2].first, kRepAck);
  EXPECT_EQ(HandleOption(kOptList, Bytes("x"), exports_, &n_).outcome, OptionOutcome::kContinue);
  EXPECT_EQ(Replies(HandleOption(kOptList, Bytes("x"), exports_, &n_).reply)[0].first,
            kRepErrInvalid);
}

TEST_F(OptionsTest, InfoAndGo) {
  auto r = HandleOption(kOptInfo, Go("vol", {kInfoName, kInfoDescription}), exports_, &n_);
  EXPECT_EQ(r.outcome, OptionOutcome::kContinue);
  auto replies = Replies(r.reply);
  ASSERT_EQ(replies.back().first, kRepAck);
  bool saw_export = false, saw_block = false, saw_name = false;
  for (auto& [type, payload] : replies) {
    if (type != kRepInfo) continue;
    uint16_t item = GetBe16(payload.data());
    if (item == kInfoExport) {
      saw_export = true;
      EXPECT_EQ(GetBe64(payload.data() + 2), 16 * kMiB);
      uint16_t flags = GetBe16(payload.data() + 10);
      EXPECT_TRUE(flags & kTxCanMultiConn);
      EXPECT_TRUE(flags & kTxSendFua);
      EXPECT_FALSE(flags & kTxReadOnly);
    }
    if (item == kInfoBlockSize) {
      saw_block = true;
      EXPECT_EQ(GetBe32(payload.data() + 2), 512u);
      EXPECT_EQ(GetBe32(payload.data() + 6), 4096u);
      EXPECT_EQ(GetBe32(payload.data() + 10), 32 * kMiB);
    }
    saw_name |= item == kInfoName;
  }
  EXPECT_TRUE(saw_export && saw_block && saw_name);

  auto unknown = HandleOption(kOptGo, Go("nope", {}), exports_, &n_);
  EXPECT_EQ(Replies(unknown.reply)[0].first, kRepErrUnknown);
  EXPECT_EQ(unknown.outcome, OptionOutcome::kContinue);

  auto bad = Go("vol", {1});
  bad.pop_back();  // count says 1 item, only one byte follows
  EXPECT_EQ(Replies(HandleOption(kOptGo, bad, exports_, &n_).reply)[0].first, kRepErrInvalid);

  auto go = HandleOption(kOptGo, Go("ro", {}), exports_, &n_);
  EXPECT_EQ(go.outcome, OptionOutcome::kTransmission);
  ASSERT_TRUE(n_.chosen.has_value());
  EXPECT_TRUE(n_.chosen->effective_read_only());
}

// The advertised minimum is the one transmission enforces: 512 only for a
// GO that asked for NBD_INFO_BLOCK_SIZE; INFO tells what such a GO gets.
TEST_F(OptionsTest, BlockSizesBindOnlyClientsThatAskForThem) {
  auto min_block = [](const OptionResult& r) -> uint32_t {
    for (auto& [type, payload] : Replies(r.reply)) {
      if (type == kRepInfo && GetBe16(payload.data()) == kInfoBlockSize) {
        EXPECT_EQ(GetBe32(payload.data() + 6), 4096u);
        EXPECT_EQ(GetBe32(payload.data() + 10), 32 * kMiB);
        return GetBe32(payload.data() + 2);
      }
    }
    ADD_FAILURE() << "no NBD_INFO_BLOCK_SIZE";
    return 0;
  };
  Negotiation info;
  EXPECT_EQ(min_block(HandleOption(kOptInfo, Go("vol", {}), exports_, &info)), 512u);
  EXPECT_EQ(min_block(HandleOption(kOptInfo, Go("vol", {kInfoBlockSize}), exports_, &info)),
            512u);
  EXPECT_FALSE(info.block_sizes_agreed);  // INFO commits to nothing

  Negotiation asked;
  EXPECT_EQ(min_block(HandleOption(kOptGo, Go("vol", {kInfoBlockSize}), exports_, &asked)),
            512u);
  EXPECT_TRUE(asked.block_sizes_agreed);
  EXPECT_EQ(asked.min_block_size(), 512u);

  Negotiation not_asked;
  EXPECT_EQ(min_block(HandleOption(kOptGo, Go("vol", {kInfoName}), exports_, &not_asked)), 1u);
  EXPECT_EQ(not_asked.min_block_size(), 1u);

  Negotiation old_style;
  HandleOption(kOptExportName, Bytes("vol"), exports_, &old_style);
  EXPECT_EQ(old_style.min_block_size(), 1u);
}

TEST_F(OptionsTest, MetaContextNeedsStructuredReplies) {
  auto r = HandleOption(kOptSetMetaContext, Meta("vol", {"base:allocation"}), exports_, &n_);
  EXPECT_EQ(Replies(r.reply)[0].first, kRepErrInvalid);
  HandleOption(kOptStructuredReply, {}, exports_, &n_);
  EXPECT_TRUE(n_.structured_replies);
  r = HandleOption(kOptSetMetaContext, Meta("vol", {"base:allocation", "x-other:y"}), exports_,
                   &n_);
  auto replies = Replies(r.reply);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].first, kRepMetaContext);
  EXPECT_EQ(GetBe32(replies[0].second.data()), kBaseAllocationId);
  EXPECT_TRUE(n_.base_allocation);
  // LIST with no queries lists everything; "base:" lists the namespace.
  EXPECT_EQ(Replies(HandleOption(kOptListMetaContext, Meta("vol", {}), exports_, &n_).reply)
                .size(),
            2u);
  EXPECT_EQ(Replies(HandleOption(kOptListMetaContext, Meta("vol", {"base:"}), exports_, &n_)
                        .reply)
                .size(),
            2u);
  // GO to a different volume drops the selection.
  HandleOption(kOptGo, Go("ro", {}), exports_, &n_);
  EXPECT_FALSE(n_.base_allocation);
}

TEST_F(OptionsTest, ExportNameAndAbort) {
  n_.no_zeroes = false;
  auto r = HandleOption(kOptExportName, Bytes("vol"), exports_, &n_);
  EXPECT_EQ(r.outcome, OptionOutcome::kTransmission);
  EXPECT_EQ(r.reply.size(), 8u + 2 + 124);
  Negotiation n2;
  n2.no_zeroes = true;
  EXPECT_EQ(HandleOption(kOptExportName, Bytes(""), exports_, &n2).reply.size(), 10u);
  EXPECT_EQ(HandleOption(kOptExportName, Bytes("zz"), exports_, &n2).outcome,
            OptionOutcome::kClose);
  EXPECT_EQ(HandleOption(kOptAbort, {}, exports_, &n2).outcome, OptionOutcome::kClose);
  EXPECT_EQ(Replies(HandleOption(kOptStartTls, {}, exports_, &n2).reply)[0].first,
            kRepErrPolicy);
  EXPECT_EQ(Replies(HandleOption(77, {}, exports_, &n2).reply)[0].first, kRepErrUnsup);
}

// NBD_OPT_LIST over the daemon's own export table: every export a client
// can open, the default export "" included (nbdinfo --list, qemu-img).
TEST(DaemonExports, ListShowsEveryExportIncludingTheDefault) {
  FormatOptions f;
  f.segment_bytes = 256 << 10;
  OpenOptions open;
  open.start_cleaner = false;
  open.checkpoint_interval = std::chrono::milliseconds(0);
  auto pool = Pool::Format(NewMemMedia(32 * kMiB), f, open);
  ASSERT_OK(pool);
  DaemonOptions o;
  o.export_name = "disk";
  ExportTable exports;
  ASSERT_OK(FillExports(**pool, o, &exports));
  Negotiation n;
  auto replies = Replies(HandleOption(kOptList, {}, exports, &n).reply);
  std::vector<std::pair<std::string, std::string>> listed;  // (name, description)
  for (auto& [type, payload] : replies) {
    if (type != kRepServer) continue;
    uint32_t len = GetBe32(payload.data());
    ASSERT_LE(4 + len, payload.size());
    std::string text(reinterpret_cast<const char*>(payload.data()) + 4, payload.size() - 4);
    listed.push_back({text.substr(0, len), text.substr(len)});
  }
  EXPECT_EQ(replies.back().first, kRepAck);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0], std::make_pair(std::string("disk"), std::string("ftld volume ftl0")));
  EXPECT_EQ(listed[1],
            std::make_pair(std::string(""), std::string("ftld volume ftl0 (default)")));
  ASSERT_OK((*pool)->Close());
}

// Key-value datasets are no block devices: the daemon does not export
// them, the table refuses them, and LIST / INFO / GO do not know them.
TEST(DaemonExports, KeyValueDatasetsAreNeverExports) {
  FormatOptions f;
  f.segment_bytes = 256 << 10;
  OpenOptions open;
  open.start_cleaner = false;
  open.checkpoint_interval = std::chrono::milliseconds(0);
  auto pool = Pool::Format(NewMemMedia(32 * kMiB), f, open);
  ASSERT_OK(pool);
  auto kv = (*pool)->CreateDataset("kv", DatasetKind::kKv, uint64_t(1) << 40);
  ASSERT_OK(kv);
  ASSERT_OK((*pool)->CreateDataset("blk", DatasetKind::kBlock, kMiB).status());
  ExportTable exports;
  ASSERT_OK(FillExports(**pool, DaemonOptions{}, &exports));
  std::vector<std::string> names;
  for (const Export& e : exports.List()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ftl0", "", "blk"}));
  absl::Status add = exports.Add({.name = "kv", .description = "", .volume = *kv});
  EXPECT_TRUE(absl::IsFailedPrecondition(add)) << add;
  EXPECT_FALSE(exports.Find("kv").has_value());
  Negotiation n;
  auto replies = Replies(HandleOption(kOptList, {}, exports, &n).reply);
  EXPECT_EQ(replies.size(), 4u);  // three exports and the ack
  std::vector<std::byte> go_kv;  // name "kv", no info requests
  BeWriter w(&go_kv);
  w.U32(2);
  w.Str("kv");
  w.U16(0);
  auto go = HandleOption(kOptGo, go_kv, exports, &n);
  EXPECT_EQ(Replies(go.reply)[0].first, kRepErrUnknown);
  EXPECT_FALSE(n.chosen.has_value());
  auto info = HandleOption(kOptInfo, go_kv, exports, &n);
  EXPECT_EQ(Replies(info.reply)[0].first, kRepErrUnknown);
  ASSERT_OK((*pool)->Close());
}

TEST(Validate, ErrorsAsTheSpecAsks) {
  TransmissionContext ctx{.size = 1 * kMiB, .read_only = false, .structured_replies = false,
                          .base_allocation = false};
  auto code = [&](uint16_t type, uint64_t off, uint32_t len, uint16_t flags = 0) {
    return StatusToNbdError(ValidateRequest({flags, type, 1, off, len}, ctx));
  };
  EXPECT_EQ(code(kCmdRead, 0, 4096), 0u);
  EXPECT_EQ(code(kCmdRead, kMiB, 512), kEInval);
  EXPECT_EQ(code(kCmdWrite, kMiB - 512, 1024), kENoSpc);
  EXPECT_EQ(code(kCmdWriteZeroes, kMiB, 512), kENoSpc);
  EXPECT_EQ(code(kCmdTrim, kMiB, 512), kEInval);
  EXPECT_EQ(code(kCmdCache, kMiB, 512), kEInval);
  EXPECT_EQ(code(kCmdRead, 1, 512), kEInval);
  EXPECT_EQ(code(kCmdRead, 0, 100), kEInval);
  ctx.min_block_size = 1;  // a client that agreed to no block sizes
  EXPECT_EQ(code(kCmdRead, 1, 511), 0u);
  EXPECT_EQ(code(kCmdWrite, 4097, 3), 0u);
  EXPECT_EQ(code(kCmdTrim, 1, 1), 0u);
  EXPECT_EQ(code(kCmdWriteZeroes, kMiB - 1, 1), 0u);
  EXPECT_EQ(code(kCmdWriteZeroes, kMiB - 1, 2), kENoSpc);
  EXPECT_EQ(code(kCmdRead, kMiB - 1, 2), kEInval);
  EXPECT_EQ(code(kCmdRead, 0, 0), kEInval);
  EXPECT_EQ(code(kCmdRead, 1, 32 * kMiB + 1), kEInval);  // the maximum stays
  ctx.min_block_size = kMinBlockSize;
  EXPECT_EQ(code(kCmdRead, 0, 0), kEInval);
  EXPECT_EQ(code(kCmdWrite, 0, 33 * kMiB), kEInval);
  EXPECT_EQ(code(42, 0, 512), kEInval);
  EXPECT_EQ(code(kCmdRead, 0, 512, kCmdFlagDf), kEInval);  // DF needs structured replies
  EXPECT_EQ(code(kCmdRead, 0, 512, 1 << 9), kEInval);
  EXPECT_EQ(code(kCmdWrite, 0, 512, kCmdFlagNoHole), kEInval);
  EXPECT_EQ(code(kCmdWriteZeroes, 0, 512, kCmdFlagNoHole | kCmdFlagFua), 0u);
  // Valid together (the spec allows it); the volume answers ENOTSUP if it
  // cannot be fast.
  EXPECT_EQ(code(kCmdWriteZeroes, 0, 512, kCmdFlagNoHole | kCmdFlagFastZero), 0u);
  EXPECT_EQ(code(kCmdFlush, 0, 0), 0u);
  EXPECT_EQ(code(kCmdFlush, 0, 512), kEInval);
  EXPECT_EQ(code(kCmdBlockStatus, 0, 512), kEInval);  // no meta context
  EXPECT_EQ(code(kCmdDisc, 123, 456), 0u);
  ctx.read_only = true;
  EXPECT_EQ(code(kCmdWrite, 0, 512), kEPerm);
  EXPECT_EQ(code(kCmdTrim, 0, 512), kEPerm);
  EXPECT_EQ(code(kCmdWriteZeroes, 0, 512), kEPerm);
  EXPECT_EQ(code(kCmdRead, 0, 512), 0u);
  ctx.structured_replies = ctx.base_allocation = true;
  EXPECT_EQ(code(kCmdRead, 0, 512, kCmdFlagDf), 0u);
  EXPECT_EQ(code(kCmdBlockStatus, 0, 512, kCmdFlagReqOne), 0u);
}

TEST(Transmission, BlockStatusMergesAndClips) {
  TestVolume v("v", 4 * kMiB);
  std::vector<std::byte> data(8192, std::byte{1});
  ASSERT_OK(v.Write(0, data, false));
  ASSERT_OK(v.Write(8192, data, false));
  auto d = ExecuteBlockStatus(v, {0, kCmdBlockStatus, 1, 0, uint32_t(kMiB)});
  ASSERT_OK(d);
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].length, 16384u);
  EXPECT_EQ((*d)[0].flags, 0u);
  EXPECT_EQ((*d)[1].length, kMiB - 16384);
  EXPECT_EQ((*d)[1].flags, kStateHole | kStateZero);
  d = ExecuteBlockStatus(v, {kCmdFlagReqOne, kCmdBlockStatus, 1, 0, uint32_t(kMiB)});
  EXPECT_EQ(d->size(), 1u);
}

TEST(DaemonOptions, ParsesTheContract) {
  auto o = ParseDaemonArgs({"--size", "1G", "--format", "--force", "--bind", "0.0.0.0",
                            "--port=1234", "--unix", "/tmp/s", "--export", "disk",
                            "--read-only", "--control", "/tmp/c", "--log-level", "debug",
                            "--placement", "on", "--no-discard", "/data/x.img"});
  ASSERT_OK(o);
  EXPECT_EQ(*o->size, 1ull << 30);
  EXPECT_TRUE(o->format && o->force && o->read_only && o->tcp_enabled());
  EXPECT_EQ(o->port, 1234);
  EXPECT_EQ(*o->export_name, "disk");
  EXPECT_EQ(o->control, "/tmp/c");
  EXPECT_EQ(o->placement, "on");
  EXPECT_FALSE(o->discard);
  auto d = ParseDaemonArgs({"/var/lib/pool.img"});
  ASSERT_OK(d);
  EXPECT_EQ(d->control, "/run/ftld/pool.img.sock");
  EXPECT_EQ(d->bind, "127.0.0.1");
  EXPECT_EQ(d->port, 10809);
  EXPECT_FALSE(ParseDaemonArgs({"-k", "/tmp/s", "x"})->tcp_enabled());
  EXPECT_FALSE(ParseDaemonArgs({}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--force", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--port", "99999", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--wat", "x"}).ok());
  EXPECT_EQ(d->placement, "auto");
  EXPECT_TRUE(d->discard);
  EXPECT_FALSE(ParseDaemonArgs({"--placement", "sometimes", "x"}).ok());
}

TEST(DaemonOptions, SimulateVolatileCacheTakesAnOptionalInlineSeed) {
  auto o = ParseDaemonArgs({"x"});
  ASSERT_OK(o);
  EXPECT_FALSE(o->simulate_volatile_cache);
  o = ParseDaemonArgs({"--simulate-volatile-cache", "x"});
  ASSERT_OK(o);
  EXPECT_TRUE(o->simulate_volatile_cache);
  EXPECT_FALSE(o->volatile_cache_seed.has_value());
  EXPECT_EQ(o->backing, "x");  // the next word is BACKING, never a seed
  o = ParseDaemonArgs({"--simulate-volatile-cache=18446744073709551615", "x"});
  ASSERT_OK(o);
  EXPECT_TRUE(o->simulate_volatile_cache);
  EXPECT_EQ(*o->volatile_cache_seed, UINT64_MAX);
  EXPECT_FALSE(ParseDaemonArgs({"--simulate-volatile-cache=abc", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--simulate-volatile-cache=", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--simulate-volatile-cache", "7", "x"}).ok());  // two BACKINGs
}

TEST(DaemonOptions, ProofDelayInMilliseconds) {
  auto o = ParseDaemonArgs({"x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->proof_delay_ms, 20u);
  o = ParseDaemonArgs({"--proof-delay", "0", "x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->proof_delay_ms, 0u);
  o = ParseDaemonArgs({"--proof-delay=250", "x"});
  ASSERT_OK(o);
  EXPECT_EQ(o->proof_delay_ms, 250u);
  EXPECT_FALSE(ParseDaemonArgs({"--proof-delay", "1001", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--proof-delay", "-1", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--proof-delay", "soon", "x"}).ok());
}

TEST(DaemonOptions, SectorHeadersOnOrOff) {
  auto o = ParseDaemonArgs({"x"});
  ASSERT_OK(o);
  EXPECT_TRUE(o->sector_headers);
  o = ParseDaemonArgs({"--sector-headers", "off", "x"});
  ASSERT_OK(o);
  EXPECT_FALSE(o->sector_headers);
  o = ParseDaemonArgs({"--sector-headers=on", "x"});
  ASSERT_OK(o);
  EXPECT_TRUE(o->sector_headers);
  EXPECT_FALSE(ParseDaemonArgs({"--sector-headers", "maybe", "x"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--sector-headers"}).ok());
}

TEST(Backing, Rules) {
  DaemonOptions o;
  o.backing = "b";
  EXPECT_EQ(DecideBackingAction(o, {.exists = false}).status().code(),
            absl::StatusCode::kNotFound);
  o.size = 1 << 30;
  EXPECT_EQ(*DecideBackingAction(o, {.exists = false}), BackingAction::kCreateAndFormat);
  EXPECT_EQ(*DecideBackingAction(o, {.exists = true, .formatted = true}), BackingAction::kOpen);
  EXPECT_FALSE(DecideBackingAction(o, {.exists = true, .looks_empty = true}).ok());
  EXPECT_FALSE(DecideBackingAction(o, {.exists = true}).ok());
  o.format = true;
  EXPECT_EQ(*DecideBackingAction(o, {.exists = true}), BackingAction::kFormat);
  EXPECT_FALSE(DecideBackingAction(o, {.exists = true, .formatted = true}).ok());
  o.force = true;
  EXPECT_EQ(*DecideBackingAction(o, {.exists = true, .formatted = true}), BackingAction::kFormat);
}

TEST(Control, DispatcherNeverThrows) {
  ControlDispatcher d;
  d.Register("echo", "", [](const Json& r) -> absl::StatusOr<Json> {
    auto v = U64Arg(r, "n");
    if (!v.ok()) return v.status();
    return Json{{"n", *v}};
  });
  d.Register("boom", "", [](const Json&) -> absl::StatusOr<Json> {
    throw std::runtime_error("kaput");
  });
  auto reply = [&](std::string_view line) { return Json::parse(d.Dispatch(line)); };
  EXPECT_EQ(reply(R"({"cmd":"echo","n":5,"id":"x"})"),
            Json::parse(R"({"ok":true,"n":5,"id":"x"})"));
  EXPECT_FALSE(reply(R"({"cmd":"echo","n":-1})")["ok"]);
  EXPECT_FALSE(reply("{")["ok"]);
  EXPECT_FALSE(reply("null")["ok"]);
  EXPECT_FALSE(reply(R"({"cmd":1})")["ok"]);
  EXPECT_FALSE(reply(R"({"cmd":"nope"})")["ok"]);
  EXPECT_NE(reply(R"({"cmd":"boom"})")["error"].get<std::string>().find("kaput"),
            std::string::npos);
  EXPECT_TRUE(reply(R"({"cmd":"help"})")["ok"]);
  EXPECT_FALSE(reply(std::string("{\"cmd\":\"\xff\xfe\"}"))["ok"]);
}

// ---- the server over a socket ------------------------------------------

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(exports_.Add({"", "", &vol_, false, false}));
    ServerOptions o;
    o.port = 0;
    server_ = std::make_unique<Server>(&exports_, o);
    ASSERT_OK(server_->Listen());
    server_->Start();
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::seconds(5));
    server_->Join();
  }

  // Connects and reads the server's greeting.
  int Dial() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->tcp_port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    SetReceiveTimeout(fd);
    Recv(fd, 18);
    return fd;
  }
  // Connects, haggles (optionally structured replies), enters transmission.
  int Connect(bool structured) {
    int fd = Dial();
    std::vector<std::byte> out;
    BeWriter w(&out);
    w.U32(3);
    if (structured) {
      w.U64(kOptMagic);
      w.U32(kOptStructuredReply);
      w.U32(0);
    }
    w.U64(kOptMagic);
    w.U32(kOptExportName);
    w.U32(0);
    Send(fd, out);
    if (structured) Recv(fd, 20);
    Recv(fd, 10);
    return fd;
  }
  // Connects and enters transmission with NBD_OPT_GO, with or without an
  // NBD_INFO_BLOCK_SIZE request; returns the advertised minimum block size
  // through *min_block (0 if none was sent).
  int ConnectGo(bool request_block_size, uint32_t* min_block) {
    int fd = Dial();
    std::vector<std::byte> out;
    BeWriter w(&out);
    w.U32(3);
    w.U64(kOptMagic);
    w.U32(kOptGo);
    w.U32(request_block_size ? 8 : 6);
    w.U32(0);  // export ""
    w.U16(request_block_size ? 1 : 0);
    if (request_block_size) w.U16(kInfoBlockSize);
    Send(fd, out);
    *min_block = 0;
    for (;;) {
      auto h = Recv(fd, 20);
      EXPECT_EQ(GetBe64(h.data()), kOptReplyMagic);
      uint32_t type = GetBe32(h.data() + 12);
      auto d = Recv(fd, GetBe32(h.data() + 16));
      if (type == kRepInfo && GetBe16(d.data()) == kInfoBlockSize) *min_block = GetBe32(d.data() + 2);
      if (type == kRepAck) break;
      if (type != kRepInfo) {
        ADD_FAILURE() << "option reply " << type;
        break;
      }
    }
    return fd;
  }
  // A reply that never comes fails the test instead of hanging it.
  static void SetReceiveTimeout(int fd) {
    timeval tv{.tv_sec = 20, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  static void Send(int fd, std::span<const std::byte> b) {
    ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), ssize_t(b.size()));
  }
  static std::vector<std::byte> Recv(int fd, size_t n) {
    std::vector<std::byte> b(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::recv(fd, b.data() + got, n - got, 0);
      if (r <= 0) {
        ADD_FAILURE() << "connection closed or no reply within 20 s";
        return b;
      }
      got += size_t(r);
    }
    return b;
  }
  static void SendRequest(int fd, Request r, std::span<const std::byte> payload = {}) {
    std::array<std::byte, kRequestSize> raw;
    EncodeRequest(r, raw);
    Send(fd, raw);
    if (!payload.empty()) Send(fd, payload);
  }
  // (error, cookie) of a simple reply.
  static std::pair<uint32_t, uint64_t> SimpleReply(int fd) {
    auto b = Recv(fd, 16);
    EXPECT_EQ(GetBe32(b.data()), kSimpleReplyMagic);
    return {GetBe32(b.data() + 4), GetBe64(b.data() + 8)};
  }

  TestVolume vol_{"vol", 64 * kMiB};
  ExportTable exports_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, RepliesOutOfOrder) {
  int fd = Connect(false);
  vol_.SetWriteDelay(0, std::chrono::milliseconds(300));
  std::vector<std::byte> data(4096, std::byte{7});
  SendRequest(fd, {0, kCmdWrite, 1, 0, 4096}, data);
  SendRequest(fd, {0, kCmdWrite, 2, 8192, 4096}, data);
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(2)));
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(1)));
  ::close(fd);
}

TEST_F(ServerTest, OversizeWriteIsDrainedAndTheConnectionLives) {
  int fd = Connect(false);
  std::vector<std::byte> big(33 * kMiB);
  std::thread sender([&] { SendRequest(fd, {0, kCmdWrite, 9, 0, uint32_t(big.size())}, big); });
  EXPECT_EQ(SimpleReply(fd), std::make_pair(kEInval, uint64_t(9)));
  sender.join();
  SendRequest(fd, {0, kCmdRead, 10, 0, 512});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(10)));
  Recv(fd, 512);
  ::close(fd);
}

TEST_F(ServerTest, StructuredReadAndErrors) {
  int fd = Connect(true);
  std::vector<std::byte> data(4096, std::byte{0x5a});
  ASSERT_OK(vol_.Write(4096, data, false));
  SendRequest(fd, {0, kCmdRead, 3, 4096, 4096});
  auto h = Recv(fd, kChunkHeaderSize);
  EXPECT_EQ(GetBe32(h.data()), kStructuredReplyMagic);
  EXPECT_EQ(GetBe16(h.data() + 4), kReplyFlagDone);
  EXPECT_EQ(GetBe16(h.data() + 6), kReplyTypeOffsetData);
  EXPECT_EQ(GetBe32(h.data() + 16), 8u + 4096);
  auto body = Recv(fd, 8 + 4096);
  EXPECT_EQ(GetBe64(body.data()), 4096u);
  EXPECT_EQ(body[8], std::byte{0x5a});
  // A media error is EIO in an error chunk with a message.
  vol_.FailReadsAt(16384, absl::DataLossError("checksum mismatch"));
  SendRequest(fd, {0, kCmdRead, 4, 16384, 4096});
  h = Recv(fd, kChunkHeaderSize);
  EXPECT_EQ(GetBe16(h.data() + 6), kReplyTypeError);
  auto err = Recv(fd, GetBe32(h.data() + 16));
  EXPECT_EQ(GetBe32(err.data()), kEIo);
  ::close(fd);
}

TEST_F(ServerTest, FastZeroWithNoHoleIsNotSupportedRatherThanInvalid) {
  int fd = Connect(false);
  std::vector<std::byte> data(8192, std::byte{0x77});
  ASSERT_OK(vol_.Write(0, data, false));
  // FAST_ZERO|NO_HOLE: allocated zeros cannot be fast, so ENOTSUP, and
  // nothing changed.
  SendRequest(fd, {kCmdFlagFastZero | kCmdFlagNoHole, kCmdWriteZeroes, 1, 0, 4096});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(kENotSup, uint64_t(1)));
  std::vector<std::byte> got(8192);
  ASSERT_OK(vol_.Read(0, got));
  EXPECT_EQ(got, data);
  // Either flag alone works.
  SendRequest(fd, {kCmdFlagNoHole, kCmdWriteZeroes, 2, 0, 4096});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(2)));
  SendRequest(fd, {kCmdFlagFastZero, kCmdWriteZeroes, 3, 4096, 4096});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(3)));
  ASSERT_OK(vol_.Read(0, got));
  EXPECT_EQ(got, std::vector<std::byte>(8192));
  ::close(fd);
}

// The spec's default minimum block size is 1: a client that did not ask
// for NBD_INFO_BLOCK_SIZE in NBD_OPT_GO (or used NBD_OPT_EXPORT_NAME) is
// served at any byte offset and length.
TEST_F(ServerTest, ClientsWithoutBlockSizesAreServedByteGranular) {
  int fd = Connect(false);  // NBD_OPT_EXPORT_NAME
  std::vector<std::byte> data(16384);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte(uint8_t(i * 7 + 1));
  ASSERT_OK(vol_.Write(0, data, false));
  SendRequest(fd, {0, kCmdRead, 1, 1, 511});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(1)));
  auto got = Recv(fd, 511);
  EXPECT_EQ(0, std::memcmp(got.data(), data.data() + 1, 511));
  std::vector<std::byte> three(3, std::byte{0xee});
  SendRequest(fd, {0, kCmdWrite, 2, 4097, 3}, three);
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(2)));
  std::memset(data.data() + 4097, 0xee, 3);
  SendRequest(fd, {0, kCmdWriteZeroes, 3, 7, 10});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(3)));
  std::memset(data.data() + 7, 0, 10);
  SendRequest(fd, {0, kCmdTrim, 4, 4095, 4098});  // rounds inward: block 1
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(4)));
  std::memset(data.data() + 4096, 0, 4096);
  SendRequest(fd, {0, kCmdCache, 5, 3, 5});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(5)));
  std::vector<std::byte> now(data.size());
  ASSERT_OK(vol_.Read(0, now));
  EXPECT_EQ(now, data);
  // Past the end is still refused.
  SendRequest(fd, {0, kCmdRead, 6, vol_.size_bytes() - 1, 2});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(kEInval, uint64_t(6)));
  ::close(fd);

  uint32_t min_block = 0;
  fd = ConnectGo(false, &min_block);  // GO without the request: told 1
  EXPECT_EQ(min_block, 1u);
  SendRequest(fd, {0, kCmdRead, 7, 1, 511});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(7)));
  Recv(fd, 511);
  ::close(fd);
}

// A client that asked for block sizes in NBD_OPT_GO MUST honour them
// (spec, "Block size constraints"); ftld keeps enforcing 512.
TEST_F(ServerTest, ClientsThatAskedForBlockSizesKeepTheMinimum) {
  uint32_t min_block = 0;
  int fd = ConnectGo(true, &min_block);
  EXPECT_EQ(min_block, kMinBlockSize);
  SendRequest(fd, {0, kCmdRead, 1, 1, 511});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(kEInval, uint64_t(1)));
  std::vector<std::byte> three(3, std::byte{0xee});
  SendRequest(fd, {0, kCmdWrite, 2, 4097, 3}, three);  // payload drained
  EXPECT_EQ(SimpleReply(fd), std::make_pair(kEInval, uint64_t(2)));
  SendRequest(fd, {0, kCmdRead, 3, 512, 1024});
  EXPECT_EQ(SimpleReply(fd), std::make_pair(0u, uint64_t(3)));
  Recv(fd, 1024);
  ::close(fd);
}

TEST_F(ServerTest, ManyRequestsInFlight) {
  int fd = Connect(false);
  std::vector<std::byte> data(4096, std::byte{1});
  std::thread sender([&] {
    for (uint64_t i = 0; i < 2000; ++i) {
      SendRequest(fd, {0, kCmdWrite, i, (i % 1000) * 4096, 4096}, data);
    }
  });
  std::set<uint64_t> cookies;
  for (int i = 0; i < 2000; ++i) {
    auto [err, cookie] = SimpleReply(fd);
    EXPECT_EQ(err, 0u);
    cookies.insert(cookie);
  }
  sender.join();
  EXPECT_EQ(cookies.size(), 2000u);
  ::close(fd);
}

}  // namespace
}  // namespace ftl::nbd
