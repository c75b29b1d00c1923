// Tests for src/media: file media, block device media on a real loop device,
// memory media and OpenMedia.

#include "ftl/media.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "status_asserts.h"

namespace ftl {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = std::byte(x);
  }
  return v;
}

bool AllZero(std::span<const std::byte> b) {
  for (std::byte x : b) {
    if (x != std::byte{0}) return false;
  }
  return true;
}

// A fresh directory under the test temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (fs::path(testing::TempDir()) / "ftl-media-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr) << std::strerror(errno);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const {
    return (path_ / name).string();
  }

 private:
  fs::path path_;
};

// A 4096-aligned heap buffer.
struct AlignedBuf {
  explicit AlignedBuf(size_t n)
      : p(static_cast<std::byte*>(
            std::aligned_alloc(4096, (n + 4095) / 4096 * 4096 + 4096))),
        size(n) {}
  ~AlignedBuf() { std::free(p); }
  std::span<std::byte> span(size_t skew = 0) const { return {p + skew, size}; }
  std::byte* p;
  size_t size;
};

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return uint64_t(st.st_blocks) * 512;
}

// ---------------------------------------------------------------- file media

TEST(FileMediaTest, CreatesSparseFileOfRequestedSize) {
  TempDir dir;
  std::string path = dir.File("store.img");
  auto media = OpenFileMedia(path, 64 * kMiB);
  ASSERT_OK(media);
  EXPECT_EQ((*media)->size(), 64 * kMiB);
  EXPECT_EQ((*media)->Describe(), "file " + path);
  EXPECT_EQ(fs::file_size(path), 64 * kMiB);
  EXPECT_LT(AllocatedBytes(path), 1 * kMiB) << "file should be sparse";
  std::vector<std::byte> buf(8192, std::byte{0x55});
  ASSERT_OK((*media)->Read(32 * kMiB, buf));
  EXPECT_TRUE(AllZero(buf));
}

TEST(FileMediaTest, CreatedFileIsPrivateExistingFileKeepsItsMode) {
  TempDir dir;
  std::string path = dir.File("store.img");
  ASSERT_OK(OpenFileMedia(path, 1 * kMiB));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  ASSERT_OK(OpenFileMedia(path, 1 * kMiB));
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(FileMediaTest, MissingFileWithoutCreateSizeIsNotFound) {
  TempDir dir;
  std::string path = dir.File("absent.img");
  auto media = OpenFileMedia(path);
  ASSERT_FALSE(media.ok());
  EXPECT_EQ(media.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(media.status().message()),
              HasSubstr("no such file: " + path));
  EXPECT_FALSE(fs::exists(path));
}

TEST(FileMediaTest, ReopenKeepsSizeAndData) {
  TempDir dir;
  std::string path = dir.File("store.img");
  auto data = Pattern(3 * 4096, 7);
  {
    auto media = OpenFileMedia(path, 16 * kMiB);
    ASSERT_OK(media);
    ASSERT_OK((*media)->Write(5 * 4096, data));
    ASSERT_OK((*media)->Sync());
  }
  // An existing file keeps its size whatever create_size says.
  auto media = OpenFileMedia(path, 1 * kMiB);
  ASSERT_OK(media);
  EXPECT_EQ((*media)->size(), 16 * kMiB);
  std::vector<std::byte> got(data.size());
  ASSERT_OK((*media)->Read(5 * 4096, got));
  EXPECT_EQ(got, data);
  auto again = OpenFileMedia(path);
  ASSERT_OK(again);
  EXPECT_EQ((*again)->size(), 16 * kMiB);
}

TEST(FileMediaTest, ReadWriteRoundTripAlignedAndUnaligned) {
  TempDir dir;
  auto media = OpenFileMedia(dir.File("store.img"), 4 * kMiB);
  ASSERT_OK(media);
  auto a = Pattern(64 * kKiB, 1);
  ASSERT_OK((*media)->Write(1 * kMiB, a));
  auto b = Pattern(777, 2);
  ASSERT_OK((*media)->Write(3 * kMiB + 13, b));
  std::vector<std::byte> got(a.size());
  ASSERT_OK((*media)->Read(1 * kMiB, got));
  EXPECT_EQ(got, a);
  got.resize(b.size());
  ASSERT_OK((*media)->Read(3 * kMiB + 13, got));
  EXPECT_EQ(got, b);
  // The last byte of the media is reachable.
  std::vector<std::byte> one{std::byte{0x7f}};
  ASSERT_OK((*media)->Write(4 * kMiB - 1, one));
  std::vector<std::byte> back(1);
  ASSERT_OK((*media)->Read(4 * kMiB - 1, back));
  EXPECT_EQ(back, one);
  ASSERT_OK((*media)->Sync());
}

TEST(MediaGatherTest, WriteGatherEqualsOneWriteOfTheConcatenation) {
  // Uneven and empty pieces, more than one pwritev's worth of them (file),
  // the same on memory media and through the default (block device and
  // fault media path: one Write of the joined bytes).
  TempDir dir;
  auto file = OpenFileMedia(dir.File("store.img"), 8 * kMiB);
  ASSERT_OK(file);
  std::vector<std::shared_ptr<Media>> all{*file, NewMemMedia(8 * kMiB)};
  EXPECT_TRUE(all[0]->gathers_writes());
  EXPECT_TRUE(all[1]->gathers_writes());
  const auto data = Pattern(3 * kMiB, 9);
  std::vector<std::span<const std::byte>> pieces;
  for (size_t at = 0, k = 0; at < data.size(); ++k) {
    const size_t n = std::min(data.size() - at, k % 7 == 3 ? size_t(0) : 512 + (k * 977) % 4096);
    pieces.emplace_back(data.data() + at, n);
    at += n;
  }
  ASSERT_GT(pieces.size(), 1024u);
  for (const auto& m : all) {
    ASSERT_OK(m->WriteGather(1 * kMiB + 5, pieces)) << m->Describe();
    std::vector<std::byte> got(data.size() + 10);
    ASSERT_OK(m->Read(1 * kMiB, got));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin() + 5)) << m->Describe();
    EXPECT_EQ(got[0], std::byte{0});
    EXPECT_EQ(got.back(), std::byte{0});
    // Past the end: refused, nothing written.
    std::vector<std::byte> before(16);
    ASSERT_OK(m->Read(8 * kMiB - 16, before));
    EXPECT_FALSE(m->WriteGather(8 * kMiB - 2 * kMiB, pieces).ok());
    std::vector<std::byte> after(16);
    ASSERT_OK(m->Read(8 * kMiB - 16, after));
    EXPECT_EQ(before, after);
    // The default path (copy into one buffer, then Write).
    ASSERT_OK(m->Media::WriteGather(5 * kMiB, pieces));
    got.resize(data.size());
    ASSERT_OK(m->Read(5 * kMiB, got));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin())) << m->Describe();
  }
}

