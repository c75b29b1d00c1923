// On-media format: superblock and record header round trips and rejection
// of damaged or foreign bytes.

#include "log/log_format.h"
#include "util/encoding.h"

#include <gtest/gtest.h>

#include "log/segment_reader.h"
#include "status_asserts.h"
#include "util/checksum.h"

namespace ftl::log {
namespace {

RecordHeader SampleHeader() {
  RecordHeader h;
  h.seq = 42;
  h.durable_seq = 40;
  h.uuid = NewUuid();
  h.stream = Stream::kRelocation;
  Op w;
  w.type = OpType::kWrite;
  w.write.vol = 3;
  w.write.lba = 100;
  w.write.vba = {7, 8, 9};
  w.write.csum = {1, 2, 3};
  Op t;
  t.type = OpType::kTrim;
  t.trim = {3, 500, 12};
  Op r;
  r.type = OpType::kReloc;
  r.reloc.blocks = {{11, 12, 13, 14, 15, 16}};
  h.ops = {w, t, r};
  return h;
}

TEST(LogFormat, RecordHeaderRoundTrip) {
  RecordHeader h = SampleHeader();
  std::vector<std::byte> buf(kBlock);
  EncodeRecordHeader(h, buf);
  EXPECT_EQ(h.header_blocks, 1);
  EXPECT_EQ(h.data_blocks, 4u);
  EXPECT_EQ(PeekHeaderBlocks(buf), 1);
  auto d = DecodeRecordHeader(buf);
  ASSERT_OK(d);
  EXPECT_EQ(d->seq, 42u);
  EXPECT_EQ(d->durable_seq, 40u);
  EXPECT_EQ(d->uuid, h.uuid);
  EXPECT_EQ(d->stream, Stream::kRelocation);
  ASSERT_EQ(d->ops.size(), 3u);
  EXPECT_EQ(d->ops[0].write.vba, (std::vector<Bno>{7, 8, 9}));
  EXPECT_EQ(d->ops[0].write.csum, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(d->ops[1].trim.lba, 500u);
  EXPECT_EQ(d->ops[1].trim.count, 12u);
  EXPECT_EQ(d->ops[2].reloc.blocks[0].data_seq, 14u);
  EXPECT_EQ(d->ops[2].reloc.blocks[0].lba, 16u);
  EXPECT_FALSE(d->joined);
  h.joined = true;
  EncodeRecordHeader(h, buf);
  d = DecodeRecordHeader(buf);
  ASSERT_OK(d);
  EXPECT_TRUE(d->joined);
}

// RELOC packs (RELOCP, 20 bytes a block) when its blocks share a volume and
// their data seqs lie within 2^32; otherwise it keeps the 28-byte form.
// Both decode to the same blocks, and OpPayloadBytes says what the encoder
// writes.
TEST(LogFormat, RelocPacksWhenItCanAndRoundTripsEitherWay) {
  auto round_trip = [](const std::vector<RelocBlock>& blocks, size_t want_payload) {
    RecordHeader h;
    h.seq = 1ull << 40;
    h.stream = Stream::kRelocation;
    Op r;
    r.type = OpType::kReloc;
    r.reloc.blocks = blocks;
    h.ops = {r};
    EXPECT_EQ(OpPayloadBytes(r), want_payload);
    std::vector<std::byte> buf(2 * kBlock);
    EncodeRecordHeader(h, buf);
    EXPECT_EQ(h.header_blocks, HeaderBlocksFor(want_payload));
    auto d = DecodeRecordHeader(std::span(buf).first(h.header_blocks * kBlock));
    ASSERT_OK(d);
    ASSERT_EQ(d->ops.size(), 1u);
    ASSERT_EQ(d->ops[0].type, OpType::kReloc);
    const auto& got = d->ops[0].reloc.blocks;
    ASSERT_EQ(got.size(), blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(got[i].vba, blocks[i].vba) << i;
      EXPECT_EQ(got[i].src_pba, blocks[i].src_pba) << i;
      EXPECT_EQ(got[i].csum, blocks[i].csum) << i;
      EXPECT_EQ(got[i].data_seq, blocks[i].data_seq) << i;
      EXPECT_EQ(got[i].vol, blocks[i].vol) << i;
      EXPECT_EQ(got[i].lba, blocks[i].lba) << i;
    }
  };
  std::vector<RelocBlock> one_vol;
  for (uint32_t i = 0; i < 200; ++i)
    one_vol.push_back({1000 + i, 50000 + i, 0xABC00000u + i, (1ull << 36) + 7 * i, 2, 9000 - i});
  // 200 packed blocks fill exactly one header block.
  round_trip(one_vol, 17 + 20 * 200);
  EXPECT_EQ(HeaderBlocksFor(17 + 20 * 200), 1u);
  // Data seqs exactly 2^32 - 1 apart still pack; 2^32 apart do not.
  auto wide = one_vol;
  wide[5].data_seq = wide[0].data_seq + UINT32_MAX;
  round_trip(wide, 17 + 20 * 200);
  wide[5].data_seq = wide[0].data_seq + (1ull << 32);
  round_trip(wide, 5 + 28 * 200);
  // Two volumes: the unpacked form.
  auto mixed = one_vol;
  mixed[199].vol = 3;
  round_trip(mixed, 5 + 28 * 200);
  // A packed op next to other ops decodes in order.
  RecordHeader h = SampleHeader();
  h.ops[2].reloc.blocks = {one_vol.begin(), one_vol.begin() + 3};
  std::vector<std::byte> buf(kBlock);
  EncodeRecordHeader(h, buf);
  auto d = DecodeRecordHeader(buf);
  ASSERT_OK(d);
  ASSERT_EQ(d->ops.size(), 3u);
  EXPECT_EQ(d->ops[2].reloc.blocks[2].data_seq, one_vol[2].data_seq);
  EXPECT_EQ(d->ops[1].trim.count, 12u);
}

TEST(LogFormat, NoteOpsRoundTrip) {
  RecordHeader h;
  h.seq = 7;
  Op tree;
  tree.type = OpType::kTree;
  tree.tree = {12, 0, 1, 1, 123456789, "hourly-1"};
  Op drop;
  drop.type = OpType::kDrop;
  drop.drop = 9;
  Op rb;
  rb.type = OpType::kRollback;
  rb.rollback = {0, 12};
  Op cl;
  cl.type = OpType::kClone;
  cl.clone = {12, 100, 0, 200, 50};
  Op at;
  at.type = OpType::kAttr;
  at.attr = {0, 5, 6, kAttrNonPersistent, kAttrImmutable};
  h.ops = {tree, drop, rb, cl, at};
  size_t payload = 0;
  for (const Op& o : h.ops) payload += OpPayloadBytes(o);
  std::vector<std::byte> buf(kBlock);
  EncodeRecordHeader(h, buf);
  EXPECT_EQ(h.data_blocks, 0u);
  auto d = DecodeRecordHeader(buf);
  ASSERT_OK(d);
  ASSERT_EQ(d->ops.size(), 5u);
  EXPECT_EQ(d->ops[0].tree.name, "hourly-1");
  EXPECT_EQ(d->ops[0].tree.time_ns, 123456789u);
  EXPECT_EQ(d->ops[0].tree.kind, 1);
  EXPECT_EQ(d->ops[1].drop, 9u);
  EXPECT_EQ(d->ops[2].rollback.snap, 12u);
  EXPECT_EQ(d->ops[3].clone.dst_lba, 200u);
  EXPECT_EQ(d->ops[3].clone.count, 50u);
  EXPECT_EQ(d->ops[4].attr.set, kAttrNonPersistent);
  EXPECT_EQ(d->ops[4].attr.clear, kAttrImmutable);
  // The payload length the header carries is what OpPayloadBytes predicts.
  EXPECT_EQ(util::GetU32(buf.data() + 12), payload);
}

TEST(LogFormat, DatasetOpRoundTripsAndIsChecked) {
  RecordHeader h;
  h.seq = 8;
  Op ds;
  ds.type = OpType::kDataset;
  ds.dataset = {17, 1, 0, (uint64_t(1) << 28), 987654321, "kv-store"};
  Op drop;
  drop.type = OpType::kDrop;
  drop.drop = 17;
  h.ops = {ds, drop};
  std::vector<std::byte> buf(kBlock);
  EncodeRecordHeader(h, buf);
  EXPECT_EQ(h.data_blocks, 0u);
  EXPECT_EQ(util::GetU32(buf.data() + 12), OpPayloadBytes(ds) + OpPayloadBytes(drop));
  auto d = DecodeRecordHeader(buf);
  ASSERT_OK(d);
  ASSERT_EQ(d->ops.size(), 2u);
  EXPECT_EQ(d->ops[0].type, OpType::kDataset);
  EXPECT_EQ(d->ops[0].dataset.id, 17u);
  EXPECT_EQ(d->ops[0].dataset.kind, 1);
  EXPECT_EQ(d->ops[0].dataset.flags, 0);
  EXPECT_EQ(d->ops[0].dataset.blocks, uint64_t(1) << 28);
  EXPECT_EQ(d->ops[0].dataset.time_ns, 987654321u);
  EXPECT_EQ(d->ops[0].dataset.name, "kv-store");
  EXPECT_EQ(d->ops[1].drop, 17u);
  // The wire type is 10, as the grammar says.
  EXPECT_EQ(uint8_t(buf[kRecordFixedBytes]), 10);
  // A kind or size no build writes is a damaged header.
  for (auto bad : {std::pair<uint8_t, uint64_t>{2, 1}, {1, 0}, {0, kMaxDatasetBlocks + 1}}) {
    h.ops = {ds};
    h.ops[0].dataset.kind = bad.first;
    h.ops[0].dataset.blocks = bad.second;
    EncodeRecordHeader(h, buf);
    EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeader(buf).status())) << int(bad.first);
  }
  h.ops = {ds};
  h.ops[0].dataset.blocks = kMaxDatasetBlocks;
  EncodeRecordHeader(h, buf);
  EXPECT_OK(DecodeRecordHeader(buf));
}

TEST(LogFormat, ResizeOpRoundTripsAndIsChecked) {
  RecordHeader h;
  h.seq = 9;
  Op rs;
  rs.type = OpType::kResize;
  rs.resize = {5, kResizeForce, (uint64_t(1) << 32) - 2};
  Op grow;
  grow.type = OpType::kResize;
  grow.resize = {0, 0, 1};
  h.ops = {rs, grow};
  std::vector<std::byte> buf(kBlock);
  EncodeRecordHeader(h, buf);
  EXPECT_EQ(h.data_blocks, 0u);
  EXPECT_EQ(OpPayloadBytes(rs), 14u);
  EXPECT_EQ(util::GetU32(buf.data() + 12), OpPayloadBytes(rs) + OpPayloadBytes(grow));
  auto d = DecodeRecordHeader(buf);
  ASSERT_OK(d);
  ASSERT_EQ(d->ops.size(), 2u);
  EXPECT_EQ(d->ops[0].type, OpType::kResize);
  EXPECT_EQ(d->ops[0].resize.vol, 5u);
  EXPECT_EQ(d->ops[0].resize.flags, kResizeForce);
  EXPECT_EQ(d->ops[0].resize.blocks, kMaxDatasetBlocks);
  EXPECT_EQ(d->ops[1].resize.vol, 0u);
  EXPECT_EQ(d->ops[1].resize.flags, 0);
  EXPECT_EQ(d->ops[1].resize.blocks, 1u);
  // The wire type is 11, as the grammar says.
  EXPECT_EQ(uint8_t(buf[kRecordFixedBytes]), 11);
  // A size no build writes is a damaged header.
  for (uint64_t bad : {uint64_t(0), kMaxDatasetBlocks + 1}) {
    h.ops = {rs};
    h.ops[0].resize.blocks = bad;
    EncodeRecordHeader(h, buf);
    EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeader(buf).status())) << bad;
  }
}

