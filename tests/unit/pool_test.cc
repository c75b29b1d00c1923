// Pool and Volume behaviour on memory media: I/O semantics, errors, reopen.

#include "ftl/pool.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "log/log_format.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using testing::Pattern;
using testing::QuietOpen;
using testing::SmallFormat;

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    media_ = NewMemMedia(64 << 20);
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Format(media_, SmallFormat(), QuietOpen()));
    vol_ = pool_->PrimaryVolume();
    ASSERT_NE(vol_, nullptr);
  }
  void Reopen(bool clean = true) {
    if (clean) {
      ASSERT_OK(pool_->Close());
    }
    pool_.reset();
    ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen()));
    vol_ = pool_->PrimaryVolume();
  }
  std::vector<std::byte> ReadBack(uint64_t off, size_t len) {
    std::vector<std::byte> out(len);
    absl::Status s = vol_->Read(off, out);
    EXPECT_OK(s);
    return out;
  }
  std::shared_ptr<Media> media_;
  std::unique_ptr<Pool> pool_;
  Volume* vol_ = nullptr;
};

TEST_F(PoolTest, FreshVolumeReadsZeros) {
  auto got = ReadBack(0, 1 << 20);
  EXPECT_EQ(got, std::vector<std::byte>(1 << 20));
  EXPECT_EQ(vol_->name(), "ftl0");
  EXPECT_GT(vol_->size_bytes(), 40u << 20);
}

TEST_F(PoolTest, WriteReadAligned) {
  auto data = Pattern(1, 8192, 64 << 10);
  ASSERT_OK(vol_->Write(8192, data));
  EXPECT_EQ(ReadBack(8192, data.size()), data);
  EXPECT_EQ(ReadBack(0, 8192), std::vector<std::byte>(8192));
}

TEST_F(PoolTest, SubBlockWritesAreReadModifyWrite) {
  auto a = Pattern(1, 0, 16384);
  ASSERT_OK(vol_->Write(0, a));
  auto b = Pattern(2, 1536, 512 * 7);
  ASSERT_OK(vol_->Write(1536, b));
  auto expect = a;
  std::memcpy(expect.data() + 1536, b.data(), b.size());
  EXPECT_EQ(ReadBack(0, 16384), expect);
  // Unaligned read in the middle.
  auto mid = ReadBack(1024, 3072);
  EXPECT_EQ(0, std::memcmp(mid.data(), expect.data() + 1024, 3072));
}

TEST_F(PoolTest, LargeWriteSplitsAtAtomicSize) {
  auto data = Pattern(3, 0, 5 << 20);
  ASSERT_OK(vol_->Write(1 << 20, data));
  EXPECT_EQ(ReadBack(1 << 20, data.size()), data);
  EXPECT_GE(pool_->geometry().max_atomic_bytes, 64u << 10);
}

TEST_F(PoolTest, RangeErrors) {
  std::vector<std::byte> buf(4096);
  uint64_t size = vol_->size_bytes();
  EXPECT_TRUE(absl::IsOutOfRange(vol_->Write(size, buf)));
  EXPECT_TRUE(absl::IsOutOfRange(vol_->Write(size - 512, buf)));
  EXPECT_TRUE(absl::IsInvalidArgument(vol_->Read(size - 512, buf)));
  EXPECT_TRUE(absl::IsInvalidArgument(vol_->Trim(size, 4096)));
  EXPECT_TRUE(absl::IsOutOfRange(vol_->WriteZeroes(size, 4096)));
  EXPECT_TRUE(absl::IsInvalidArgument(vol_->BlockStatus(size, 4096).status()));
  // Still serving.
  ASSERT_OK(vol_->Write(0, buf));
}

