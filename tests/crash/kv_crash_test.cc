// Key-value store crash tests (tests/README.md: the crash tier). A worker
// runs random puts, deletes and batches (some synced, some large enough to
// need the scratch-and-move flush) against a KvStore in a dataset of a
// pool on FaultMedia; the main thread crashes the media at a random
// moment, applies a random crash plan (drop unsynced writes, keep a prefix
// or a random subset, tear one), reopens pool and store and checks:
//  - the store opens and every page reads back (a full scan succeeds:
//    no torn page, no broken log);
//  - its content is the model after some prefix of the operations issued
//    that is at least as long as the last acknowledged synced one: synced
//    data survives, a batch is all or nothing, nothing half-applied.
// Iterations: $FTL_CRASH_ITERATIONS (default 150).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "ftl/kv.h"
#include "ftl/pool.h"
#include "media/fault_media.h"
#include "status_asserts.h"
#include "test_util.h"

namespace ftl {
namespace {

using media::FaultMedia;
using Image = std::map<std::string, std::string>;

// One operation as the store sees it: a batch of puts (value) and
// deletes (nullopt), applied all or nothing.
using Op = std::vector<std::pair<std::string, std::optional<std::string>>>;

void ApplyOp(Image& m, const Op& op) {
  for (const auto& [k, v] : op) {
    if (v) m[k] = *v;
    else m.erase(k);
  }
}

struct Log {
  absl::Mutex mu;
  std::vector<Op> ops;       // issued, in order
  size_t acked_synced = 0;   // ops[0, acked_synced) are durable
};

std::string Key(uint64_t i) { return "k" + std::to_string(i); }

void Worker(KvStore* s, Log* log, uint64_t seed, std::atomic<bool>* stop, int* ok_ops) {
  std::mt19937_64 rng(seed);
  uint64_t tag = seed & 0xffff;
  while (!stop->load()) {
    Op op;
    int n = rng() % 8 == 0 ? 2 + int(rng() % 40) : 1;
    bool big = rng() % 25 == 0;  // values kept outside pages, past the atomic size
    std::set<std::string> used;
    for (int i = 0; i < n; ++i) {
      std::string k = Key(rng() % 400);
      if (!used.insert(k).second) continue;
      if (rng() % 5 == 0) {
        op.push_back({k, std::nullopt});
      } else {
        size_t len = big ? 20000 + rng() % 40000 : rng() % 300;
        std::string v = std::to_string(++tag) + ":" + std::string(len, char('a' + rng() % 26));
        op.push_back({k, v});
      }
    }
    bool sync = rng() % 3 == 0;
    KvWriteBatch b;
    for (const auto& [k, v] : op) {
      if (v) b.Put(k, *v);
      else b.Delete(k);
    }
    size_t index;
    {
      absl::MutexLock l(&log->mu);
      index = log->ops.size();
      log->ops.push_back(op);
    }
    // A lone put goes through Modify now and then (the read and the put of
    // one search; the value the same).
    absl::Status st;
    if (op.size() == 1 && op[0].second && rng() % 4 == 0) {
      const std::string& v = *op[0].second;
      st = s->Modify(
          op[0].first,
          [&](std::optional<std::string_view>) -> absl::StatusOr<std::optional<std::string>> {
            return std::optional<std::string>(v);
          },
          {.sync = sync});
    } else {
      st = s->Write(b, {.sync = sync});
    }
    if (!st.ok()) return;  // the media was crashed under us
    ++*ok_ops;
    if (sync) {
      absl::MutexLock l(&log->mu);
      log->acked_synced = std::max(log->acked_synced, index + 1);
    }
    if (rng() % 50 == 0 && !s->Flush().ok()) return;
  }
}

// After a crash of `fault`: closes store and pool, applies a random crash
// plan to what was not synced, reopens both.
void Restart(const std::shared_ptr<FaultMedia>& fault, std::mt19937_64& rng, const OpenOptions& open,
             const KvOptions& ko, int iteration, std::unique_ptr<Pool>* pool,
             std::unique_ptr<KvStore>* store) {
  store->reset();
  pool->reset();
  fault->Restart(testing::RandomCrashPlan(rng, fault->unsynced_writes()));
  auto reopened = Pool::Open(fault, open);
  ASSERT_OK(reopened) << "iteration " << iteration;
  *pool = std::move(*reopened);
  ASSERT_OK_AND_ASSIGN(*store, KvStore::Open(pool->get(), "kv", ko));
}

TEST(KvCrashTest, RandomCrashPointsAgainstModel) {
  const char* e = std::getenv("FTL_CRASH_ITERATIONS");
  int iterations = e ? std::atoi(e) : 150;
  auto fault = std::make_shared<FaultMedia>(64 << 20);
  auto open = testing::QuietOpen(true);
  // 1 MiB segments: 256 KiB atomic writes, so large batches take the
  // scratch path.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(fault, testing::SmallFormat(1 << 20), open));
  ASSERT_OK(KvStore::Create(pool.get(), "kv"));
  KvOptions ko;
  ko.buffer_pages = 24;
  Image base;  // state after ops the last check accepted
  std::mt19937_64 rng(20261125);
  int total_ok = 0;
  uint64_t scratch = 0, merges = 0, blind = 0, diff_merges = 0, relogs = 0, replayed = 0;
  size_t total_lost = 0;
  for (int it = 0; it < iterations; ++it) {
    // The modes take turns on one dataset: each opens what the others
    // left (a store of another mode merges the differential log first).
    static constexpr KvMode kTurns[] = {KvMode::kIplMerge, KvMode::kPdl, KvMode::kIpl,
                                        KvMode::kPdl, KvMode::kInPlace, KvMode::kPdl};
    ko.mode = kTurns[it % 6];
    // Small differential budgets: merges and log cleaning happen often.
    ko.diff_budget_bytes = (4u << 10) << (rng() % 6);
    // Every other round of the six modes hands unsynced flushes to the
    // store's thread (as the daemon does).
    ko.background_flush = (it / 6) % 2 == 1;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<KvStore> store, KvStore::Open(pool.get(), "kv", ko));
    Log log;
    std::atomic<bool> stop{false};
    int ok_ops = 0;
    std::thread t([&] { Worker(store.get(), &log, rng(), &stop, &ok_ops); });
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    fault->Crash();
    stop = true;
    t.join();
    total_ok += ok_ops;
    scratch += store->Stats().scratch_flushes;
    merges += store->Stats().unit_merges;
    blind += store->Stats().blind_writes;
    diff_merges += store->Stats().diff_merges;
    relogs += store->Stats().diff_relogs;
    ASSERT_NO_FATAL_FAILURE(Restart(fault, rng, open, ko, it, &pool, &store));
    replayed += store->Stats().diff_load_reads;
    auto got = store->Scan("", "", SIZE_MAX);
    ASSERT_OK(got) << "iteration " << it;
    Image image(got->begin(), got->end());
    // The shortest prefix at or after the last synced op that explains it.
    Image m = base;
    size_t k = 0;
    for (; k < log.acked_synced; ++k) ApplyOp(m, log.ops[k]);
    bool found = m == image;
    while (!found && k < log.ops.size()) {
      ApplyOp(m, log.ops[k++]);
      found = m == image;
    }
    if (!found) {
      // Where the store differs from the last acknowledged state.
      Image want = base;
      for (size_t j = 0; j < log.acked_synced; ++j) ApplyOp(want, log.ops[j]);
      int shown = 0;
      for (const auto& [key, v] : want) {
        auto g = image.find(key);
        if ((g == image.end() || g->second != v) && shown++ < 5)
          std::printf("  %s: want %.20s, got %s\n", key.c_str(), v.c_str(),
                      g == image.end() ? "(absent)" : g->second.substr(0, 20).c_str());
      }
      for (const auto& [key, v] : image)
        if (!want.count(key) && shown++ < 10) std::printf("  %s: want absent, got %.20s\n", key.c_str(), v.c_str());
    }
    ASSERT_TRUE(found) << "iteration " << it << ": the store is no prefix of the " << log.ops.size()
                       << " ops issued (" << log.acked_synced << " acknowledged synced), "
                       << image.size() << " keys";
    // Point reads agree with the scan (in kPdl they read pages unbuffered
    // and answer from differentials replayed at open).
    for (int q = 0; q < 40; ++q) {
      std::string key = Key(rng() % 400);
      auto g = store->Get(key);
      auto want = image.find(key);
      if (want == image.end()) {
        ASSERT_TRUE(absl::IsNotFound(g.status())) << "iteration " << it << " " << key << ": " << g.status();
      } else {
        ASSERT_OK(g) << "iteration " << it << " " << key;
        ASSERT_EQ(*g, want->second) << "iteration " << it << " " << key;
      }
    }
    total_lost += log.ops.size() - k;
    base = std::move(m);
    store.reset();
  }
  std::printf("crash points: %d, batches acknowledged: %d, ops lost (unsynced): %zu, "
              "scratch flushes: %llu, unit merges: %llu, pdl: %llu blind changes, %llu page "
              "merges, %llu relogs, %llu log blocks replayed\n",
              iterations, total_ok, total_lost, (unsigned long long)scratch, (unsigned long long)merges,
              (unsigned long long)blind, (unsigned long long)diff_merges, (unsigned long long)relogs,
              (unsigned long long)replayed);
  EXPECT_GT(total_ok, iterations);
  EXPECT_GT(scratch, 0u) << "no flush took the scratch path";
  EXPECT_GT(merges, 0u) << "no erase unit was merged";
  EXPECT_GT(blind, 0u) << "no change was logged without reading its page";
  EXPECT_GT(diff_merges, 0u) << "no page was merged for its differential";
  EXPECT_GT(replayed, uint64_t(iterations)) << "the differential log was never replayed";
}

// Synced writers on several threads share flushes (group commit), and
// what they were told is durable is there after a crash.
TEST(KvCrashTest, ConcurrentSyncedWritersShareFlushesAndSurvive) {
  auto fault = std::make_shared<FaultMedia>(64 << 20);
  auto open = testing::QuietOpen(true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(fault, testing::SmallFormat(1 << 20), open));
  ASSERT_OK(KvStore::Create(pool.get(), "kv"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<KvStore> store, KvStore::Open(pool.get(), "kv"));
  constexpr int kThreads = 8, kPuts = 150;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPuts; ++i)
        EXPECT_OK(store->Put("t" + std::to_string(t) + "-" + std::to_string(i), std::to_string(i),
                             {.sync = true}));
    });
  }
  for (auto& th : ts) th.join();
  KvStats st = store->Stats();
  EXPECT_EQ(st.synced_writes, uint64_t(kThreads * kPuts));
  EXPECT_LT(st.flushes, st.synced_writes) << "no flush was shared";
  std::printf("%llu synced writes in %llu flushes\n", (unsigned long long)st.synced_writes,
              (unsigned long long)st.flushes);
  fault->Crash();
  store.reset();
  pool.reset();
  fault->Restart(media::CrashPlan{});  // drop everything unsynced
  ASSERT_OK_AND_ASSIGN(pool, Pool::Open(fault, open));
  ASSERT_OK_AND_ASSIGN(store, KvStore::Open(pool.get(), "kv"));
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPuts; ++i)
      EXPECT_EQ(*store->Get("t" + std::to_string(t) + "-" + std::to_string(i)), std::to_string(i));
}

