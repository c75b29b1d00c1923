#include "log/log_format.h"
#include "media/mirror_label.h"

#include <algorithm>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "util/checksum.h"
#include "util/encoding.h"

// The mirror label (media/mirror_label.h) claims a format version older
// builds refuse and this one knows.
static_assert(ftl::media::kLabelFormatVersion <= ftl::log::kFormatVersion);

namespace ftl::log {

using util::Decoder;
using util::Encoder;

std::string UuidToString(const Uuid& u) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (std::byte b : u) {
    s.push_back(kHex[uint8_t(b) >> 4]);
    s.push_back(kHex[uint8_t(b) & 15]);
  }
  return s;
}

Uuid NewUuid() {
  std::random_device rd;
  Uuid u;
  for (auto& b : u) b = std::byte(rd());
  return u;
}

std::vector<std::byte> EncodeSuperblock(const Superblock& sb) {
  std::vector<std::byte> buf;
  Encoder e(&buf);
  e.U64(kSuperMagic);
  e.U32(sb.format_version);
  e.Bytes(sb.uuid);
  e.U64(sb.generation);
  e.U32(sb.block_size);
  e.U32(sb.segment_blocks);
  e.U32(sb.segment_count);
  e.U32(sb.ckpt_slot_blocks);
  e.U64(sb.data_offset);
  e.U64(sb.media_bytes);
  e.U64(sb.logical_blocks);
  e.U8(sb.clean ? 1 : 0);
  e.U8(sb.newest_slot);
  for (const SlotInfo& s : sb.slots) {
    e.U64(s.next_seq);
    e.U64(s.bytes);
    e.U64(s.xxh3);
  }
  e.String(sb.primary_name);
  e.U64(sb.primary_blocks);
  e.U64(util::Xxh3(buf));
  buf.resize(kBlock);
  return buf;
}

absl::StatusOr<Superblock> DecodeSuperblock(std::span<const std::byte> block) {
  Decoder d(block);
  if (d.U64() != kSuperMagic) return absl::NotFoundError("no ftld superblock");
  Superblock sb;
  sb.format_version = d.U32();
  auto uuid = d.Bytes(16);
  if (uuid.size() == 16) std::memcpy(sb.uuid.data(), uuid.data(), 16);
  sb.generation = d.U64();
  sb.block_size = d.U32();
  sb.segment_blocks = d.U32();
  sb.segment_count = d.U32();
  sb.ckpt_slot_blocks = d.U32();
  sb.data_offset = d.U64();
  sb.media_bytes = d.U64();
  sb.logical_blocks = d.U64();
  sb.clean = d.U8() != 0;
  sb.newest_slot = d.U8();
  for (SlotInfo& s : sb.slots) {
    s.next_seq = d.U64();
    s.bytes = d.U64();
    s.xxh3 = d.U64();
  }
  sb.primary_name = d.String();
  sb.primary_blocks = d.U64();
  size_t covered = d.pos();
  uint64_t stored = d.U64();
  if (!d.ok() || util::Xxh3(block.subspan(0, covered)) != stored) {
    return absl::DataLossError("superblock checksum mismatch");
  }
  // A mirror device's label (media/mirror_label.h) wears a superblock whose
  // name field starts with the label magic "FTLDLABL".
  if (sb.primary_name.size() >= 8 && sb.primary_name.starts_with("FTLDLABL")) {
    return absl::FailedPreconditionError(
        "this is a device of a mirror (it starts with a mirror label): open it as a mirror "
        "(ftld --mirror, ftl-tool --mirror)");
  }
  if (sb.format_version > kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("pool has format version ", sb.format_version,
                     ", this ftld understands up to ", kFormatVersion));
  }
  if (sb.format_version < kOldestFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("unknown format version ", sb.format_version));
  }
  if (sb.block_size != kBlock || sb.segment_blocks == 0 || sb.segment_count == 0 ||
      sb.newest_slot > 1) {
    return absl::DataLossError("superblock geometry is invalid");
  }
  return sb;
}

uint32_t Op::data_blocks() const {
  switch (type) {
    case OpType::kWrite: return uint32_t(write.csum.size());
    case OpType::kReloc: return uint32_t(reloc.blocks.size());
    default: return 0;
  }
}

size_t WritePayloadBytes(size_t n) { return 13 + 8 * n; }

