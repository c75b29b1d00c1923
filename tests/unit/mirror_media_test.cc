// Tests for the mirror vdev (ftl/mirror.h, media/mirror_media.h) over
// fault-injecting devices: labels and device identity, writes to every
// device, self-heal of bit flips and read errors through ReadVerified,
// degraded writes when a device fails or disappears mid-write, offline /
// online / replace with resilver, and a pool on a mirror that reads back
// what was written, heals, and scrubs.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "ftl/mirror.h"
#include "ftl/pool.h"
#include "media/fault_media.h"
#include "media/mirror_label.h"
#include "status_asserts.h"
#include "test_util.h"
#include "util/checksum.h"

namespace ftl {
namespace {

using media::FaultMedia;
using media::kLabelAreaBytes;
using ::testing::HasSubstr;

constexpr uint64_t kDev = 48ull << 20;  // each device
constexpr uint64_t kB = 4096;

std::vector<std::byte> Raw(FaultMedia& m, uint64_t mirror_offset, size_t n) {
  std::vector<std::byte> out(n);
  EXPECT_OK(m.Read(kLabelAreaBytes + mirror_offset, out));
  return out;
}

// A check by the blocks' checksums, as the engine makes them.
struct Sums {
  std::vector<uint32_t> csum;
  explicit Sums(const std::vector<std::byte>& data) {
    for (size_t at = 0; at < data.size(); at += kB)
      csum.push_back(util::BlockChecksum(std::span(data).subspan(at, kB)));
  }
  ReadVerdict operator()(size_t i, std::span<const std::byte> b) const {
    return util::BlockChecksum(b) == csum[i] ? ReadVerdict::kGood : ReadVerdict::kBad;
  }
};

struct Fixture {
  std::shared_ptr<FaultMedia> a = std::make_shared<FaultMedia>(kDev);
  std::shared_ptr<FaultMedia> b = std::make_shared<FaultMedia>(kDev);
  std::shared_ptr<MirrorMedia> m;
  explicit Fixture(MirrorOptions o = {}) {
    auto r = CreateMirror({{"a", a}, {"b", b}}, o);
    EXPECT_OK(r);
    m = *r;
  }
  absl::StatusOr<std::shared_ptr<MirrorMedia>> Reopen(MirrorOptions o = {}) {
    m.reset();
    return OpenMirror({{"a", a}, {"b", b}}, o);
  }
  DeviceInfo Dev(int i) { return m->Devices()[size_t(i)]; }
};

TEST(MirrorMediaTest, LabelsNameTheMirrorAndItsDevices) {
  Fixture f;
  EXPECT_EQ(f.m->size(), kDev - kLabelAreaBytes);
  EXPECT_EQ(f.m->State(), "ONLINE");
  ASSERT_OK_AND_ASSIGN(MirrorLabelInfo la, ReadMirrorLabel(*f.a));
  ASSERT_OK_AND_ASSIGN(MirrorLabelInfo lb, ReadMirrorLabel(*f.b));
  EXPECT_EQ(la.uuid, f.m->uuid());
  EXPECT_EQ(lb.uuid, f.m->uuid());
  EXPECT_EQ(la.index, 0);
  EXPECT_EQ(lb.index, 1);
  ASSERT_EQ(la.members.size(), 2u);
  EXPECT_EQ(la.members[1].name, "b");
  EXPECT_NE(la.device_guid, lb.device_guid);
  // A device without a label, and a pool superblock, are no mirror devices.
  auto plain = std::make_shared<FaultMedia>(kDev);
  EXPECT_TRUE(absl::IsNotFound(ReadMirrorLabel(*plain).status()));
  // An older build sees a superblock of format version 8 there; this one
  // names the device a mirror's.
  EXPECT_FALSE(Pool::Open(f.a, testing::QuietOpen()).ok());
  EXPECT_THAT(std::string(Pool::Open(f.a, testing::QuietOpen()).status().message()), HasSubstr("mirror"));
  EXPECT_TRUE(Pool::LooksFormatted(*f.a));
  ASSERT_OK(f.Reopen().status());
}

TEST(MirrorMediaTest, ForeignReplacedAndSplitDevicesAreRefused) {
  Fixture f, g;
  f.m.reset();
  auto mixed = OpenMirror({{"a", f.a}, {"g", g.b}});
  EXPECT_TRUE(absl::IsFailedPrecondition(mixed.status())) << mixed.status();
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("another mirror"));
  auto twice = OpenMirror({{"a", f.a}, {"a2", f.a}});
  EXPECT_FALSE(twice.ok());
  auto none = OpenMirror({{"plain", std::make_shared<FaultMedia>(kDev)}});
  EXPECT_TRUE(absl::IsNotFound(none.status()));

