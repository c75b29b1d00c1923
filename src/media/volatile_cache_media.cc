// VolatileCacheMedia: see volatile_cache_media.h for the model.
//
// Details fixed here:
// - The cache is a map of disjoint extents keyed by start offset; a write
//   removes what it covers (trimming or splitting the extents it overlaps)
//   and adds itself, so a write costs O(log n) plus the extents it covers
//   entirely. Split pieces share the write's buffer (no copy).
// - cached_bytes() counts each write buffer the cache still references in
//   full, so a buffer mostly overwritten still counts all its bytes: the
//   limit bounds memory, not live data.
// - The shuffle is a Fisher-Yates over the PRNG's raw output (not
//   std::shuffle), so a seed gives the same order with any library.
// - Zero-length writes and discards succeed and cache nothing.
// - A write that does not fit under the limit destages first; if that
//   fails, the write fails and changes nothing.

#include "media/volatile_cache_media.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "media/io_util.h"
#include "util/logging.h"

namespace ftl::media {
namespace {

constexpr uint64_t kSector = 512;
const std::string kWhat = "volatile cache";

}  // namespace

VolatileCacheMedia::VolatileCacheMedia(std::shared_ptr<Media> inner, uint64_t seed,
                                       uint64_t max_cached_bytes)
    : inner_(std::move(inner)), max_cached_bytes_(max_cached_bytes), rng_(seed) {}

std::string VolatileCacheMedia::Describe() const {
  return absl::StrCat("volatile cache over ", inner_->Describe());
}

void VolatileCacheMedia::ReadLayer(const Layer& layer, uint64_t offset, std::span<std::byte> out,
                                   std::vector<std::pair<uint64_t, uint64_t>>& gaps) {
  std::vector<std::pair<uint64_t, uint64_t>> left;
  for (auto [start, end] : gaps) {
    auto it = layer.upper_bound(start);
    if (it != layer.begin() && std::prev(it)->second.end > start) --it;
    uint64_t at = start;  // bytes before `at` are filled or left
    for (; it != layer.end() && it->first < end; ++it) {
      const uint64_t s = std::max(it->first, at);
      const uint64_t e = std::min(it->second.end, end);
      if (s > at) left.emplace_back(at, s);
      std::byte* dst = out.data() + (s - offset);
      const Extent& x = it->second;
      if (x.data == nullptr) {
        std::memset(dst, 0, e - s);
      } else {
        std::memcpy(dst, x.data->bytes.get() + x.data_off + (s - it->first), e - s);
      }
      at = e;
    }
    if (at < end) left.emplace_back(at, end);
  }
  gaps.swap(left);
}

absl::Status VolatileCacheMedia::Read(uint64_t offset, std::span<std::byte> out) {
  if (auto s = CheckRange(kWhat, offset, out.size(), size()); !s.ok()) return s;
  if (out.empty()) return absl::OkStatus();
  std::vector<std::pair<uint64_t, uint64_t>> gaps{{offset, offset + out.size()}};
  {
    absl::ReaderMutexLock lock(&mu_);
    ReadLayer(cache_, offset, out, gaps);
    if (writing_ != nullptr && !gaps.empty()) ReadLayer(*writing_, offset, out, gaps);
  }
  // Neither layer holds the gaps, so the inner media has their newest data;
  // a write that lands there from now on is concurrent with this read.
  for (auto [start, end] : gaps) {
    if (auto s = inner_->Read(start, out.subspan(start - offset, end - start)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status VolatileCacheMedia::Write(uint64_t offset, std::span<const std::byte> data) {
  const std::span<const std::byte> one[] = {data};
  return WriteGather(offset, one);
}

absl::Status VolatileCacheMedia::WriteGather(
    uint64_t offset, std::span<const std::span<const std::byte>> pieces) {
  uint64_t total = 0;
  for (const auto& p : pieces) total += p.size();
  if (auto s = CheckRange(kWhat, offset, total, size()); !s.ok()) return s;
  if (total == 0) return absl::OkStatus();
  auto buf = std::make_shared<Buffer>(size_t(total));
  size_t at = 0;
  for (const auto& p : pieces) {
    if (!p.empty()) std::memcpy(buf->bytes.get() + at, p.data(), p.size());
    at += p.size();
  }
  if (auto s = MakeRoom(total); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Insert(offset, total, std::move(buf));
  return absl::OkStatus();
}

absl::Status VolatileCacheMedia::Discard(uint64_t offset, uint64_t length) {
  if (auto s = CheckRange(kWhat, offset, length, size()); !s.ok()) return s;
  if (length == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  Insert(offset, length, nullptr);
  return absl::OkStatus();
}

absl::Status VolatileCacheMedia::Sync() {
  absl::MutexLock lock(&sync_mu_);
  return WriteThrough(/*sync=*/true);
}

absl::Status VolatileCacheMedia::MakeRoom(uint64_t length) {
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cached_bytes_ == 0 || cached_bytes_ + length <= max_cached_bytes_;
  };
  {
    absl::MutexLock lock(&mu_);
    if (fits()) return absl::OkStatus();
  }
  absl::MutexLock sync_lock(&sync_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (fits()) return absl::OkStatus();  // another writer destaged meanwhile
    ++destages_;
    util::Logger("media")->debug("volatile cache: destaging {} bytes", cached_bytes_);
  }
  return WriteThrough(/*sync=*/false);
}

void VolatileCacheMedia::Insert(uint64_t offset, uint64_t length,
                                std::shared_ptr<const Buffer> data) {
  Remove(offset, offset + length);
  if (data != nullptr) cached_bytes_ += data->size;
  cache_.emplace(offset, Extent{offset + length, std::move(data), 0});
}

void VolatileCacheMedia::Remove(uint64_t start, uint64_t end) {
  auto it = cache_.upper_bound(start);
  if (it != cache_.begin() && std::prev(it)->second.end > start) --it;
  while (it != cache_.end() && it->first < end) {
    const uint64_t s = it->first;
    Extent& x = it->second;
    if (s < start) {
      if (x.end > end) {  // covers [start, end) and more on both sides: split
        Extent right{x.end, x.data, x.data != nullptr ? x.data_off + size_t(end - s) : 0};
        x.end = start;
        cache_.emplace_hint(std::next(it), end, std::move(right));
        return;
      }
      x.end = start;
      ++it;
    } else if (x.end > end) {  // the last one: keep its tail [end, x.end)
      auto node = cache_.extract(it++);
      if (node.mapped().data != nullptr) node.mapped().data_off += size_t(end - s);
      node.key() = end;
      cache_.insert(it, std::move(node));
      return;
    } else {
      Release(x);
      it = cache_.erase(it);
    }
  }
}

void VolatileCacheMedia::Release(Extent& x) {
  // Every reference to a cached buffer is an extent of cache_ (guarded by
  // mu_), so a count of one means this extent is the last.
  if (x.data != nullptr && x.data.use_count() == 1) cached_bytes_ -= x.data->size;
  x.data.reset();
}

absl::Status VolatileCacheMedia::WriteThrough(bool sync) {
  Layer batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(cache_);
    cached_bytes_ = 0;
    writing_ = &batch;
  }
  absl::Status written = WriteLayer(batch);
  absl::Status synced = written.ok() && sync ? inner_->Sync() : absl::OkStatus();
  absl::MutexLock lock(&mu_);
  writing_ = nullptr;
  if (!written.ok()) {
    PutBack(batch);
    return written;
  }
  // `batch` is destroyed after the lock is released: none of its buffers is
  // referenced by the cache (they were all moved out above).
  return synced;
}

absl::Status VolatileCacheMedia::WriteLayer(const Layer& layer) {
  // One step per sector piece of cached data, one per pending discard.
  struct Step {
    uint64_t offset;
    uint64_t length;
    const std::byte* data;  // null: discard
  };
  std::vector<Step> steps;
  for (const auto& [start, x] : layer) {
    if (x.data == nullptr) {
      steps.push_back({start, x.end - start, nullptr});
      continue;
    }
    const std::byte* base = x.data->bytes.get() + x.data_off;
    for (uint64_t s = start; s < x.end;) {
      const uint64_t e = std::min(x.end, (s / kSector + 1) * kSector);
      steps.push_back({s, e - s, base + (s - start)});
      s = e;
    }
  }
  for (size_t i = steps.size(); i > 1; --i) std::swap(steps[i - 1], steps[rng_() % i]);
  for (const Step& st : steps) {
    if (st.data == nullptr) {
      // Either outcome of a discard is allowed; the engine ignores them too.
      if (auto s = inner_->Discard(st.offset, st.length); !s.ok()) {
        util::Logger("media")->debug("volatile cache: inner discard failed: {}", s.ToString());
      }
      continue;
    }
    if (auto s = inner_->Write(st.offset, std::span(st.data, st.length)); !s.ok()) return s;
    sectors_written_.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void VolatileCacheMedia::PutBack(Layer& layer) {
  std::vector<const Buffer*> counted;  // buffers of `layer` now in the cache
  for (const auto& entry : layer) {
    const uint64_t start = entry.first;
    const Extent& x = entry.second;
    // The parts of [start, x.end) that no newer write or discard covers.
    uint64_t at = start;
    auto it = cache_.upper_bound(start);
    if (it != cache_.begin() && std::prev(it)->second.end > start) --it;
    auto put = [&](uint64_t s, uint64_t e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (s >= e) return;
      size_t off = x.data != nullptr ? x.data_off + size_t(s - start) : 0;
      cache_.emplace_hint(it, s, Extent{e, x.data, off});
      if (x.data != nullptr &&
          std::find(counted.begin(), counted.end(), x.data.get()) == counted.end()) {
        counted.push_back(x.data.get());
        cached_bytes_ += x.data->size;
      }
    };
    for (; it != cache_.end() && it->first < x.end; ++it) {
      put(at, std::min(it->first, x.end));
      at = std::max(at, it->second.end);
    }
    put(at, x.end);
  }
  // Cleared under mu_, so Release's reference counts are right once more.
  layer.clear();
}

uint64_t VolatileCacheMedia::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

size_t VolatileCacheMedia::cached_ranges() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

uint64_t VolatileCacheMedia::destages() const {
  absl::MutexLock lock(&mu_);
  return destages_;
}

uint64_t VolatileCacheMedia::sectors_written_through() const {
  return sectors_written_.load(std::memory_order_relaxed);
}

}  // namespace ftl::media

namespace ftl {

std::shared_ptr<Media> NewVolatileCacheMedia(std::shared_ptr<Media> inner, uint64_t seed,
                                             uint64_t max_cached_bytes) {
  return std::make_shared<media::VolatileCacheMedia>(std::move(inner), seed, max_cached_bytes);
}

}  // namespace ftl
