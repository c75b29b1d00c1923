// ftl-tool on a real backing file: a consistent pool checks clean (exit 0),
// damaged data or metadata is reported (exit 1), a non-pool is refused
// (exit 2); dump prints the geometry. The tool never writes to the file.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ftl/pool.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

struct Result {
  int code;
  std::string out;
};

Result RunTool(const std::string& args) {
  std::string cmd = std::string(FTL_TOOL) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  Result r{-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  int st = pclose(f);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Byte offset in the file of the first 4 KiB block equal to `block`, or -1.
std::streamoff FindInFile(const std::string& path, const void* block) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> buf(4096);
  for (std::streamoff off = 0; f.read(buf.data(), 4096); off += 4096)
    if (std::memcmp(buf.data(), block, 4096) == 0) return off;
  return -1;
}

std::string FileHash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  return std::to_string(std::hash<std::string>{}(all));
}

class FtlToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ftl_tool_test." + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "pool.img").string();
    auto media = OpenMedia(path_, 64 << 20);
    ASSERT_OK(media);
    auto pool = Pool::Format(*media, testing::SmallFormat(), testing::QuietOpen());
    ASSERT_OK(pool);
    data_ = testing::Pattern(1, 0, 1 << 20);
    ASSERT_OK((*pool)->PrimaryVolume()->Write(0, data_));
    ASSERT_OK((*pool)->PrimaryVolume()->Trim(65536, 65536));
    ASSERT_OK((*pool)->Close());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
  std::vector<std::byte> data_;
};

TEST_F(FtlToolTest, ConsistentPoolChecksCleanAndIsNotModified) {
  std::string before = FileHash(path_);
  Result r = RunTool("check " + path_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("consistent"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("240 mapped blocks"), std::string::npos) << r.out;
  r = RunTool("dump " + path_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("segments"), std::string::npos);
  EXPECT_NE(r.out.find("ftl0"), std::string::npos);
  EXPECT_EQ(FileHash(path_), before);
}

TEST_F(FtlToolTest, FlippedDataBitIsReported) {
  // Find one of our data blocks in the file and flip a bit in it.
  std::streamoff at = FindInFile(path_, data_.data() + 8192);
  ASSERT_GE(at, 0);
  std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at + 17);
  char c = char(data_[8192 + 17]) ^ 0x04;
  f.write(&c, 1);
  f.close();
  Result r = RunTool("check " + path_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("fails its checksum"), std::string::npos) << r.out;
  // --no-data skips reading data blocks, so the map alone is consistent.
  EXPECT_EQ(RunTool("check --no-data " + path_).code, 0);
}

TEST_F(FtlToolTest, RefusesNonPoolsAndBadUsage) {
  std::string other = (dir_ / "zeros.img").string();
  std::ofstream(other).close();
  std::filesystem::resize_file(other, 16 << 20);
  Result r = RunTool("check " + other);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("no ftld pool"), std::string::npos) << r.out;
  EXPECT_EQ(RunTool("check " + (dir_ / "missing").string()).code, 2);
  EXPECT_EQ(RunTool("frobnicate " + path_).code, 2);
  EXPECT_EQ(RunTool("").code, 2);
}


// Exit statuses for scripts (issue 19 item 4): a damaged checkpoint slot
// or superblock copy is "degraded" (3); repair rewrites both and says
// "repaired" (4); the next check is clean (0).
TEST_F(FtlToolTest, LostRedundancyIsDegradedAndRepairRestoresIt) {
  Geometry g;
  {
    auto media = OpenMedia(path_, 0);
    ASSERT_OK(media);
    auto ro = testing::QuietOpen(false);
    ro.read_only = true;
    auto p = Pool::Open(*media, ro);
    ASSERT_OK(p);
    g = (*p)->geometry();
  }
  auto smash = [&](uint64_t off) {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(off));
    f.write("XXXXXXXX", 8);
  };
  smash((2 + uint64_t(g.checkpoint_slot_blocks)) * kBlockSize + 64);  // slot 1
  smash(kBlockSize + 40);                                              // superblock B
  Result r = RunTool("check " + path_);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("DEGRADED: superblock copy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("status: degraded"), std::string::npos) << r.out;
  r = RunTool("repair " + path_);
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("status: repaired"), std::string::npos) << r.out;
  r = RunTool("check " + path_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("status: clean"), std::string::npos) << r.out;
}

// A damaged record that a later durable record proves was acknowledged:
// check cannot open (2) and says how to go on; with --accept-loss it lists
// the lost blocks and says "damaged" (1); repair --accept-loss makes the
// loss permanent (the blocks answer EIO) so that plain opens work again.
TEST_F(FtlToolTest, DamagedDurableRecordNeedsAcceptLoss) {
  auto b = testing::Pattern(7, 4 << 20, 16 << 10);
  {
    auto media = OpenMedia(path_, 0);
    ASSERT_OK(media);
    auto p = Pool::Open(*media, testing::QuietOpen(false));
    ASSERT_OK(p);
    ASSERT_OK((*p)->PrimaryVolume()->Write(2 << 20, testing::Pattern(8, 2 << 20, 16 << 10), true));
    ASSERT_OK((*p)->PrimaryVolume()->Write(4 << 20, b, true));
    // No Close(): a crash, so both records are replayed at the next open.
  }
  uint64_t header;
  {
    std::ifstream in(path_, std::ios::binary);
    header = testing::FindWriteHeader(
        [&in](uint64_t off, std::span<std::byte> out) {
          in.seekg(std::streamoff(off));
          return bool(in.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size())));
        },
        0, (2 << 20) / 4096);
  }
  ASSERT_NE(header, UINT64_MAX);
  std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(header) + 90);  // the header's checksum of block 1
  char c = 0x5a;
  f.write(&c, 1);
  f.close();
  Result r = RunTool("check " + path_);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--accept-loss"), std::string::npos) << r.out;
  r = RunTool("check --accept-loss " + path_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("volume ftl0 blocks 512-515 read as EIO"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("status: damaged"), std::string::npos) << r.out;
  r = RunTool("repair --accept-loss " + path_);
  EXPECT_EQ(r.code, 1) << r.out;  // what is lost stays lost
  auto media = OpenMedia(path_, 0);
  ASSERT_OK(media);
  auto p = Pool::Open(*media, testing::QuietOpen(false));
  ASSERT_OK(p);
  std::vector<std::byte> out(4096);
  EXPECT_TRUE(absl::IsDataLoss((*p)->PrimaryVolume()->Read(2 << 20, out)));
  std::vector<std::byte> back(b.size());
  ASSERT_OK((*p)->PrimaryVolume()->Read(4 << 20, back));
  EXPECT_EQ(back, b);
}

// dump names every volume a snapshot is active as (issue 19 item 13).
TEST_F(FtlToolTest, DumpListsEveryActivation) {
  {
    auto media = OpenMedia(path_, 0);
    ASSERT_OK(media);
    auto p = Pool::Open(*media, testing::QuietOpen(false));
    ASSERT_OK(p);
    ASSERT_OK((*p)->CreateSnapshot("", "s1"));
    ASSERT_OK((*p)->ActivateSnapshot("", "s1", "copy-a", true));
    ASSERT_OK((*p)->ActivateSnapshot("", "s1", "copy-b", false));
    ASSERT_OK((*p)->Close());
  }
  Result r = RunTool("dump " + path_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("active as copy-a,copy-b"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ftl