  // Replace b with c: b is no member any more.
  ASSERT_OK_AND_ASSIGN(f.m, OpenMirror({{"a", f.a}, {"b", f.b}}));
  auto c = std::make_shared<FaultMedia>(kDev);
  ASSERT_OK(f.m->Replace("b", {"c", c}));
  ASSERT_OK(f.m->WaitForResilver());
  f.m.reset();
  auto stale = OpenMirror({{"a", f.a}, {"b", f.b}});
  EXPECT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_THAT(std::string(stale.status().message()), HasSubstr("no longer a member"));
  ASSERT_OK(OpenMirror({{"a", f.a}, {"c", c}}).status());

  // Split brain: a and c each opened (and written) without the other.
  ASSERT_OK_AND_ASSIGN(auto only_a, OpenMirror({{"a", f.a}}));
  ASSERT_OK(only_a->Write(0, std::vector<std::byte>(kB, std::byte{1})));
  only_a.reset();
  ASSERT_OK_AND_ASSIGN(auto only_c, OpenMirror({{"c", c}}));
  only_c.reset();
  auto split = OpenMirror({{"a", f.a}, {"c", c}});
  EXPECT_TRUE(absl::IsFailedPrecondition(split.status())) << split.status();
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("split brain"));
  // Either alone still opens (the one whose data is wanted).
  EXPECT_OK(OpenMirror({{"a", f.a}}).status());
}

TEST(MirrorMediaTest, WritesReachEveryDeviceAndReadsAreSpread) {
  Fixture f;
  auto data = testing::Pattern(1, 0, 4 << 20);
  ASSERT_OK(f.m->Write(0, data));
  ASSERT_OK(f.m->Sync());
  EXPECT_EQ(Raw(*f.a, 0, data.size()), data);
  EXPECT_EQ(Raw(*f.b, 0, data.size()), data);
  std::vector<std::byte> got(kB);
  for (uint64_t off = 0; off < data.size(); off += 256 * kB) ASSERT_OK(f.m->Read(off, got));
  EXPECT_GT(f.Dev(0).reads, 0u);
  EXPECT_GT(f.Dev(1).reads, 0u);
}

TEST(MirrorMediaTest, ReadVerifiedHealsABitFlipOnEitherSide) {
  Fixture f;
  // Reads prefer device a in the first 1 MiB stripe and b in the second.
  auto d0 = testing::Pattern(2, 0, 64 * kB);
  auto d1 = testing::Pattern(3, 1 << 20, 64 * kB);
  ASSERT_OK(f.m->Write(0, d0));
  ASSERT_OK(f.m->Write(1 << 20, d1));
  f.a->FlipBit(kLabelAreaBytes + 5 * kB + 17, 3);
  f.a->FlipBit(kLabelAreaBytes + 40 * kB + 4000, 0);
  f.b->FlipBit(kLabelAreaBytes + (1 << 20) + 9 * kB, 6);
  Sums s0(d0), s1(d1);
  std::vector<std::byte> got(64 * kB);
  ReadOutcome out;
  ASSERT_OK(f.m->ReadVerified(0, got, kB, std::ref(s0), &out));
  EXPECT_EQ(got, d0);
  ASSERT_OK(f.m->ReadVerified(1 << 20, got, kB, std::ref(s1), &out));
  EXPECT_EQ(got, d1);
  EXPECT_EQ(out.bad_copies, 3u);
  EXPECT_EQ(out.repaired, 3u);
  EXPECT_EQ(out.unrecovered, 0u);
  EXPECT_EQ(Raw(*f.a, 0, 64 * kB), d0) << "a healed";
  EXPECT_EQ(Raw(*f.b, 1 << 20, 64 * kB), d1) << "b healed";
  EXPECT_EQ(f.Dev(0).checksum_errors, 2u);
  EXPECT_EQ(f.Dev(1).checksum_errors, 1u);
  EXPECT_EQ(f.Dev(0).repaired_bytes, 2 * kB);
  EXPECT_EQ(f.m->Counters().healed_units, 3u);
  // Healed: reading again finds nothing.
  ReadOutcome again;
  ASSERT_OK(f.m->ReadVerified(0, got, kB, std::ref(s0), &again));
  EXPECT_EQ(again.bad_copies, 0u);
}

