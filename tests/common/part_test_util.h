#pragma once
// Helpers shared by the tests of the engine's parts (issue 20): each part
// is tested on its own, not through ftl::Pool.
//
//  - (ASSERT_OK / EXPECT_OK come from status_asserts.h);
//  - Blocks(): 4 KiB blocks of a recognisable pattern and their checksums;
//  - ApplyWriteRecord(): a WRITE record applied to a hand-built MapState,
//    the way the committer or replay applies it;
//  - CountingMedia: a Media wrapper that counts the hints and syncs the
//    engine gives it;
//  - Engine: the parts of an open pool assembled and opened as
//    core::PoolImpl's constructor and open steps do (no cleaner, no
//    volume objects), for the committer and the parts above it.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/checkpointer.h"
#include "commit/committer.h"
#include "commit/record_writer.h"
#include "commit/request.h"
#include "commit/segment_allocator.h"
#include "commit/slot_classifier.h"
#include "ftl/media.h"
#include "ftl/pool.h"
#include "gc/placement.h"
#include "log/durability.h"
#include "status_asserts.h"
#include "log/log_format.h"
#include "media/aligned_buffer.h"
#include "recovery/recovery.h"
#include "state/map_state.h"
#include "state/pool_state.h"
#include "test_util.h"
#include "util/checksum.h"

namespace ftl::parts {

inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}


using log::Bno;
using log::kNoBlock;

// n blocks of data named by `tag`, 4 KiB aligned (a media write needs it).
struct Blocks {
  Blocks(uint64_t tag, Bno n) : buf(size_t(n) * kBlockSize) {
    std::vector<std::byte> p = testing::Pattern(tag, 0, buf.size());
    std::memcpy(buf.data(), p.data(), p.size());
    for (Bno i = 0; i < n; ++i) csums.push_back(util::BlockChecksum(block(i)));
  }
  std::span<const std::byte> block(Bno i) const {
    return {buf.data() + size_t(i) * kBlockSize, kBlockSize};
  }
  std::span<const std::byte> all() const { return {buf.data(), buf.size()}; }
  const std::byte* data() const { return buf.data(); }
  Bno count() const { return Bno(csums.size()); }
  media::AlignedBuffer buf;
  std::vector<uint32_t> csums;
};

// Applies a record of one WRITE of [lba, lba+n) of `vol` whose header is at
// physical block `pba` (data at pba+1...), with VBAs planned as the
// committer plans them. Returns the VBAs.
inline std::vector<Bno> ApplyWriteRecord(state::MapState& map, uint32_t vol, Bno lba, Bno n,
                                         Bno pba, uint64_t seq, uint32_t csum_base = 100) {
  log::RecordHeader h;
  h.seq = seq;
  log::Op op;
  op.type = log::OpType::kWrite;
  op.write.vol = vol;
  op.write.lba = lba;
  for (Bno i = 0; i < n; ++i) op.write.csum.push_back(csum_base + i);
  map.PlanWrite(vol, lba, n, &op.write.vba);
  std::vector<Bno> vbas = op.write.vba;
  h.data_blocks = n;
  h.ops.push_back(std::move(op));
  map.ApplyRecord(h, pba);
  return vbas;
}

// Applies a record of one note op (TREE, DROP, ...) at physical block `pba`.
inline void ApplyNoteRecord(state::MapState& map, log::Op op, Bno pba, uint64_t seq) {
  log::RecordHeader h;
  h.seq = seq;
  h.ops.push_back(std::move(op));
  map.ApplyRecord(h, pba);
}

// Forwards to another Media and counts what the engine asks of it.
class CountingMedia : public Media {
 public:
  explicit CountingMedia(std::shared_ptr<Media> inner) : inner_(std::move(inner)) {}
  uint64_t size() const override { return inner_->size(); }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    return inner_->Read(offset, out);
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override {
    ++writes;
    return inner_->Write(offset, data);
  }
  absl::Status Sync() override {
    ++syncs;
    return inner_->Sync();
  }
  absl::Status Discard(uint64_t offset, uint64_t length) override {
    return inner_->Discard(offset, length);
  }
  void Prepare(uint64_t offset, uint64_t length) override {
    absl::MutexLock l(&mu);
    prepared.push_back({offset, length});
  }
  void StartWriteback(uint64_t offset, uint64_t length) override {
    absl::MutexLock l(&mu);
    written_back.push_back({offset, length});
  }
  std::string Describe() const override { return "counting " + inner_->Describe(); }

