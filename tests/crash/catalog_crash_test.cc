// Crash test of snapshots and range operations (issues 4 and 5; tests/README.md,
// the crash tier). One worker runs a random mix of writes, trims, zeroes, flushes,
// snapshot create/delete/activate/deactivate/rollback and atomic batches of
// range clones/moves, across the primary volume, activated snapshots and
// snapshots as clone sources, while the cleaner runs. The media is crashed at
// a random moment with a random crash plan; after reopening, the whole
// catalogue and every image (volumes and snapshots) must equal a reference
// world after some prefix of the operations issued since the last durable
// point (a flush, or any catalogue/range operation, which are synced):
//  - no acknowledged-and-durable change is lost, no batch is half-applied,
//    no snapshot shows later writes;
//  - non-persistent (scratch) ranges of volumes read as zeros after the crash.
// Iterations: $FTL_CATALOG_CRASH_ITERATIONS (default 300).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ftl/pool.h"
#include "media/fault_media.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using media::FaultMedia;

constexpr uint64_t kB = 4096;
constexpr uint64_t kRegion = 1 << 20;           // every op stays in the first MiB
constexpr uint64_t kScratch = 192 * kB;          // [768 KiB, 1 MiB) is non-persistent
constexpr uint64_t kScratchLen = kRegion - kScratch;

using Image = std::vector<std::byte>;

struct World {
  std::map<std::string, Image> vols;         // volume name -> first kRegion bytes
  std::map<std::string, Image> snaps;        // "vol@snap" -> image
  std::map<std::string, std::string> origin;  // activated volume -> "vol@snap"
  bool operator==(const World& o) const { return vols == o.vols && snaps == o.snaps; }
  void DropScratch() {
    for (auto& [n, img] : vols) std::memset(img.data() + kScratch, 0, kScratchLen);
  }
};

using Unit = std::function<void(World&)>;

class Model {
 public:
  Model() { base_.vols["ftl0"] = Image(kRegion); cur_ = base_; }
  // Records a unit issued (before the call, which may or may not apply it).
  void Add(Unit u) {
    u(cur_);
    pending_.push_back(std::move(u));
  }
  // Everything issued so far is durable.
  void Durable() {
    base_ = cur_;
    pending_.clear();
  }
  const World& current() const { return cur_; }
  size_t pending() const { return pending_.size(); }
  // Finds k such that base + first k units (scratch dropped) == got.
  long Match(const World& got) {
    World w = base_;
    for (size_t k = 0;; ++k) {
      World dropped = w;
      dropped.DropScratch();
      if (dropped == got) {
        base_ = dropped;
        cur_ = dropped;
        pending_.clear();
        return long(k);
      }
      if (k == pending_.size()) return -1;
      pending_[k](w);
    }
  }
  std::string Describe(const World& got) const {
    std::string s = "recovered volumes:";
    for (auto& [n, i] : got.vols) absl::StrAppend(&s, " ", n);
    absl::StrAppend(&s, "; snapshots:");
    for (auto& [n, i] : got.snaps) absl::StrAppend(&s, " ", n);
    absl::StrAppend(&s, "; model base volumes:");
    for (auto& [n, i] : base_.vols) absl::StrAppend(&s, " ", n);
    absl::StrAppend(&s, "; snapshots:");
    for (auto& [n, i] : base_.snaps) absl::StrAppend(&s, " ", n);
    absl::StrAppend(&s, "; pending ", pending_.size());
    return s;
  }

 private:
  World base_, cur_;
  std::vector<Unit> pending_;
};

template <typename M>
auto Pick(const M& m, std::mt19937_64& rng) {
  auto it = m.begin();
  std::advance(it, long(rng() % m.size()));
  return it;
}

struct Worker {
  Pool* pool;
  Model* model;
  std::atomic<bool>* stop;
  uint64_t seed;
  uint64_t* counter;  // names and tags, unique across iterations
  size_t ops_ok = 0, notes_ok = 0;

