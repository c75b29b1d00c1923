// tearing_nbd_server: the negative control of the MariaDB power-cut test
// (tests/mariadb/mariadb_power_cut.py, docs/decisions.md "Issue 25: the
// whole-stack tests"). It serves a plain file over NBD (nbd/ over a Media,
// no engine) through NewVolatileCacheMedia: the same volatile-cache model
// that `ftld --simulate-volatile-cache` puts under ftld
// (src/media/volatile_cache_media.h), but with nothing above it that makes a
// write atomic. A 16 KiB page write is 32 sectors of the cache, and a power
// cut (kill -9 of this process) during the flush that writes them through
// keeps a random subset: a torn page, as a plain disk with a volatile write
// cache may leave one. Writes are cached, a FLUSH (or a FUA write) writes
// the cache through and syncs the file; trims become cached discards.
//
//   tearing_nbd_server [--seed N] [--size MIB] FILE
//
// Creates FILE sparse with --size MiB if missing. Listens on 127.0.0.1, a
// free port; prints "NBD listening on 127.0.0.1:PORT" and then "ready" on
// stdout. SIGINT/SIGTERM: stop serving, write the cache through, exit 0.
// For tests only.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ftl/log.h"
#include "ftl/media.h"
#include "ftl/pool.h"
#include "nbd/server.h"

namespace {

// A block Volume straight over a Media: every call goes to the media.
// Thread-safety: as the media's (all methods may be called concurrently);
// the counters are atomics.
class MediaVolume : public ftl::Volume {
 public:
  MediaVolume(std::string name, std::shared_ptr<ftl::Media> media)
      : name_(std::move(name)), media_(std::move(media)) {}

  const std::string& name() const override { return name_; }
  uint64_t size_bytes() const override { return media_->size(); }
  bool read_only() const override { return false; }

  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    if (auto s = Check(offset, out.size()); !s.ok()) return s;
    reads_++;
    read_bytes_ += out.size();
    return media_->Read(offset, out);
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data, bool fua) override {
    if (auto s = Check(offset, data.size()); !s.ok()) return s;
    writes_++;
    write_bytes_ += data.size();
    if (auto s = media_->Write(offset, data); !s.ok()) return s;
    return fua ? media_->Sync() : absl::OkStatus();
  }
  // Inline: the contract of WriteAsyncBatch allows completing on the
  // caller's thread, and a Media write is a memory copy into the cache.
  void WriteAsync(uint64_t offset, std::span<const std::byte> data, bool fua,
                  Callback done) override {
    done(Write(offset, data, fua));
  }
  void WriteAsyncBatch(std::vector<AsyncWrite> writes) override {
    for (AsyncWrite& w : writes) w.done(Write(w.offset, w.data, w.fua));
  }
  // Not atomic at all: this is the device that tears.
  absl::Status WriteAtomic(std::span<const Piece> pieces, bool fua) override {
    for (const Piece& p : pieces) {
      if (auto s = Write(p.offset, p.data, false); !s.ok()) return s;
    }
    return fua ? media_->Sync() : absl::OkStatus();
  }
  absl::Status Trim(uint64_t offset, uint64_t length, bool fua) override {
    if (auto s = Check(offset, length); !s.ok()) return s;
    trims_++;
    uint64_t first = (offset + 4095) & ~uint64_t(4095), end = (offset + length) & ~uint64_t(4095);
    if (end > first) {
      if (auto s = media_->Discard(first, end - first); !s.ok()) return s;
    }
    return fua ? media_->Sync() : absl::OkStatus();
  }
  absl::Status WriteZeroes(uint64_t offset, uint64_t length, bool fua, bool, bool fast_only) override {
    if (auto s = Check(offset, length); !s.ok()) return s;
    if (fast_only) return absl::UnimplementedError("zeroes are written");
    zeroes_++;
    static const std::vector<std::byte> kZeros(1 << 20);
    for (uint64_t done = 0; done < length;) {
      uint64_t n = std::min<uint64_t>(kZeros.size(), length - done);
      if (auto s = media_->Write(offset + done, std::span(kZeros.data(), n)); !s.ok()) return s;
      done += n;
    }
    return fua ? media_->Sync() : absl::OkStatus();
  }
  absl::Status Flush() override {
    flushes_++;
    return media_->Sync();
  }
  absl::StatusOr<std::vector<ftl::BlockExtent>> BlockStatus(uint64_t offset,
                                                            uint64_t length) override {
    if (auto s = Check(offset, length); !s.ok()) return s;
    return std::vector<ftl::BlockExtent>{{offset, length, true}};
  }
  ftl::VolumeStats Stats() const override {
    ftl::VolumeStats s;
    s.name = name_;
    s.size_bytes = media_->size();
    s.reads = reads_, s.writes = writes_, s.trims = trims_, s.zeroes = zeroes_;
    s.flushes = flushes_, s.read_bytes = read_bytes_, s.write_bytes = write_bytes_;
    return s;
  }

 private:
  absl::Status Check(uint64_t offset, uint64_t length) const {
    if (offset > media_->size() || length > media_->size() - offset) {
      return absl::OutOfRangeError("past the end");
    }
    return absl::OkStatus();
  }

  const std::string name_;
  const std::shared_ptr<ftl::Media> media_;
  std::atomic<uint64_t> reads_{0}, writes_{0}, trims_{0}, zeroes_{0}, flushes_{0};
  std::atomic<uint64_t> read_bytes_{0}, write_bytes_{0};
};

int Usage() {
  std::cerr << "usage: tearing_nbd_server [--seed N] [--size MIB] FILE\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  uint64_t size_mib = 0;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--seed" || a == "--size") && i + 1 < argc) {
      char* end = nullptr;
      uint64_t v = std::strtoull(argv[++i], &end, 10);
      if (!end || *end) return Usage();
      (a == "--seed" ? seed : size_mib) = v;
    } else if (!a.empty() && a[0] != '-' && file.empty()) {
      file = a;
    } else {
      return Usage();
    }
  }
  if (file.empty()) return Usage();
  if (const char* lvl = std::getenv("FTLD_LOG_LEVEL")) ftl::SetLogLevel(lvl);

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto inner = ftl::OpenFileMedia(file, size_mib << 20);
  if (!inner.ok()) {
    std::cerr << file << ": " << inner.status() << "\n";
    return 1;
  }
  std::cerr << "tearing_nbd_server: " << file << " behind a volatile write cache, seed " << seed
            << "\n";
  auto media = ftl::NewVolatileCacheMedia(*inner, seed);
  MediaVolume volume("disk", media);
  ftl::nbd::ExportTable exports;
  (void)exports.Add({.name = "", .description = "a file behind a tearing cache", .volume = &volume});
  ftl::nbd::ServerOptions opts;
  opts.port = 0;
  ftl::nbd::Server server(&exports, opts);
  if (auto s = server.Listen(); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  server.Start();
  std::cout << "NBD listening on 127.0.0.1:" << server.tcp_port() << "\nready" << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  server.Shutdown(std::chrono::seconds(10));
  server.Join();
  if (auto s = media->Sync(); !s.ok()) {
    std::cerr << "final sync: " << s << "\n";
    return 1;
  }
  return 0;
}