  std::atomic<int> writes{0}, syncs{0};
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> prepared, written_back;

 private:
  std::shared_ptr<Media> inner_;
};

struct EngineOptions {
  OpenOptions::Placement placement = OpenOptions::Placement::kOff;
  bool read_only = false;
  bool accept_loss = false;
  std::chrono::milliseconds proof_delay{0};  // OpenOptions::proof_delay
  // OpenOptions::sector_headers. Off here: these tests read a record's
  // header in the block before its data (HeaderAt at computed places);
  // sector chains are tested in log_format_test, committer_test
  // (SmallRecordsChain...), recovery_test and the crash tier.
  bool sector_headers = false;
};

// The parts of an open pool, wired as core::PoolImpl wires them; Open()
// runs PoolImpl's open steps (read superblock, recover, write recovered
// checkpoints, mark dirty, configure and start the writer). No cleaner:
// a full pool fails user writes with ResourceExhausted.
class Engine {
 public:
  explicit Engine(std::shared_ptr<Media> m)
      : media(std::move(m)),
        durability(media),
        checkpointer(media, &durability, &state),
        segments(media, &state, &placement),
        classifier(&state, &placement),
        writer(media, &state, &segments, &durability),
        committer(&state, &durability, &checkpointer, &segments, &classifier, &writer) {}

  absl::Status Open(const EngineOptions& o = {}) {
    if (absl::Status s = checkpointer.ReadSuperblock(&degraded); !s.ok()) return s;
    const log::Superblock& sb = checkpointer.superblock();
    state.InitPins(sb.segment_count);
    segments.Configure(sb.data_offset, sb.segment_blocks);
    absl::StatusOr<recovery::Recovered> r = recovery::Recovery(media, sb, o.accept_loss).Run();
    if (!r.ok()) return r.status();
    state.map = std::move(r->map);
    report = r->report;
    if (r->clean) segments.AdoptOpenSegments();
    durability.Reset(r->next_seq);
    writer.Configure(sb.uuid, sb.data_offset, r->next_seq);
    writer.set_sector_headers(o.sector_headers);
    if (!o.read_only && r->needs_checkpoints) {
      for (int i = 0; i < 2; ++i)
        if (absl::Status s = checkpointer.Checkpoint(writer.next_seq()); !s.ok()) return s;
    }
    if (!o.read_only)
      if (absl::Status s = checkpointer.MarkDirty(); !s.ok()) return s;
    placement.set_active(o.placement == OpenOptions::Placement::kOn);
    classifier.Configure(o.placement, sb.logical_blocks, sb.segment_blocks);
    {
      absl::ReaderMutexLock l(&state.map_mu);
      checkpointer.NoteMapSize(state.map->tree_context()->leaves,
                               state.map->tree_context()->inners);
    }
    checkpointer.Started(writer.next_seq());
    commit::CommitterOptions co;
    co.read_only = o.read_only;
    co.checkpoint_interval = std::chrono::milliseconds(0);
    co.auto_checkpoint = false;
    co.segment_blocks = sb.segment_blocks;
    co.segment_count = sb.segment_count;
    co.proof_delay = o.proof_delay;
    committer.Configure(co, [this] { ++catalogue_changes; });
    committer.Start();
    return absl::OkStatus();
  }

  // PoolImpl's close steps.
  absl::Status Close() {
    committer.Stop();
    if (absl::Status s = committer.failure(); !s.ok()) return s;
    absl::Status s = committer.WithCommitRole([&] {
      segments.SealHotSegments();
      segments.CheckpointTaken();
      return checkpointer.Checkpoint(writer.next_seq());
    });
    if (!s.ok()) return s;
    return checkpointer.MarkClean();
  }