size_t OpPayloadBytes(const Op& op) {
  switch (op.type) {
    case OpType::kWrite: return WritePayloadBytes(op.write.csum.size());
    case OpType::kTrim: return 13;
    case OpType::kReloc: return RelocPayloadBytes(op.reloc.blocks);
    case OpType::kTree: return 1 + 4 + 4 + 1 + 1 + 8 + 2 + op.tree.name.size();
    case OpType::kDrop: return 5;
    case OpType::kRollback: return 9;
    case OpType::kClone: return 21;
    case OpType::kAttr: return 15;
    case OpType::kDataset: return 1 + 4 + 1 + 1 + 8 + 8 + 2 + op.dataset.name.size();
    case OpType::kResize: return 1 + 4 + 1 + 8;
  }
  return 0;
}

namespace {
constexpr size_t kSeqOffset = 16, kUuidOffset = 32, kCsumOffset = 52;
// Wire type of a packed RELOC (decodes to OpType::kReloc).
constexpr uint8_t kRelocPackedWire = 9;

// Whether the blocks can be packed (one volume, data seqs within 2^32);
// sets *base to the lowest data seq.
bool RelocPackable(std::span<const RelocBlock> blocks, uint64_t* base) {
  if (blocks.empty()) return false;
  uint64_t lo = blocks[0].data_seq, hi = lo;
  for (const RelocBlock& b : blocks) {
    if (b.vol != blocks[0].vol) return false;
    lo = std::min(lo, b.data_seq);
    hi = std::max(hi, b.data_seq);
  }
  *base = lo;
  return hi - lo <= UINT32_MAX;
}
}  // namespace

size_t RelocPayloadBytes(std::span<const RelocBlock> blocks) {
  uint64_t base;
  return RelocPackable(blocks, &base) ? 17 + 20 * blocks.size() : 5 + 28 * blocks.size();
}