TEST(FileMediaTest, OutOfRangeIsRejectedAndChangesNothing) {
  TempDir dir;
  std::string path = dir.File("store.img");
  auto media = OpenFileMedia(path, 1 * kMiB);
  ASSERT_OK(media);
  std::vector<std::byte> buf(8192, std::byte{1});
  for (uint64_t off : {1 * kMiB - 4096, 1 * kMiB, 2 * kMiB, UINT64_MAX - 100}) {
    auto r = (*media)->Read(off, buf);
    EXPECT_EQ(r.code(), absl::StatusCode::kOutOfRange) << off << " " << r;
    auto w = (*media)->Write(off, buf);
    EXPECT_EQ(w.code(), absl::StatusCode::kOutOfRange) << off << " " << w;
    EXPECT_EQ((*media)->Discard(off, 8192).code(),
              absl::StatusCode::kOutOfRange);
  }
  EXPECT_EQ(fs::file_size(path), 1 * kMiB);
  std::vector<std::byte> tail(4096);
  ASSERT_OK((*media)->Read(1 * kMiB - 4096, tail));
  EXPECT_TRUE(AllZero(tail));
}

TEST(FileMediaTest, DiscardPunchesHoleAndReadsZeros) {
  TempDir dir;
  std::string path = dir.File("store.img");
  auto media = OpenFileMedia(path, 8 * kMiB);
  ASSERT_OK(media);
  auto data = Pattern(2 * kMiB, 3);
  ASSERT_OK((*media)->Write(2 * kMiB, data));
  ASSERT_OK((*media)->Sync());
  uint64_t before = AllocatedBytes(path);
  EXPECT_GE(before, 2 * kMiB);

  ASSERT_OK((*media)->Discard(2 * kMiB, 1 * kMiB));
  std::vector<std::byte> got(2 * kMiB);
  ASSERT_OK((*media)->Read(2 * kMiB, got));
  EXPECT_TRUE(AllZero(std::span(got).first(1 * kMiB)));
  EXPECT_TRUE(std::equal(got.begin() + kMiB, got.end(), data.begin() + kMiB));
  EXPECT_LE(AllocatedBytes(path), before - 1 * kMiB) << "no hole was punched";
  EXPECT_EQ(fs::file_size(path), 8 * kMiB);  // KEEP_SIZE

  // Zero-length and unaligned discards are fine too.
  EXPECT_OK((*media)->Discard(0, 0));
  ASSERT_OK((*media)->Discard(3 * kMiB + 100, 1000));
  got.resize(1200);
  ASSERT_OK((*media)->Read(3 * kMiB, got));
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 100, data.begin() + kMiB));
  EXPECT_TRUE(AllZero(std::span(got).subspan(100, 1000)));
  EXPECT_TRUE(
      std::equal(got.begin() + 1100, got.end(), data.begin() + kMiB + 1100));
}

