// Engine paths through the public API (issue 2, "Benchmarks"): write and
// read throughput on memory and file media, recovery roll-forward rate after
// a crash, and clean open time of an 8 GiB volume.
//
//   engine_bench            quick sizes (each group well under 2 minutes)
//   engine_bench --full     full sizes (FTL_BENCH_FULL=1 too)
//
// File media live under $FTL_BENCH_DIR (default /tmp) and are deleted
// afterwards. File writes go through the page cache (the file media uses
// pwrite + fdatasync); write timings end with a Flush() so the data is
// durable when the clock stops. Warm reads come from the page cache; "cold"
// opens first drop the file's cached pages (posix_fadvise DONTNEED).

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_util.h"
#include "ftl/pool.h"
#include "util/logging.h"

namespace ftl::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Drops the page cache of a file (it must be synced; Pool::Close syncs).
void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Media size whose default-format (20% over-provisioning) logical capacity
// holds `volume_bytes`.
uint64_t MediaFor(uint64_t volume_bytes) {
  return volume_bytes / 4 * 5 + volume_bytes / 16 + (64ull << 20);
}

// Timestamps what the "core" logger says (startup steps, recovery summary)
// while it is installed; everything else keeps going to stderr at "warn".
class CoreLogCapture {
 public:
  struct Line {
    Clock::time_point at;
    std::string text;
  };
  CoreLogCapture() : logger_(util::Logger("core")) {
    sink_ = std::make_shared<Sink>();
    for (auto& s : logger_->sinks()) s->set_level(spdlog::level::warn);
    logger_->sinks().push_back(sink_);
    logger_->set_level(spdlog::level::debug);
  }
  ~CoreLogCapture() {
    auto& sinks = logger_->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    for (auto& s : sinks) s->set_level(spdlog::level::trace);
    util::SetLogLevel("warn");
  }
  std::vector<Line> Take() {
    std::lock_guard<std::mutex> l(sink_->lines_mu);
    return std::exchange(sink_->lines, {});
  }
  // Duration in ms logged for startup step `step` ("open: step 'x' took N ms").
  static double StepMs(const std::vector<Line>& lines, const std::string& step) {
    const std::string key = "step '" + step + "' took ";
    for (const Line& l : lines) {
      auto at = l.text.find(key);
      if (at != std::string::npos) return std::atof(l.text.c_str() + at + key.size());
    }
    return -1;
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    void sink_it_(const spdlog::details::log_msg& msg) override {
      std::lock_guard<std::mutex> l(lines_mu);
      lines.push_back({Clock::now(), std::string(msg.payload.data(), msg.payload.size())});
    }
    void flush_() override {}
    std::mutex lines_mu;
    std::vector<Line> lines;
  };
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<Sink> sink_;
};

// ---------------------------------------------------------------- throughput

struct IoResult {
  double seconds = 0;
  uint64_t bytes = 0;
  uint64_t ops = 0;
};

// QD 32 through WriteAsync, or WriteAsyncBatch of `batch` writes.
IoResult WriteRandom4k(Pool* pool, uint64_t n, uint64_t seed, int batch = 0) {
  Volume* vol = pool->PrimaryVolume();
  const uint64_t blocks = vol->size_bytes() / kBlockSize;
  std::mt19937_64 rng(seed);
  AsyncWriter w(vol, 32, kBlockSize, 7, 60, batch);
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) w.Submit((rng() % blocks) * kBlockSize);
  CheckOk(w.Drain(), "random writes");
  CheckOk(vol->Flush(), "flush");
  return {Seconds(Clock::now() - t0), n * kBlockSize, n};
}

IoResult WriteSequential(Pool* pool, uint64_t bytes, size_t io_bytes, int depth) {
  Volume* vol = pool->PrimaryVolume();
  AsyncWriter w(vol, depth, io_bytes);
  auto t0 = Clock::now();
  uint64_t n = 0;
  for (uint64_t off = 0; off + io_bytes <= bytes; off += io_bytes, ++n) w.Submit(off);
  CheckOk(w.Drain(), "sequential writes");
  CheckOk(vol->Flush(), "flush");
  return {Seconds(Clock::now() - t0), n * io_bytes, n};
}