  absl::Status Step(std::mt19937_64& rng) {
    const World& w = model->current();
    int kind = int(rng() % 100);
    if (kind < 45) {  // write
      auto vol = Pick(w.vols, rng)->first;
      uint64_t len = (1 + rng() % 32) * 512 * (rng() % 2 ? 8 : 1);
      uint64_t off = (rng() % (kRegion / 512)) * 512;
      if (rng() % 2) off = off / kB * kB;
      // At most the atomic size: a larger write is split and only atomic
      // per block (crash_test covers that), which this model does not track.
      len = std::min({len, kRegion - off, pool->geometry().max_atomic_bytes});
      Image data = testing::Pattern(++*counter, off, len);
      model->Add([vol, off, data](World& x) { std::memcpy(x.vols[vol].data() + off, data.data(), data.size()); });
      return pool->GetVolume(vol)->Write(off, data, rng() % 10 == 0);
    }
    if (kind < 52) {  // trim (whole blocks inside)
      auto vol = Pick(w.vols, rng)->first;
      uint64_t off = (rng() % (kRegion / kB)) * kB, len = (1 + rng() % 16) * kB;
      len = std::min(len, kRegion - off);
      model->Add([vol, off, len](World& x) { std::memset(x.vols[vol].data() + off, 0, len); });
      return pool->GetVolume(vol)->Trim(off, len);
    }
    if (kind < 56) {  // write zeroes
      auto vol = Pick(w.vols, rng)->first;
      uint64_t off = (rng() % (kRegion / 512)) * 512, len = (1 + rng() % 16) * 512;
      len = std::min(len, kRegion - off);
      model->Add([vol, off, len](World& x) { std::memset(x.vols[vol].data() + off, 0, len); });
      return pool->GetVolume(vol)->WriteZeroes(off, len);
    }
    if (kind < 64) {  // flush
      auto vol = Pick(w.vols, rng)->first;
      absl::Status s = pool->GetVolume(vol)->Flush();
      if (s.ok()) model->Durable();
      return s;
    }
    absl::Status s;
    if (kind < 71) {  // snapshot create
      auto vol = Pick(w.vols, rng)->first;
      std::string name = absl::StrCat("s", ++*counter);
      model->Add([vol, name](World& x) { x.snaps[vol + "@" + name] = x.vols[vol]; });
      s = pool->CreateSnapshot(vol, name).status();
    } else if (kind < 75) {  // snapshot delete (an active one with force)
      if (w.snaps.empty()) return absl::OkStatus();
      std::string ref = Pick(w.snaps, rng)->first;
      bool active = false;
      for (auto& [v, o] : w.origin) active |= o == ref;
      if (active && rng() % 2) return absl::OkStatus();
      model->Add([ref](World& x) {
        x.snaps.erase(ref);
        for (auto it = x.origin.begin(); it != x.origin.end();) {
          if (it->second == ref) {
            x.vols.erase(it->first);
            it = x.origin.erase(it);
          } else {
            ++it;
          }
        }
      });
      size_t at = ref.find('@');
      s = pool->DeleteSnapshot(ref.substr(0, at), ref.substr(at + 1), /*force=*/active);
    } else if (kind < 80) {  // activate
      if (w.snaps.empty() || w.vols.size() >= 4) return absl::OkStatus();
      std::string ref = Pick(w.snaps, rng)->first;
      std::string name = absl::StrCat("a", ++*counter);
      model->Add([ref, name](World& x) {
        x.vols[name] = x.snaps[ref];
        x.origin[name] = ref;
      });
      size_t at = ref.find('@');
      s = pool->ActivateSnapshot(ref.substr(0, at), ref.substr(at + 1), name, false).status();
    } else if (kind < 84) {  // deactivate
      if (w.vols.size() < 2) return absl::OkStatus();
      std::string vol = Pick(w.vols, rng)->first;
      if (vol == "ftl0") return absl::OkStatus();
      model->Add([vol](World& x) {
        x.vols.erase(vol);
        x.origin.erase(vol);
      });
      s = pool->DeactivateVolume(vol);
    } else if (kind < 88) {  // rollback
      std::vector<std::string> refs;
      for (auto& [ref, img] : w.snaps)
        if (w.vols.count(ref.substr(0, ref.find('@')))) refs.push_back(ref);
      if (refs.empty()) return absl::OkStatus();
      std::string ref = refs[rng() % refs.size()];
      std::string vol = ref.substr(0, ref.find('@'));
      model->Add([ref, vol](World& x) { x.vols[vol] = x.snaps[ref]; });
      s = pool->Rollback(vol, ref.substr(ref.find('@') + 1));
    } else {  // an atomic batch of clones and moves
      std::vector<RangeOp> ops;
      int n = 1 + int(rng() % 3);
      for (int i = 0; i < n; ++i) {
        RangeOp op;
        op.kind = rng() % 2 ? RangeOp::Kind::kClone : RangeOp::Kind::kMove;
        bool from_snap = op.kind == RangeOp::Kind::kClone && !w.snaps.empty() && rng() % 3 == 0;
        op.from = from_snap ? Pick(w.snaps, rng)->first : Pick(w.vols, rng)->first;
        op.to = Pick(w.vols, rng)->first;
        op.len = (1 + rng() % 16) * kB;
        op.src = (rng() % ((kRegion - op.len) / kB + 1)) * kB;
        op.dst = (rng() % ((kRegion - op.len) / kB + 1)) * kB;
        ops.push_back(op);
      }
      model->Add([ops](World& x) {
        for (const RangeOp& op : ops) {
          bool snap = op.from.find('@') != std::string::npos;
          Image src = snap ? x.snaps[op.from] : x.vols[op.from];  // read before writing
          std::memcpy(x.vols[op.to].data() + op.dst, src.data() + op.src, op.len);
          if (op.kind == RangeOp::Kind::kMove) {
            Image& s = x.vols[op.from];
            for (uint64_t b = op.src; b < op.src + op.len; b += kB) {
              bool in_dst = op.from == op.to && b >= op.dst && b < op.dst + op.len;
              if (!in_dst) std::memset(s.data() + b, 0, kB);
            }
          }
        }
      });
      s = pool->ApplyRangeOps(ops);
    }
    // Catalogue and range operations are synced: everything before is durable.
    if (s.ok()) {
      model->Durable();
      ++notes_ok;
    }
    return s;
  }