TEST(FileMediaTest, PrepareAllocatesWithoutChangingContents) {
  TempDir dir;
  std::string path = dir.File("store.img");
  auto media = OpenFileMedia(path, 8 * kMiB);
  ASSERT_OK(media);
  auto data = Pattern(1 * kMiB, 5);
  ASSERT_OK((*media)->Write(4 * kMiB, data));
  uint64_t before = AllocatedBytes(path);
  (*media)->Prepare(2 * kMiB, 4 * kMiB);  // a hole and written data
  EXPECT_GE(AllocatedBytes(path), before + 3 * kMiB) << "the hole was not allocated";
  EXPECT_EQ(fs::file_size(path), 8 * kMiB);  // KEEP_SIZE
  std::vector<std::byte> got(4 * kMiB);
  ASSERT_OK((*media)->Read(2 * kMiB, got));
  EXPECT_TRUE(AllZero(std::span(got).first(2 * kMiB)));
  EXPECT_TRUE(std::equal(got.begin() + 2 * kMiB, got.begin() + 3 * kMiB, data.begin()));
  EXPECT_TRUE(AllZero(std::span(got).subspan(3 * kMiB)));
  // Out of range or empty: ignored.
  (*media)->Prepare(7 * kMiB, 2 * kMiB);
  (*media)->Prepare(0, 0);
  EXPECT_EQ(fs::file_size(path), 8 * kMiB);
}

// Whether any extent of [offset, offset+length) of the file at fd still
// waits for write-back: delayed allocation, or an allocated-but-unwritten
// extent (ext4 converts those when the data reaches the disk). nullopt:
// the file system has no FIEMAP.
std::optional<bool> PendingWriteback(int fd, uint64_t offset, uint64_t length) {
  constexpr int kExtents = 64;
  std::vector<std::byte> buf(sizeof(fiemap) + kExtents * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  fm->fm_start = offset;
  fm->fm_length = length;
  fm->fm_extent_count = kExtents;
  if (::ioctl(fd, FS_IOC_FIEMAP, fm) != 0) return std::nullopt;
  for (uint32_t i = 0; i < fm->fm_mapped_extents; ++i) {
    if (fm->fm_extents[i].fe_flags & (FIEMAP_EXTENT_UNWRITTEN | FIEMAP_EXTENT_DELALLOC)) return true;
  }
  return false;
}

TEST(FileMediaTest, StartWritebackWritesTheRangeBackWithoutASync) {
  TempDir dir;
  std::string path = dir.File("store.img");
  auto media = OpenFileMedia(path, 8 * kMiB);
  ASSERT_OK(media);
  (*media)->Prepare(0, 4 * kMiB);  // unwritten extents until write-back
  auto data = Pattern(4 * kMiB, 11);
  ASSERT_OK((*media)->Write(0, data));
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::optional<bool> pending = PendingWriteback(fd, 0, 4 * kMiB);
  if (!pending.has_value() || !*pending) {
    ::close(fd);
    GTEST_SKIP() << "this file system shows no pending write-back through FIEMAP";
  }
  // The kernel's own write-back waits ~30 s for dirty pages; the hint
  // starts it now. Bounded wait for the I/O to complete.
  (*media)->StartWriteback(0, 4 * kMiB);
  for (int i = 0; i < 500 && PendingWriteback(fd, 0, 4 * kMiB).value_or(false); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(PendingWriteback(fd, 0, 4 * kMiB).value_or(true)) << "write-back did not start";
  ::close(fd);
  std::vector<std::byte> got(4 * kMiB);
  ASSERT_OK((*media)->Read(0, got));
  EXPECT_EQ(got, data);
  // Out of range or empty: ignored; other media: a no-op.
  (*media)->StartWriteback(7 * kMiB, 2 * kMiB);
  (*media)->StartWriteback(0, 0);
  auto mem = NewMemMedia(1 * kMiB);
  mem->StartWriteback(0, 1 * kMiB);
  EXPECT_OK(mem->Sync());
}

TEST(FileMediaTest, ConcurrentWritersToDisjointRanges) {
  TempDir dir;
  auto media = OpenFileMedia(dir.File("store.img"), 4 * kMiB);
  ASSERT_OK(media);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 64; ++i) {
        auto d = Pattern(4096, t * 1000 + i);
        ASSERT_OK((*media)->Write(uint64_t(t * 64 + i) * 4096, d));
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_OK((*media)->Sync());
  std::vector<std::byte> got(4096);
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 64; ++i) {
      ASSERT_OK((*media)->Read(uint64_t(t * 64 + i) * 4096, got));
      ASSERT_EQ(got, Pattern(4096, t * 1000 + i));
    }
  }
}

// Pages of [offset, offset+length) of `path` in the page cache (mincore of
// a shared read-only mapping), or nullopt if that cannot be asked.
std::optional<size_t> CachedPages(const std::string& path, uint64_t offset, uint64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::nullopt;
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, off_t(offset));
  ::close(fd);
  if (p == MAP_FAILED) return std::nullopt;
  std::vector<unsigned char> vec((length + 4095) / 4096);
  const bool ok = ::mincore(p, length, vec.data()) == 0;
  ::munmap(p, length);
  if (!ok) return std::nullopt;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// Whether the file system under `path` takes O_DIRECT.