// `threads` readers, each with synchronous Read()s of io_bytes, random
// (aligned) or sequential over its own slice; `n` reads in total.
IoResult ReadMany(Pool* pool, uint64_t range_bytes, size_t io_bytes, bool random, int threads,
                  uint64_t n) {
  Volume* vol = pool->PrimaryVolume();
  const uint64_t slots = range_bytes / io_bytes;
  std::atomic<bool> failed{false};
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      auto* buf = static_cast<std::byte*>(std::aligned_alloc(4096, io_bytes));
      std::mt19937_64 rng(100 + t);
      const uint64_t per = n / threads;
      const uint64_t base = slots / threads * t;
      for (uint64_t i = 0; i < per; ++i) {
        uint64_t slot = random ? rng() % slots : (base + i) % slots;
        if (!vol->Read(slot * io_bytes, std::span<std::byte>(buf, io_bytes)).ok()) failed = true;
      }
      std::free(buf);
    });
  }
  for (auto& t : ts) t.join();
  if (failed) CheckOk(absl::InternalError("a read failed"), "reads");
  return {Seconds(Clock::now() - t0), n / threads * threads * io_bytes, n / threads * threads};
}

void ReportIo(benchmark::State& state, const std::string& name, const IoResult& r,
              const std::string& note) {
  const double mibps = r.bytes / kMiB / r.seconds;
  const double iops = r.ops / r.seconds;
  Report({"throughput", name, mibps, "MiB/s", "", true,
          absl::StrFormat("%.0f kIOPS, %.1f s%s", iops / 1000, r.seconds,
                          note.empty() ? "" : "; " + note)});
}

// Writes a fresh pool at random (4 KiB, QD 32 through WriteAsync, then
// through WriteAsyncBatch) and sequentially (128 KiB, QD 32), then reads it
// back (4 KiB random with 1 and 2 threads, 128 KiB sequential). Random
// writes cover half the volume's size so the cleaner stays idle
// (steady-state rates under cleaning are in wa_bench).
void BM_Throughput(benchmark::State& state, bool file) {
  const uint64_t vol_bytes = FullMode() ? 4ull << 30 : 2ull << 30;
  const char* what = file ? "file" : "memory";
  for (auto _ : state) {
    TempFile tf("ftld-bench-throughput.img");
    std::shared_ptr<Media> media;
    if (file) {
      auto m = OpenFileMedia(tf.path, MediaFor(vol_bytes));
      CheckOk(m.status(), "open file media");
      media = *m;
    } else {
      media = NewMemMedia(MediaFor(vol_bytes));
    }
    FormatOptions f;
    f.volume_bytes = vol_bytes;
    double t_total = 0;
    {
      auto pool = Pool::Format(media, f);
      CheckOk(pool.status(), "format");
      IoResult r = WriteRandom4k(pool->get(), vol_bytes / kBlockSize / 4, 1);
      ReportIo(state, absl::StrFormat("%s: write 4 KiB random, WriteAsync QD32", what), r,
               "fresh volume, a quarter of its size");
      t_total += r.seconds;
      r = WriteRandom4k(pool->get(), vol_bytes / kBlockSize / 4, 2, 32);
      ReportIo(state, absl::StrFormat("%s: write 4 KiB random, WriteAsyncBatch(32)", what), r,
               "next quarter");
      t_total += r.seconds;
      // Reads of blocks that exist: the random writes mapped ~40% of them;
      // the sequential pass below maps everything.
      r = WriteSequential(pool->get(), vol_bytes, 128 << 10, 32);
      ReportIo(state, absl::StrFormat("%s: write 128 KiB sequential QD32", what), r,
               "over the randomly written volume");
      const uint64_t n4k = FullMode() ? 1'000'000 : 400'000;
      r = ReadMany(pool->get(), vol_bytes, kBlockSize, true, 1, n4k);
      ReportIo(state, absl::StrFormat("%s: read 4 KiB random, 1 thread", what), r,
               file ? "page cache warm" : "");
      r = ReadMany(pool->get(), vol_bytes, kBlockSize, true, 2, n4k);
      ReportIo(state, absl::StrFormat("%s: read 4 KiB random, 2 threads", what), r,
               file ? "page cache warm" : "");
      r = ReadMany(pool->get(), vol_bytes, 128 << 10, false, 1, vol_bytes / (128 << 10));
      ReportIo(state, absl::StrFormat("%s: read 128 KiB sequential, 1 thread", what), r,
               file ? "page cache warm" : "");
      CheckOk((*pool)->Close(), "close");
    }
    if (file) {
      // Cold sequential read: reopen with the file's pages dropped.
      DropCache(tf.path);
      auto pool = Pool::Open(media);
      CheckOk(pool.status(), "open");
      IoResult r = ReadMany(pool->get(), vol_bytes, 128 << 10, false, 1, vol_bytes / (128 << 10));
      ReportIo(state, "file: read 128 KiB sequential, 1 thread, cold", r, "page cache dropped");
      DropCache(tf.path);
      r = ReadMany(pool->get(), vol_bytes, kBlockSize, true, 2,
                   FullMode() ? 200'000 : 100'000);
      ReportIo(state, "file: read 4 KiB random, 2 threads, cold", r, "page cache dropped");
      CheckOk((*pool)->Close(), "close");
    }
    state.SetIterationTime(t_total);
  }
}