TEST(MirrorMediaTest, WithoutAGoodCopyTheBadDataIsReportedNotHealed) {
  Fixture f;
  auto data = testing::Pattern(3, 0, 256 * kB);
  ASSERT_OK(f.m->Write(0, data));
  Sums sums(data);
  std::mt19937_64 rng(7);
  std::set<uint64_t> blocks;
  for (int i = 0; i < 20; ++i) {
    uint64_t blk = rng() % 256;
    blocks.insert(blk);
    f.b->FlipBit(kLabelAreaBytes + blk * kB + rng() % kB, int(rng() % 8));
  }
  ASSERT_OK(f.m->Offline("a"));
  std::vector<std::byte> got(data.size());
  ReadOutcome out;
  ASSERT_OK(f.m->ReadVerified(0, got, kB, std::ref(sums), &out));
  EXPECT_EQ(out.unrecovered, blocks.size());
  EXPECT_EQ(out.repaired, 0u);
  // With a back, every flipped block of b is healed from it.
  ASSERT_OK(f.m->Online("a"));
  ASSERT_OK(f.m->WaitForResilver());
  // The resilver copied b to a raw (the mirror knows no checksums), flips
  // and all: only the engine's scrub can tell; documented in decisions.md.
  EXPECT_EQ(Raw(*f.a, 0, data.size()), Raw(*f.b, 0, data.size()));
}

TEST(MirrorMediaTest, ReadErrorsOnOneSideAreServedFromTheOther) {
  Fixture f;
  auto data = testing::Pattern(4, 0, 32 * kB);
  ASSERT_OK(f.m->Write(0, data));
  f.a->FailReads(kLabelAreaBytes, 32 * kB);
  f.b->FailReads(kLabelAreaBytes + 16 * kB, 16 * kB);
  std::vector<std::byte> got(16 * kB);
  ASSERT_OK(f.m->Read(0, got));
  EXPECT_EQ(got, std::vector<std::byte>(data.begin(), data.begin() + 16 * kB));
  Sums sums(std::vector<std::byte>(data.begin(), data.begin() + 16 * kB));
  ReadOutcome out;
  ASSERT_OK(f.m->ReadVerified(0, got, kB, std::ref(sums), &out));
  EXPECT_EQ(got, std::vector<std::byte>(data.begin(), data.begin() + 16 * kB));
  EXPECT_GT(f.Dev(0).read_errors, 0u);
  EXPECT_EQ(f.m->State(), "ONLINE") << "a read error does not fault a device";
  // Both sides failing: an error, never wrong data.
  EXPECT_FALSE(f.m->Read(16 * kB, got).ok());
}