bool TakesDirectIo(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_DIRECT);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Media::WriteEach: several writes at once (AIO on direct descriptors),
// the same bytes as one WriteGather each, in every direct-I/O mode; a
// 512-byte sector write where the media says it writes sectors.
TEST(FileMediaTest, WriteEachWritesEveryPieceWhereverItGoes) {
  TempDir dir;
  const uint64_t kSize = 8 * kMiB;
  AlignedBuf buf(1 * kMiB);
  auto a = Pattern(1 * kMiB, 31);
  std::memcpy(buf.p, a.data(), a.size());
  for (DirectIo mode : {DirectIo::kOff, DirectIo::kWrites, DirectIo::kAll}) {
    const std::string path = dir.File(std::string("each-") + DirectIoName(mode) + ".img");
    auto m = OpenFileMedia(path, kSize, mode);
    ASSERT_OK(m);
    std::vector<std::span<const std::byte>> data{buf.span().subspan(0, 4096), buf.span().subspan(8192, 8192)};
    std::vector<std::span<const std::byte>> sector{buf.span().subspan(64 * kKiB, 512)};
    std::vector<std::span<const std::byte>> block{buf.span().subspan(128 * kKiB, 4096)};
    std::vector<Media::WriteAt> writes{{2 * kMiB, data}, {1 * kMiB + 1536, sector}, {3 * kMiB, block}};
    if (!(*m)->writes_sectors()) writes.erase(writes.begin() + 1);
    // A lone sector is cheap with direct writes of 512 bytes only: the
    // page cache would read its block first.
    EXPECT_EQ((*m)->writes_lone_sectors(), mode != DirectIo::kOff && TakesDirectIo(path) && (*m)->writes_sectors())
        << DirectIoName(mode);
    ASSERT_OK((*m)->WriteEach(writes));
    ASSERT_OK((*m)->Sync());
    std::vector<std::byte> got(12288);
    ASSERT_OK((*m)->Read(2 * kMiB, got));
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + 4096, a.begin())) << DirectIoName(mode);
    EXPECT_TRUE(std::equal(got.begin() + 4096, got.end(), a.begin() + 8192)) << DirectIoName(mode);
    got.resize(4096);
    ASSERT_OK((*m)->Read(3 * kMiB, got));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin() + 128 * kKiB)) << DirectIoName(mode);
    if ((*m)->writes_sectors()) {
      // The sector, and nothing around it.
      got.resize(4096);
      ASSERT_OK((*m)->Read(1 * kMiB, got));
      EXPECT_TRUE(std::equal(got.begin() + 1536, got.begin() + 2048, a.begin() + 64 * kKiB)) << DirectIoName(mode);
      EXPECT_TRUE(std::all_of(got.begin(), got.begin() + 1536, [](std::byte b) { return b == std::byte{0}; }));
      EXPECT_TRUE(std::all_of(got.begin() + 2048, got.end(), [](std::byte b) { return b == std::byte{0}; }));
    }
    // Out of range: refused, nothing written.
    std::vector<Media::WriteAt> bad{{3 * kMiB + 4096, block}, {kSize, block}};
    EXPECT_FALSE((*m)->WriteEach(bad).ok());
    ASSERT_OK((*m)->Read(3 * kMiB + 4096, got));
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](std::byte b) { return b == std::byte{0}; }));
  }
}

