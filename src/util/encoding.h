#pragma once
// Explicit little-endian encoding of integers into byte buffers. On-media and
// wire formats use these helpers; structs are never cast onto bytes.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ftl::util {

inline void PutU16(std::byte* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = std::byte(v >> (8 * i));
}
inline void PutU32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::byte(v >> (8 * i));
}
inline void PutU64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = std::byte(v >> (8 * i));
}
inline uint16_t GetU16(const std::byte* p) {
  return uint16_t(uint16_t(p[0]) | uint16_t(p[1]) << 8);
}
inline uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint32_t(p[i]);
  return v;
}
inline uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

// Appends little-endian values to a growable buffer.
class Encoder {
 public:
  explicit Encoder(std::vector<std::byte>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(std::byte(v)); }
  void U16(uint16_t v) { Grow(2, [&](std::byte* p) { PutU16(p, v); }); }
  void U32(uint32_t v) { Grow(4, [&](std::byte* p) { PutU32(p, v); }); }
  void U64(uint64_t v) { Grow(8, [&](std::byte* p) { PutU64(p, v); }); }
  void Bytes(std::span<const std::byte> b) {
    out_->insert(out_->end(), b.begin(), b.end());
  }
  // u16 length + bytes.
  void String(std::string_view s) {
    U16(uint16_t(s.size()));
    Bytes(std::as_bytes(std::span(s.data(), s.size())));
  }
  size_t size() const { return out_->size(); }

 private:
  template <typename F>
  void Grow(size_t n, F f) {
    size_t at = out_->size();
    out_->resize(at + n);
    f(out_->data() + at);
  }
  std::vector<std::byte>* out_;
};

// Reads little-endian values; any read past the end sets a sticky error and
// yields zeros, so callers check ok() once after decoding a structure.
class Decoder {
 public:
  explicit Decoder(std::span<const std::byte> in) : in_(in) {}
  uint8_t U8() { return Take(1) ? uint8_t(in_[pos_ - 1]) : 0; }
  uint16_t U16() { return Take(2) ? GetU16(&in_[pos_ - 2]) : 0; }
  uint32_t U32() { return Take(4) ? GetU32(&in_[pos_ - 4]) : 0; }
  uint64_t U64() { return Take(8) ? GetU64(&in_[pos_ - 8]) : 0; }
  std::span<const std::byte> Bytes(size_t n) {
    if (!Take(n)) return {};
    return in_.subspan(pos_ - n, n);
  }
  std::string String() {
    uint16_t n = U16();
    auto b = Bytes(n);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

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

}  // namespace ftl::util