  const log::Superblock& sb() const { return checkpointer.superblock(); }
  uint64_t MediaOffset(Bno pba) const {
    return sb().data_offset + uint64_t(pba) * kBlockSize;
  }

  // A user write request of `data` (which must outlive it) to `vol`.
  static commit::Request* WriteRequest(uint32_t vol, Bno lba, const Blocks& data,
                                       bool fua = false) {
    auto* r = new commit::Request;
    r->fua = fua;
    r->ops.push_back(commit::ReqOp::Write(vol, lba, data.csums, data.data()));
    return r;
  }
  absl::Status Write(uint32_t vol, Bno lba, const Blocks& data, bool fua = false) {
    return committer.SubmitAndWait(WriteRequest(vol, lba, data, fua));
  }
  absl::Status Trim(uint32_t vol, Bno lba, Bno n) {
    auto* r = new commit::Request;
    r->frees = true;
    r->ops.push_back(commit::ReqOp::Trim(vol, lba, n));
    return committer.SubmitAndWait(r);
  }
  // The physical block `vol`'s block `lba` is read from, or kNoBlock.
  Bno Pba(uint32_t vol, Bno lba) {
    std::vector<std::pair<log::Pba, uint32_t>> out;
    std::vector<uint32_t> pinned;
    state.LookupForRead(vol, lba, 1, &out, &pinned);
    state.Unpin(pinned);
    return out[0].first.value();
  }
  // Whether block `lba` of `vol` reads as block `i` of `data` (checksum
  // in the map and bytes on the media).
  bool Holds(uint32_t vol, Bno lba, const Blocks& data, Bno i) {
    std::vector<std::pair<log::Pba, uint32_t>> out;
    std::vector<uint32_t> pinned;
    state.LookupForRead(vol, lba, 1, &out, &pinned);
    state.Unpin(pinned);
    if (out[0].first == log::Pba(kNoBlock) || out[0].second != data.csums[i]) return false;
    media::AlignedBuffer b(kBlockSize);
    if (!media->Read(MediaOffset(out[0].first.value()), b.span()).ok()) return false;
    return std::memcmp(b.data(), data.block(i).data(), kBlockSize) == 0;
  }
  // The record header at physical block `pba`.
  absl::StatusOr<log::RecordHeader> HeaderAt(Bno pba) {
    media::AlignedBuffer b(size_t(log::kMaxHeaderBlocks) * kBlockSize);
    if (absl::Status s = media->Read(MediaOffset(pba), b.span()); !s.ok()) return s;
    return log::DecodeRecordHeader(b.span());
  }
  // The sector header in sector `sector` of physical block `pba`.
  absl::StatusOr<log::RecordHeader> SectorAt(Bno pba, uint32_t sector) {
    media::AlignedBuffer b(kBlockSize);
    if (absl::Status s = media->Read(MediaOffset(pba), b.span()); !s.ok()) return s;
    return log::DecodeRecordHeader(b.span().subspan(size_t(sector) * log::kSectorBytes, log::kSectorBytes));
  }

  std::shared_ptr<Media> media;
  state::PoolState state;
  log::Durability durability;
  checkpoint::Checkpointer checkpointer;
  gc::Placement placement;
  commit::SegmentAllocator segments;
  commit::SlotClassifier classifier;
  commit::RecordWriter writer;
  commit::Committer committer;
  std::atomic<int> catalogue_changes{0};
  std::vector<std::string> degraded;
  std::string report;
};

// A formatted media of `bytes` with 256 KiB segments (64 blocks).
inline std::shared_ptr<Media> FormattedMem(uint64_t bytes = 16 << 20) {
  std::shared_ptr<Media> m = NewMemMedia(bytes);
  absl::Status s = checkpoint::FormatMedia(*m, testing::SmallFormat(), /*discard=*/false);
  EXPECT_TRUE(s.ok()) << s;
  return m;
}

}  // namespace ftl::parts