TEST(FileMediaTest, DirectWritesBypassThePageCacheAndReadBack) {
  // kWrites: an aligned write (and an aligned gather) leaves no page of its
  // range cached, where kOff caches every one; unaligned offsets, lengths
  // and buffers go through the page cache; everything reads back, through
  // both descriptors and after a reopen without direct I/O.
  TempDir dir;
  const uint64_t kSize = 8 * kMiB;
  auto off = OpenFileMedia(dir.File("off.img"), kSize, DirectIo::kOff);
  ASSERT_OK(off);
  if (!TakesDirectIo(dir.File("off.img"))) GTEST_SKIP() << "no O_DIRECT on " << testing::TempDir();
  auto direct = OpenFileMedia(dir.File("direct.img"), kSize, DirectIo::kWrites);
  ASSERT_OK(direct);
  EXPECT_THAT((*direct)->Describe(), HasSubstr("(direct writes)"));
  EXPECT_THAT((*off)->Describe(), testing::Not(HasSubstr("direct")));

  AlignedBuf buf(1 * kMiB);
  auto a = Pattern(1 * kMiB, 21);
  std::memcpy(buf.p, a.data(), a.size());
  for (auto* m : {&*off, &*direct}) ASSERT_OK((*m)->Write(1 * kMiB, buf.span()));
  auto cached_off = CachedPages(dir.File("off.img"), 1 * kMiB, 1 * kMiB);
  auto cached_direct = CachedPages(dir.File("direct.img"), 1 * kMiB, 1 * kMiB);
  ASSERT_TRUE(cached_off && cached_direct);
  EXPECT_EQ(*cached_off, 256u);
  EXPECT_EQ(*cached_direct, 0u);

  // A gather of aligned pieces is direct; one misaligned piece sends the
  // whole gather through the page cache.
  std::vector<std::span<const std::byte>> pieces{buf.span().subspan(0, 4096),
                                                 buf.span().subspan(8192, 64 * kKiB)};
  ASSERT_OK((*direct)->WriteGather(3 * kMiB, pieces));
  EXPECT_EQ(CachedPages(dir.File("direct.img"), 3 * kMiB, 68 * kKiB).value_or(99), 0u);
  std::vector<std::span<const std::byte>> skewed{buf.span().subspan(0, 4096),
                                                 buf.span().subspan(8192 + 512, 4096)};
  ASSERT_OK((*direct)->WriteGather(4 * kMiB, skewed));
  EXPECT_GT(CachedPages(dir.File("direct.img"), 4 * kMiB, 8 * kKiB).value_or(0), 0u);

  // Unaligned offset, length and buffer: through the page cache, correct.
  auto b = Pattern(777, 22);
  ASSERT_OK((*direct)->Write(5 * kMiB + 13, b));
  ASSERT_OK((*direct)->Write(6 * kMiB, buf.span(512).subspan(0, 8192)));
  ASSERT_OK((*direct)->Sync());

  auto check = [&](Media& m) {
    std::vector<std::byte> got(a.size());
    ASSERT_OK(m.Read(1 * kMiB, got));
    EXPECT_EQ(got, a) << m.Describe();
    got.resize(4096);
    ASSERT_OK(m.Read(3 * kMiB, got));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin())) << m.Describe();
    got.resize(64 * kKiB);
    ASSERT_OK(m.Read(3 * kMiB + 4096, got));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin() + 8192)) << m.Describe();
    got.resize(4096);
    ASSERT_OK(m.Read(4 * kMiB + 4096, got));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin() + 8192 + 512)) << m.Describe();
    got.resize(b.size());
    ASSERT_OK(m.Read(5 * kMiB + 13, got));
    EXPECT_EQ(got, b) << m.Describe();
    got.resize(8192);
    ASSERT_OK(m.Read(6 * kMiB, got));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin() + 512)) << m.Describe();
  };
  check(**direct);
  direct->reset();
  auto plain = OpenFileMedia(dir.File("direct.img"), 0, DirectIo::kOff);
  ASSERT_OK(plain);
  check(**plain);
  auto all = OpenFileMedia(dir.File("direct.img"), 0, DirectIo::kAll);
  ASSERT_OK(all);
  EXPECT_THAT((*all)->Describe(), HasSubstr("(direct reads and writes)"));
  check(**all);
}

TEST(FileMediaTest, DirectReadsBypassThePageCache) {
  TempDir dir;
  const std::string path = dir.File("store.img");
  {
    auto m = OpenFileMedia(path, 4 * kMiB, DirectIo::kOff);
    ASSERT_OK(m);
    if (!TakesDirectIo(path)) GTEST_SKIP() << "no O_DIRECT on " << testing::TempDir();
  }
  auto all = OpenFileMedia(path, 0, DirectIo::kAll);
  auto writes = OpenFileMedia(path, 0, DirectIo::kWrites);
  ASSERT_OK(all);
  ASSERT_OK(writes);
  AlignedBuf buf(256 * kKiB);
  auto a = Pattern(buf.size, 23);
  std::memcpy(buf.p, a.data(), a.size());
  ASSERT_OK((*all)->Write(0, buf.span()));
  ASSERT_OK((*all)->Write(1 * kMiB, buf.span()));
  std::memset(buf.p, 0, buf.size);
  ASSERT_OK((*all)->Read(0, buf.span()));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), buf.p));
  EXPECT_EQ(CachedPages(path, 0, 256 * kKiB).value_or(99), 0u);
  // kWrites reads through the page cache.
  ASSERT_OK((*writes)->Read(1 * kMiB, buf.span()));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), buf.p));
  EXPECT_EQ(CachedPages(path, 1 * kMiB, 256 * kKiB).value_or(0), 64u);
}

