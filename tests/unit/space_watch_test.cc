// The pool-use warnings of ftld (daemon/space_watch.h): which crossing of
// 80% / 90% / 95% is logged when, with hysteresis against a pool hovering
// at a threshold; and SpaceMonitor logging them for a real pool as it
// fills and empties.

#include "daemon/space_watch.h"

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>

#include <sstream>
#include <thread>

#include "ftl/log.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl::daemon {
namespace {

using Crossing = SpaceWatch::Crossing;

std::string Show(const std::vector<Crossing>& cs) {
  if (cs.empty()) return "-";
  std::string out;
  for (const Crossing& c : cs)
    out += std::string(out.empty() ? "" : ", ") + (c.rising ? "up " : "down ") +
           std::to_string(int(c.threshold));
  return out;
}

TEST(SpaceWatchTest, EachThresholdIsLoggedOnceOnTheWayUp) {
  SpaceWatch w;
  EXPECT_EQ(Show(w.Update(0)), "-");
  EXPECT_EQ(Show(w.Update(79.9)), "-");
  EXPECT_EQ(Show(w.Update(80)), "up 80");
  EXPECT_EQ(Show(w.Update(85)), "-");
  EXPECT_EQ(Show(w.Update(80.5)), "-");
  EXPECT_EQ(Show(w.Update(90.1)), "up 90");
  EXPECT_EQ(Show(w.Update(94.9)), "-");
  EXPECT_EQ(Show(w.Update(95)), "up 95");
  EXPECT_EQ(Show(w.Update(120)), "-");  // over the capacity: still the one warning
  EXPECT_EQ(w.level(), 3u);
}

TEST(SpaceWatchTest, AJumpLogsEveryThresholdPassedInOrder) {
  SpaceWatch w;
  EXPECT_EQ(Show(w.Update(91)), "up 80, up 90");
  EXPECT_EQ(Show(w.Update(99)), "up 95");
  EXPECT_EQ(Show(w.Update(10)), "down 95, down 90, down 80");
  EXPECT_EQ(w.level(), 0u);
}

TEST(SpaceWatchTest, FallingBackBelowArmsTheWarningAgain) {
  SpaceWatch w;
  EXPECT_EQ(Show(w.Update(91)), "up 80, up 90");
  // Hovering at a threshold: within the hysteresis nothing changes.
  EXPECT_EQ(Show(w.Update(89.9)), "-");
  EXPECT_EQ(Show(w.Update(90.2)), "-");
  EXPECT_EQ(Show(w.Update(88.1)), "-");
  EXPECT_EQ(Show(w.Update(87.9)), "down 90");
  EXPECT_EQ(w.level(), 1u);
  EXPECT_EQ(Show(w.Update(89)), "-");
  EXPECT_EQ(Show(w.Update(90)), "up 90");  // crossed again: warned again
  EXPECT_EQ(Show(w.Update(50)), "down 90, down 80");
  EXPECT_EQ(Show(w.Update(80)), "up 80");
}

// A real pool, filled by a volume created at will and emptied by
// destroying it: the monitor logs 80, 90, 95 once each, then one line when
// use falls back.
TEST(SpaceMonitorTest, LogsTheCrossingsOfARealPool) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  Logger("nbd")->sinks().push_back(sink);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(NewMemMedia(48 << 20), testing::SmallFormat(),
                                    testing::QuietOpen()));
  const uint64_t logical = pool->geometry().logical_blocks * 4096;
  ASSERT_OK_AND_ASSIGN(Volume * v, pool->CreateDataset("thin", DatasetKind::kBlock, 2 * logical));
  auto wait_for = [&](const std::string& text) {
    for (int i = 0; i < 500 && out.str().find(text) == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return out.str().find(text) != std::string::npos;
  };
  {
    SpaceMonitor monitor(pool.get(), std::chrono::milliseconds(5));
    for (uint64_t off = 0; pool->Stats().used_percent < 96; off += 1 << 20)
      ASSERT_OK(v->Write(off, testing::Pattern(1, off, 1 << 20)));
    EXPECT_TRUE(wait_for("crossed 95%")) << out.str();
    ASSERT_OK(pool->DestroyDataset("thin"));
    EXPECT_TRUE(wait_for("back below 80%")) << out.str();
  }
  const std::string log = out.str();
  Logger("nbd")->sinks().pop_back();
  // Each crossing once, in order, however the polls fell between writes.
  size_t at = 0;
  for (const char* t : {"crossed 80%", "crossed 90%", "crossed 95%", "back below 95%",
                        "back below 90%", "back below 80%"}) {
    size_t here = log.find(t);
    EXPECT_NE(here, std::string::npos) << t << ":\n" << log;
    EXPECT_GE(here, at) << t << " out of order:\n" << log;
    EXPECT_EQ(log.find(t, here + 1), std::string::npos) << t << " twice:\n" << log;
    at = here;
  }
  EXPECT_NE(log.find("crossed 95%"), std::string::npos) << log;
  // The primary (the whole capacity) and "thin" (twice it).
  EXPECT_NE(log.find("(3.00x the capacity)"), std::string::npos) << log;
  ASSERT_OK(pool->Close());
}

}  // namespace
}  // namespace ftl::daemon
