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


// Appends little-endian integers (the on-media byte order) to a growable
// buffer. (The NBD wire is big-endian: nbd/big_endian.h.)
class Encoder {
 public:
  explicit Encoder(std::vector<std::byte>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(std::byte(v)); }
  void U16(uint16_t v) { PutU16(Grow(2), v); }
  void U32(uint32_t v) { PutU32(Grow(4), v); }
  void U64(uint64_t v) { PutU64(Grow(8), v); }
  void Bytes(std::span<const std::byte> b) { out_->insert(out_->end(), b.begin(), b.end()); }
  // Raw bytes of a string (no length).
  void Str(std::string_view s) { Bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  // u16 length + bytes.
  void String(std::string_view s) {
    U16(uint16_t(s.size()));
    Str(s);
  }
  void Zeroes(size_t n) { out_->resize(out_->size() + n); }
  // LEB128: 7 bits a byte, low bits first, high bit = more follows.
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      U8(uint8_t(v | 0x80));
      v >>= 7;
    }
    U8(uint8_t(v));
  }
  // Signed values zigzag-encoded as a Varint.
  void Svarint(int64_t v) { Varint((uint64_t(v) << 1) ^ uint64_t(v >> 63)); }
  size_t size() const { return out_->size(); }

 private:
  std::byte* Grow(size_t n) {
    out_->resize(out_->size() + n);
    return out_->data() + out_->size() - n;
  }
  std::vector<std::byte>* out_;
};

// Reads little-endian integers; any read past the end sets a sticky error
// and yields zeros, so callers check ok() once after decoding a structure.
class Decoder {
 public:
  explicit Decoder(std::span<const std::byte> in) : in_(in) {}
  uint8_t U8() { return Take(1) ? uint8_t(in_[pos_ - 1]) : 0; }
  uint16_t U16() {
    if (!Take(2)) return 0;
    return GetU16(&in_[pos_ - 2]);
  }
  uint32_t U32() {
    if (!Take(4)) return 0;
    return GetU32(&in_[pos_ - 4]);
  }
  uint64_t U64() {
    if (!Take(8)) return 0;
    return GetU64(&in_[pos_ - 8]);
  }
  std::span<const std::byte> Bytes(size_t n) {
    if (!Take(n)) return {};
    return in_.subspan(pos_ - n, n);
  }
  // n raw bytes, viewed in place (valid while the input is).
  std::string_view View(size_t n) {
    auto b = Bytes(n);
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // n raw bytes as a string.
  std::string Str(size_t n) {
    auto b = Bytes(n);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // u16 length + bytes.
  std::string String() { return Str(U16()); }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = U8();
      if (!ok_) return 0;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ok_ = false;  // more than 10 bytes
    return 0;
  }
  int64_t Svarint() {
    uint64_t z = Varint();
    return int64_t(z >> 1) ^ -int64_t(z & 1);
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

}  // namespace ftl::util
