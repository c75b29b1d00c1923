#pragma once
// On-media format of an ftld pool. Grammar (all integers little-endian,
// "block" = 4096 bytes, "pba" = physical block number counted from
// data_offset, i.e. byte = data_offset + pba * 4096):
//
//   media       := superblock_A superblock_B ckpt_slot_0 ckpt_slot_1 pad segment*
//   device      := media                       (a single device)
//                | label_A label_B pad media   (a device of a mirror, format >= 8:
//                                               media/mirror_label.h; media starts
//                                               at byte 1 MiB and is the same on
//                                               every device of the mirror)
//   superblock  := (one block, A at byte 0, B at byte 4096; the valid copy
//                  with the highest generation wins)
//                  magic u64 "FTLDSUPR" | format_version u32 | uuid 16B
//                  | generation u64 | block_size u32 | segment_blocks u32
//                  | segment_count u32 | ckpt_slot_blocks u32 | data_offset u64
//                  | media_bytes u64 | logical_blocks u64 | clean u8
//                  | newest_slot u8 | slot_info[2] | primary_name string
//                  | primary_blocks u64 | xxh3 u64 (of everything before it)
//   slot_info   := next_seq u64 | bytes u64 | xxh3 u64   (bytes 0 = empty)
//   string      := len u16 | bytes
//   ckpt_slot   := checkpoint (core/checkpoint_format.h) padded to
//                  ckpt_slot_blocks blocks
//   segment     := record* (records never span segments; the rest of a
//                  segment after its last record is garbage)
//   record      := header_block{header_blocks} data_block{data_blocks}
//                | sector_record                                (format >= 9)
//   header      := magic u32 "FTLR" | version u16 | header_blocks u16
//                  | data_blocks u32 | payload_len u32 | seq u64
//                  | durable_seq u64 | uuid 16B | stream u8 | flags u8
//                  | sector u8 | pad 1
//                  | xxh3 u64 (of the 64-byte fixed part with this field zero,
//                    then the payload) | data_start u32 | payload (payload_len
//                    bytes) | zeros to the end of the last header block
//                  (sector and data_start are 0 except in a sector header)
//   sector_record := data_block{data_blocks}, described by a sector header
//   sector header := a header with flags bit 1 (IN_SECTOR), header_blocks 0,
//                  sector 1..7 and payload_len <= 448, alone in the 512-byte
//                  sector `sector` of the header block of an earlier record of
//                  the same segment (the chain's first record, whose header
//                  is one block with payload_len <= 448); data_start is the
//                  block (within the segment) of its first data block
//
// Sector chains (format >= 9; docs/decisions.md "Sector headers"): a small
// record's header block has room in sectors 1-7 (zeros, or since format 10
// another lap's bytes: see the end of this paragraph); the next small
// records of the segment may then put their headers there, one sector each,
// written once (512 bytes), with their data appended at the segment's write
// point as usual. A chain reads in order: the block header's record, then
// sector 1's record if valid (checksum, IN_SECTOR, sector 1, data_start =
// the end of the previous record, a higher seq), then sector 2's, ...; the
// first sector that is not ends the chain and the next record starts at the
// end of the chain's last one. A chain never spans a checkpoint: its first
// record is newer than every checkpoint taken while it grows, so a
// recovery that scans an open segment from a checkpoint's write point
// never starts inside one. Since format 10 the first record's header may
// be written as sector 0 alone (on media that write a lone sector without
// reading its block: Media::writes_lone_sectors), leaving sectors 1-7
// with another lap's bytes until the chain reaches them: such a sector is
// not a continuation (a lower seq, another uuid, no magic), and one whose
// checksum fails is damage only if it names this pool and a higher seq.
//   payload     := op*
//   op          := WRITE  u8=1 | vol u32 | lba u32 | count u32
//                           | (vba u32 | csum u32){count}
//                | TRIM   u8=2 | vol u32 | lba u32 | count u32
//                | RELOC  u8=3 | count u32 | (vba u32 | src_pba u32 | csum u32
//                           | data_seq u64 | vol u32 | lba u32){count}
//                | RELOCP u8=9 | count u32 | vol u32 | base_seq u64
//                           | (vba u32 | src_pba u32 | csum u32 | lba u32
//                           | seq_delta u32){count}             (format >= 4)
//                | TREE   u8=4 | id u32 | src u32 | kind u8 | flags u8
//                           | time_ns u64 | name string      (format >= 2)
//                | DROP   u8=5 | id u32
//                | ROLLBACK u8=6 | vol u32 | snap u32
//                | CLONE  u8=7 | src u32 | src_lba u32 | dst u32 | dst_lba u32
//                           | count u32
//                | ATTR   u8=8 | vol u32 | lba u32 | count u32 | set u8 | clear u8
//                | DATASET u8=10 | id u32 | kind u8 | flags u8 | blocks u64
//                           | time_ns u64 | name string            (format >= 5)
//                | RESIZE u8=11 | vol u32 | flags u8 | blocks u64     (format >= 6)
//
// Ops 4-8, 10 and 11 are notes (no data blocks; docs/architecture.md, "Records"): TREE creates tree `id`
// sharing the tree `src` (kind 1: a snapshot of volume src; kind 0: a volume
// activated from snapshot src; flags bit 0: read-only); DROP deletes a tree;
// ROLLBACK makes volume `vol` share snapshot `snap`'s tree; CLONE maps
// dst[dst_lba, +count) to what src[src_lba, +count) maps (a move is a CLONE
// plus TRIMs of the source in the same record); ATTR sets/clears attribute
// bits (1 immutable, 2 non-persistent) on a range; DATASET creates tree `id`,
// a new empty volume-kind tree of `blocks` blocks (thin: at most 2^32 - 2,
// any sum over the pool) holding a dataset of `kind` (0 block volume, 1
// key-value store: ftl::DatasetKind; flags bit 0: read-only). A dataset is
// destroyed by DROP. RESIZE sets volume `vol`'s size to `blocks` blocks
// (1 to 2^32 - 2; a block volume, not a snapshot): a shrink unmaps every
// block at or past the new end and clears their range attributes, a grow
// adds unmapped blocks (flags bit 0: forced, the shrink was allowed to drop
// mapped blocks; replay ignores it). All ops of a record apply in order, so
// a record of notes is one atomic metadata change.
//
// WRITE and RELOC consume the record's data blocks in order. A data block's
// csum is the low 32 bits of its xxh3. seq is global and gapless: every seq
// names exactly one record. durable_seq is the highest seq known durable
// (synced) when the record was built; replay uses it to tell a torn tail
// (crash) from a corrupted durable record (media error). A record is valid
// only if its header checksum and every data block checksum match, so a
// record is all-or-nothing after a crash. Within a segment seq strictly
// increases; a lower or invalid seq ends the segment's records.
//
// A RELOC block is a copy made by the cleaner of vba's data from src_pba;
// data_seq is the seq of the record that wrote the data originally, and
// vol/lba is that write's identity (for a rebuild from the log alone).
// RELOCP is the same op packed (20 bytes a block instead of 28, so that one
// header block describes 200 blocks): all its blocks share vol, and
// data_seq = base_seq + seq_delta. Both decode to OpType::kReloc; the
// encoder packs whenever the blocks allow it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "log/address.h"