// Offsets and lengths are byte-granular (NBD clients that negotiated no
// block size may send READ 511@1): reads copy out of whole blocks, writes
// and write-zeroes read-modify-write their edge blocks in the same record,
// trims round inward, block status clips to the bytes asked for.
TEST_F(PoolTest, ByteGranularRequestsMatchAModel) {
  constexpr uint64_t kSpan = 256 << 10;
  std::vector<std::byte> model(kSpan);
  std::mt19937_64 rng(42);
  uint64_t tag = 100;
  auto check = [&](const char* when) {
    ASSERT_EQ(ReadBack(0, kSpan), model) << when;
    for (int i = 0; i < 50; ++i) {
      uint64_t off = rng() % kSpan, len = 1 + rng() % std::min<uint64_t>(9000, kSpan - off);
      auto got = ReadBack(off, len);
      ASSERT_EQ(0, std::memcmp(got.data(), model.data() + off, len)) << when << " " << off;
    }
  };
  for (int i = 0; i < 400; ++i) {
    uint64_t off = rng() % kSpan;
    uint64_t len = 1 + rng() % std::min<uint64_t>(rng() % 4 ? 700 : 20000, kSpan - off);
    switch (rng() % 4) {
      case 0:
      case 1: {
        auto data = Pattern(++tag, off, len);
        ASSERT_OK(vol_->Write(off, data, rng() % 8 == 0)) << off << "+" << len;
        std::memcpy(model.data() + off, data.data(), len);
        break;
      }
      case 2:
        ASSERT_OK(vol_->WriteZeroes(off, len, false, rng() % 2)) << off << "+" << len;
        std::memset(model.data() + off, 0, len);
        break;
      case 3: {
        ASSERT_OK(vol_->Trim(off, len)) << off << "+" << len;
        uint64_t first = (off + kBlockSize - 1) / kBlockSize * kBlockSize;
        uint64_t end = (off + len) / kBlockSize * kBlockSize;
        if (first < end) std::memset(model.data() + first, 0, end - first);
        break;
      }
    }
    if (i % 40 == 0) {
      auto bs = vol_->BlockStatus(off, len);
      ASSERT_OK(bs);
      ASSERT_FALSE(bs->empty());
      EXPECT_EQ(bs->front().offset, off);
      EXPECT_EQ(bs->back().offset + bs->back().length, off + len);
      for (const BlockExtent& e : *bs) {
        if (e.allocated) continue;  // holes read as zeros
        for (uint64_t b = e.offset; b < e.offset + e.length; ++b) {
          ASSERT_EQ(model[b], std::byte{0}) << "hole at " << b;
        }
      }
    }
  }
  check("after the requests");
  Reopen(true);
  check("after a clean reopen");
  ASSERT_OK(vol_->Write(3, Pattern(7, 3, 5)));
  std::memcpy(model.data() + 3, Pattern(7, 3, 5).data(), 5);
  ASSERT_OK(vol_->Flush());
  Reopen(false);
  check("after recovery");
}

// Two writers updating different bytes of one 512-byte sector never lose
// each other's bytes: the read-modify-write holds the block's range lock.
TEST_F(PoolTest, ConcurrentSubSectorWritesToOneBlockKeepBoth) {
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([this, t] {
      for (int i = 0; i < 200; ++i) {
        std::vector<std::byte> b(7, std::byte(uint8_t(16 * t + i % 16)));
        ASSERT_OK(vol_->Write(100 + 10 * t, b));
      }
    });
  }
  for (auto& th : ts) th.join();
  auto got = ReadBack(0, 512);
  for (int t = 0; t < 4; ++t) {
    for (int k = 0; k < 7; ++k) {
      EXPECT_EQ(got[100 + 10 * t + k], std::byte(uint8_t(16 * t + 199 % 16))) << t;
    }
  }
}

TEST_F(PoolTest, TrimAndBlockStatus) {
  auto data = Pattern(4, 0, 1 << 20);
  ASSERT_OK(vol_->Write(0, data));
  ASSERT_OK(vol_->Trim(256 << 10, 256 << 10));
  auto got = ReadBack(0, 1 << 20);
  EXPECT_EQ(0, std::memcmp(got.data(), data.data(), 256 << 10));
  EXPECT_EQ(std::vector<std::byte>(got.begin() + (256 << 10), got.begin() + (512 << 10)),
            std::vector<std::byte>(256 << 10));
  auto bs = vol_->BlockStatus(0, 2 << 20);
  ASSERT_OK(bs);
  ASSERT_EQ(bs->size(), 4u);
  EXPECT_TRUE((*bs)[0].allocated);
  EXPECT_EQ((*bs)[0].length, 256u << 10);
  EXPECT_FALSE((*bs)[1].allocated);
  EXPECT_TRUE((*bs)[2].allocated);
  EXPECT_FALSE((*bs)[3].allocated);
  EXPECT_EQ((*bs)[3].offset + (*bs)[3].length, 2u << 20);
}

