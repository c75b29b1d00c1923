// Mirror device labels: see mirror_label.h for the grammar.

#include "media/mirror_label.h"

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "util/checksum.h"
#include "util/encoding.h"

namespace ftl::media {
namespace {
// log_format.h kSuperMagic ("FTLDSUPR"); media/ is below log/, so the
// constant is repeated here.
constexpr uint64_t kSuperMagic = 0x5250555344544c46ull;
constexpr size_t kBlockBytes = 4096;
}  // namespace

std::string GuidToString(const Guid& g) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (std::byte b : g) {
    s.push_back(kHex[uint8_t(b) >> 4]);
    s.push_back(kHex[uint8_t(b) & 15]);
  }
  return s;
}

Guid NewGuid() {
  std::random_device rd;
  Guid g;
  for (auto& b : g) b = std::byte(rd());
  return g;
}

int Label::self() const {
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].guid == device_guid) return int(i);
  return -1;
}

std::vector<std::byte> EncodeLabel(const Label& l) {
  std::vector<std::byte> body;
  util::Encoder b(&body);
  b.U64(kLabelMagic);
  b.U32(kLabelVersion);
  b.U8(kLabelKindMirror);
  b.Bytes(l.device_guid);
  b.U64(l.data_bytes);
  b.U32(uint32_t(l.members.size()));
  for (const LabelMember& m : l.members) {
    b.Bytes(m.guid);
    b.U8(uint8_t(m.state));
    b.String(m.name.substr(0, 1024));
  }
  std::vector<std::byte> buf;
  util::Encoder e(&buf);
  e.U64(kSuperMagic);
  e.U32(kLabelFormatVersion);
  e.Bytes(l.set_uuid);
  e.U64(l.generation);
  e.U32(uint32_t(kBlockBytes));
  e.U32(0);
  e.U32(0);
  e.U32(0);
  e.U64(kLabelAreaBytes);
  e.U64(l.device_bytes);
  e.U64(0);
  e.U8(0);
  e.U8(0);
  for (int i = 0; i < 6; ++i) e.U64(0);
  e.U16(uint16_t(body.size()));
  e.Bytes(body);
  e.U64(0);
  e.U64(util::Xxh3(buf));
  buf.resize(kBlockBytes);
  return buf;
}

absl::StatusOr<Label> DecodeLabel(std::span<const std::byte> block) {
  util::Decoder d(block);
  if (d.U64() != kSuperMagic) return absl::NotFoundError("no label");
  uint32_t version = d.U32();
  Label l;
  auto uuid = d.Bytes(16);
  if (uuid.size() == 16) std::memcpy(l.set_uuid.data(), uuid.data(), 16);
  l.generation = d.U64();
  d.U32();  // block size
  d.U32();
  d.U32();
  d.U32();
  uint64_t data_offset = d.U64();
  l.device_bytes = d.U64();
  d.U64();
  d.U8();
  d.U8();
  for (int i = 0; i < 6; ++i) d.U64();
  uint16_t body_len = d.U16();
  auto body = d.Bytes(body_len);
  d.U64();
  size_t covered = d.pos();
  uint64_t stored = d.U64();
  if (!d.ok() || util::Xxh3(block.subspan(0, covered)) != stored) {
    // A superblock of another shape (a pool) fails here too: only a block
    // that starts like a label body is a damaged label.
    if (body.size() >= 8 && util::GetU64(body.data()) == kLabelMagic)
      return absl::DataLossError("mirror label checksum mismatch");
    return absl::NotFoundError("no label");
  }
  util::Decoder bd(body);
  if (body.size() < 8 || bd.U64() != kLabelMagic) return absl::NotFoundError("no label (a pool superblock)");
  if (version != kLabelFormatVersion) return absl::DataLossError(absl::StrCat("label format version ", version));
  if (uint32_t lv = bd.U32(); lv != kLabelVersion)
    return absl::FailedPreconditionError(absl::StrCat("mirror label version ", lv, " is not understood"));
  if (uint8_t kind = bd.U8(); kind != kLabelKindMirror)
    return absl::FailedPreconditionError(absl::StrCat("device label of kind ", int(kind), " is not understood"));
  auto g = bd.Bytes(16);
  if (g.size() == 16) std::memcpy(l.device_guid.data(), g.data(), 16);
  l.data_bytes = bd.U64();
  uint32_t n = bd.U32();
  if (!bd.ok() || n == 0 || n > kMaxMirrorDevices) return absl::DataLossError("mirror label: bad member count");
  for (uint32_t i = 0; i < n; ++i) {
    LabelMember m;
    auto mg = bd.Bytes(16);
    if (mg.size() == 16) std::memcpy(m.guid.data(), mg.data(), 16);
    uint8_t st = bd.U8();
    if (st > uint8_t(MemberState::kResilvering)) return absl::DataLossError("mirror label: bad member state");
    m.state = MemberState(st);
    m.name = bd.String();
    l.members.push_back(std::move(m));
  }
  if (!bd.ok() || data_offset != kLabelAreaBytes || l.data_bytes == 0 ||
      l.data_bytes > l.device_bytes)
    return absl::DataLossError("mirror label is malformed");
  return l;
}

}  // namespace ftl::media