namespace ftl::log {

// Bno: a block number — lba, vba or pba (16 TiB at 4 KiB); log/address.h
// has a distinct type for each kind.
inline constexpr Bno kNoBlock = UINT32_MAX;
inline constexpr uint32_t kBlock = 4096;
inline constexpr uint32_t kFormatVersion = 10;
// Oldest format this build opens (version 1 has no note ops 4-8, version 2
// no JOINED records, version 3 no RELOCP, version 4 no DATASET, version 5
// no RESIZE, versions 6 and 7 no mirror device labels, version 8 no sector
// headers, version 9 no chain heads written as a lone sector, so a
// version-9 build could count another lap's sectors as damage; opening
// upgrades the superblock). Version 7 was never released (reserved while issues 21 and
// 22 were built side by side; it reads as 6); version 8 changed nothing
// inside the pool: it marks
// the mirror device label (whose block carries 8 in the superblock's
// version field so that older builds refuse a mirror device instead of
// formatting over it).
inline constexpr uint32_t kOldestFormatVersion = 1;
inline constexpr uint64_t kSuperMagic = 0x5250555344544c46ull;  // "FTLDSUPR"
inline constexpr uint32_t kRecordMagic = 0x524c5446u;           // "FTLR"
inline constexpr uint16_t kRecordVersion = 1;
inline constexpr size_t kRecordFixedBytes = 64;
// Record header flags.
inline constexpr uint8_t kRecordJoined = 1;
inline constexpr uint8_t kRecordInSector = 2;
// Sector headers (format >= 9).
inline constexpr uint32_t kSectorBytes = 512;
inline constexpr uint32_t kSectorsPerBlock = kBlock / kSectorBytes;
inline constexpr size_t kMaxSectorPayload = kSectorBytes - 64;
// Largest header a record may have; bounds group-commit batches.
inline constexpr uint32_t kMaxHeaderBlocks = 8;

using Uuid = std::array<std::byte, 16>;
std::string UuidToString(const Uuid& u);
Uuid NewUuid();

struct SlotInfo {
  uint64_t next_seq = 0;
  uint64_t bytes = 0;  // 0 = slot empty
  uint64_t xxh3 = 0;
};

struct Superblock {
  uint32_t format_version = kFormatVersion;
  Uuid uuid{};
  uint64_t generation = 0;
  uint32_t block_size = kBlock;
  uint32_t segment_blocks = 0;
  uint32_t segment_count = 0;
  uint32_t ckpt_slot_blocks = 0;
  uint64_t data_offset = 0;
  uint64_t media_bytes = 0;
  uint64_t logical_blocks = 0;
  bool clean = false;
  uint8_t newest_slot = 0;
  std::array<SlotInfo, 2> slots{};
  std::string primary_name;
  uint64_t primary_blocks = 0;
};

// Encodes into exactly one block.
std::vector<std::byte> EncodeSuperblock(const Superblock& sb);
// NotFound if the magic is absent; DataLoss on a checksum mismatch;
// FailedPrecondition for an unknown format version, or for a mirror
// device's label (the pool starts after it: open the device as a mirror).
absl::StatusOr<Superblock> DecodeSuperblock(std::span<const std::byte> block);

enum class Stream : uint8_t { kUser = 0, kRelocation = 1 };
enum class OpType : uint8_t {
  kWrite = 1,
  kTrim = 2,
  kReloc = 3,
  kTree = 4,
  kDrop = 5,
  kRollback = 6,
  kClone = 7,
  kAttr = 8,
  kDataset = 10,
  kResize = 11,
};

struct WriteOp {
  uint32_t vol = 0;
  Bno lba = 0;
  std::vector<Bno> vba;        // one per block (empty until the committer plans it)
  std::vector<uint32_t> csum;  // one per block: the write's length
  Bno count() const { return Bno(csum.size()); }
};
struct TrimOp {
  uint32_t vol = 0;
  Bno lba = 0;
  Bno count = 0;
};
struct RelocBlock {
  Bno vba = 0;
  Bno src_pba = 0;
  uint32_t csum = 0;
  uint64_t data_seq = 0;
  uint32_t vol = 0;
  Bno lba = 0;
};
struct RelocOp {
  std::vector<RelocBlock> blocks;
};

struct TreeOp {
  uint32_t id = 0;
  uint32_t src = 0;
  uint8_t kind = 0;   // 0 volume (activation), 1 snapshot
  uint8_t flags = 0;  // bit 0: read-only
  uint64_t time_ns = 0;
  std::string name;
};
// DATASET: a new empty tree (docs/architecture.md, "Datasets").
struct DatasetOp {
  uint32_t id = 0;
  uint8_t kind = 0;   // ftl::DatasetKind: 0 block volume, 1 key-value
  uint8_t flags = 0;  // bit 0: read-only
  uint64_t blocks = 0;
  uint64_t time_ns = 0;
  std::string name;
};
// Largest DATASET kind and size (Bno is 32-bit; kNoBlock is no block).
inline constexpr uint8_t kMaxDatasetKind = 1;
inline constexpr uint64_t kMaxDatasetBlocks = uint64_t(UINT32_MAX) - 1;
// RESIZE: a volume's new size (docs/architecture.md, "Datasets").
struct ResizeOp {
  uint32_t vol = 0;
  uint8_t flags = 0;  // bit 0 (kResizeForce): may drop data past the new end
  uint64_t blocks = 0;
};
inline constexpr uint8_t kResizeForce = 1;
struct RollbackOp {
  uint32_t vol = 0;
  uint32_t snap = 0;
};
struct CloneOp {
  uint32_t src = 0;
  Bno src_lba = 0;
  uint32_t dst = 0;
  Bno dst_lba = 0;
  Bno count = 0;
};
struct AttrOp {
  uint32_t vol = 0;
  Bno lba = 0;
  Bno count = 0;
  uint8_t set = 0;
  uint8_t clear = 0;
};
inline constexpr uint8_t kAttrImmutable = 1;
inline constexpr uint8_t kAttrNonPersistent = 2;

struct Op {
  OpType type;
  WriteOp write;  // kWrite
  TrimOp trim;    // kTrim
  RelocOp reloc;  // kReloc
  TreeOp tree;    // kTree
  uint32_t drop = 0;  // kDrop: tree id
  RollbackOp rollback;
  CloneOp clone;
  AttrOp attr;
  DatasetOp dataset;  // kDataset
  ResizeOp resize;    // kResize
  uint32_t data_blocks() const;
};

struct RecordHeader {
  uint16_t header_blocks = 1;
  uint32_t data_blocks = 0;
  uint64_t seq = 0;
  uint64_t durable_seq = 0;
  Uuid uuid{};
  Stream stream = Stream::kUser;
  // JOINED: atomic together with record seq + 1 (see the grammar).
  bool joined = false;
  // A sector header (sector 1..7, header_blocks 0): its data starts at
  // block data_start of the segment. 0 for a block header.
  uint8_t sector = 0;
  uint32_t data_start = 0;
  // As encoded or decoded.
  uint32_t payload_len = 0;
  std::vector<Op> ops;
};

// Payload bytes an op adds to a header (a write's by its csum count, so
// also before its VBAs are planned).
size_t OpPayloadBytes(const Op& op);
// Payload bytes of a WRITE of n blocks.
size_t WritePayloadBytes(size_t n);
// Payload bytes of a RELOC op of these blocks (packed when they allow it).
size_t RelocPayloadBytes(std::span<const RelocBlock> blocks);
// Header blocks needed for `payload_bytes` of ops.
inline uint32_t HeaderBlocksFor(size_t payload_bytes) {
  return uint32_t((kRecordFixedBytes + payload_bytes + kBlock - 1) / kBlock);
}
// Encodes the header (header_blocks blocks) into `out`, which must hold
// h.header_blocks * 4096 bytes. Fills in header_blocks, data_blocks and
// payload_len from the ops. With h.sector > 0 it encodes a sector header
// instead: header_blocks 0, into the 512 bytes `out` must hold (REQUIRES:
// the payload fits a sector, SectorHeaderFits).
void EncodeRecordHeader(RecordHeader& h, std::span<std::byte> out);
// Whether ops with `payload_bytes` of payload fit a sector header (and a
// block header that leaves sectors 1-7 free).
inline bool SectorHeaderFits(size_t payload_bytes) { return payload_bytes <= kMaxSectorPayload; }
// Decodes a header from its first block; `more` supplies further header
// blocks when header_blocks > 1 (pass the whole header span if available).
// A sector header decodes from its 512 bytes.
// NotFound: no record magic (end of segment). DataLoss: checksum mismatch or
// malformed payload. OutOfRange: needs more blocks than given (call again
// with header_blocks blocks).
absl::StatusOr<RecordHeader> DecodeRecordHeader(std::span<const std::byte> header);
// The same without comparing the header checksum: what a damaged header
// claims (recovery with accept_loss lists and fences off the blocks it
// names). Nothing it returns is verified.
absl::StatusOr<RecordHeader> DecodeRecordHeaderUnverified(std::span<const std::byte> header);
// Reads header_blocks from the first block without verifying anything
// (0 if no magic).
uint16_t PeekHeaderBlocks(std::span<const std::byte> first_block);
// Reads a header's seq and pool uuid without verifying anything: whose a
// damaged header claims to be (nullopt if no magic or too short).
struct RecordIdentity {
  uint64_t seq = 0;
  Uuid uuid{};
};
std::optional<RecordIdentity> PeekRecordIdentity(std::span<const std::byte> header);

}  // namespace ftl::log