TEST(LogFormat, MultiBlockHeader) {
  RecordHeader h;
  h.seq = 1;
  Op w;
  w.type = OpType::kWrite;
  for (Bno i = 0; i < 1500; ++i) {
    w.write.vba.push_back(i);
    w.write.csum.push_back(i * 3);
  }
  h.ops = {w};
  std::vector<std::byte> buf(kBlock * kMaxHeaderBlocks);
  EncodeRecordHeader(h, buf);
  EXPECT_EQ(h.header_blocks, 3);
  EXPECT_TRUE(absl::IsOutOfRange(DecodeRecordHeader(std::span(buf).subspan(0, kBlock)).status()));
  auto d = DecodeRecordHeader(std::span(buf).subspan(0, 3 * kBlock));
  ASSERT_OK(d);
  EXPECT_EQ(d->ops[0].write.vba.size(), 1500u);
}

TEST(LogFormat, DamagedHeaderIsRejected) {
  RecordHeader h = SampleHeader();
  std::vector<std::byte> buf(kBlock);
  EncodeRecordHeader(h, buf);
  for (size_t at : {size_t(20), size_t(70), size_t(100)}) {
    auto copy = buf;
    copy[at] ^= std::byte{0x10};
    EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeader(copy).status())) << at;
  }
  std::vector<std::byte> zeros(kBlock);
  EXPECT_TRUE(absl::IsNotFound(DecodeRecordHeader(zeros).status()));
}