namespace {

void EncodeOps(const std::vector<Op>& ops, Encoder& e) {
  for (const Op& op : ops) {
    uint64_t base = 0;
    const bool packed = op.type == OpType::kReloc && RelocPackable(op.reloc.blocks, &base);
    e.U8(packed ? kRelocPackedWire : uint8_t(op.type));
    switch (op.type) {
      case OpType::kWrite:
        e.U32(op.write.vol);
        e.U32(op.write.lba);
        e.U32(uint32_t(op.write.vba.size()));
        for (size_t i = 0; i < op.write.vba.size(); ++i) {
          e.U32(op.write.vba[i]);
          e.U32(op.write.csum[i]);
        }
        break;
      case OpType::kTrim:
        e.U32(op.trim.vol);
        e.U32(op.trim.lba);
        e.U32(op.trim.count);
        break;
      case OpType::kReloc:
        e.U32(uint32_t(op.reloc.blocks.size()));
        if (packed) {
          e.U32(op.reloc.blocks[0].vol);
          e.U64(base);
          for (const RelocBlock& b : op.reloc.blocks) {
            e.U32(b.vba);
            e.U32(b.src_pba);
            e.U32(b.csum);
            e.U32(b.lba);
            e.U32(uint32_t(b.data_seq - base));
          }
          break;
        }
        for (const RelocBlock& b : op.reloc.blocks) {
          e.U32(b.vba);
          e.U32(b.src_pba);
          e.U32(b.csum);
          e.U64(b.data_seq);
          e.U32(b.vol);
          e.U32(b.lba);
        }
        break;
      case OpType::kTree:
        e.U32(op.tree.id);
        e.U32(op.tree.src);
        e.U8(op.tree.kind);
        e.U8(op.tree.flags);
        e.U64(op.tree.time_ns);
        e.String(op.tree.name);
        break;
      case OpType::kDrop:
        e.U32(op.drop);
        break;
      case OpType::kRollback:
        e.U32(op.rollback.vol);
        e.U32(op.rollback.snap);
        break;
      case OpType::kClone:
        e.U32(op.clone.src);
        e.U32(op.clone.src_lba);
        e.U32(op.clone.dst);
        e.U32(op.clone.dst_lba);
        e.U32(op.clone.count);
        break;
      case OpType::kAttr:
        e.U32(op.attr.vol);
        e.U32(op.attr.lba);
        e.U32(op.attr.count);
        e.U8(op.attr.set);
        e.U8(op.attr.clear);
        break;
      case OpType::kDataset:
        e.U32(op.dataset.id);
        e.U8(op.dataset.kind);
        e.U8(op.dataset.flags);
        e.U64(op.dataset.blocks);
        e.U64(op.dataset.time_ns);
        e.String(op.dataset.name);
        break;
      case OpType::kResize:
        e.U32(op.resize.vol);
        e.U8(op.resize.flags);
        e.U64(op.resize.blocks);
        break;
    }
  }
}

absl::Status DecodeOps(Decoder& d, std::vector<Op>* ops, uint32_t data_blocks) {
  uint64_t consumed = 0;
  while (d.remaining() > 0) {
    Op op;
    const uint8_t wire = d.U8();
    op.type = wire == kRelocPackedWire ? OpType::kReloc : OpType(wire);
    switch (op.type) {
      case OpType::kWrite: {
        op.write.vol = d.U32();
        op.write.lba = d.U32();
        uint32_t n = d.U32();
        if (!d.ok() || n > d.remaining() / 8) return absl::DataLossError("bad WRITE op");
        op.write.vba.resize(n);
        op.write.csum.resize(n);
        for (uint32_t i = 0; i < n; ++i) {
          op.write.vba[i] = d.U32();
          op.write.csum[i] = d.U32();
        }
        consumed += n;
        break;
      }
      case OpType::kTrim:
        op.trim.vol = d.U32();
        op.trim.lba = d.U32();
        op.trim.count = d.U32();
        break;
      case OpType::kReloc: {
        uint32_t n = d.U32();
        if (wire == kRelocPackedWire) {
          const uint32_t vol = d.U32();
          const uint64_t base = d.U64();
          if (!d.ok() || n > d.remaining() / 20) return absl::DataLossError("bad RELOCP op");
          op.reloc.blocks.resize(n);
          for (RelocBlock& b : op.reloc.blocks) {
            b.vba = d.U32();
            b.src_pba = d.U32();
            b.csum = d.U32();
            b.lba = d.U32();
            b.data_seq = base + d.U32();
            b.vol = vol;
          }
          consumed += n;
          break;
        }
        if (!d.ok() || n > d.remaining() / 28) return absl::DataLossError("bad RELOC op");
        op.reloc.blocks.resize(n);
        for (RelocBlock& b : op.reloc.blocks) {
          b.vba = d.U32();
          b.src_pba = d.U32();
          b.csum = d.U32();
          b.data_seq = d.U64();
          b.vol = d.U32();
          b.lba = d.U32();
        }
        consumed += n;
        break;
      }
      case OpType::kTree:
        op.tree.id = d.U32();
        op.tree.src = d.U32();
        op.tree.kind = d.U8();
        op.tree.flags = d.U8();
        op.tree.time_ns = d.U64();
        op.tree.name = d.String();
        if (op.tree.kind > 1) return absl::DataLossError("bad TREE op kind");
        break;
      case OpType::kDrop:
        op.drop = d.U32();
        break;
      case OpType::kRollback:
        op.rollback.vol = d.U32();
        op.rollback.snap = d.U32();
        break;
      case OpType::kClone:
        op.clone.src = d.U32();
        op.clone.src_lba = d.U32();
        op.clone.dst = d.U32();
        op.clone.dst_lba = d.U32();
        op.clone.count = d.U32();
        break;
      case OpType::kAttr:
        op.attr.vol = d.U32();
        op.attr.lba = d.U32();
        op.attr.count = d.U32();
        op.attr.set = d.U8();
        op.attr.clear = d.U8();
        break;
      case OpType::kDataset:
        op.dataset.id = d.U32();
        op.dataset.kind = d.U8();
        op.dataset.flags = d.U8();
        op.dataset.blocks = d.U64();
        op.dataset.time_ns = d.U64();
        op.dataset.name = d.String();
        if (op.dataset.kind > kMaxDatasetKind) return absl::DataLossError("bad DATASET op kind");
        if (op.dataset.blocks == 0 || op.dataset.blocks > kMaxDatasetBlocks)
          return absl::DataLossError("bad DATASET op size");
        break;
      case OpType::kResize:
        op.resize.vol = d.U32();
        op.resize.flags = d.U8();
        op.resize.blocks = d.U64();
        if (op.resize.blocks == 0 || op.resize.blocks > kMaxDatasetBlocks)
          return absl::DataLossError("bad RESIZE op size");
        break;
      default:
        return absl::DataLossError(absl::StrCat("unknown op type ", int(op.type)));
    }
    if (!d.ok()) return absl::DataLossError("truncated op");
    ops->push_back(std::move(op));
  }
  if (consumed != data_blocks) {
    return absl::DataLossError("record ops do not match its data block count");
  }
  return absl::OkStatus();
}
}  // namespace

