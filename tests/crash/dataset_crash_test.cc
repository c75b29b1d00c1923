// Crash tests of datasets (issues 21, 22; tests/README.md, the crash tier).
// The media is crashed at a random moment and reopened under a random
// crash plan (a random part of the unsynced writes kept, the next one torn):
//  - CreateResizeDestroyIsAllOrNothing: a worker creates, stamps,
//    snapshots, resizes (grow, shrink, forced shrink), rolls back and
//    destroys datasets between unsynced writes to the primary. After
//    recovery the catalogue of datasets — names, kinds, sizes, their
//    snapshots, every stamp — is the model after every acknowledged
//    change, with the change in flight at the crash either fully in effect
//    or not at all.
//  - WriteAtomicIsAllOrNothing: two workers issue WriteAtomic calls of
//    several pieces at scattered offsets of their own region, each block
//    stamped with the call's id. After recovery the pieces of one call
//    show its id everywhere or nowhere (where no later call overwrote
//    them), and each region is its model after some prefix of the calls
//    since its last durable point.
// Iterations: $FTL_DATASET_CRASH_ITERATIONS (default 150 each).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ftl/pool.h"
#include "media/fault_media.h"
#include "status_asserts.h"
#include "test_util.h"
#include "util/encoding.h"

namespace ftl {
namespace {

using media::FaultMedia;

constexpr uint64_t kB = 4096;

int Iterations() {
  if (const char* e = std::getenv("FTL_DATASET_CRASH_ITERATIONS")) return std::atoi(e);
  return 150;
}

// ------------------------------------------- create / resize / destroy

// Blocks a dataset's stamps go to (and ReadCatalog reads): every 16th
// block of the first 1024, as far as the dataset reaches.
constexpr uint64_t kStampStride = 16;
constexpr uint64_t kStampSlots = 64;

struct Dataset {
  DatasetKind kind;
  uint64_t size;
  std::map<uint64_t, uint64_t> stamps;  // block -> id (absent: reads zeros)
  bool operator==(const Dataset& o) const {
    return kind == o.kind && size == o.size && stamps == o.stamps;
  }
  std::string Describe() const {
    std::string s = absl::StrCat(DatasetKindName(kind), ",", size, ",{");
    for (auto& [b, id] : stamps) absl::StrAppend(&s, b, ":", id, " ");
    return s + "}";
  }
};

struct Catalog {
  std::map<std::string, Dataset> sets;   // not the primary
  std::map<std::string, Dataset> snaps;  // "name@snap" of those datasets
  bool operator==(const Catalog& o) const { return sets == o.sets && snaps == o.snaps; }
  std::string Describe() const {
    std::string s = "datasets:";
    for (auto& [n, d] : sets) absl::StrAppend(&s, " ", n, "(", d.Describe(), ")");
    absl::StrAppend(&s, "; snapshots:");
    for (auto& [n, d] : snaps) absl::StrAppend(&s, " ", n, "(", d.Describe(), ")");
    return s;
  }
};

std::vector<std::byte> Stamp(uint64_t id, uint64_t block) {
  std::vector<std::byte> b = testing::Pattern(id, block * kB, kB);
  util::PutU64(b.data(), id);
  util::PutU64(b.data() + 8, block);
  return b;
}

// The stamps of a tree as its first kStampSlots slots read (those inside
// its size); a block that is neither zeros nor its own stamp is an error.
absl::StatusOr<Dataset> ReadTree(Volume* v, const std::string& what) {
  Dataset d{v->kind(), v->size_bytes(), {}};
  std::vector<std::byte> b(kB);
  for (uint64_t k = 0; k < kStampSlots && (k * kStampStride + 1) * kB <= d.size; ++k) {
    const uint64_t block = k * kStampStride;
    if (absl::Status s = v->Read(block * kB, b); !s.ok()) return s;
    uint64_t id = util::GetU64(b.data());
    if (id == 0 && b == std::vector<std::byte>(kB)) continue;
    if (b != Stamp(id, block))
      return absl::DataLossError(absl::StrCat(what, ": block ", block, " is no stamp of its own"));
    d.stamps[block] = id;
  }
  return d;
}

absl::StatusOr<Catalog> ReadCatalog(Pool* pool) {
  Catalog c;
  for (const DatasetInfo& d : pool->ListDatasets()) {
    if (d.name == "ftl0") continue;
    Volume* v = pool->GetVolume(d.name);
    if (v == nullptr) return absl::InternalError(absl::StrCat("listed ", d.name, " has no volume"));
    if (v->kind() != d.kind || v->size_bytes() != d.size_bytes)
      return absl::InternalError(absl::StrCat(d.name, ": its volume disagrees with the list"));
    absl::StatusOr<Dataset> got = ReadTree(v, d.name);
    if (!got.ok()) return got.status();
    c.sets[d.name] = *got;
  }
  for (const SnapshotInfo& si : pool->ListSnapshots("")) {
    if (si.volume == "ftl0") continue;
    absl::StatusOr<Volume*> sv = pool->SnapshotVolume(si.volume, si.name);
    if (!sv.ok()) return sv.status();
    auto it = c.sets.find(si.volume);
    // A snapshot outliving its dataset: a destroy applied in part.
    if (it == c.sets.end())
      return absl::InternalError(absl::StrCat("snapshot ", si.volume, "@", si.name,
                                              " of a dataset that is gone"));
    if ((*sv)->kind() != it->second.kind)
      return absl::InternalError(absl::StrCat(si.volume, "@", si.name, ": kind differs"));
    if ((*sv)->size_bytes() != si.size_bytes)
      return absl::InternalError(absl::StrCat(si.volume, "@", si.name, ": size differs"));
    absl::StatusOr<Dataset> got = ReadTree(*sv, si.volume + "@" + si.name);
    if (!got.ok()) return got.status();
    c.snaps[si.volume + "@" + si.name] = *got;
  }
  return c;
}

// A worker creates datasets of random kinds and (thin) sizes, stamps
// blocks of them, snapshots them, resizes block volumes (grows, shrinks
// that must keep data and are refused while a stamp lies past the new
// end, forced shrinks that drop such stamps), rolls them back to
// snapshots (size included) and destroys them (with force, dropping their
// snapshots in the same note), between unsynced writes to the primary.
// After recovery the catalogue — names, kinds, sizes, snapshots, every
// stamp — is the model after every acknowledged change, with the change in
// flight either fully in effect or not at all; a block dropped by a shrink
// never comes back after a grow.
TEST(DatasetCrashTest, CreateResizeDestroyIsAllOrNothing) {
  const int iterations = Iterations();
  auto fault = std::make_shared<FaultMedia>(24 << 20);
  auto open = testing::QuietOpen(true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(fault, testing::SmallFormat(256 << 10), open));
  std::mt19937_64 rng(20260311);
  uint64_t counter = 0;
  Catalog durable;  // every acknowledged change
  size_t changes = 0, in_flight_applied = 0, in_flight_lost = 0, refusals = 0;
  std::map<std::string, size_t> done;       // acknowledged changes by kind
  std::map<std::string, size_t> in_flight;  // changes in flight at a crash, by kind
  for (int it = 0; it < iterations; ++it) {
    std::atomic<bool> stop{false};
    std::optional<Catalog> pending;  // the model if the change in flight applies
    std::string pending_kind;
    std::mutex mu;  // guards durable, pending and pending_kind with the worker
    std::thread worker([&, seed = rng()] {
      std::mt19937_64 r(seed);
      while (!stop.load()) {
        Catalog next;
        {
          std::lock_guard<std::mutex> l(mu);
          next = durable;
        }
        absl::Status s;
        std::string kind_of_change;
        const int op = int(r() % 100);
        auto pick = [&](const auto& m) {
          auto i = m.begin();
          std::advance(i, long(r() % m.size()));
          return *i;
        };
        auto propose = [&] {
          std::lock_guard<std::mutex> l(mu);
          pending = next;
          pending_kind = kind_of_change;
        };
        // A refusal must change nothing: the model stays as it is.
        auto expect_refused = [&](const absl::Status& st, absl::StatusCode code,
                                  const std::string& what) {
          if (fault->crashed()) return false;
          if (st.code() != code) {
            ADD_FAILURE() << what << ": " << st;
            return false;
          }
          ++refusals;
          return true;
        };
        if (op < 25) {  // unsynced writes to the primary: traffic to tear
          s = pool->PrimaryVolume()->Write((r() % 256) * kB, testing::Pattern(++counter, 0, 4 * kB));
          if (!s.ok()) return;
          continue;
        } else if (op < 40 && next.sets.size() < 6) {  // create
          std::string name = absl::StrCat("d", ++counter);
          DatasetKind kind = r() % 3 == 0 ? DatasetKind::kKv : DatasetKind::kBlock;
          uint64_t size = r() % 4 == 0 ? (uint64_t(1) << 40) : (1 + r() % 64) * kStampStride * kB;
          next.sets[name] = Dataset{kind, size, {}};
          kind_of_change = "create";
          propose();
          s = pool->CreateDataset(name, kind, size).status();
        } else if (op < 55 && !next.sets.empty()) {  // stamp a block, durable
          auto [name, d] = pick(next.sets);
          uint64_t slots = std::min<uint64_t>(kStampSlots, d.size / kB / kStampStride);
          uint64_t block = (r() % slots) * kStampStride;
          uint64_t id = ++counter;
          next.sets[name].stamps[block] = id;
          kind_of_change = "stamp";
          propose();
          Volume* v = pool->GetVolume(name);
          s = v ? v->Write(block * kB, Stamp(id, block), /*fua=*/true)
                : absl::InternalError("no volume " + name);
        } else if (op < 67 && !next.sets.empty()) {  // resize
          auto [name, d] = pick(next.sets);
          const uint64_t size = (1 + r() % 64) * kStampStride * kB;
          if (d.kind != DatasetKind::kBlock) {
            if (!expect_refused(pool->ResizeDataset(name, size, r() % 2 == 0),
                                absl::StatusCode::kFailedPrecondition, "resize of kv " + name))
              return;
            continue;
          }
          bool data_past_end = false;
          for (auto& [b, id] : d.stamps) data_past_end |= (b + 1) * kB > size;
          const bool force = data_past_end && r() % 4 != 0;
          if (data_past_end && !force) {
            if (!expect_refused(pool->ResizeDataset(name, size, false),
                                absl::StatusCode::kFailedPrecondition,
                                absl::StrCat("shrink of ", name, " to ", size, " over data")))
              return;
            continue;
          }
          Dataset& nd = next.sets[name];
          nd.size = size;
          for (auto i = nd.stamps.begin(); i != nd.stamps.end();)
            i = (i->first + 1) * kB > size ? nd.stamps.erase(i) : std::next(i);
          kind_of_change = size > d.size ? "grow" : size < d.size ? "shrink" : "resize";
          propose();
          s = pool->ResizeDataset(name, size, force);
        } else if (op < 77 && !next.sets.empty()) {  // snapshot
          auto [name, d] = pick(next.sets);
          std::string snap = absl::StrCat("s", ++counter);
          next.snaps[name + "@" + snap] = d;
          kind_of_change = "snapshot";
          propose();
          s = pool->CreateSnapshot(name, snap).status();
        } else if (op < 82 && !next.snaps.empty()) {  // snapshot delete
          std::string ref = pick(next.snaps).first;
          next.snaps.erase(ref);
          kind_of_change = "snapshot delete";
          propose();
          size_t at = ref.find('@');
          s = pool->DeleteSnapshot(ref.substr(0, at), ref.substr(at + 1));
        } else if (op < 88 && !next.snaps.empty()) {  // rollback
          auto [ref, snapd] = pick(next.snaps);
          size_t at = ref.find('@');
          next.sets[ref.substr(0, at)] = snapd;
          kind_of_change = "rollback";
          propose();
          s = pool->Rollback(ref.substr(0, at), ref.substr(at + 1));
        } else if (!next.sets.empty()) {  // destroy
          std::string name = pick(next.sets).first;
          bool has_snaps = false;
          for (const auto& [ref, sd] : next.snaps) has_snaps |= ref.rfind(name + "@", 0) == 0;
          if (has_snaps && r() % 3 == 0) {
            if (!expect_refused(pool->DestroyDataset(name, false),
                                absl::StatusCode::kFailedPrecondition,
                                "destroy of " + name + " with snapshots"))
              return;
            continue;
          }
          next.sets.erase(name);
          for (auto i = next.snaps.begin(); i != next.snaps.end();)
            i = i->first.rfind(name + "@", 0) == 0 ? next.snaps.erase(i) : std::next(i);
          kind_of_change = "destroy";
          propose();
          s = pool->DestroyDataset(name, /*force=*/has_snaps);
        } else {
          continue;
        }
        if (!s.ok()) {
          if (!fault->crashed()) ADD_FAILURE() << kind_of_change << ": " << s;
          return;  // the media was crashed under us
        }
        std::lock_guard<std::mutex> l(mu);
        durable = next;
        pending.reset();
        ++changes;
        ++done[kind_of_change];
      }
    });
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
    fault->Crash();
    stop = true;
    worker.join();
    ASSERT_FALSE(::testing::Test::HasFailure()) << "iteration " << it;
    pool.reset();
    fault->Restart(testing::RandomCrashPlan(rng, fault->unsynced_writes()));
    auto reopened = Pool::Open(fault, open);
    ASSERT_OK(reopened) << "iteration " << it;
    pool = std::move(*reopened);
    absl::StatusOr<Catalog> got = ReadCatalog(pool.get());
    ASSERT_OK(got) << "iteration " << it << " (" << pool->OpenReport() << ")";
    if (pending) ++in_flight[pending_kind];
    if (*got == durable) {
      if (pending) ++in_flight_lost;
    } else {
      ASSERT_TRUE(pending && *got == *pending)
          << "iteration " << it << ": recovered " << got->Describe() << "\n  acknowledged "
          << durable.Describe() << "\n  in flight "
          << (pending ? pending->Describe() : std::string("nothing")) << "\n  ("
          << pool->OpenReport() << ")";
      ++in_flight_applied;
      durable = *got;
    }
    if (it % 25 == 24) {
      ASSERT_OK_AND_ASSIGN(CheckReport rep, pool->Check(/*verify_data=*/true));
      ASSERT_TRUE(rep.problems.empty()) << "iteration " << it << ": " << rep.problems[0];
    }
  }
  std::string kinds, crashed_in;
  for (auto& [k, n] : done) absl::StrAppend(&kinds, " ", k, " ", n);
  for (auto& [k, n] : in_flight) absl::StrAppend(&crashed_in, " ", k, " ", n);
  std::printf("crash points: %d, dataset changes acknowledged: %zu (%s), refusals checked: %zu, "
              "in flight at the crash: %zu applied, %zu not (%s); datasets at the end: %zu\n",
              iterations, changes, kinds.c_str(), refusals, in_flight_applied, in_flight_lost,
              crashed_in.c_str(), durable.sets.size());
  EXPECT_GT(changes, size_t(iterations));
  for (const char* k : {"grow", "shrink", "rollback", "create", "destroy"})
    EXPECT_GT(done[k], 0u) << k;
}

// ---------------------------------------------------------- WriteAtomic

constexpr uint64_t kRegionBlocks = 256;  // per worker

struct AtomicWrite {
  uint64_t id;
  std::vector<uint64_t> blocks;  // region-relative
};

// Per worker: the ids its region's blocks hold (0 = never written) after
// every write known durable, and the writes issued since, in order.
struct RegionModel {
  std::vector<uint64_t> base = std::vector<uint64_t>(kRegionBlocks, 0);
  std::vector<AtomicWrite> pending;
  std::mutex mu;
};

std::vector<uint64_t> Apply(std::vector<uint64_t> img, const std::vector<AtomicWrite>& ws,
                            size_t k) {
  for (size_t i = 0; i < k; ++i)
    for (uint64_t b : ws[i].blocks) img[b] = ws[i].id;
  return img;
}

std::vector<std::byte> StampBlock(uint64_t id, uint64_t block) {
  std::vector<std::byte> b = testing::Pattern(id, block * kB, kB);
  util::PutU64(b.data(), id);
  util::PutU64(b.data() + 8, block);
  return b;
}

TEST(DatasetCrashTest, WriteAtomicIsAllOrNothing) {
  const int iterations = Iterations();
  constexpr int kWorkers = 2;
  auto fault = std::make_shared<FaultMedia>(24 << 20);
  auto open = testing::QuietOpen(true);
  open.placement = OpenOptions::Placement::kOn;  // hot/cold slots: joined records too
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(fault, testing::SmallFormat(256 << 10), open));
  // Worker 1 writes a key-value dataset: the same path for every kind.
  ASSERT_OK(pool->CreateDataset("kv", DatasetKind::kKv, uint64_t(1) << 40).status());
  const std::string vol_of[kWorkers] = {"ftl0", "kv"};
  const uint64_t region_at[kWorkers] = {64 * kB, (uint64_t(1) << 39)};
  const uint64_t max_blocks = pool->geometry().max_atomic_bytes / kB;
  RegionModel models[kWorkers];
  std::atomic<uint64_t> next_id{0};
  std::mt19937_64 rng(20260312);
  size_t acked = 0, torn_checked = 0;
  for (int it = 0; it < iterations; ++it) {
    std::atomic<bool> stop{false};
    std::atomic<size_t> ok_calls{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&, w, seed = rng()] {
        std::mt19937_64 r(seed);
        Volume* v = pool->GetVolume(vol_of[w]);
        RegionModel& m = models[w];
        while (!stop.load()) {
          if (r() % 12 == 0) {
            if (!v->Flush().ok()) return;
            std::lock_guard<std::mutex> l(m.mu);
            m.base = Apply(m.base, m.pending, m.pending.size());
            m.pending.clear();
            continue;
          }
          // 1-5 pieces of 1-4 blocks at scattered, non-overlapping places.
          AtomicWrite aw{++next_id, {}};
          std::vector<std::vector<std::byte>> bufs;
          std::vector<Volume::Piece> pieces;
          std::set<uint64_t> used;
          const int n = 1 + int(r() % 5);
          for (int p = 0; p < n && aw.blocks.size() < max_blocks; ++p) {
            uint64_t len = std::min<uint64_t>(1 + r() % 4, max_blocks - aw.blocks.size());
            uint64_t at = r() % (kRegionBlocks - len + 1);
            bool clash = false;
            for (uint64_t b = at; b < at + len; ++b) clash |= used.count(b) > 0;
            if (clash) continue;
            std::vector<std::byte> buf;
            for (uint64_t b = at; b < at + len; ++b) {
              used.insert(b);
              aw.blocks.push_back(b);
              std::vector<std::byte> s = StampBlock(aw.id, b);
              buf.insert(buf.end(), s.begin(), s.end());
            }
            bufs.push_back(std::move(buf));
            pieces.push_back({region_at[w] + at * kB, {}});
          }
          for (size_t p = 0; p < pieces.size(); ++p) pieces[p].data = bufs[p];
          const bool fua = r() % 8 == 0;
          {
            std::lock_guard<std::mutex> l(m.mu);
            m.pending.push_back(aw);
          }
          if (!v->WriteAtomic(pieces, fua).ok()) return;
          ok_calls.fetch_add(1);
          if (fua) {
            std::lock_guard<std::mutex> l(m.mu);
            m.base = Apply(m.base, m.pending, m.pending.size());
            m.pending.clear();
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    fault->Crash();
    stop = true;
    for (std::thread& t : workers) t.join();
    acked += ok_calls.load();
    pool.reset();
    fault->Restart(testing::RandomCrashPlan(rng, fault->unsynced_writes()));
    auto reopened = Pool::Open(fault, open);
    ASSERT_OK(reopened) << "iteration " << it;
    pool = std::move(*reopened);
    for (int w = 0; w < kWorkers; ++w) {
      RegionModel& m = models[w];
      Volume* v = pool->GetVolume(vol_of[w]);
      ASSERT_NE(v, nullptr);
      ASSERT_EQ(v->kind(), w == 0 ? DatasetKind::kBlock : DatasetKind::kKv);
      std::vector<std::byte> img(kRegionBlocks * kB);
      ASSERT_OK(v->Read(region_at[w], img)) << "iteration " << it;
      std::vector<uint64_t> got(kRegionBlocks);
      for (uint64_t b = 0; b < kRegionBlocks; ++b) {
        std::span<const std::byte> blk(img.data() + b * kB, kB);
        got[b] = util::GetU64(blk.data());
        if (got[b] == 0) {
          ASSERT_EQ(std::vector<std::byte>(blk.begin(), blk.end()), std::vector<std::byte>(kB))
              << "iteration " << it << " block " << b;
        } else {
          ASSERT_EQ(std::vector<std::byte>(blk.begin(), blk.end()), StampBlock(got[b], b))
              << "iteration " << it << " block " << b << " holds another block's data";
        }
      }
      // Each pending call: the blocks no later call overwrote show its id
      // everywhere or nowhere.
      for (size_t i = 0; i < m.pending.size(); ++i) {
        std::set<uint64_t> later;
        for (size_t j = i + 1; j < m.pending.size(); ++j)
          later.insert(m.pending[j].blocks.begin(), m.pending[j].blocks.end());
        size_t mine = 0, own = 0;
        for (uint64_t b : m.pending[i].blocks) {
          if (later.count(b)) continue;
          ++own;
          mine += got[b] == m.pending[i].id ? 1 : 0;
        }
        ASSERT_TRUE(mine == 0 || mine == own)
            << "iteration " << it << ": atomic write " << m.pending[i].id << " is in effect on "
            << mine << " of its " << own << " blocks (" << pool->OpenReport() << ")";
        ++torn_checked;
      }
      long k = -1;
      for (size_t c = 0; c <= m.pending.size() && k < 0; ++c)
        if (Apply(m.base, m.pending, c) == got) k = long(c);
      ASSERT_GE(k, 0) << "iteration " << it << ", worker " << w
                      << ": the region is no prefix of the calls since its last durable point ("
                      << m.pending.size() << " pending; " << pool->OpenReport() << ")";
      m.base = got;
      m.pending.clear();
    }
    if (it % 25 == 24) {
      ASSERT_OK_AND_ASSIGN(CheckReport rep, pool->Check(/*verify_data=*/true));
      ASSERT_TRUE(rep.problems.empty()) << "iteration " << it << ": " << rep.problems[0];
    }
  }
  std::printf("crash points: %d, atomic writes acknowledged: %zu, pending writes checked whole: "
              "%zu\n",
              iterations, acked, torn_checked);
  EXPECT_GT(acked, size_t(iterations));
}

}  // namespace
}  // namespace ftl
