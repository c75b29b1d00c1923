#include "gc/relocator.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "log/segment_reader.h"
#include "media/aligned_buffer.h"
#include "util/checksum.h"

namespace ftl::gc {
namespace {
using log::Bno;
// Relocated blocks per record: as many as one header block describes
// (a packed RELOC takes 20 bytes a block after the 64-byte fixed header
// and its own 17 bytes; log/log_format.h). Header blocks are dead space in
// every segment the cleaner writes. A chunk that cannot be packed (blocks
// of several volumes) takes two header blocks.
constexpr uint32_t kRelocChunkBlocks = (log::kBlock - log::kRecordFixedBytes - 17) / 20;
static_assert(kRelocChunkBlocks == 200);
}  // namespace

uint32_t Relocator::FreeSegments() {
  absl::ReaderMutexLock l(&state_->map_mu);
  return state_->map->segments().free_count();
}

uint32_t Relocator::SlackSegments() {
  // One segment per 128 segments of space not holding live data, at most
  // 64: nothing at fill 0.8-0.9 of a few hundred segments (each idle free
  // segment there costs ~0.03-0.1 of WA), several at low fill, where the
  // cleaner can then work ahead of the writers and free segments several
  // to a media sync.
  absl::ReaderMutexLock l(&state_->map_mu);
  const auto& segs = state_->map->segments();
  const uint64_t live_segs = (segs.live_blocks() + segs.segment_blocks() - 1) / segs.segment_blocks();
  const uint64_t spare = segs.count() > live_segs ? segs.count() - live_segs : 0;
  return uint32_t(std::min<uint64_t>(spare / 128, 64));
}

VictimInput Relocator::Candidates() {
  VictimInput in;
  absl::ReaderMutexLock l(&state_->map_mu);
  const auto& segs = state_->map->segments();
  in.segment_blocks = segs.segment_blocks();
  in.now_seq = durability_->last_written() + 1;
  in.gate_seq = checkpointer_->gate_seq();
  for (uint32_t s = 0; s < segs.count(); ++s) {
    const auto& si = segs.at(s);
    if (si.state != log::SegmentState::kFull) continue;
    in.full.push_back({s, si.live, si.max_seq, si.sealed_seq});
  }
  return in;
}

absl::Status Relocator::ReleaseCleaned() {
  if (cleaned_unreleased_.empty()) return absl::OkStatus();
  // A segment may be reused only once everything that made its blocks dead
  // (relocations, overwrites, trims) is durable, and no reader still reads
  // from it. One sync covers the whole group.
  if (absl::Status s = durability_->Sync(); !s.ok()) {
    absl::MutexLock l(&state_->map_mu);
    for (uint32_t seg : cleaned_unreleased_) state_->map->segments().AbortCleaning(seg);
    cleaned_unreleased_.clear();
    return s;
  }
  for (uint32_t seg : cleaned_unreleased_) {
    while (state_->Pinned(seg)) std::this_thread::sleep_for(std::chrono::microseconds(20));
    absl::MutexLock l(&state_->map_mu);
    state_->map->segments().Release(seg);
  }
  cleaned_unreleased_.clear();
  sink_->SpaceFreed();
  return absl::OkStatus();
}

uint32_t Relocator::DiscardIdle(uint32_t max) {
  // Discarding right when a segment is freed mostly hurts: it is usually
  // reused moments later, and the file system must reallocate and zero the
  // range. So free segments are discarded only after a second without
  // I/O, taken out of the free pool while the discard runs (a punch hole
  // also locks the backing file against reads for its duration).
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  if (!cfg_.discard || now - state_->counters.last_io_ns.load(std::memory_order_relaxed) < 2'000'000'000) return 0;
  auto& segs = state_->map->segments();
  uint32_t done = 0;
  for (uint32_t s = 0; s < segs.count() && done < max; ++s) {
    {
      absl::MutexLock l(&state_->map_mu);
      const auto& si = segs.at(s);
      if (si.state != log::SegmentState::kFree || si.discarded) continue;
      segs.BeginDiscard(s);
    }
    (void)media_->Discard(MediaOffset(segs.FirstBlock(s)), uint64_t(cfg_.segment_blocks) * kBlockSize);
    absl::MutexLock l(&state_->map_mu);
    segs.EndDiscard(s);
    ++done;
  }
  return done;
}

absl::StatusOr<uint32_t> Relocator::CleanSegment(uint32_t seg) {
  auto& segs = state_->map->segments();
  uint32_t wp;
  bool from_hot;
  const uint64_t now = durability_->last_written() + 1;
  {
    absl::MutexLock l(&state_->map_mu);
    if (segs.at(seg).state != log::SegmentState::kFull) return 0;
    segs.BeginCleaning(seg);
    wp = segs.at(seg).write_ptr;
    from_hot = segs.at(seg).hot;
    // The lifespan of hot segments is what tells hot blocks from cold ones.
    if (from_hot) placement_->HotSegmentReclaimed(now - segs.at(seg).opened_seq);
    // Nothing live (a full segment never gains live blocks): no need to
    // read it. Its notes are older than the checkpoint gate (Candidates).
    if (segs.at(seg).live == 0) {
      cleaned_unreleased_.push_back(seg);
      return 0;
    }
  }
  auto restore = [&](absl::Status s) {
    absl::MutexLock l(&state_->map_mu);
    segs.AbortCleaning(seg);
    return s;
  };
  const log::Pba first = segs.FirstBlock(seg);
  media::AlignedBuffer buf(size_t(wp) * kBlockSize);
  if (wp > 0) {
    if (absl::Status s = media_->Read(MediaOffset(first), buf.span()); !s.ok()) return restore(s);
  }
  log::ScanOptions so;
  so.segment_blocks = wp;
  so.uuid = checkpointer_->superblock().uuid;
  so.verify_data = false;
  // Headers come from the buffer; one that does not verify there (below
  // the write pointer, every block is a record's) is read again through
  // ReadVerified, which on a mirror takes another copy and heals this one.
  log::SegmentScan scan = log::ScanSegment(
      so, log::CheckedBlockReader([&](uint32_t b, uint32_t n, std::span<std::byte> out, size_t unit_bytes,
                                      ReadCheck check) {
        std::byte* at = buf.data() + size_t(b) * kBlockSize;
        const size_t len = size_t(n) * kBlockSize;
        bool fine = true;
        for (size_t u = 0; u * unit_bytes < len && fine; ++u)
          fine = check(u, std::span<const std::byte>(at + u * unit_bytes, std::min(unit_bytes, len - u * unit_bytes))) ==
                 ReadVerdict::kGood;
        if (!fine) {
          (void)media_->ReadVerified(MediaOffset(first + b), std::span<std::byte>(at, len), unit_bytes, check);
        }
        std::memcpy(out.data(), at, len);
        return absl::OkStatus();
      }));

  // Live blocks: the VBA table still points at them.
  std::vector<log::RelocBlock> live;
  std::vector<uint32_t> offsets;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    const auto& vbas = state_->map->vbas();
    auto is_live = [&](Bno vba, Bno pba) {
      return vbas.InRange(vba) && vbas.Get(vba).refs > 0 && vbas.Get(vba).pba == pba;
    };
    for (const log::ParsedRecord& rec : scan.records) {
      uint32_t i = 0;
      for (const log::Op& op : rec.header.ops) {
        if (op.type == log::OpType::kWrite) {
          for (size_t k = 0; k < op.write.vba.size(); ++k, ++i) {
            Bno pba = (first + rec.data_block(i)).value();
            if (!is_live(op.write.vba[k], pba)) continue;
            live.push_back({op.write.vba[k], pba, state_->map->block_csum(pba), rec.header.seq,
                            op.write.vol, op.write.lba + Bno(k)});
            offsets.push_back(rec.data_block(i));
          }
        } else if (op.type == log::OpType::kReloc) {
          for (const log::RelocBlock& b : op.reloc.blocks) {
            Bno pba = (first + rec.data_block(i++)).value();
            if (!is_live(b.vba, pba)) continue;
            live.push_back({b.vba, pba, state_->map->block_csum(pba), b.data_seq, b.vol, b.lba});
            offsets.push_back(rec.data_block(i - 1));
          }
        }
      }
    }
  }

  // A live block that fails its checksum is read again: a mirror answers
  // with a good copy (and heals the bad one) instead of relocating damage.
  for (size_t k = 0; k < live.size(); ++k) {
    std::span<std::byte> block(buf.data() + size_t(offsets[k]) * kBlockSize, kBlockSize);
    if (util::BlockChecksum(block) == live[k].csum) continue;
    const uint32_t want = live[k].csum;
    auto check = [want](size_t, std::span<const std::byte> b) {
      return util::BlockChecksum(b) == want ? ReadVerdict::kGood : ReadVerdict::kBad;
    };
    (void)media_->ReadVerified(MediaOffset(first + offsets[k]), block, kBlockSize, check);
  }

  // Each live block goes to the slot placement chooses.
  std::vector<size_t> order[kSlotCount];
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    for (size_t k = 0; k < live.size(); ++k)
      order[int(placement_->ForRelocation(from_hot, live[k].data_seq, now))].push_back(k);
  }