TEST_F(PoolTest, WriteZeroesPartialAndNoHole) {
  auto data = Pattern(5, 0, 64 << 10);
  ASSERT_OK(vol_->Write(0, data));
  ASSERT_OK(vol_->WriteZeroes(1024, 19968));
  auto expect = data;
  std::memset(expect.data() + 1024, 0, 19968);
  EXPECT_EQ(ReadBack(0, 64 << 10), expect);
  ASSERT_OK(vol_->WriteZeroes(32768, 8192, false, /*no_hole=*/true));
  std::memset(expect.data() + 32768, 0, 8192);
  EXPECT_EQ(ReadBack(0, 64 << 10), expect);
  auto bs = vol_->BlockStatus(32768, 8192);
  ASSERT_OK(bs);
  EXPECT_TRUE((*bs)[0].allocated);
  EXPECT_TRUE(absl::IsUnimplemented(vol_->WriteZeroes(0, 4096, false, true, true)));
}

TEST_F(PoolTest, CleanReopenKeepsData) {
  auto data = Pattern(6, 0, 3 << 20);
  ASSERT_OK(vol_->Write(4096, data));
  ASSERT_OK(vol_->Trim(4096, 4096));
  Reopen(true);
  EXPECT_NE(pool_->OpenReport().find("clean"), std::string::npos) << pool_->OpenReport();
  auto got = ReadBack(4096, data.size());
  EXPECT_EQ(std::vector<std::byte>(got.begin(), got.begin() + 4096), std::vector<std::byte>(4096));
  EXPECT_EQ(0, std::memcmp(got.data() + 4096, data.data() + 4096, data.size() - 4096));
  // Appending continues after reopen.
  ASSERT_OK(vol_->Write(0, Pattern(7, 0, 4096)));
  Reopen(true);
  EXPECT_EQ(ReadBack(0, 4096), Pattern(7, 0, 4096));
}

TEST_F(PoolTest, UncleanReopenRollsForward) {
  auto data = Pattern(8, 0, 1 << 20);
  ASSERT_OK(vol_->Write(0, data));
  ASSERT_OK(vol_->Flush());
  Reopen(/*clean=*/false);
  EXPECT_NE(pool_->OpenReport().find("rolled forward"), std::string::npos) << pool_->OpenReport();
  EXPECT_EQ(ReadBack(0, data.size()), data);
}

// A pool of an older format version opens, keeps its data and is
// upgraded (records from now on may carry ops the old version lacks, such
// as packed RELOCs in version 4).
TEST_F(PoolTest, OlderFormatOpensAndIsUpgraded) {
  auto data = Pattern(9, 0, 1 << 20);
  ASSERT_OK(vol_->Write(0, data));
  ASSERT_OK(pool_->Close());
  pool_.reset();
  for (uint64_t off : {uint64_t(0), uint64_t(log::kBlock)}) {
    std::vector<std::byte> block(log::kBlock);
    ASSERT_OK(media_->Read(off, block));
    auto sb = log::DecodeSuperblock(block);
    ASSERT_OK(sb);
    sb->format_version = 3;
    std::vector<std::byte> enc = log::EncodeSuperblock(*sb);
    enc.resize(log::kBlock);
    ASSERT_OK(media_->Write(off, enc));
  }
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, QuietOpen()));
  vol_ = pool_->PrimaryVolume();
  EXPECT_EQ(pool_->geometry().format_version, log::kFormatVersion);
  EXPECT_EQ(ReadBack(0, data.size()), data);
  Reopen(true);
  EXPECT_EQ(pool_->geometry().format_version, log::kFormatVersion);
}

TEST_F(PoolTest, OpenRejectsUnformattedMedia) {
  auto blank = NewMemMedia(64 << 20);
  EXPECT_FALSE(Pool::LooksFormatted(*blank));
  auto p = Pool::Open(blank);
  EXPECT_TRUE(absl::IsNotFound(p.status())) << p.status();
  EXPECT_TRUE(Pool::LooksFormatted(*media_));
}

TEST_F(PoolTest, FormatRejectsTinyMedia) {
  auto tiny = NewMemMedia(1 << 20);
  auto p = Pool::Format(tiny, SmallFormat());
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
}

