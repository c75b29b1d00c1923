// snap::ExclusiveBlocks against its definition: the number of VBAs that a
// release of the tree frees. Trees share nodes (snapshots) and reference the
// same VBAs several times (clones within a tree and from snapshots).

#include "snap/exclusive_space.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "map/range_clone.h"
#include "log/segment_table.h"
#include "map/extent_tree.h"
#include "map/vba_table.h"

namespace ftl::snap {
namespace {

using map::ExtentTree;
using log::Bno;

constexpr Bno kSpace = 1 << 14;

struct Fixture {
  log::SegmentTable segs{64, 4096};
  map::VbaTable vbas{&segs, 1 << 20};
  map::TreeContext ctx{&vbas};
  // Maps [lba, lba+len) to fresh VBAs, run by run.
  void Write(ExtentTree* t, Bno lba, Bno len) {
    std::vector<std::pair<Bno, Bno>> runs;
    vbas.Allocate(len, &runs);
    for (auto [start, n] : runs) {
      t->Assign(lba, n, start);
      lba += n;
    }
  }
};

TEST(ExclusiveBlocks, EqualsWhatReleasingTheTreeFrees) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Fixture f;
    std::mt19937_64 rng(seed);
    ExtentTree live(&f.ctx);
    std::vector<ExtentTree> snaps;
    auto range = [&](Bno max_len) {
      Bno len = Bno(1 + rng() % max_len);
      Bno lba = Bno(rng() % (kSpace - len));
      return std::pair{lba, len};
    };
    f.Write(&live, 0, kSpace / 2);  // one long extent to start from
    for (int op = 0; op < 3000; ++op) {
      int what = int(rng() % 10);
      if (what < 6) {
        auto [lba, len] = range(rng() % 4 == 0 ? 300 : 4);
        f.Write(&live, lba, len);
      } else if (what == 6) {
        auto [lba, len] = range(64);
        live.Assign(lba, len, log::kNoBlock);
      } else if (what == 7) {  // clone within the tree (overlap allowed)
        auto [src, len] = range(200);
        Bno dst = Bno(rng() % (kSpace - len));
        map::CloneRange(live, src, &live, dst, len, &f.vbas);
      } else if (what == 8 && !snaps.empty()) {  // restore from a snapshot
        auto [lba, len] = range(100);
        map::CloneRange(snaps[rng() % snaps.size()], lba, &live, lba, len, &f.vbas);
      }
      if (op % 150 == 75) snaps.push_back(live.Share());
    }
    ASSERT_GE(snaps.size(), 3u);
    // Release the snapshots in random order, the live tree last: each frees
    // exactly what ExclusiveBlocks said just before.
    snaps.push_back(std::move(live));
    while (!snaps.empty()) {
      size_t i = rng() % snaps.size();
      uint64_t excl = ExclusiveBlocks(snaps[i], f.vbas);
      uint64_t before = f.vbas.live_vbas();
      snaps.erase(snaps.begin() + long(i));
      EXPECT_EQ(before - f.vbas.live_vbas(), excl) << "seed " << seed;
    }
    EXPECT_EQ(f.vbas.live_vbas(), 0u);
  }
}

}  // namespace
}  // namespace ftl::snap