  // A chunk of one volume's blocks packs (log/log_format.h: RELOCP).
  for (auto& ks : order)
    std::stable_sort(ks.begin(), ks.end(), [&](size_t a, size_t b) { return live[a].vol < live[b].vol; });

  // Relocate in chunks of one slot; data is gathered into one buffer per chunk.
  struct Pending {
    media::AlignedBuffer data;
    absl::Notification done;
    absl::Status status;
  };
  std::vector<std::unique_ptr<Pending>> pending;
  for (int slot = 0; slot < kSlotCount; ++slot) {
    const std::vector<size_t>& ks = order[slot];
    for (size_t at = 0; at < ks.size(); at += kRelocChunkBlocks) {
      size_t n = std::min<size_t>(kRelocChunkBlocks, ks.size() - at);
      auto pd = std::make_unique<Pending>();
      pd->data = media::AlignedBuffer(n * kBlockSize);
      std::vector<log::RelocBlock> blocks;
      for (size_t j = 0; j < n; ++j) {
        size_t k = ks[at + j];
        std::memcpy(pd->data.data() + j * kBlockSize, buf.data() + size_t(offsets[k]) * kBlockSize,
                    kBlockSize);
        blocks.push_back(live[k]);
      }
      Pending* raw = pd.get();
      const std::byte* data = pd->data.data();
      pending.push_back(std::move(pd));
      sink_->SubmitRelocation(Slot(slot), std::move(blocks), data, [raw](absl::Status s) {
        raw->status = s;
        raw->done.Notify();
      });
    }
  }
  for (auto& pd : pending) {
    pd->done.WaitForNotification();
    if (!pd->status.ok()) return restore(pd->status);
  }
  {
    absl::MutexLock l(&state_->map_mu);
    if (uint32_t left = segs.at(seg).live; left != 0) {
      segs.AbortCleaning(seg);
      return absl::InternalError(absl::StrFormat(
          "segment %d still has %d live blocks its records do not describe", seg, left));
    }
  }
  cleaned_unreleased_.push_back(seg);
  return uint32_t(live.size());
}

}  // namespace ftl::gc