TEST(MirrorMediaTest, AWriteErrorFaultsTheDeviceAndWritesGoOnDegraded) {
  Fixture f;
  auto d1 = testing::Pattern(5, 0, 8 * kB);
  ASSERT_OK(f.m->Write(0, d1));
  f.b->FailNthWrite(1);
  auto d2 = testing::Pattern(6, 0, 8 * kB);
  ASSERT_OK(f.m->Write(0, d2)) << "acknowledged by the survivor";
  EXPECT_EQ(f.m->State(), "DEGRADED");
  EXPECT_EQ(f.Dev(1).state, DeviceState::kFaulted);
  EXPECT_EQ(f.Dev(1).write_errors, 1u);
  EXPECT_THAT(f.Dev(1).reason, HasSubstr("write error"));
  ASSERT_OK_AND_ASSIGN(MirrorLabelInfo la, ReadMirrorLabel(*f.a));
  EXPECT_EQ(la.members[1].state, DeviceState::kFaulted) << "durable before the write returned";
  auto d3 = testing::Pattern(7, 8 * kB, 8 * kB);
  ASSERT_OK(f.m->Write(8 * kB, d3));
  ASSERT_OK(f.m->Sync());
  // The last ONLINE device is never faulted: its errors are returned.
  f.a->FailNthWrite(1);
  EXPECT_FALSE(f.m->Write(0, d1).ok());
  EXPECT_EQ(f.Dev(0).state, DeviceState::kOnline);
  EXPECT_FALSE(f.m->Offline("a").ok());
  // Reopened with both: b is stale and resilvered before it is read.
  ASSERT_OK_AND_ASSIGN(f.m, f.Reopen());
  ASSERT_OK(f.m->WaitForResilver());
  EXPECT_EQ(f.m->State(), "ONLINE");
  EXPECT_EQ(Raw(*f.b, 0, 8 * kB), d2);
  EXPECT_EQ(Raw(*f.b, 8 * kB, 8 * kB), d3);
}

TEST(MirrorMediaTest, ADeviceThatDisappearsMidWriteAndComesBackIsResilvered) {
  Fixture f;
  auto d1 = testing::Pattern(8, 0, 64 * kB);
  ASSERT_OK(f.m->Write(0, d1));
  ASSERT_OK(f.m->Sync());
  f.b->Crash();  // gone: every call fails
  auto d2 = testing::Pattern(9, 0, 64 * kB);
  ASSERT_OK(f.m->Write(0, d2));
  ASSERT_OK(f.m->Sync());
  EXPECT_EQ(f.Dev(1).state, DeviceState::kFaulted);
  media::CrashPlan plan;
  plan.mode = media::CrashPlan::Mode::kDropAll;
  f.b->Restart(plan);  // back, with only what it had synced
  EXPECT_EQ(Raw(*f.b, 0, 64 * kB), d1);
  std::vector<std::byte> got(64 * kB);
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(f.m->Read(0, got));
    EXPECT_EQ(got, d2) << "a FAULTED device is never read";
  }
  ASSERT_OK(f.m->Online("b"));
  EXPECT_EQ(f.Dev(1).state, DeviceState::kResilvering);
  ASSERT_OK(f.m->WaitForResilver());
  EXPECT_EQ(f.Dev(1).state, DeviceState::kOnline);
  EXPECT_EQ(Raw(*f.b, 0, 64 * kB), d2);
  EXPECT_EQ(f.m->Resilver().completed, 1u);
}

TEST(MirrorMediaTest, OfflineOnlineCatchesUpWhileWritesGoOn) {
  Fixture f(MirrorOptions{.resilver_bytes_per_sec = 64ull << 20});
  ASSERT_OK(f.m->Offline("b"));
  EXPECT_EQ(f.m->State(), "DEGRADED");
  auto d = testing::Pattern(10, 0, 1 << 20);
  ASSERT_OK(f.m->Write(20 << 20, d));
  ASSERT_OK(f.m->Online("b"));
  // Writes during the resilver reach b too.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t i = 0; !stop; ++i) {
      auto w = testing::Pattern(100 + i, (i % 64) * kB, kB);
      ASSERT_OK(f.m->Write((i % 64) * kB, w));
    }
  });
  ASSERT_OK(f.m->WaitForResilver());
  stop = true;
  writer.join();
  EXPECT_EQ(f.m->State(), "ONLINE");
  EXPECT_EQ(Raw(*f.a, 0, f.m->size()), Raw(*f.b, 0, f.m->size()));
}

