// core::VolumeRegistry on its own: the Volume objects follow the catalogue
// (Sync), removed ones are marked gone and kept, a reused id gets a fresh
// object, and pointers handed out stay valid. The objects it creates run
// over the engine's parts (part_test_util.h: Engine), not a Pool.

#include <gtest/gtest.h>

#include <thread>

#include "core/range_lock.h"
#include "core/volume_registry.h"
#include "part_test_util.h"

namespace ftl::core {
namespace {

using Live = VolumeRegistry::Live;

class VolumeRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(e_.Open());
    const log::Superblock& sb = e_.sb();
    geo_.data_offset = sb.data_offset;
    geo_.segment_blocks = sb.segment_blocks;
    geo_.max_atomic_bytes = uint64_t(sb.segment_blocks) * kBlockSize / 4;
    ctx_.committer = &e_.committer;
    ctx_.state = &e_.state;
    ctx_.media = e_.media.get();
    ctx_.geo = &geo_;
    ctx_.range_lock = &range_lock_;
    ctx_.metadata_room = [](uint32_t) { return absl::OkStatus(); };
  }
  // Adds a volume to the catalogue (as an activation note would).
  void AddToMap(uint32_t id, const std::string& name, uint64_t blocks) {
    absl::MutexLock meta(&e_.state.tree_meta_mu);
    absl::MutexLock l(&e_.state.map_mu);
    e_.state.map->AddVolume(id, name, blocks);
  }

  parts::Engine e_{parts::FormattedMem()};
  Geometry geo_;
  RangeLock range_lock_;
  VolumeContext ctx_;
  VolumeRegistry reg_;
};

TEST_F(VolumeRegistryTest, EmptyUntilSynced) {
  EXPECT_TRUE(reg_.Names().empty());
  EXPECT_EQ(reg_.Get("ftl0"), nullptr);
  EXPECT_EQ(reg_.Primary(), nullptr);
}

TEST_F(VolumeRegistryTest, SyncCreatesTheVolumesOfTheCatalogue) {
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}, {3, "data", 50, true, false}});
  EXPECT_EQ(reg_.Names(), (std::vector<std::string>{"ftl0", "data"}));  // by id
  Volume* p = reg_.Primary();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name(), "ftl0");
  EXPECT_EQ(p->size_bytes(), 100u * kBlockSize);
  EXPECT_FALSE(p->read_only());
  EXPECT_EQ(reg_.Get("ftl0"), p);
  Volume* d = reg_.Get("data");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->size_bytes(), 50u * kBlockSize);
  EXPECT_TRUE(d->read_only());
  EXPECT_EQ(static_cast<VolumeImpl*>(d)->id(), 3u);
  EXPECT_EQ(reg_.Get("nope"), nullptr);
}

TEST_F(VolumeRegistryTest, SyncingTheSameCatalogueKeepsTheObjects) {
  std::vector<Live> live = {{0, "ftl0", 100, false, false}, {3, "data", 50, false, false}};
  reg_.Sync(&ctx_, live);
  Volume* p = reg_.Primary();
  Volume* d = reg_.Get("data");
  reg_.Sync(&ctx_, live);
  EXPECT_EQ(reg_.Primary(), p);
  EXPECT_EQ(reg_.Get("data"), d);
  EXPECT_EQ(reg_.Names().size(), 2u);
}

TEST_F(VolumeRegistryTest, ARemovedVolumeIsGoneButItsObjectStaysValid) {
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}, {3, "data", 50, false, false}});
  Volume* d = reg_.Get("data");
  ASSERT_NE(d, nullptr);
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}});
  EXPECT_EQ(reg_.Get("data"), nullptr);
  EXPECT_EQ(reg_.Names(), std::vector<std::string>{"ftl0"});
  // A client still holding it: every request fails, nothing crashes.
  EXPECT_EQ(d->name(), "data");
  EXPECT_TRUE(static_cast<VolumeImpl*>(d)->gone());
  std::vector<std::byte> buf(kBlockSize);
  EXPECT_TRUE(absl::IsUnavailable(d->Read(0, buf)));
  EXPECT_TRUE(absl::IsUnavailable(d->Write(0, buf)));
  EXPECT_TRUE(absl::IsUnavailable(d->Trim(0, kBlockSize)));
  EXPECT_FALSE(static_cast<VolumeImpl*>(reg_.Primary())->gone());
}