// ---------------------------------------------------------------- recovery

// Writes `log_bytes` with automatic checkpoints off, drops the pool without
// Close() (a crash), then times Pool::Open, which loads the format-time
// checkpoint and rolls the whole log forward.
void BM_Recovery(benchmark::State& state, bool random, int batch) {
  const uint64_t log_bytes = FullMode() ? 2ull << 30 : 1ull << 30;  // of user data
  const uint64_t vol_bytes = log_bytes + log_bytes / 2;
  for (auto _ : state) {
    // Room for a header block per 4 KiB write (no cleaner runs here).
    auto media = NewMemMedia(3 * log_bytes + (256ull << 20));
    FormatOptions f;
    f.volume_bytes = vol_bytes;
    OpenOptions o;
    o.auto_checkpoint = false;
    o.start_cleaner = false;
    o.checkpoint_interval = std::chrono::milliseconds(0);
    PoolStats before, after;
    {
      auto pool = Pool::Format(media, f, o);
      CheckOk(pool.status(), "format");
      before = (*pool)->Stats();
      if (random) {
        WriteRandom4k(pool->get(), log_bytes / kBlockSize, 2, batch);
      } else {
        WriteSequential(pool->get(), log_bytes, 1 << 20, 8);
      }
      after = (*pool)->Stats();
      // Destroyed without Close(): a crash.
    }
    const double log = double(after.media_write_bytes - before.media_write_bytes);
    CoreLogCapture cap;
    auto t0 = Clock::now();
    auto pool = Pool::Open(media, o);
    const double secs = Seconds(Clock::now() - t0);
    CheckOk(pool.status(), "recovery open");
    auto lines = cap.Take();
    // The roll-forward ends with its "recovered: ..." line; after it the
    // open writes two checkpoints of the recovered state.
    double roll = secs;
    for (const auto& l : lines) {
      if (l.text.rfind("recovered", 0) == 0) roll = Seconds(l.at - t0);
    }
    std::string report = (*pool)->OpenReport();
    PoolStats s = (*pool)->Stats();
    CheckOk((*pool)->Close(), "close");
    state.SetIterationTime(secs);
    state.counters["log_GiB"] = log / kGiB;
    state.counters["open_s"] = secs;
    state.counters["GiB_per_s"] = log / kGiB / secs;
    state.counters["rollforward_GiB_per_s"] = log / kGiB / roll;
    const double records = double(after.next_seq - before.next_seq);
    std::string how = !random ? "1 MiB sequential"
                      : batch ? absl::StrFormat("4 KiB random, WriteAsyncBatch(%d)", batch)
                              : "4 KiB random, WriteAsync QD32";
    Report({"recovery", "roll-forward, " + how,
            log / kGiB / secs, "GiB/s", ">= 1 GiB/s (memory media)", log / kGiB / secs >= 1.0,
            absl::StrFormat(
                "%.2f GiB of log (%.0f records, %.1f blocks each) in %.2f s; until the "
                "'recovered' line %.2f s (%.2f GiB/s), then 2 checkpoints; %d mapped "
                "blocks; \"%s\"",
                log / kGiB, records, log / kBlockSize / records, secs, roll, log / kGiB / roll,
                s.mapped_blocks, report)});
  }
}

// ---------------------------------------------------------------- open time

// Times Open of a clean pool, warm (page cache holds the file) and cold.
void TimeOpens(benchmark::State& state, const std::string& path, const std::string& label) {
  for (bool cold : {false, true}) {
    if (cold) DropCache(path);
    auto m = OpenFileMedia(path);
    CheckOk(m.status(), "open file media");
    CoreLogCapture cap;
    auto t0 = Clock::now();
    auto pool = Pool::Open(*m);
    const double secs = Seconds(Clock::now() - t0);
    CheckOk(pool.status(), "open");
    auto lines = cap.Take();
    PoolStats s = (*pool)->Stats();
    CheckOk((*pool)->Close(), "close");
    std::string name = absl::StrFormat("8 GiB volume, %s, %s", label, cold ? "cold" : "warm");
    state.counters[absl::StrFormat("%s_%s_s", label, cold ? "cold" : "warm")] = secs;
    Report({"clean open", name, secs, "s", "<= 0.5 s", secs <= 0.5,
            absl::StrFormat("steps: superblock %.1f ms, checkpoint %.1f ms, mark dirty %.1f ms, "
                            "threads %.1f ms; map %.0f MiB, %d mapped blocks; \"%s\"",
                            CoreLogCapture::StepMs(lines, "read superblock"),
                            CoreLogCapture::StepMs(lines, "load checkpoint / recover"),
                            CoreLogCapture::StepMs(lines, "mark dirty"),
                            CoreLogCapture::StepMs(lines, "start threads"),
                            s.map_memory_bytes / kMiB, s.mapped_blocks,
                            (*pool)->OpenReport())});
  }
}