TEST(MirrorMediaTest, ReplaceResilversANewDeviceWhileServing) {
  Fixture f;
  auto d = testing::Pattern(11, 0, 2 << 20);
  ASSERT_OK(f.m->Write(0, d));
  auto small = std::make_shared<FaultMedia>(8 << 20);
  EXPECT_FALSE(f.m->Replace("b", {"small", small}).ok());
  EXPECT_FALSE(f.m->Replace("a", {"a2", f.b}).ok()) << "already a member";
  auto c = std::make_shared<FaultMedia>(kDev);
  ASSERT_OK(f.m->Replace("b", {"c", c}));
  std::vector<std::byte> got(d.size());
  ASSERT_OK(f.m->Read(0, got));
  EXPECT_EQ(got, d);
  ASSERT_OK(f.m->WaitForResilver());
  EXPECT_EQ(f.Dev(1).name, "c");
  EXPECT_EQ(f.Dev(1).state, DeviceState::kOnline);
  EXPECT_EQ(Raw(*c, 0, d.size()), d);
  // Replacing the only ONLINE device: nothing to copy from.
  ASSERT_OK(f.m->Offline("c"));
  EXPECT_FALSE(f.m->Replace("a", {"d", std::make_shared<FaultMedia>(kDev)}).ok());
}

// ---- a pool on a mirror

struct PoolOnMirror {
  Fixture f;
  std::unique_ptr<Pool> pool;
  PoolOnMirror() {
    auto p = Pool::Format(f.m, testing::SmallFormat(), testing::QuietOpen(false));
    EXPECT_OK(p);
    pool = std::move(*p);
  }
  // The device byte offsets of the volume's data blocks: found by content.
  std::vector<uint64_t> Find(FaultMedia& dev, const std::vector<std::byte>& data) {
    std::vector<uint64_t> at;
    std::vector<std::byte> img(dev.size());
    EXPECT_OK(dev.Read(0, img));
    for (size_t blk = 0; blk < data.size() / kB; ++blk) {
      for (uint64_t off = kLabelAreaBytes; off + kB <= img.size(); off += kB) {
        if (std::memcmp(&img[off], &data[blk * kB], kB) == 0) {
          at.push_back(off);
          break;
        }
      }
    }
    return at;
  }
};

TEST(MirrorMediaTest, PoolReadsAreHealedAndScrubRepairsEveryFlippedLiveBlock) {
  PoolOnMirror p;
  Volume* v = p.pool->PrimaryVolume();
  auto data = testing::Pattern(12, 0, 512 * kB);
  ASSERT_OK(v->Write(0, data));
  ASSERT_OK(v->Flush());
  std::vector<uint64_t> at = p.Find(*p.f.b, data);
  ASSERT_EQ(at.size(), 512u);
  std::mt19937_64 rng(22);
  std::set<uint64_t> flipped;
  for (int i = 0; i < 40; ++i) {
    uint64_t blk = rng() % 512;
    flipped.insert(blk);
    p.f.b->FlipBit(at[blk] + rng() % kB, int(rng() % 8));
  }
  // Reads never return wrong data.
  std::vector<std::byte> got(data.size());
  ASSERT_OK(v->Read(0, got));
  EXPECT_EQ(got, data);
  // A scrub finds the rest; afterwards b holds the data again.
  ASSERT_OK_AND_ASSIGN(ScrubStatus s, p.pool->Scrub({.rate_bytes_per_sec = 0}));
  EXPECT_EQ(s.state, "finished");
  EXPECT_EQ(s.unrecoverable, 0u);
  EXPECT_GE(s.blocks_verified, 512u);
  auto devs = p.f.m->Devices();
  EXPECT_EQ(devs[1].checksum_errors, flipped.size()) << "every flipped live block found once";
  EXPECT_EQ(devs[0].checksum_errors, 0u);
  for (size_t blk = 0; blk < 512; ++blk) {
    std::vector<std::byte> raw(kB);
    ASSERT_OK(p.f.b->Read(at[blk], raw));
    ASSERT_EQ(raw, std::vector<std::byte>(data.begin() + long(blk * kB), data.begin() + long((blk + 1) * kB)))
        << "block " << blk << " not healed";
  }
  ASSERT_OK_AND_ASSIGN(ScrubStatus again, p.pool->Scrub({.rate_bytes_per_sec = 0}));
  EXPECT_EQ(again.errors, 0u);
  EXPECT_EQ(again.passes, 2u);
  ASSERT_OK_AND_ASSIGN(CheckReport rep, p.pool->Check(true));
  EXPECT_TRUE(rep.problems.empty());
}

