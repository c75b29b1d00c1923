#pragma once
// Helpers shared by the benchmark binaries: quick/full sizing, a queue-depth
// driver for Volume::WriteAsync, and a summary of results against goals that
// is printed after Google Benchmark's own output.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ftl/pool.h"

namespace ftl::bench {

// Where file-backed benchmarks put their backing files: $FTL_BENCH_DIR or /tmp.
inline std::string BenchDir() {
  const char* d = std::getenv("FTL_BENCH_DIR");
  return d && *d ? d : "/tmp";
}

// A backing file under BenchDir() that is removed when this goes away.
struct TempFile {
  explicit TempFile(const std::string& name) : path(BenchDir() + "/" + name) {
    std::filesystem::remove(path);
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

// True when the full sizes were asked for (--full or FTL_BENCH_FULL=1).
bool FullMode();
// Removes --full from argv (call before benchmark::Initialize).
void ParseFullFlag(int* argc, char** argv);

inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * kMiB;

// Keeps up to `depth` WriteAsync requests of `io_bytes` in flight, each with
// its own buffer (random bytes with a per-write stamp). Submit blocks while
// the queue is full. With `batch` > 0 writes are handed over through
// Volume::WriteAsyncBatch, `batch` at a time (or fewer when the queue is
// full), as the NBD server does with requests already in its socket.
// Thread-safety: one submitting thread; completions come from engine
// threads.
//
// Stall detection: if no write completes for `stall_seconds` while Submit
// waits, Submit returns false and stalled() turns true; the caller must then
// destroy (or close) the pool, which fails the queued writes, before this
// writer goes away.
class AsyncWriter {
 public:
  AsyncWriter(Volume* vol, int depth, size_t io_bytes, uint64_t seed = 7,
              double stall_seconds = 60, int batch = 0);
  ~AsyncWriter();
  // False if the engine stalled (see above); nothing was submitted then.
  bool Submit(uint64_t offset);
  // Waits for every submitted write; returns the first error, or
  // DeadlineExceeded on a stall.
  absl::Status Drain();
  bool stalled() const { return stalled_; }

 private:
  void Flush();
  void Done(int slot, const absl::Status& s);

  Volume* vol_;
  size_t io_bytes_;
  int batch_;
  std::vector<Volume::AsyncWrite> pending_;
  std::vector<std::byte*> bufs_;
  uint64_t stamp_ = 0;
  double stall_seconds_;
  bool stalled_ = false;
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Prints pool counters to stderr every few seconds while a long phase runs,
// when FTL_BENCH_VERBOSE is set. Call Tick(i) from the submit loop.
class Progress {
 public:
  Progress(Pool* pool, std::string phase, uint64_t total);
  void Tick(uint64_t i) {
    if (enabled_ && (i & 255) == 0) Print(i);
  }

 private:
  void Print(uint64_t i);
  Pool* pool_;
  std::string phase_;
  uint64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_;
};

// One line of the results-vs-goals summary.
struct Result {
  Result(std::string section_, std::string name_, double value_, std::string unit_,
         std::string goal_ = "", bool met_ = true, std::string note_ = "")
      : section(std::move(section_)),
        name(std::move(name_)),
        value(value_),
        unit(std::move(unit_)),
        goal(std::move(goal_)),
        met(met_),
        note(std::move(note_)) {}
  std::string section;
  std::string name;
  double value = 0;
  std::string unit;
  std::string goal;  // empty: informational
  bool met = true;
  std::string note;
  std::string met_text;  // replaces yes / no when set
};
void Report(Result r);
// Prints every reported result as a Markdown table to stdout.
void PrintSummary();

// Fails the process with a message when `s` is not OK: a benchmark that
// cannot do its I/O must not report numbers.
void CheckOk(const absl::Status& s, const char* what);

}  // namespace ftl::bench