TEST(LogFormat, SuperblockRoundTripAndVersionCheck) {
  Superblock sb;
  sb.uuid = NewUuid();
  sb.generation = 9;
  sb.segment_blocks = 1024;
  sb.segment_count = 77;
  sb.ckpt_slot_blocks = 33;
  sb.data_offset = 1 << 20;
  sb.media_bytes = 1 << 30;
  sb.logical_blocks = 5000;
  sb.clean = true;
  sb.newest_slot = 1;
  sb.slots[1] = {5, 6, 7};
  sb.primary_name = "vol";
  sb.primary_blocks = 4096;
  auto enc = EncodeSuperblock(sb);
  ASSERT_EQ(enc.size(), kBlock);
  auto d = DecodeSuperblock(enc);
  ASSERT_OK(d);
  EXPECT_EQ(d->generation, 9u);
  EXPECT_EQ(d->slots[1].xxh3, 7u);
  EXPECT_EQ(d->primary_name, "vol");
  EXPECT_TRUE(d->clean);
  auto bad = enc;
  bad[30] ^= std::byte{1};
  EXPECT_TRUE(absl::IsDataLoss(DecodeSuperblock(bad).status()));
  for (uint32_t v = kOldestFormatVersion; v <= kFormatVersion; ++v) {
    sb.format_version = v;  // older formats still open
    EXPECT_OK(DecodeSuperblock(EncodeSuperblock(sb))) << v;
  }
  EXPECT_EQ(kFormatVersion, 10u);  // chain heads written as a lone sector
  EXPECT_EQ(kOldestFormatVersion, 1u);
  sb.format_version = 0;
  EXPECT_TRUE(absl::IsFailedPrecondition(DecodeSuperblock(EncodeSuperblock(sb)).status()));
  sb.format_version = kFormatVersion + 1;
  auto newer = DecodeSuperblock(EncodeSuperblock(sb));
  EXPECT_TRUE(absl::IsFailedPrecondition(newer.status()));
  EXPECT_NE(newer.status().message().find("format version"), std::string::npos);
}

