#include "bench_util.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_format.h"

namespace ftl::bench {
namespace {
bool full_flag = false;
std::mutex results_mu;
std::vector<Result>& Results() {
  static auto* r = new std::vector<Result>;
  return *r;
}
}  // namespace

bool FullMode() {
  if (full_flag) return true;
  const char* e = std::getenv("FTL_BENCH_FULL");
  return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
}

void ParseFullFlag(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) {
      full_flag = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;
}

AsyncWriter::AsyncWriter(Volume* vol, int depth, size_t io_bytes, uint64_t seed,
                         double stall_seconds, int batch)
    : vol_(vol), io_bytes_(io_bytes), batch_(batch), stall_seconds_(stall_seconds) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < depth; ++i) {
    auto* b = static_cast<std::byte*>(std::aligned_alloc(4096, io_bytes));
    for (size_t k = 0; k < io_bytes; k += 8) {
      uint64_t v = rng();
      std::memcpy(b + k, &v, 8);
    }
    bufs_.push_back(b);
    free_.push_back(i);
  }
}

AsyncWriter::~AsyncWriter() {
  {
    // Writes never handed over are dropped; completions of the others may
    // still arrive from a pool being torn down.
    absl::MutexLock l(&mu_);
    in_flight_ -= int(pending_.size());
    pending_.clear();
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &in_flight_));
  }
  for (std::byte* b : bufs_) std::free(b);
}

bool AsyncWriter::Submit(uint64_t offset) {
  int slot;
  {
    absl::MutexLock l(&mu_);
    if (stalled_) return false;
    if (!mu_.AwaitWithTimeout(
            absl::Condition(+[](std::vector<int>* f) { return !f->empty(); }, &free_),
            absl::Seconds(stall_seconds_))) {
      stalled_ = true;
      return false;
    }
    slot = free_.back();
    free_.pop_back();
    ++in_flight_;
  }
  std::byte* b = bufs_[slot];
  // A fresh stamp per 4 KiB block keeps every write's content distinct.
  for (size_t k = 0; k < io_bytes_; k += kBlockSize) {
    ++stamp_;
    std::memcpy(b + k, &stamp_, sizeof(stamp_));
  }
  auto data = std::span<const std::byte>(b, io_bytes_);
  auto done = [this, slot](absl::Status s) { Done(slot, s); };
  if (batch_ == 0) {
    vol_->WriteAsync(offset, data, false, std::move(done));
    return true;
  }
  pending_.push_back({offset, data, false, std::move(done)});
  bool queue_full;
  {
    absl::MutexLock l(&mu_);
    queue_full = free_.empty();
  }
  if (int(pending_.size()) >= batch_ || queue_full) Flush();
  return true;
}

void AsyncWriter::Flush() {
  if (pending_.empty()) return;
  vol_->WriteAsyncBatch(std::exchange(pending_, {}));
}

void AsyncWriter::Done(int slot, const absl::Status& s) {
  absl::MutexLock l(&mu_);
  if (!s.ok() && error_.ok()) error_ = s;
  free_.push_back(slot);
  --in_flight_;
}

absl::Status AsyncWriter::Drain() {
  Flush();
  absl::MutexLock l(&mu_);
  if (stalled_) return absl::DeadlineExceededError("engine stalled: no write completed");
  // Progress means some write completes within stall_seconds_.
  while (in_flight_ > 0) {
    std::pair<int*, int> fewer(&in_flight_, in_flight_);
    if (!mu_.AwaitWithTimeout(
            absl::Condition(
                +[](std::pair<int*, int>* p) { return *p->first < p->second; }, &fewer),
            absl::Seconds(stall_seconds_))) {
      stalled_ = true;
      return absl::DeadlineExceededError("engine stalled: no write completed");
    }
  }
  return error_;
}

Progress::Progress(Pool* pool, std::string phase, uint64_t total)
    : pool_(pool),
      phase_(std::move(phase)),
      total_(total),
      enabled_(std::getenv("FTL_BENCH_VERBOSE") != nullptr),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::Print(uint64_t i) {
  auto now = std::chrono::steady_clock::now();
  if (Seconds(now - last_) < 2) return;
  last_ = now;
  PoolStats s = pool_->Stats();
  std::fprintf(stderr,
               "[%6.1fs] %s %llu/%llu: user %.0f MiB media %.0f MiB reloc %.0f MiB "
               "ckpt %llu (%.0f MiB) free %u/%u cleaned %llu\n",
               Seconds(now - start_), phase_.c_str(), (unsigned long long)i,
               (unsigned long long)total_, s.user_write_bytes / kMiB, s.media_write_bytes / kMiB,
               s.gc_relocated_bytes / kMiB, (unsigned long long)s.checkpoint_count,
               s.checkpoint_bytes / kMiB, s.segments_free, s.segments_total,
               (unsigned long long)s.gc_segments_cleaned);
}

void Report(Result r) {
  std::lock_guard<std::mutex> l(results_mu);
  Results().push_back(std::move(r));
}

void PrintSummary() {
  std::lock_guard<std::mutex> l(results_mu);
  if (Results().empty()) return;
  std::printf("\n## Summary (%s sizes)\n\n", FullMode() ? "full" : "quick");
  std::printf("| section | measurement | value | goal | met | note |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Result& r : Results()) {
    std::string v = absl::StrFormat("%.3g %s", r.value, r.unit);
    if (r.value >= 1000) v = absl::StrFormat("%.0f %s", r.value, r.unit);
    std::printf("| %s | %s | %s | %s | %s | %s |\n", r.section.c_str(), r.name.c_str(),
                v.c_str(), r.goal.empty() ? "-" : r.goal.c_str(),
                !r.met_text.empty() ? r.met_text.c_str()
                : r.goal.empty()    ? "-"
                : r.met             ? "yes"
                                    : "**no**",
                r.note.c_str());
  }
  std::fflush(stdout);
}

void CheckOk(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "benchmark failed: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

}  // namespace ftl::bench