  void Run() {
    std::mt19937_64 rng(seed);
    while (!stop->load()) {
      if (!Step(rng).ok()) return;  // the media was crashed under us
      ++ops_ok;
    }
  }
};

absl::StatusOr<World> ReadWorld(Pool* pool, int it) {
  World w;
  for (const std::string& name : pool->VolumeNames()) {
    Image img(kRegion);
    if (absl::Status s = pool->GetVolume(name)->Read(0, img); !s.ok()) return s;
    w.vols[name] = std::move(img);
    std::string o = pool->VolumeOrigin(name);
    if (!o.empty()) w.origin[name] = o;
  }
  int k = 0;
  for (const SnapshotInfo& si : pool->ListSnapshots("")) {
    std::string tmp = absl::StrCat("chk", it, "-", k++);
    auto v = pool->ActivateSnapshot(si.volume, si.name, tmp, true);
    if (!v.ok()) return v.status();
    Image img(kRegion);
    if (absl::Status s = (*v)->Read(0, img); !s.ok()) return s;
    if (absl::Status s = pool->DeactivateVolume(tmp); !s.ok()) return s;
    w.snaps[si.volume + "@" + si.name] = std::move(img);
  }
  return w;
}

TEST(CatalogCrashTest, RandomCrashPointsAgainstModel) {
  int iterations = 300;
  if (const char* e = std::getenv("FTL_CATALOG_CRASH_ITERATIONS")) iterations = std::atoi(e);
  auto fault = std::make_shared<FaultMedia>(24 << 20);
  auto open = testing::QuietOpen(true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(fault, testing::SmallFormat(256 << 10), open));
  ASSERT_OK(pool->SetRangeAttr("", kScratch, kScratchLen, RangeAttr::kNonPersistent));
  Model model;
  std::mt19937_64 rng(20261122);
  uint64_t counter = 0;
  size_t total_ops = 0, total_notes = 0, lost = 0;
  for (int it = 0; it < iterations; ++it) {
    std::atomic<bool> stop{false};
    Worker w{pool.get(), &model, &stop, rng(), &counter};
    std::thread t([&] { w.Run(); });
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    fault->Crash();
    stop = true;
    t.join();
    total_ops += w.ops_ok;
    total_notes += w.notes_ok;
    pool.reset();

    fault->Restart(testing::RandomCrashPlan(rng, fault->unsynced_writes()));
    auto reopened = Pool::Open(fault, open);
    ASSERT_OK(reopened) << "iteration " << it;
    pool = std::move(*reopened);
    auto got = ReadWorld(pool.get(), it);
    ASSERT_OK(got) << "iteration " << it;
    size_t pending = model.pending();
    long k = model.Match(*got);
    ASSERT_GE(k, 0) << "iteration " << it << ": the recovered catalogue and images are no prefix "
                    << "of the operations since the last durable point (" << pool->OpenReport()
                    << "); " << model.Describe(*got);
    lost += pending - size_t(k);
    if (it % 50 == 49) {
      auto report = pool->Check(/*verify_data=*/true);
      ASSERT_OK(report);
      ASSERT_TRUE(report->problems.empty()) << "iteration " << it << ": " << report->problems[0];
    }
  }
  std::printf("crash points: %d, ops acknowledged: %zu (catalogue/range: %zu), units lost "
              "(not durable): %zu, snapshots at the end: %zu\n",
              iterations, total_ops, total_notes, lost, pool->ListSnapshots("").size());
  EXPECT_GT(total_notes, size_t(iterations) / 2);
}

}  // namespace
}  // namespace ftl
