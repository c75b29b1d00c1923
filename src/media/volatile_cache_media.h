#pragma once
// VolatileCacheMedia: a test Media that gives another Media (the real
// backing) the volatile write cache of a disk, so that killing the process
// (kill -9) loses exactly what cutting the power of such a disk would. The
// backing file's page cache survives a killed process, which is why a plain
// file backing makes kill -9 a much kinder test than a power cut.
//
// The model:
// - Write and WriteGather copy the data into an in-memory cache; Read sees
//   the newest data (the cache over the inner media). Nothing reaches the
//   inner media before a write-through.
// - Sync() writes every cached write through to the inner media, one
//   512-byte sector at a time (sectors of the device, absolute offsets; the
//   end sectors of an unaligned write are partial pieces) in an order
//   shuffled by a seeded PRNG, then calls the inner Sync(), then drops what
//   it wrote from the cache. So if the process dies at any moment, the inner
//   media holds every synced write, plus, if it died during a write-through,
//   a random subset of the sectors being written (an in-flight write torn at
//   sector granularity), and nothing else.
// - Overlapping writes coalesce in the cache, newest wins: a write-through
//   writes each sector's newest data once. (A real cache may do the same;
//   the states this model leaves are a subset of those a real one may.)
// - Discard is cached as a pending discard: reads of the range return zeros
//   until a later write covers it; the write-through issues the inner
//   Discard for what is left of the range, as one step at a random place in
//   the shuffled order. After a crash the range may hold its old data, which
//   Media::Discard allows. An inner Discard error is ignored (a discard may
//   or may not happen).
// - Destage: before a write that would take the cached data above
//   max_cached_bytes, the cache is written through as a Sync does but
//   without the inner Sync (a real cache destages too: unsynced data may
//   reach the media at any time, so this stays a valid power-cut model; it
//   only keeps some unsynced data that a cut could have lost). Memory is
//   about twice max_cached_bytes at most (the cache being destaged plus
//   the one filling meanwhile), plus writes in flight.
// - A write-through that fails (an inner Write error) stops there and puts
//   what it was writing back under the cache (newer writes win), so reads
//   still see it and the next Sync retries it; the Sync returns the error.
//   A failed inner Sync returns its error; the data stays written through.
// - Prepare() is passed to the inner media (it changes no contents);
//   StartWriteback() does nothing (it must not write through).
//
// A write-through does not block reads and writes: the cache is swapped for
// an empty one and written through without the cache lock, and reads look
// in the cache, then in the part being written through, then in the inner
// media. One write-through at a time (Sync and destage share a mutex); a
// write that finds the cache full waits for the one in progress.
//
// Owns the cache and a reference to the inner media.
// Thread-safety: all methods are safe to call concurrently. Locks: sync_mu_
// (one write-through at a time; held across inner I/O) before mu_ (the
// cache; never held across inner I/O).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ftl/media.h"

namespace ftl::media {

class VolatileCacheMedia : public Media {
 public:
  static constexpr uint64_t kDefaultMaxCachedBytes = 256ull << 20;

  VolatileCacheMedia(std::shared_ptr<Media> inner, uint64_t seed,
                     uint64_t max_cached_bytes = kDefaultMaxCachedBytes);

  uint64_t size() const override { return inner_->size(); }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override;
  absl::Status WriteGather(uint64_t offset,
                           std::span<const std::span<const std::byte>> pieces) override;
  bool gathers_writes() const override { return true; }  // one copy, into the cache
  // Cached, and written through a sector at a time: what it models.
  bool writes_sectors() const override { return true; }
  bool writes_lone_sectors() const override { return true; }
  absl::Status Sync() override;
  absl::Status Discard(uint64_t offset, uint64_t length) override;
  void Prepare(uint64_t offset, uint64_t length) override { inner_->Prepare(offset, length); }
  void StartWriteback(uint64_t, uint64_t) override {}
  std::string Describe() const override;

  // Bytes of write buffers the cache holds (what max_cached_bytes bounds;
  // not counting a write-through in progress).
  uint64_t cached_bytes() const;
  // Disjoint ranges in the cache (writes and discards).
  size_t cached_ranges() const;
  uint64_t destages() const;              // write-throughs started by the limit
  uint64_t sectors_written_through() const;  // inner Write calls made

 private:
  struct Buffer {
    explicit Buffer(size_t n) : bytes(std::make_unique_for_overwrite<std::byte[]>(n)), size(n) {}
    std::unique_ptr<std::byte[]> bytes;
    size_t size;
  };
  // [start, end) of the device, start being the map key. data == nullptr:
  // a pending discard. Otherwise byte `start` is data->bytes[data_off].
  struct Extent {
    uint64_t end = 0;
    std::shared_ptr<const Buffer> data;
    size_t data_off = 0;
  };
  using Layer = std::map<uint64_t, Extent>;

  // Puts [offset, offset + length) into the cache over what it holds.
  void Insert(uint64_t offset, uint64_t length, std::shared_ptr<const Buffer> data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes [start, end) from the cache, trimming and splitting extents.
  void Remove(uint64_t start, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops one extent's reference to its buffer, uncounting the buffer if it
  // was the last one.
  void Release(Extent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills the parts of `gaps` (absolute [start, end) ranges inside
  // [offset, offset + out.size())) that `layer` holds into `out`; `gaps`
  // becomes what is left.
  static void ReadLayer(const Layer& layer, uint64_t offset, std::span<std::byte> out,
                        std::vector<std::pair<uint64_t, uint64_t>>& gaps);
  // Makes room for `length` more cached bytes: destages if the limit
  // would be passed.
  absl::Status MakeRoom(uint64_t length) ABSL_LOCKS_EXCLUDED(mu_, sync_mu_);
  // Moves the cache out and writes it through (see the class comment).
  // `sync`: then the inner Sync. REQUIRES sync_mu_ held, mu_ not held.
  absl::Status WriteThrough(bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes `layer` to the inner media in the shuffled sector order.
  absl::Status WriteLayer(const Layer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // After a failed write-through: puts `layer` back under the cache (where
  // no newer write covers it) and empties it.
  void PutBack(Layer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<Media> inner_;
  const uint64_t max_cached_bytes_;

  absl::Mutex sync_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(sync_mu_);

  mutable absl::Mutex mu_;
  Layer cache_ ABSL_GUARDED_BY(mu_);
  uint64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The layer being written through (owned by WriteThrough's frame), or null.
  const Layer* writing_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t destages_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> sectors_written_{0};
};

}  // namespace ftl::media