// Reads blocks of a segment image in memory (the image may change between
// scans: it is read by reference).
SegmentBlockReader MemoryReader(const std::vector<std::byte>& seg) {
  return [&seg](uint32_t b, uint32_t n, std::span<std::byte> out) {
    std::copy_n(seg.begin() + size_t(b) * kBlock, size_t(n) * kBlock, out.begin());
    return absl::OkStatus();
  };
}

ScanOptions Options(uint32_t segment_blocks, const Uuid& uuid) {
  ScanOptions so;
  so.segment_blocks = segment_blocks;
  so.uuid = uuid;
  return so;
}

// A record of pool `u` writing `data` (one block) at vba `seq`.
RecordHeader OneBlockWrite(uint64_t seq, const Uuid& u, std::span<const std::byte> data) {
  RecordHeader h;
  h.seq = seq;
  h.uuid = u;
  Op w;
  w.type = OpType::kWrite;
  w.write.vba = {Bno(seq)};
  w.write.csum = {util::BlockChecksum(data)};
  h.ops = {w};
  return h;
}

TEST(SegmentReader, StopsAtTornDataAndNonIncreasingSeq) {
  Uuid uuid = NewUuid();
  const uint32_t kSeg = 16;
  std::vector<std::byte> seg(size_t(kSeg) * kBlock);
  auto put = [&](uint32_t at, uint64_t seq, uint8_t fill) {
    std::vector<std::byte> data(kBlock, std::byte{fill});
    RecordHeader h = OneBlockWrite(seq, uuid, data);
    EncodeRecordHeader(h, std::span(seg).subspan(size_t(at) * kBlock, kBlock));
    std::copy(data.begin(), data.end(), seg.begin() + size_t(at + 1) * kBlock);
  };
  put(0, 5, 1);
  put(2, 6, 2);
  put(4, 3, 3);  // stale: lower seq ends the segment
  auto reader = MemoryReader(seg);
  ScanOptions so = Options(kSeg, uuid);
  auto scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 2u);
  EXPECT_EQ(scan.end_block, 4u);
  EXPECT_EQ(scan.stop_reason, "sequence");
  // A torn data block: the record comes back flagged and the scan stops.
  seg[size_t(3) * kBlock + 100] ^= std::byte{1};
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 2u);
  EXPECT_FALSE(scan.records[1].data_ok);
  EXPECT_EQ(scan.stop_reason, "data checksum");
  // Another pool's records are not ours.
  so.uuid = NewUuid();
  EXPECT_EQ(ScanSegment(so, reader).records.size(), 0u);
}

