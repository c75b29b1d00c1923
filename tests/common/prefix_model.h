#pragma once
// PrefixModel: what a volume may hold after a crash, for the crash tests.
// It keeps the flushed image (the base) and the atomic units of change
// issued since, in order; an image read back after a crash must equal the
// base after some prefix of them (README, "Crash semantics"). Match finds
// that prefix sector by sector in one pass over the units.
// Not thread-safe: the test's worker adds, the test matches after joining.

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace ftl::testing {

// One atomic unit of change: [off, off+len) becomes `data` (or zeros).
struct Unit {
  uint64_t off;
  uint64_t len;
  std::vector<std::byte> data;  // empty = zeros
};

class PrefixModel {
 public:
  static constexpr uint64_t kSector = 512;

  explicit PrefixModel(uint64_t size) : base_(size) {}
  void Add(Unit u) { pending_.push_back(std::move(u)); }
  void Add(uint64_t off, std::vector<std::byte> data) {
    const uint64_t len = data.size();
    Add(Unit{off, len, std::move(data)});
  }
  // The first `units_done` pending units were issued before a flush that
  // returned: they are durable, part of the base.
  void Flushed(size_t units_done) {
    for (size_t i = 0; i < units_done; ++i) Apply(base_, pending_[i]);
    pending_.erase(pending_.begin(), pending_.begin() + long(units_done));
  }
  size_t pending() const { return pending_.size(); }

  // Finds the prefix of pending units that explains `image`; on success the
  // base becomes that state and the prefix's length is returned, else -1.
  long Match(const std::vector<std::byte>& image) {
    std::vector<std::byte> s = base_;
    const size_t sectors = s.size() / kSector;
    std::vector<uint8_t> bad(sectors);
    size_t mismatched = 0;
    for (size_t i = 0; i < sectors; ++i) {
      bad[i] = std::memcmp(&s[i * kSector], &image[i * kSector], kSector) != 0;
      mismatched += bad[i];
    }
    for (size_t k = 0;; ++k) {
      if (mismatched == 0) {
        base_ = std::move(s);
        pending_.clear();
        return long(k);
      }
      if (k == pending_.size()) return -1;
      const Unit& u = pending_[k];
      Apply(s, u);
      for (uint64_t sec = u.off / kSector; sec < (u.off + u.len + kSector - 1) / kSector; ++sec) {
        const uint8_t now = std::memcmp(&s[sec * kSector], &image[sec * kSector], kSector) != 0;
        mismatched = mismatched - bad[sec] + now;
        bad[sec] = now;
      }
    }
  }
  const std::vector<std::byte>& base() const { return base_; }

 private:
  static void Apply(std::vector<std::byte>& s, const Unit& u) {
    if (u.data.empty()) std::memset(&s[u.off], 0, u.len);
    else std::memcpy(&s[u.off], u.data.data(), u.len);
  }
  std::vector<std::byte> base_;
  std::vector<Unit> pending_;
};

}  // namespace ftl::testing