TEST(FileMediaTest, NoDirectIoOnTheFileSystemFallsBackToThePageCache) {
  // tmpfs takes no O_DIRECT before Linux 6.6: the file opens anyway, says
  // so, and works through the page cache.
  const std::string path = "/dev/shm/ftl-media-test-" + std::to_string(::getpid()) + ".img";
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  auto m = OpenFileMedia(path, 1 * kMiB, DirectIo::kAll);
  ASSERT_OK(m);
  if (TakesDirectIo(path)) {
    EXPECT_THAT((*m)->Describe(), HasSubstr("direct"));
  } else {
    EXPECT_EQ((*m)->Describe(), "file " + path);
  }
  AlignedBuf buf(64 * kKiB);
  auto a = Pattern(buf.size, 24);
  std::memcpy(buf.p, a.data(), a.size());
  EXPECT_OK((*m)->Write(0, buf.span()));
  EXPECT_OK((*m)->Sync());
  std::memset(buf.p, 0, buf.size);
  EXPECT_OK((*m)->Read(0, buf.span()));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), buf.p));
  m->reset();
  ::unlink(path.c_str());
}

TEST(FileMediaTest, DirectIoNamesParse) {
  for (DirectIo d : {DirectIo::kOff, DirectIo::kWrites, DirectIo::kAll}) {
    DirectIo back = DirectIo::kOff;
    ASSERT_TRUE(ParseDirectIo(DirectIoName(d), &back)) << DirectIoName(d);
    EXPECT_EQ(back, d);
  }
  DirectIo untouched = DirectIo::kWrites;
  EXPECT_FALSE(ParseDirectIo("yes", &untouched));
  EXPECT_FALSE(ParseDirectIo("", &untouched));
  EXPECT_EQ(untouched, DirectIo::kWrites);
}

// ------------------------------------------------------------------ OpenMedia

TEST(OpenMediaTest, PicksFileAndCreates) {
  TempDir dir;
  std::string path = dir.File("new.img");
  auto missing = OpenMedia(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("no such file: " + path));

  auto created = OpenMedia(path, 2 * kMiB);
  ASSERT_OK(created);
  EXPECT_EQ((*created)->size(), 2 * kMiB);
  EXPECT_EQ((*created)->Describe(), "file " + path);
  created->reset();

  auto reopened = OpenMedia(path);
  ASSERT_OK(reopened);
  EXPECT_EQ((*reopened)->size(), 2 * kMiB);
}

TEST(OpenMediaTest, RejectsDirectoriesAndCharacterDevices) {
  TempDir dir;
  std::string sub = dir.File("subdir");
  ASSERT_TRUE(fs::create_directory(sub));
  for (const std::string& path : {sub, std::string("/dev/null")}) {
    auto media = OpenMedia(path, 1 * kMiB);
    ASSERT_FALSE(media.ok()) << path;
    EXPECT_EQ(media.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(media.status().message()),
                HasSubstr("not a regular file or block device"));
  }
  EXPECT_FALSE(OpenFileMedia("/dev/null").ok());
  EXPECT_FALSE(OpenBlockDeviceMedia("/dev/null").ok());
}