TEST(MirrorMediaTest, BackgroundScrubReportsProgressAndStops) {
  PoolOnMirror p;
  Volume* v = p.pool->PrimaryVolume();
  ASSERT_OK(v->Write(0, testing::Pattern(13, 0, 8 << 20)));
  ASSERT_OK(p.pool->StartScrub({.rate_bytes_per_sec = 4 << 20}));
  EXPECT_FALSE(p.pool->StartScrub({}).ok()) << "one at a time";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ScrubStatus mid = p.pool->GetScrubStatus();
  EXPECT_EQ(mid.state, "running");
  EXPECT_GT(mid.scanned_bytes, 0u);
  EXPECT_LT(mid.scanned_bytes, mid.total_bytes);
  p.pool->StopScrub();
  EXPECT_EQ(p.pool->GetScrubStatus().state, "stopped");
  ASSERT_OK(p.pool->StartScrub({.rate_bytes_per_sec = 0}));
  for (int i = 0; i < 200 && p.pool->GetScrubStatus().state == "running"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ScrubStatus done = p.pool->GetScrubStatus();
  EXPECT_EQ(done.state, "finished");
  EXPECT_EQ(done.scanned_bytes, done.total_bytes);
}

TEST(MirrorMediaTest, ScrubOnASingleDeviceReportsWhatCannotBeRepaired) {
  auto dev = std::make_shared<FaultMedia>(kDev);
  ASSERT_OK_AND_ASSIGN(auto pool, Pool::Format(dev, testing::SmallFormat(), testing::QuietOpen(false)));
  auto data = testing::Pattern(14, 0, 64 * kB);
  ASSERT_OK(pool->PrimaryVolume()->Write(0, data));
  std::vector<std::byte> img(dev->size());
  ASSERT_OK(dev->Read(0, img));
  uint64_t at = 0;
  for (uint64_t off = 0; off < img.size(); off += kB)
    if (std::memcmp(&img[off], &data[3 * kB], kB) == 0) at = off;
  ASSERT_NE(at, 0u);
  dev->FlipBit(at + 100, 1);
  ASSERT_OK_AND_ASSIGN(ScrubStatus s, pool->Scrub({.rate_bytes_per_sec = 0}));
  EXPECT_EQ(s.unrecoverable, 1u);
  EXPECT_EQ(s.repaired, 0u);
  ASSERT_EQ(s.damage.size(), 1u);
  EXPECT_THAT(s.damage[0], HasSubstr("fails its checksum"));
}

TEST(MirrorMediaTest, PoolSurvivesDegradedWritesAndReopensWithTheStaleDeviceResilvered) {
  PoolOnMirror p;
  Volume* v = p.pool->PrimaryVolume();
  auto d1 = testing::Pattern(15, 0, 1 << 20);
  ASSERT_OK(v->Write(0, d1));
  ASSERT_OK(v->Flush());
  p.f.b->Crash();
  auto d2 = testing::Pattern(16, 0, 1 << 20);
  ASSERT_OK(v->Write(0, d2));
  ASSERT_OK(v->Flush());
  EXPECT_EQ(p.f.m->State(), "DEGRADED");
  ASSERT_OK(p.pool->Close());
  p.pool.reset();
  media::CrashPlan plan;
  p.f.b->Restart(plan);
  ASSERT_OK_AND_ASSIGN(p.f.m, p.f.Reopen());
  ASSERT_OK_AND_ASSIGN(auto pool, Pool::Open(p.f.m, testing::QuietOpen(false)));
  std::vector<std::byte> got(d2.size());
  ASSERT_OK(pool->PrimaryVolume()->Read(0, got));
  EXPECT_EQ(got, d2) << "the stale device must not be read";
  ASSERT_OK(p.f.m->WaitForResilver());
  EXPECT_EQ(p.f.m->State(), "ONLINE");
  ASSERT_OK(pool->Close());
  // b alone now opens the newest pool.
  pool.reset();
  p.f.m.reset();
  ASSERT_OK_AND_ASSIGN(auto only_b, OpenMirror({{"b", p.f.b}}, {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(auto pb, Pool::Open(only_b, [] {
                         OpenOptions o = testing::QuietOpen(false);
                         o.read_only = true;
                         return o;
                       }()));
  ASSERT_OK(pb->PrimaryVolume()->Read(0, got));
  EXPECT_EQ(got, d2);
}

}  // namespace
}  // namespace ftl