// A sector header (format 9): header_blocks 0, one 512-byte sector, its
// data placed by data_start; a flipped bit, a sector index out of range or
// a block header claiming sector fields are refused.
TEST(LogFormat, SectorHeaderRoundTripAndChecks) {
  RecordHeader h = SampleHeader();
  h.sector = 3;
  h.data_start = 17;
  std::vector<std::byte> sector(kSectorBytes);
  EncodeRecordHeader(h, sector);
  EXPECT_EQ(h.header_blocks, 0);
  EXPECT_EQ(h.data_blocks, 4u);
  EXPECT_TRUE(SectorHeaderFits(h.payload_len));
  auto d = DecodeRecordHeader(sector);
  ASSERT_OK(d);
  EXPECT_EQ(d->header_blocks, 0);
  EXPECT_EQ(d->sector, 3);
  EXPECT_EQ(d->data_start, 17u);
  EXPECT_EQ(d->seq, 42u);
  ASSERT_EQ(d->ops.size(), 3u);
  EXPECT_EQ(d->ops[0].write.vba, (std::vector<Bno>{7, 8, 9}));
  auto bad = sector;
  bad[100] ^= std::byte{4};  // inside the payload
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeader(bad).status()));
  // The sector field is covered by the checksum, and 0 or 8 is no sector.
  bad = sector;
  bad[50] = std::byte{0};
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeader(bad).status()));
  bad[50] = std::byte{8};
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeader(bad).status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecordHeaderUnverified(bad).status()));
  // A block header is unchanged by the new fields: sector 0, data_start 0.
  RecordHeader b = SampleHeader();
  b.data_start = 9;  // ignored for a block header
  std::vector<std::byte> block(kBlock);
  EncodeRecordHeader(b, block);
  EXPECT_EQ(b.header_blocks, 1);
  EXPECT_EQ(util::GetU32(block.data() + 60), 0u);
  d = DecodeRecordHeader(block);
  ASSERT_OK(d);
  EXPECT_EQ(d->sector, 0);
  EXPECT_EQ(d->data_start, 0u);
  EXPECT_EQ(d->payload_len, b.payload_len);
  // Sectors 1-7 of a small block header are zero: a chain may use them.
  for (size_t i = kSectorBytes; i < kBlock; ++i) ASSERT_EQ(block[i], std::byte{0}) << i;
}