TEST_F(PoolTest, StatsCountBytes) {
  ASSERT_OK(vol_->Write(0, Pattern(9, 0, 1 << 20)));
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.user_write_bytes, 1u << 20);
  EXPECT_GT(s.media_write_bytes, s.user_write_bytes);
  EXPECT_EQ(s.mapped_blocks, 256u);
  EXPECT_GT(s.map_memory_bytes, 0u);
  EXPECT_EQ(vol_->Stats().mapped_bytes, 1u << 20);
}

}  // namespace
}  // namespace ftl

namespace ftl {
namespace {

// Freed segments go back to the device (punch hole) once the pool is idle.
TEST(PoolDiscardTest, IdleFreedSegmentsArePunchedOut) {
  std::string path = "/tmp/ftl_discard_test." + std::to_string(getpid());
  std::remove(path.c_str());
  auto media = OpenMedia(path, 64 << 20);
  ASSERT_OK(media);
  auto p = Pool::Format(*media, testing::SmallFormat(), testing::QuietOpen(true));
  ASSERT_OK(p);
  Volume* v = (*p)->PrimaryVolume();
  ASSERT_OK(v->Write(0, testing::Pattern(1, 0, 16 << 20)));
  ASSERT_OK(v->Flush());
  auto allocated = [&] {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    return uint64_t(st.st_blocks) * 512;
  };
  uint64_t full = allocated();
  EXPECT_GE(full, 16u << 20);
  ASSERT_OK(v->Trim(0, 16 << 20));
  auto cleaned = (*p)->RunCleaner((*p)->Stats().segments_total);
  ASSERT_OK(cleaned);
  EXPECT_GT(*cleaned, 0u);
  // Bounded wait for the idle discard (the cleaner waits for 2 s of quiet).
  uint64_t now = full;
  for (int i = 0; i < 300 && now > full / 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = allocated();
  }
  EXPECT_LT(now, full / 2) << "freed segments were not discarded";
  ASSERT_OK((*p)->Close());
  std::remove(path.c_str());
}

// OpenOptions::discard = false: a backing file written full beforehand
// stays allocated through format, writes, trims, cleaning and idle time.
TEST(PoolDiscardTest, NoDiscardKeepsTheBackingAllocated) {
  std::string path = "/tmp/ftl_nodiscard_test." + std::to_string(getpid());
  std::remove(path.c_str());
  {
    std::vector<char> ones(1 << 20, 1);
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(std::fwrite(ones.data(), 1, ones.size(), f), ones.size());
    std::fclose(f);
  }
  auto allocated = [&] {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    return uint64_t(st.st_blocks) * 512;
  };
  const uint64_t full = allocated();
  ASSERT_GE(full, 64u << 20);
  auto media = OpenMedia(path, 0);
  ASSERT_OK(media);
  OpenOptions o = testing::QuietOpen(true);
  o.discard = false;
  auto p = Pool::Format(*media, testing::SmallFormat(), o);
  ASSERT_OK(p);
  EXPECT_EQ(allocated(), full) << "format discarded";
  Volume* v = (*p)->PrimaryVolume();
  ASSERT_OK(v->Write(0, testing::Pattern(1, 0, 16 << 20)));
  ASSERT_OK(v->Trim(0, 16 << 20));
  auto cleaned = (*p)->RunCleaner((*p)->Stats().segments_total);
  ASSERT_OK(cleaned);
  EXPECT_GT(*cleaned, 0u);
  // Past the cleaner's 2 s of quiet, after which the default discards.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_EQ(allocated(), full) << "freed segments were discarded";
  // The pool still works: data written now reads back after a reopen.
  ASSERT_OK(v->Write(1 << 20, testing::Pattern(2, 1 << 20, 1 << 20)));
  ASSERT_OK((*p)->Close());
  auto again = Pool::Open(*media, o);
  ASSERT_OK(again);
  std::vector<std::byte> back(1 << 20);
  ASSERT_OK((*again)->PrimaryVolume()->Read(1 << 20, back));
  EXPECT_EQ(back, testing::Pattern(2, 1 << 20, 1 << 20));
  EXPECT_EQ(allocated(), full);
  ASSERT_OK((*again)->Close());
  std::remove(path.c_str());
}

// FormatOptions::preallocate: a sparse backing file gets its whole data
// area written (allocated, and zero: old data is gone) instead of discarded.
TEST(PoolDiscardTest, PreallocateWritesTheDataAreaOnce) {
  std::string path = "/tmp/ftl_prealloc_test." + std::to_string(getpid());
  std::remove(path.c_str());
  auto allocated = [&] {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    return uint64_t(st.st_blocks) * 512;
  };
  {
    auto media = OpenMedia(path, 64 << 20);
    ASSERT_OK(media);
    // Old data in the middle of the data area, in a hole-punched file.
    std::vector<std::byte> junk(1 << 20, std::byte{0xab});
    ASSERT_OK((*media)->Write(32 << 20, junk));
    ASSERT_OK((*media)->Sync());
    ASSERT_LT(allocated(), 8u << 20);
    FormatOptions f = testing::SmallFormat();
    f.preallocate = true;
    OpenOptions o = testing::QuietOpen(true);
    o.discard = false;
    auto p = Pool::Format(*media, f, o);
    ASSERT_OK(p);
    // Everything but the metadata area's unwritten tail is allocated.
    EXPECT_GE(allocated(), 56u << 20);
    std::vector<std::byte> back(1 << 20);
    ASSERT_OK((*media)->Read(32 << 20, back));
    EXPECT_EQ(back, std::vector<std::byte>(1 << 20, std::byte{0}));
    ASSERT_OK((*p)->PrimaryVolume()->Write(0, testing::Pattern(3, 0, 1 << 20)));
    ASSERT_OK((*p)->Close());
    auto again = Pool::Open(*media, o);
    ASSERT_OK(again);
    ASSERT_OK((*again)->PrimaryVolume()->Read(0, back));
    EXPECT_EQ(back, testing::Pattern(3, 0, 1 << 20));
    ASSERT_OK((*again)->Close());
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ftl

namespace ftl {
namespace {

// WriteAsyncBatch: whole-block writes share records, partial and invalid
// ones take the ordinary path; every callback runs once with its own status.
TEST(PoolBatchTest, MixedBatchCompletesEachWrite) {
  auto media = NewMemMedia(64 << 20);
  auto p = Pool::Format(media, testing::SmallFormat(), testing::QuietOpen());
  ASSERT_OK(p);
  Volume* v = (*p)->PrimaryVolume();
  std::vector<std::vector<std::byte>> data;
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 40; ++i) {
    offsets.push_back(uint64_t(i) * 3 * 4096);
    data.push_back(testing::Pattern(i, offsets.back(), 8192));
  }
  auto partial = testing::Pattern(100, 200 * 4096 + 512, 1024);
  std::vector<std::byte> past_end(4096);
  absl::Mutex mu;
  std::vector<absl::Status> got(42);
  int done = 0;
  std::vector<Volume::AsyncWrite> batch;
  for (int i = 0; i < 40; ++i) {
    batch.push_back({offsets[i], data[i], false, [&, i](absl::Status s) {
                       absl::MutexLock l(&mu);
                       got[i] = s;
                       ++done;
                     }});
  }
  batch.push_back({200 * 4096 + 512, partial, false, [&](absl::Status s) {
                     absl::MutexLock l(&mu);
                     got[40] = s;
                     ++done;
                   }});
  batch.push_back({v->size_bytes(), past_end, false, [&](absl::Status s) {
                     absl::MutexLock l(&mu);
                     got[41] = s;
                     ++done;
                   }});
  uint64_t media_before = (*p)->Stats().media_write_bytes;
  v->WriteAsyncBatch(std::move(batch));
  {
    absl::MutexLock l(&mu);
    auto all = [&] { return done == 42; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
  }
  for (int i = 0; i < 41; ++i) EXPECT_OK(got[i]) << i;
  EXPECT_TRUE(absl::IsOutOfRange(got[41])) << got[41];
  for (int i = 0; i < 40; ++i) {
    std::vector<std::byte> out(8192);
    ASSERT_OK(v->Read(offsets[i], out));
    EXPECT_EQ(out, data[i]) << i;
  }
  std::vector<std::byte> out(1024);
  ASSERT_OK(v->Read(200 * 4096 + 512, out));
  EXPECT_EQ(out, partial);
  // 80 data blocks + 2 for the partial write: far fewer header blocks than
  // one per write, because the whole-block writes shared records.
  uint64_t media_blocks = ((*p)->Stats().media_write_bytes - media_before) / 4096;
  EXPECT_LT(media_blocks, 82u + 20u);
}

}  // namespace
}  // namespace ftl
