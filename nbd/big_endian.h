#pragma once
// Big-endian integers for the NBD wire (every NBD integer is big-endian).
// nbd/ keeps its own: the engine's encoders (src/util/encoding.h) are for
// its little-endian on-media format and are not part of the public API.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ftl::nbd {

inline void PutBe16(std::byte* p, uint16_t v) {
  p[0] = std::byte(v >> 8);
  p[1] = std::byte(v);
}
inline void PutBe32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::byte(v >> (24 - 8 * i));
}
inline void PutBe64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = std::byte(v >> (56 - 8 * i));
}
inline uint16_t GetBe16(const std::byte* p) {
  return uint16_t(uint16_t(p[0]) << 8 | uint16_t(p[1]));
}
inline uint32_t GetBe32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | uint32_t(p[i]);
  return v;
}
inline uint64_t GetBe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | uint64_t(p[i]);
  return v;
}

// Appends big-endian integers and raw bytes to a growable buffer.
class BeWriter {
 public:
  explicit BeWriter(std::vector<std::byte>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(std::byte(v)); }
  void U16(uint16_t v) { PutBe16(Grow(2), v); }
  void U32(uint32_t v) { PutBe32(Grow(4), v); }
  void U64(uint64_t v) { PutBe64(Grow(8), v); }
  void Bytes(std::span<const std::byte> b) { out_->insert(out_->end(), b.begin(), b.end()); }
  // The bytes of a string, without a length.
  void Str(std::string_view s) { Bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  void Zeroes(size_t n) { out_->resize(out_->size() + n); }
  size_t size() const { return out_->size(); }

 private:
  std::byte* Grow(size_t n) {
    out_->resize(out_->size() + n);
    return out_->data() + out_->size() - n;
  }
  std::vector<std::byte>* out_;
};

// Reads big-endian integers; a read past the end sets a sticky error and
// yields zeros (empty for Bytes/Str), so a caller checks ok() once after
// decoding a structure.
class BeReader {
 public:
  explicit BeReader(std::span<const std::byte> in) : in_(in) {}
  uint8_t U8() { return Take(1) ? uint8_t(in_[pos_ - 1]) : 0; }
  uint16_t U16() { return Take(2) ? GetBe16(&in_[pos_ - 2]) : 0; }
  uint32_t U32() { return Take(4) ? GetBe32(&in_[pos_ - 4]) : 0; }
  uint64_t U64() { return Take(8) ? GetBe64(&in_[pos_ - 8]) : 0; }
  std::span<const std::byte> Bytes(size_t n) {
    if (!Take(n)) return {};
    return in_.subspan(pos_ - n, n);
  }
  // n raw bytes as a string.
  std::string Str(size_t n) {
    auto b = Bytes(n);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }

 private:
  bool Take(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace ftl::nbd