// A chain of sector headers (log_format.h, "Sector chains") reads in order
// after its block header, each record's data where the previous one's
// ended; a damaged, misplaced or stale sector ends the chain and the next
// record starts at a block header.
TEST(SegmentReader, ReadsSectorChains) {
  Uuid uuid = NewUuid();
  const uint32_t kSeg = 16;
  std::vector<std::byte> seg(size_t(kSeg) * kBlock);
  auto make = [&](uint64_t seq, uint32_t nblocks, uint8_t fill, std::vector<std::byte>* data) {
    data->assign(size_t(nblocks) * kBlock, std::byte{fill});
    RecordHeader h;
    h.seq = seq;
    h.uuid = uuid;
    if (nblocks > 0) {
      Op w;
      w.type = OpType::kWrite;
      for (uint32_t i = 0; i < nblocks; ++i) {
        w.write.vba.push_back(Bno(seq * 10 + i));
        w.write.csum.push_back(util::BlockChecksum(std::span(*data).subspan(size_t(i) * kBlock, kBlock)));
      }
      h.ops = {w};
    }
    return h;
  };
  std::vector<std::byte> data;
  // Block header at 0 (seq 10, data at 1).
  RecordHeader h = make(10, 1, 1, &data);
  EncodeRecordHeader(h, std::span(seg).subspan(0, kBlock));
  std::copy(data.begin(), data.end(), seg.begin() + kBlock);
  // Sector 1: seq 11, two blocks at 2-3; sector 2: seq 13, no data (a
  // marker); sector 3: seq 14, one block at 4.
  auto sector = [&](uint32_t k, uint64_t seq, uint32_t start, uint32_t nblocks, uint8_t fill) {
    RecordHeader s = make(seq, nblocks, fill, &data);
    s.sector = uint8_t(k);
    s.data_start = start;
    EncodeRecordHeader(s, std::span(seg).subspan(size_t(k) * kSectorBytes, kSectorBytes));
    std::copy(data.begin(), data.end(), seg.begin() + size_t(start) * kBlock);
  };
  sector(1, 11, 2, 2, 2);
  sector(2, 13, 4, 0, 0);
  sector(3, 14, 4, 1, 3);
  // Block header at 5 (seq 15, data at 6).
  h = make(15, 1, 4, &data);
  EncodeRecordHeader(h, std::span(seg).subspan(size_t(5) * kBlock, kBlock));
  std::copy(data.begin(), data.end(), seg.begin() + size_t(6) * kBlock);
  auto reader = MemoryReader(seg);
  ScanOptions so = Options(kSeg, uuid);
  auto scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 5u) << scan.stop_reason;
  const uint64_t seqs[] = {10, 11, 13, 14, 15};
  const uint32_t firsts[] = {0, 2, 4, 4, 5};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(scan.records[i].header.seq, seqs[i]);
    EXPECT_EQ(scan.records[i].first_block, firsts[i]) << i;
    EXPECT_TRUE(scan.records[i].data_ok) << i;
  }
  EXPECT_EQ(scan.records[1].header_block, 0u);
  EXPECT_EQ(scan.records[1].header.sector, 1);
  EXPECT_EQ(scan.records[1].data_block(1), 3u);
  EXPECT_EQ(scan.records[4].header_block, 5u);
  EXPECT_EQ(scan.end_block, 7u);
  EXPECT_EQ(scan.stop_reason, "no record");

  // A torn sector 2: the chain ends after seq 11; block 4 holds no header.
  auto saved = seg;
  seg[2 * kSectorBytes + 24] ^= std::byte{1};  // its durable_seq
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 2u);
  EXPECT_EQ(scan.end_block, 4u);
  // With resync (recovery), the damage is counted, its claim kept, and
  // the block header after the chain still found.
  so.resync_after_damage = true;
  scan = ScanSegment(so, reader);
  EXPECT_EQ(scan.damaged, 1u);
  ASSERT_EQ(scan.damaged_headers.size(), 1u);
  EXPECT_EQ(scan.damaged_headers[0].header.seq, 13u);
  ASSERT_GE(scan.records.size(), 3u);
  EXPECT_EQ(scan.records.back().header.seq, 15u);
  so.resync_after_damage = false;
  seg = saved;

  // A damaged block header: without resync the segment ends there; with
  // resync the chain's sector headers still lead to their records (they
  // may prove the damaged one durable), and the claim is kept.
  seg[24] ^= std::byte{1};  // its durable_seq
  scan = ScanSegment(so, reader);
  EXPECT_EQ(scan.records.size(), 0u);
  so.resync_after_damage = true;
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 4u) << scan.stop_reason;
  EXPECT_EQ(scan.records[0].header.seq, 11u);
  EXPECT_EQ(scan.records[0].first_block, 2u);
  EXPECT_EQ(scan.records[3].header.seq, 15u);
  EXPECT_EQ(scan.damaged, 1u);
  ASSERT_EQ(scan.damaged_headers.size(), 1u);
  EXPECT_EQ(scan.damaged_headers[0].header.seq, 10u);
  // And a damaged middle sector as well: the next sector says where its
  // data starts.
  seg[1 * kSectorBytes + 24] ^= std::byte{1};
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 3u);
  EXPECT_EQ(scan.records[0].header.seq, 13u);
  EXPECT_EQ(scan.records[1].first_block, 4u);
  EXPECT_EQ(scan.damaged, 2u);
  so.resync_after_damage = false;
  seg = saved;

  // Another lap's bytes in the free sectors of a header block (a torn
  // first write of the block leaves them) are not damage.
  std::fill_n(seg.begin() + 5 * kBlock + 3 * kSectorBytes, kSectorBytes, std::byte{0x77});
  so.resync_after_damage = true;
  scan = ScanSegment(so, reader);
  EXPECT_EQ(scan.records.size(), 5u);
  EXPECT_EQ(scan.damaged, 0u);
  so.resync_after_damage = false;
  EXPECT_EQ(ScanSegment(so, reader).records.size(), 5u);
  seg = saved;

  // A sector whose data_start is not where the chain stands is not part of it.
  sector(2, 13, 5, 0, 0);
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 2u);
  seg = saved;

  // A stale sector (an older seq, as from an earlier lap) ends the chain.
  sector(2, 9, 4, 0, 0);
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 2u);
  seg = saved;

  // Torn data of a chained record: returned flagged, and the scan stops.
  seg[size_t(3) * kBlock + 9] ^= std::byte{1};
  scan = ScanSegment(so, reader);
  ASSERT_EQ(scan.records.size(), 2u);
  EXPECT_FALSE(scan.records[1].data_ok);
  EXPECT_EQ(scan.stop_reason, "data checksum");
  seg = saved;

  // A block header too large for a chain: its sectors are payload, never
  // read as headers.
  RecordHeader big = make(10, 0, 0, &data);
  for (int i = 0; i < 60; ++i) {
    Op t;
    t.type = OpType::kTrim;
    t.trim = {0, Bno(i), 1};
    big.ops.push_back(t);
  }
  EncodeRecordHeader(big, std::span(seg).subspan(0, kBlock));
  ASSERT_FALSE(SectorHeaderFits(big.payload_len));
  sector(7, 11, 1, 0, 0);  // would continue a chain, if there were one
  scan = ScanSegment(so, reader);
  EXPECT_EQ(scan.records.size(), 1u);
}