TEST(OpenMediaTest, BlockDeviceMediaRejectsRegularFile) {
  TempDir dir;
  std::string path = dir.File("plain.img");
  ASSERT_OK(OpenFileMedia(path, 1 * kMiB));
  auto media = OpenBlockDeviceMedia(path);
  ASSERT_FALSE(media.ok());
  EXPECT_EQ(media.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(media.status().message()),
              HasSubstr("not a block device"));
  auto missing = OpenBlockDeviceMedia(dir.File("absent"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// --------------------------------------------------------- block device media

// Runs a shell command; returns its stdout (trimmed) and exit status.
std::pair<std::string, int> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return {"", -1};
  char buf[256];
  while (std::fgets(buf, sizeof buf, f) != nullptr) out += buf;
  int rc = ::pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return {out, rc};
}

// Each test gets a 64 MiB sparse backing file attached to a loop device,
// detached again in TearDown.
class BlockDeviceMediaTest : public testing::Test {
 protected:
  void SetUp() override {
    if (RunCommand("command -v losetup").second != 0)
      GTEST_SKIP() << "losetup not installed";
    if (::access("/dev/loop-control", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "/dev/loop-control unavailable: " << std::strerror(errno);
    }
    backing_ = dir_.File("backing.img");
    {
      auto f = OpenFileMedia(backing_, kSize);
      ASSERT_OK(f);
    }
    auto [dev, rc] =
        RunCommand("losetup --find --show '" + backing_ + "' 2>&1");
    ASSERT_EQ(rc, 0) << "losetup failed: " << dev;
    ASSERT_THAT(dev, testing::StartsWith("/dev/loop"));
    dev_ = dev;
    ASSERT_OK_AND_ASSIGN(media_, OpenBlockDeviceMedia(dev_));
  }

  void TearDown() override {
    media_.reset();  // close the fd before detaching
    if (!dev_.empty()) {
      auto [out, rc] = RunCommand("losetup -d " + dev_ + " 2>&1");
      EXPECT_EQ(rc, 0) << "losetup -d " << dev_ << ": " << out;
    }
  }

  // Reads the backing file directly (what the loop device wrote through).
  std::vector<std::byte> ReadBacking(uint64_t offset, size_t n) {
    std::vector<std::byte> out(n);
    int fd = ::open(backing_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, out.data(), n, off_t(offset)), ssize_t(n));
    ::close(fd);
    return out;
  }

  static constexpr uint64_t kSize = 64 * kMiB;
  TempDir dir_;
  std::string backing_;
  std::string dev_;
  std::shared_ptr<Media> media_;
};

TEST_F(BlockDeviceMediaTest, ReportsSizeAndDescription) {
  EXPECT_EQ(media_->size(), kSize);
  EXPECT_EQ(media_->Describe(), "blockdev " + dev_);
  auto via_open = OpenMedia(dev_);
  ASSERT_OK(via_open);
  EXPECT_EQ((*via_open)->Describe(), "blockdev " + dev_);
  EXPECT_EQ((*via_open)->size(), kSize);
}

TEST_F(BlockDeviceMediaTest, AlignedReadWriteReachesBackingFile) {
  AlignedBuf buf(256 * kKiB);
  auto data = Pattern(buf.size, 11);
  std::memcpy(buf.p, data.data(), data.size());
  ASSERT_OK(media_->Write(8 * kMiB, buf.span()));
  ASSERT_OK(media_->Sync());
  AlignedBuf got(buf.size);
  ASSERT_OK(media_->Read(8 * kMiB, got.span()));
  EXPECT_EQ(0, std::memcmp(got.p, data.data(), data.size()));
  EXPECT_EQ(ReadBacking(8 * kMiB, data.size()), data);
  // Last block of the device.
  AlignedBuf last(4096);
  std::memset(last.p, 0xee, 4096);
  ASSERT_OK(media_->Write(kSize - 4096, last.span()));
  AlignedBuf back(4096);
  ASSERT_OK(media_->Read(kSize - 4096, back.span()));
  EXPECT_EQ(0, std::memcmp(back.p, last.p, 4096));
}

// A loop device has 512-byte logical blocks: it writes sectors, and
// WriteEach submits several direct writes at once (AioWriter); every byte
// reaches the backing file, nothing around the sector changes.
TEST_F(BlockDeviceMediaTest, WriteEachReachesBackingFileAndWritesSectors) {
  EXPECT_TRUE(media_->writes_sectors());
  EXPECT_TRUE(media_->writes_lone_sectors());  // O_DIRECT: no cache reads the block
  AlignedBuf buf(64 * kKiB);
  auto data = Pattern(buf.size, 12);
  std::memcpy(buf.p, data.data(), data.size());
  std::vector<std::span<const std::byte>> run{buf.span().subspan(0, 4096), buf.span().subspan(16 * kKiB, 8192)};
  std::vector<std::span<const std::byte>> sector{buf.span().subspan(32 * kKiB, 512)};
  std::vector<Media::WriteAt> writes{{4 * kMiB, run}, {2 * kMiB + 3584, sector}};
  ASSERT_OK(media_->WriteEach(writes));
  ASSERT_OK(media_->Sync());
  auto got = ReadBacking(4 * kMiB, 12288);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 4096, data.begin()));
  EXPECT_TRUE(std::equal(got.begin() + 4096, got.end(), data.begin() + 16 * kKiB));
  got = ReadBacking(2 * kMiB, 4096);
  EXPECT_TRUE(std::equal(got.begin() + 3584, got.end(), data.begin() + 32 * kKiB));
  EXPECT_TRUE(std::all_of(got.begin(), got.begin() + 3584, [](std::byte b) { return b == std::byte{0}; }));
}

TEST_F(BlockDeviceMediaTest, UnalignedBuffersAndOffsetsAreBounced) {
  // Reference model of the first 4 MiB, starting from a known pattern.
  std::vector<std::byte> model = Pattern(4 * kMiB, 21);
  {
    AlignedBuf init(model.size());
    std::memcpy(init.p, model.data(), model.size());
    ASSERT_OK(media_->Write(0, init.span()));
  }
  struct Op {
    uint64_t offset;
    size_t length;
    size_t skew;  // buffer misalignment
  } ops[] = {
      {4096, 4096, 1},             // aligned offset, unaligned buffer
      {10 * 4096 + 100, 5000, 0},  // unaligned offset, aligned buffer
      {20 * 4096 + 7, 3, 3},       // inside one sector
      {30 * 4096 + 511, 2, 0},     // straddles a sector boundary
      {40 * 4096, 4096 + 1, 0},    // aligned start, partial tail
      {333, 3 * kMiB + 17, 5},     // larger than one bounce buffer
  };
  uint32_t seed = 100;
  for (const Op& op : ops) {
    AlignedBuf buf(op.length);
    auto data = Pattern(op.length, seed++);
    std::memcpy(buf.p + op.skew, data.data(), op.length);
    ASSERT_OK(media_->Write(op.offset, buf.span(op.skew)))
        << op.offset << "+" << op.length;
    std::copy(data.begin(), data.end(), model.begin() + op.offset);

    AlignedBuf back(op.length);
    ASSERT_OK(media_->Read(op.offset, back.span(op.skew)));
    EXPECT_EQ(0, std::memcmp(back.p + op.skew, data.data(), op.length))
        << op.offset << "+" << op.length;
  }
  ASSERT_OK(media_->Sync());
  // Neighbouring bytes of every unaligned write are intact.
  AlignedBuf all(model.size());
  ASSERT_OK(media_->Read(0, all.span()));
  EXPECT_EQ(0, std::memcmp(all.p, model.data(), model.size()));
  EXPECT_EQ(ReadBacking(0, model.size()), model);
  // An unaligned read through a std::vector (arbitrary alignment) works too.
  std::vector<std::byte> v(1001);
  ASSERT_OK(media_->Read(12345, v));
  EXPECT_TRUE(std::equal(v.begin(), v.end(), model.begin() + 12345));
}