// Synced writers on several threads while the media crashes under them:
// a flush's sync runs without the flush lock, so the next flush is written
// and synced while it runs (docs/kv.md, "Flushes"). Every put a writer was
// told is durable is there after the crash, with a random crash plan over
// what was not synced (drop, keep a subset, tear one).
TEST(KvCrashTest, ConcurrentSyncedWritersCrashMidwayKeepEveryAcknowledgedPut) {
  const char* e = std::getenv("FTL_CRASH_ITERATIONS");
  const int iterations = std::max(5, (e ? std::atoi(e) : 150) / 10);
  auto fault = std::make_shared<FaultMedia>(64 << 20);
  auto open = testing::QuietOpen(true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Pool> pool,
                       Pool::Format(fault, testing::SmallFormat(1 << 20), open));
  ASSERT_OK(KvStore::Create(pool.get(), "kv"));
  std::mt19937_64 rng(20261128);
  constexpr int kThreads = 4;
  // Per thread: the value each key of it must have at least (the last
  // acknowledged put), across iterations.
  std::vector<std::map<int, int>> acked(kThreads);
  uint64_t total_acked = 0, total_flushes = 0;
  for (int it = 0; it < iterations; ++it) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<KvStore> store, KvStore::Open(pool.get(), "kv"));
    // In flight per thread: the put not yet answered (key, value), so that
    // a key may hold it or the acknowledged value before it.
    std::vector<std::map<int, int>> started(kThreads);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t, seed = rng()] {
        std::mt19937_64 r(seed);
        for (int i = 0; i < 100000; ++i) {
          const int key = int(r() % 64);
          const int value = it * 1000000 + i;
          started[size_t(t)][key] = value;
          absl::Status s = store->Put(absl::StrCat("t", t, "-", key), std::to_string(value), {.sync = true});
          if (!s.ok()) return;  // the media crashed
          acked[size_t(t)][key] = value;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 20000));
    fault->Crash();
    for (auto& th : ts) th.join();
    total_flushes += store->Stats().flushes;
    ASSERT_NO_FATAL_FAILURE(Restart(fault, rng, open, KvOptions{}, it, &pool, &store));
    for (int t = 0; t < kThreads; ++t) {
      for (auto& [key, want] : acked[size_t(t)]) {
        ++total_acked;
        ASSERT_OK_AND_ASSIGN(std::string got, store->Get(absl::StrCat("t", t, "-", key)));
        const int v = std::stoi(got);
        // The acknowledged value, or the put in flight after it.
        auto in_flight = started[size_t(t)].find(key);
        ASSERT_TRUE(v == want || (in_flight != started[size_t(t)].end() && v == in_flight->second))
            << "iteration " << it << " t" << t << "-" << key << ": got " << v << ", acknowledged "
            << want;
        want = v;  // what the next iteration starts from
      }
    }
  }
  std::printf("%d crash points, %llu acknowledged keys checked, %llu flushes\n", iterations,
              (unsigned long long)total_acked, (unsigned long long)total_flushes);
  EXPECT_GT(total_acked, uint64_t(iterations));
}

}  // namespace
}  // namespace ftl
