// Key-value datasets in a real pool (MemMedia): create, snapshots read
// the old values, destroy returns the space, a full pool, reopen.

#include <gtest/gtest.h>

#include "ftl/kv.h"
#include "ftl/pool.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

class KvPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { Format(64 << 20); }
  void Format(uint64_t bytes) {
    pool_.reset();
    media_ = NewMemMedia(bytes);
    auto p = Pool::Format(media_, testing::SmallFormat(1 << 20), testing::QuietOpen(false));
    ASSERT_OK(p);
    pool_ = std::move(*p);
  }
  std::shared_ptr<Media> media_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(KvPoolTest, CreateOpenAndReopen) {
  KvGeometry g;
  g.sectors_per_page = 2;
  g.log_sectors_per_unit = 56;
  ASSERT_OK(KvStore::Create(pool_.get(), "kv", g));
  EXPECT_TRUE(absl::IsAlreadyExists(KvStore::Create(pool_.get(), "kv")));
  EXPECT_TRUE(absl::IsInvalidArgument(KvStore::Create(pool_.get(), "bad@name")));
  EXPECT_EQ(pool_->GetVolume("kv")->kind(), DatasetKind::kKv);
  // A block volume is no key-value store; an unknown name is NotFound.
  EXPECT_TRUE(absl::IsFailedPrecondition(KvStore::Open(pool_.get(), "ftl0").status()));
  EXPECT_TRUE(absl::IsNotFound(KvStore::Open(pool_.get(), "nope").status()));
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(pool_.get(), "kv"));
    EXPECT_EQ(s->geometry().sectors_per_page, 2u);
    for (int i = 0; i < 2000; ++i) ASSERT_OK(s->Put("k" + std::to_string(i), std::to_string(i)));
    ASSERT_OK(s->Close());
  }
  ASSERT_OK(pool_->Close());
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, testing::QuietOpen(false)));
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(pool_.get(), "kv"));
  EXPECT_EQ(*s->Get("k1999"), "1999");
  EXPECT_EQ(s->Scan("", "", SIZE_MAX)->size(), 2000u);
  auto report = pool_->Check(true);
  ASSERT_OK(report);
  EXPECT_TRUE(report->problems.empty());
}

TEST_F(KvPoolTest, SnapshotReadsTheOldValues) {
  ASSERT_OK(KvStore::Create(pool_.get(), "kv"));
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(pool_.get(), "kv"));
  for (int i = 0; i < 500; ++i) ASSERT_OK(s->Put("k" + std::to_string(i), "old"));
  ASSERT_OK(s->Flush());  // a snapshot holds what is flushed
  ASSERT_OK(pool_->CreateSnapshot("kv", "s1").status());
  for (int i = 0; i < 500; i += 2) ASSERT_OK(s->Put("k" + std::to_string(i), "new"));
  ASSERT_OK(s->Delete("k1"));
  ASSERT_OK(s->Flush());
  ASSERT_OK_AND_ASSIGN(auto snap, KvStore::Open(pool_.get(), "kv@s1"));
  EXPECT_TRUE(snap->read_only());
  EXPECT_EQ(*snap->Get("k0"), "old");
  EXPECT_EQ(*snap->Get("k1"), "old");
  EXPECT_EQ(*s->Get("k0"), "new");
  EXPECT_TRUE(absl::IsNotFound(s->Get("k1").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(snap->Put("k0", "x")));
  EXPECT_EQ(snap->Scan("", "", SIZE_MAX)->size(), 500u);
}

TEST_F(KvPoolTest, DestroyReturnsTheSpace) {
  ASSERT_OK(KvStore::Create(pool_.get(), "kv"));
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(pool_.get(), "kv"));
    for (int i = 0; i < 300; ++i) ASSERT_OK(s->Put("k" + std::to_string(i), std::string(20000, 'v')));
    ASSERT_OK(s->Close());
  }
  uint64_t mapped = pool_->Stats().mapped_blocks;
  ASSERT_OK(pool_->DestroyDataset("kv"));
  EXPECT_LT(pool_->Stats().mapped_blocks + 1000, mapped);
  EXPECT_TRUE(absl::IsNotFound(KvStore::Open(pool_.get(), "kv").status()));
}

TEST_F(KvPoolTest, FullPoolAnswersResourceExhaustedAndKeepsServing) {
  Format(24 << 20);
  ASSERT_OK(KvStore::Create(pool_.get(), "kv"));
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(pool_.get(), "kv"));
  std::vector<std::string> acked;
  absl::Status st;
  for (int i = 0; i < 5000 && st.ok(); ++i) {
    std::string k = "k" + std::to_string(i);
    st = s->Put(k, std::string(30000, char('a' + i % 26)), {.sync = true});
    if (st.ok()) acked.push_back(k);
  }
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  ASSERT_FALSE(acked.empty());
  // While the pool stays full, further writes are refused and not applied.
  absl::Status again = s->Put("refused", "v", {.sync = true});
  EXPECT_TRUE(absl::IsResourceExhausted(again)) << again;
  EXPECT_TRUE(absl::IsNotFound(s->Get("refused").status()));
  for (const std::string& k : acked) ASSERT_OK(s->Get(k).status()) << k;
  // Reopen: everything acknowledged is there.
  s.reset();
  ASSERT_OK(pool_->Close());
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, testing::QuietOpen(false)));
  ASSERT_OK_AND_ASSIGN(s, KvStore::Open(pool_.get(), "kv"));
  for (const std::string& k : acked) ASSERT_OK(s->Get(k).status()) << k;
}

// Unsynced puts with background flushes (as the daemon runs them) on a
// pool that fills: a flight that fails for lack of space refuses the next
// writes unapplied, everything acknowledged stays readable, and after a
// reopen the store holds a prefix of the puts (a failed flight leaves no
// hole).
TEST_F(KvPoolTest, FullPoolWithBackgroundFlushesKeepsAPrefix) {
  Format(24 << 20);
  ASSERT_OK(KvStore::Create(pool_.get(), "kv"));
  KvOptions o;
  o.background_flush = true;
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(pool_.get(), "kv", o));
  auto value = [](int i) { return std::string(30000, char('a' + i % 26)); };
  int acked = 0;
  absl::Status st;
  for (; acked < 5000; ++acked) {
    st = s->Put("k" + std::to_string(acked), value(acked), {});
    if (!st.ok()) break;
  }
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  ASSERT_GT(acked, 0);
  EXPECT_TRUE(absl::IsNotFound(s->Get("k" + std::to_string(acked)).status()));
  for (int i = 0; i < acked; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string v, s->Get("k" + std::to_string(i)));
    ASSERT_EQ(v, value(i)) << i;
  }
  s.reset();  // its last flush may fail: the pool is full
  ASSERT_OK(pool_->Close());
  ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media_, testing::QuietOpen(false)));
  ASSERT_OK_AND_ASSIGN(s, KvStore::Open(pool_.get(), "kv", o));
  int present = 0;
  while (present < acked && s->Get("k" + std::to_string(present)).ok()) ++present;
  EXPECT_GT(present, 0);
  for (int i = 0; i < acked; ++i) {
    absl::StatusOr<std::string> v = s->Get("k" + std::to_string(i));
    if (i < present) {
      ASSERT_OK(v) << i;
      ASSERT_EQ(*v, value(i)) << i;
    } else {
      ASSERT_TRUE(absl::IsNotFound(v.status())) << i << " of " << acked << " after a hole at " << present;
    }
  }
}

}  // namespace
}  // namespace ftl