TEST_F(BlockDeviceMediaTest, DiscardReadsZerosOnLoopDevice) {
  AlignedBuf buf(2 * kMiB);
  auto data = Pattern(buf.size, 31);
  std::memcpy(buf.p, data.data(), data.size());
  ASSERT_OK(media_->Write(16 * kMiB, buf.span()));
  ASSERT_OK(media_->Sync());
  uint64_t allocated = AllocatedBytes(backing_);

  ASSERT_OK(media_->Discard(16 * kMiB, 1 * kMiB));
  AlignedBuf got(2 * kMiB);
  ASSERT_OK(media_->Read(16 * kMiB, got.span()));
  // The Media contract allows old data; a loop device over a file punches a
  // hole in the file, so it reads zeros.
  EXPECT_TRUE(AllZero(got.span().first(1 * kMiB)));
  EXPECT_EQ(0, std::memcmp(got.p + kMiB, data.data() + kMiB, kMiB));
  EXPECT_LE(AllocatedBytes(backing_), allocated - 1 * kMiB);

  // Unaligned ends: only whole logical blocks inside the range are discarded.
  ASSERT_OK(media_->Discard(17 * kMiB + 100, 8192));
  std::vector<std::byte> around(8192 + 200);
  ASSERT_OK(media_->Read(17 * kMiB, around));
  const std::byte* old = data.data() + kMiB;
  EXPECT_TRUE(std::equal(around.begin(), around.begin() + 512, old));
  EXPECT_TRUE(AllZero(std::span(around).subspan(512, 8192 - 512)));
  EXPECT_TRUE(std::equal(around.begin() + 8192, around.end(), old + 8192));
  EXPECT_OK(media_->Discard(0, 0));
  EXPECT_OK(media_->Discard(100, 200));  // no whole block: a no-op
}

TEST_F(BlockDeviceMediaTest, OutOfRange) {
  AlignedBuf buf(8192);
  EXPECT_EQ(media_->Read(kSize - 4096, buf.span()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(media_->Write(kSize, buf.span()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(media_->Discard(kSize - 4096, 8192).code(),
            absl::StatusCode::kOutOfRange);
}

// ---------------------------------------------------------------- mem media

TEST(MemMediaTest, ZeroFilledReadWriteDiscard) {
  auto media = NewMemMedia(1 * kMiB);
  EXPECT_EQ(media->size(), 1 * kMiB);
  EXPECT_EQ(media->Describe(), "memory");
  std::vector<std::byte> got(1 * kMiB, std::byte{9});
  ASSERT_OK(media->Read(0, got));
  EXPECT_TRUE(AllZero(got));

  auto data = Pattern(10000, 5);
  ASSERT_OK(media->Write(4097, data));
  got.resize(data.size());
  ASSERT_OK(media->Read(4097, got));
  EXPECT_EQ(got, data);
  ASSERT_OK(media->Sync());

  ASSERT_OK(media->Discard(8192, 4096));
  std::vector<std::byte> hole(4096);
  ASSERT_OK(media->Read(8192, hole));
  EXPECT_TRUE(AllZero(hole));
  std::vector<std::byte> before(8192 - 4097);
  ASSERT_OK(media->Read(4097, before));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), data.begin()));
}

TEST(MemMediaTest, OutOfRange) {
  auto media = NewMemMedia(64 * kKiB);
  std::vector<std::byte> buf(4096);
  EXPECT_EQ(media->Read(64 * kKiB - 1, buf).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(media->Write(64 * kKiB, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(media->Write(UINT64_MAX, buf).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(media->Discard(0, 64 * kKiB + 1).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_OK(media->Read(64 * kKiB, std::span<std::byte>{}));
}

TEST(MemMediaTest, ConcurrentAccess) {
  auto media = NewMemMedia(1 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> got(4096);
      for (int i = 0; i < 64; ++i) {
        uint64_t off = uint64_t(t * 64 + i) * 4096;
        auto d = Pattern(4096, t * 100 + i);
        ASSERT_OK(media->Write(off, d));
        ASSERT_OK(media->Read(off, got));
        ASSERT_EQ(got, d);
      }
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace ftl