// Format 10: a chain's first header written as sector 0 alone leaves the
// block's sectors 1-7 with another lap's bytes. None of them continues the
// chain or counts as damage, unless it names this pool and a newer seq.
TEST(SegmentReader, LoneChainHeadOverAnotherLapsBytes) {
  Uuid uuid = NewUuid(), other = NewUuid();
  const uint32_t kSeg = 8;
  std::vector<std::byte> seg(size_t(kSeg) * kBlock);
  std::vector<std::byte> data;
  auto make = [&](uint64_t seq, uint8_t fill, const Uuid& u) {
    data.assign(kBlock, std::byte{fill});
    return OneBlockWrite(seq, u, data);
  };
  auto put_sector = [&](uint32_t k, RecordHeader h, uint32_t start) {
    h.sector = uint8_t(k);
    h.data_start = start;
    EncodeRecordHeader(h, std::span(seg).subspan(size_t(k) * kSectorBytes, kSectorBytes));
  };
  // The old lap: a valid sector of this pool (seq 3, as if continuing at
  // block 1), a torn one of this pool (seq 4), a torn one of another pool
  // (seq 100), and bytes without magic.
  put_sector(1, make(3, 9, uuid), 1);
  put_sector(2, make(4, 9, uuid), 2);
  seg[2 * kSectorBytes + 70] ^= std::byte{1};  // in the payload
  put_sector(3, make(100, 9, other), 2);
  seg[3 * kSectorBytes + 70] ^= std::byte{1};  // in the payload
  std::fill_n(seg.begin() + 4 * kSectorBytes, kSectorBytes, std::byte{0x77});
  for (uint32_t k : {2u, 3u})
    ASSERT_TRUE(absl::IsDataLoss(DecodeRecordHeader(std::span(seg).subspan(k * kSectorBytes, kSectorBytes)).status()));
  auto who = PeekRecordIdentity(std::span(seg).subspan(3 * kSectorBytes, kSectorBytes));
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->seq, 100u);
  EXPECT_EQ(who->uuid, other);
  EXPECT_FALSE(PeekRecordIdentity(std::span(seg).subspan(4 * kSectorBytes, kSectorBytes)).has_value());
  // This lap: the head (seq 10, data at 1) written as sector 0 alone.
  std::vector<std::byte> head(kBlock);
  RecordHeader first = make(10, 1, uuid);
  EncodeRecordHeader(first, head);
  std::copy_n(head.begin(), kSectorBytes, seg.begin());
  std::copy(data.begin(), data.end(), seg.begin() + kBlock);
  auto reader = MemoryReader(seg);
  ScanOptions so = Options(kSeg, uuid);
  // The chain's records are seqs 10.. with one block each, found with and
  // without resync, and nothing counted as damage.
  auto expect_chain = [&](size_t n) {
    for (bool resync : {false, true}) {
      so.resync_after_damage = resync;
      auto scan = ScanSegment(so, reader);
      ASSERT_EQ(scan.records.size(), n) << resync;
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(scan.records[i].header.seq, 10u + i);
      EXPECT_EQ(scan.end_block, 1u + n);
      EXPECT_EQ(scan.damaged, 0u) << resync;
    }
  };
  expect_chain(1);
  // The chain grows over the old sectors: sector 1 (seq 11, data at 2).
  put_sector(1, make(11, 2, uuid), 2);
  std::copy(data.begin(), data.end(), seg.begin() + 2 * kBlock);
  expect_chain(2);
  // Sector 2 of this lap (seq 12, data at 3), then damaged: it names this
  // pool and a newer seq, so with resync it is damage (and claimed).
  put_sector(2, make(12, 3, uuid), 3);
  std::copy(data.begin(), data.end(), seg.begin() + 3 * kBlock);
  so.resync_after_damage = false;
  EXPECT_EQ(ScanSegment(so, reader).records.size(), 3u);
  seg[2 * kSectorBytes + 70] ^= std::byte{1};  // in the payload
  EXPECT_EQ(ScanSegment(so, reader).records.size(), 2u);
  so.resync_after_damage = true;
  auto scan = ScanSegment(so, reader);
  EXPECT_EQ(scan.damaged, 1u);
  ASSERT_EQ(scan.damaged_headers.size(), 1u);
  EXPECT_EQ(scan.damaged_headers[0].header.seq, 12u);
}

}  // namespace
}  // namespace ftl::log