TEST_F(VolumeRegistryTest, AReusedIdGetsAFreshObjectAndTheOldOneStaysGone) {
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}, {3, "data", 50, false, false}});
  Volume* old = reg_.Get("data");
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}});
  AddToMap(3, "data2", 60);
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}, {3, "data2", 60, false, false}});
  Volume* fresh = reg_.Get("data2");
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(fresh, old);
  EXPECT_EQ(fresh->size_bytes(), 60u * kBlockSize);
  EXPECT_EQ(reg_.Get("data"), nullptr);
  EXPECT_EQ(old->name(), "data");  // still valid memory
  std::vector<std::byte> buf(kBlockSize);
  EXPECT_TRUE(absl::IsUnavailable(old->Read(0, buf)));
  // The fresh one works, through the engine.
  std::vector<std::byte> data = testing::Pattern(5, 0, 2 * kBlockSize);
  ASSERT_OK(fresh->Write(kBlockSize, data));
  std::vector<std::byte> got(2 * kBlockSize);
  ASSERT_OK(fresh->Read(kBlockSize, got));
  EXPECT_EQ(got, data);
}

TEST_F(VolumeRegistryTest, TheImmutableFlagFollowsTheCatalogueOnTheSameObject) {
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}});
  Volume* p = reg_.Primary();
  {
    absl::MutexLock meta(&e_.state.tree_meta_mu);
    absl::MutexLock l(&e_.state.map_mu);
    e_.state.map->volume(0)->attrs.Apply(0, 4, log::kAttrImmutable, 0);
  }
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, /*immutable=*/true}});
  EXPECT_EQ(reg_.Primary(), p);
  std::vector<std::byte> block = testing::Pattern(1, 0, kBlockSize);
  EXPECT_TRUE(absl::IsPermissionDenied(p->Write(2 * kBlockSize, block)));
  EXPECT_OK(p->Write(8 * kBlockSize, block));  // outside the range
  {
    absl::MutexLock meta(&e_.state.tree_meta_mu);
    absl::MutexLock l(&e_.state.map_mu);
    e_.state.map->volume(0)->attrs.Apply(0, 4, 0, log::kAttrImmutable);
  }
  reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}});
  EXPECT_EQ(reg_.Primary(), p);
  EXPECT_OK(p->Write(2 * kBlockSize, block));
}

TEST_F(VolumeRegistryTest, ConcurrentReadersSeeValidObjectsWhileSyncsRun) {
  std::atomic<bool> stop{false};
  std::thread syncer([&] {
    for (int i = 0; i < 300; ++i) {
      std::vector<Live> live = {{0, "ftl0", 100, false, false}};
      if (i % 2) live.push_back({uint32_t(1 + i % 5), "v" + std::to_string(i % 5), 10, false, false});
      reg_.Sync(&ctx_, live);
    }
    reg_.Sync(&ctx_, {{0, "ftl0", 100, false, false}});
    stop = true;
  });
  std::vector<Volume*> seen;
  while (!stop) {
    for (const std::string& n : reg_.Names()) {
      if (Volume* v = reg_.Get(n)) seen.push_back(v);
    }
    if (Volume* p = reg_.Primary()) seen.push_back(p);
  }
  syncer.join();
  // Every pointer ever handed out is still a live object.
  for (Volume* v : seen) EXPECT_FALSE(v->name().empty());
  EXPECT_EQ(reg_.Names(), std::vector<std::string>{"ftl0"});
}

}  // namespace
}  // namespace ftl::core