void EncodeRecordHeader(RecordHeader& h, std::span<std::byte> out) {
  std::vector<std::byte> payload;
  Encoder pe(&payload);
  EncodeOps(h.ops, pe);
  const bool in_sector = h.sector > 0;
  h.header_blocks = in_sector ? 0 : uint16_t(HeaderBlocksFor(payload.size()));
  h.payload_len = uint32_t(payload.size());
  if (!in_sector) h.data_start = 0;
  h.data_blocks = 0;
  for (const Op& op : h.ops) h.data_blocks += op.data_blocks();
  std::vector<std::byte> fixed;
  Encoder e(&fixed);
  e.U32(kRecordMagic);
  e.U16(kRecordVersion);
  e.U16(h.header_blocks);
  e.U32(h.data_blocks);
  e.U32(uint32_t(payload.size()));
  e.U64(h.seq);
  e.U64(h.durable_seq);
  e.Bytes(h.uuid);
  e.U8(uint8_t(h.stream));
  e.U8(uint8_t((h.joined ? kRecordJoined : 0) | (in_sector ? kRecordInSector : 0)));
  e.U8(h.sector);
  e.U8(0);
  e.U64(0);  // checksum placeholder at kCsumOffset
  e.U32(h.data_start);
  fixed.resize(kRecordFixedBytes);
  std::memset(out.data(), 0, in_sector ? kSectorBytes : size_t(h.header_blocks) * kBlock);
  std::memcpy(out.data(), fixed.data(), kRecordFixedBytes);
  std::memcpy(out.data() + kRecordFixedBytes, payload.data(), payload.size());
  uint64_t sum = util::Xxh3(out.subspan(0, kRecordFixedBytes + payload.size()));
  util::PutU64(out.data() + kCsumOffset, sum);
}

uint16_t PeekHeaderBlocks(std::span<const std::byte> first_block) {
  if (first_block.size() < kRecordFixedBytes || util::GetU32(first_block.data()) != kRecordMagic)
    return 0;
  return util::GetU16(first_block.data() + 6);
}

std::optional<RecordIdentity> PeekRecordIdentity(std::span<const std::byte> header) {
  if (header.size() < kRecordFixedBytes || util::GetU32(header.data()) != kRecordMagic) return std::nullopt;
  RecordIdentity id;
  id.seq = util::GetU64(header.data() + kSeqOffset);
  std::memcpy(id.uuid.data(), header.data() + kUuidOffset, id.uuid.size());
  return id;
}

namespace {
absl::StatusOr<RecordHeader> DecodeHeader(std::span<const std::byte> header, bool verify) {
  if (header.size() < kRecordFixedBytes) return absl::NotFoundError("short header");
  Decoder d(header);
  if (d.U32() != kRecordMagic) return absl::NotFoundError("no record");
  RecordHeader h;
  if (d.U16() != kRecordVersion) return absl::DataLossError("unknown record version");
  h.header_blocks = d.U16();
  h.data_blocks = d.U32();
  uint32_t payload_len = d.U32();
  h.seq = d.U64();
  h.durable_seq = d.U64();
  auto uuid = d.Bytes(16);
  std::memcpy(h.uuid.data(), uuid.data(), 16);
  h.stream = Stream(d.U8());
  const uint8_t flags = d.U8();
  h.joined = (flags & kRecordJoined) != 0;
  h.sector = d.U8();
  d.U8();
  d.U64();  // the checksum, compared below
  h.data_start = d.U32();
  h.payload_len = payload_len;
  if (flags & kRecordInSector) {
    if (h.header_blocks != 0 || h.sector == 0 || h.sector >= kSectorsPerBlock ||
        !SectorHeaderFits(payload_len)) {
      return absl::DataLossError("bad sector header");
    }
    if (header.size() < kSectorBytes) return absl::OutOfRangeError("short sector header");
  } else {
    if (h.sector != 0 || h.data_start != 0 || h.header_blocks == 0 ||
        h.header_blocks > kMaxHeaderBlocks || HeaderBlocksFor(payload_len) != h.header_blocks) {
      return absl::DataLossError("bad record header size");
    }
    if (header.size() < size_t(h.header_blocks) * kBlock) {
      return absl::OutOfRangeError("need more header blocks");
    }
  }
  std::vector<std::byte> copy(header.begin(), header.begin() + kRecordFixedBytes + payload_len);
  uint64_t stored = util::GetU64(copy.data() + kCsumOffset);
  util::PutU64(copy.data() + kCsumOffset, 0);
  if (verify && util::Xxh3(copy) != stored)
    return absl::DataLossError("record header checksum mismatch");
  Decoder pd(header.subspan(kRecordFixedBytes, payload_len));
  if (absl::Status s = DecodeOps(pd, &h.ops, h.data_blocks); !s.ok()) return s;
  return h;
}

}  // namespace

absl::StatusOr<RecordHeader> DecodeRecordHeader(std::span<const std::byte> header) {
  return DecodeHeader(header, /*verify=*/true);
}

absl::StatusOr<RecordHeader> DecodeRecordHeaderUnverified(std::span<const std::byte> header) {
  return DecodeHeader(header, /*verify=*/false);
}

}  // namespace ftl::log