void BM_CleanOpen(benchmark::State& state) {
  const uint64_t vol_bytes = 8ull << 30;
  for (auto _ : state) {
    TempFile tf("ftld-bench-open.img");
    {
      auto m = OpenFileMedia(tf.path, MediaFor(vol_bytes));
      CheckOk(m.status(), "create file media");
      FormatOptions f;
      f.volume_bytes = vol_bytes;
      auto pool = Pool::Format(*m, f);
      CheckOk(pool.status(), "format");
      IoResult r = WriteSequential(pool->get(), vol_bytes, 1 << 20, 8);
      Report({"clean open", "8 GiB sequential fill (setup)", r.bytes / kMiB / r.seconds, "MiB/s",
              "", true, "file media, 1 MiB writes QD8, ends with Flush"});
      CheckOk((*pool)->Close(), "close");
    }
    TimeOpens(state, tf.path, "after sequential fill");
    {
      // Random 4 KiB overwrites (the cleaner runs: the volume is full).
      auto m = OpenFileMedia(tf.path);
      CheckOk(m.status(), "open file media");
      auto pool = Pool::Open(*m);
      CheckOk(pool.status(), "open");
      const uint64_t n = vol_bytes / kBlockSize / (FullMode() ? 1 : 8);
      IoResult r = WriteRandom4k(pool->get(), n, 3, 32);
      PoolStats s = (*pool)->Stats();
      Report({"clean open", absl::StrFormat("%.0f GiB random 4 KiB overwrites (setup)",
                                            r.bytes / kGiB),
              r.bytes / kMiB / r.seconds, "MiB/s", "", true,
              absl::StrFormat("file media, WriteAsyncBatch(32), cleaner active; pool WA so "
                              "far %.2f",
                              s.write_amplification)});
      CheckOk((*pool)->Close(), "close");
    }
    TimeOpens(state, tf.path, "after random overwrites");
    {
      // Worst case for the map: a fresh pool whose every block was first
      // written in random order (one extent and one VBA run per block; the
      // overwrites above reuse VBAs and leave the map as the fill made it).
      auto m = OpenFileMedia(tf.path);
      CheckOk(m.status(), "open file media");
      FormatOptions f;
      f.volume_bytes = vol_bytes;
      auto pool = Pool::Format(*m, f);
      CheckOk(pool.status(), "format");
      Volume* vol = (*pool)->PrimaryVolume();
      std::vector<uint32_t> order(vol_bytes / kBlockSize);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(11));
      auto t0 = Clock::now();
      {
        AsyncWriter w(vol, 32, kBlockSize, 7, 60, 32);
        for (uint32_t b : order) w.Submit(uint64_t(b) * kBlockSize);
        CheckOk(w.Drain(), "random fill");
        CheckOk(vol->Flush(), "flush");
      }
      const double secs = Seconds(Clock::now() - t0);
      Report({"clean open", "8 GiB random-order fill (setup)", vol_bytes / kMiB / secs, "MiB/s",
              "", true, "file media, 4 KiB writes, WriteAsyncBatch(32), every block once, ends with Flush"});
      CheckOk((*pool)->Close(), "close");
    }
    TimeOpens(state, tf.path, "after random-order fill");
    state.SetIterationTime(1);
  }
}

}  // namespace
}  // namespace ftl::bench

int main(int argc, char** argv) {
  using namespace ftl::bench;
  ParseFullFlag(&argc, argv);
  ftl::util::SetLogLevel("warn");
  auto one = [](benchmark::internal::Benchmark* b) {
    b->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
  };
  one(benchmark::RegisterBenchmark("Throughput/memory", BM_Throughput, false));
  one(benchmark::RegisterBenchmark("Throughput/file", BM_Throughput, true));
  one(benchmark::RegisterBenchmark("Recovery/random4k_async", BM_Recovery, true, 0));
  one(benchmark::RegisterBenchmark("Recovery/random4k_batch32", BM_Recovery, true, 32));
  one(benchmark::RegisterBenchmark("Recovery/seq1m", BM_Recovery, false, 0));
  one(benchmark::RegisterBenchmark("CleanOpen/8GiB", BM_CleanOpen));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  PrintSummary();
  return 0;
}
