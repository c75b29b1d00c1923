#include "checkpoint/checkpointer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_format.h"
#include "util/checksum.h"
#include "util/logging.h"

namespace ftl::checkpoint {
namespace {

constexpr uint32_t kMinSegments = 16;
// Segments the cleaner keeps (commit/segment_allocator.h); format leaves
// them and two more out of the logical capacity.
constexpr uint32_t kGcReserveSegments = 2;

using media::AlignUp;

}  // namespace

absl::Status FormatMedia(Media& media, const FormatOptions& f, bool discard) {
  if (f.segment_bytes % kBlockSize || f.segment_bytes < 64 * kBlockSize ||
      f.segment_bytes > (256u << 20)) {
    return absl::InvalidArgumentError("segment size must be a multiple of 4 KiB in [256 KiB, 256 MiB]");
  }
  if (!(f.over_provision >= 0.05 && f.over_provision <= 0.9)) {
    return absl::InvalidArgumentError("over-provisioning must be within [0.05, 0.9]");
  }
  if (f.volume_name.empty() || f.volume_name.size() > 255) {
    return absl::InvalidArgumentError("volume name must be 1..255 bytes");
  }
  uint64_t size = media.size();
  uint64_t physical_est = size / kBlockSize;
  log::Superblock sb;
  sb.uuid = log::NewUuid();
  sb.segment_blocks = uint32_t(f.segment_bytes / kBlockSize);
  sb.ckpt_slot_blocks = uint32_t(AlignUp(65536 + 64 * physical_est, kBlockSize) / kBlockSize);
  sb.data_offset = AlignUp((2 + 2 * uint64_t(sb.ckpt_slot_blocks)) * kBlockSize, 1 << 20);
  uint64_t segs = size > sb.data_offset ? (size - sb.data_offset) / f.segment_bytes : 0;
  if (segs < kMinSegments) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "media too small: %d bytes holds %d segments of %d bytes, need at least %d", size, segs,
        f.segment_bytes, kMinSegments));
  }
  if (segs * sb.segment_blocks >= log::kNoBlock) {
    return absl::InvalidArgumentError("media too large: at most 16 TiB of segments");
  }
  sb.segment_count = uint32_t(segs);
  sb.media_bytes = size;
  uint64_t usable = uint64_t(segs - kGcReserveSegments - 2) * sb.segment_blocks;
  sb.logical_blocks = uint64_t(double(usable) * (1.0 - f.over_provision)) / 256 * 256;
  uint64_t vol_blocks = f.volume_bytes ? f.volume_bytes / kBlockSize : sb.logical_blocks;
  if (vol_blocks == 0 || vol_blocks > sb.logical_blocks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "volume size %d exceeds the pool's logical capacity %d", vol_blocks * kBlockSize,
        sb.logical_blocks * kBlockSize));
  }
  sb.primary_name = f.volume_name;
  sb.primary_blocks = vol_blocks;

  if (f.preallocate) {
    // All of the media, so that a file has no hole left (4 KiB aligned:
    // the last partial block stays as it is).
    media::AlignedBuffer zeros(8u << 20);
    std::memset(zeros.data(), 0, zeros.size());
    const uint64_t end = size / kBlockSize * kBlockSize;
    for (uint64_t at = 0; at < end; at += zeros.size()) {
      const size_t n = size_t(std::min<uint64_t>(zeros.size(), end - at));
      if (absl::Status s = media.Write(at, zeros.span().first(n)); !s.ok()) return s;
    }
  }
  // An empty checkpoint in both slots, then both superblock copies.
  state::MapState empty(sb.segment_count, sb.segment_blocks);
  empty.AddVolume(0, f.volume_name, vol_blocks);
  std::vector<std::byte> ck = EncodeCheckpoint(empty, sb.uuid, 1);
  media::AlignedBuffer slot(AlignUp(ck.size(), kBlockSize));
  std::memcpy(slot.data(), ck.data(), ck.size());
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = media.Write(SlotOffset(sb, i), slot.span()); !s.ok()) return s;
    sb.slots[i] = {1, ck.size(), util::Xxh3(ck)};
  }
  // Old records must not look like ours; the uuid guards too.
  if (!f.preallocate && discard) {
    (void)media.Discard(sb.data_offset, uint64_t(segs) * f.segment_bytes);
  }
  for (int i = 0; i < 2; ++i) {
    sb.generation = uint64_t(i + 1);
    sb.newest_slot = 1;
    sb.clean = true;
    std::vector<std::byte> enc = log::EncodeSuperblock(sb);
    media::AlignedBuffer b(kBlockSize);
    std::memcpy(b.data(), enc.data(), kBlockSize);
    if (absl::Status s = media.Write(uint64_t(i) * kBlockSize, b.span()); !s.ok()) return s;
  }
  if (absl::Status s = media.Sync(); !s.ok()) return s;
  util::Logger("core")->info("formatted {}: {} segments of {}, logical {} MiB, uuid {}",
                             media.Describe(), segs, f.segment_bytes,
                             sb.logical_blocks * kBlockSize >> 20, log::UuidToString(sb.uuid));
  return absl::OkStatus();
}

absl::Status Checkpointer::ReadSuperblock(std::vector<std::string>* degraded) {
  if (media_->size() < 2 * kBlockSize) return absl::NotFoundError("media too small to hold a pool");
  media::AlignedBuffer buf(2 * kBlockSize);
  // A mirror reads the other device's copy of a superblock that fails.
  auto check = [](size_t, std::span<const std::byte> b) {
    absl::StatusOr<log::Superblock> sb = log::DecodeSuperblock(b);
    if (sb.ok()) return ReadVerdict::kGood;
    if (absl::IsNotFound(sb.status())) return ReadVerdict::kAbsent;
    return absl::IsDataLoss(sb.status()) ? ReadVerdict::kBad : ReadVerdict::kUnsure;
  };
  if (absl::Status s = media_->ReadVerified(0, buf.span(), kBlockSize, check); !s.ok()) return s;
  absl::StatusOr<log::Superblock> copies[2] = {
      log::DecodeSuperblock(buf.span().subspan(0, kBlockSize)),
      log::DecodeSuperblock(buf.span().subspan(kBlockSize, kBlockSize))};
  int best = -1;
  for (int i = 0; i < 2; ++i) {
    if (copies[i].ok() && (best < 0 || copies[i]->generation > copies[best]->generation)) best = i;
  }
  if (best < 0) {
    for (auto& c : copies)
      if (absl::IsFailedPrecondition(c.status())) return c.status();
    if (absl::IsNotFound(copies[0].status()) && absl::IsNotFound(copies[1].status()))
      return absl::NotFoundError("no ftld pool on this media (no superblock)");
    return absl::DataLossError("both superblock copies are corrupt");
  }
  if (!copies[1 - best].ok()) {
    degraded->push_back(absl::StrFormat("superblock copy %d is unusable (%s)", 1 - best,
                                        copies[1 - best].status().message()));
    util::Logger("core")->warn("superblock copy {} unusable ({}); using copy {}", 1 - best,
                               std::string(copies[1 - best].status().message()), best);
  }
  sb_ = *copies[best];
  if (sb_.media_bytes > media_->size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "media is %d bytes but the pool was formatted for %d", media_->size(), sb_.media_bytes));
  }
  gate_seq_ = std::min(sb_.slots[0].next_seq, sb_.slots[1].next_seq);
  return absl::OkStatus();
}

absl::Status Checkpointer::WriteSuperblock(log::Superblock next) {
  if (!failed_.ok()) return failed_;
  // The new generation is kept only once it is durable: after a failed
  // write the next attempt goes to the same copy again (never over the
  // newest good one), and nothing in memory names a slot the media does not.
  ++next.generation;
  std::vector<std::byte> enc = log::EncodeSuperblock(next);
  media::AlignedBuffer b(kBlockSize);
  std::memcpy(b.data(), enc.data(), kBlockSize);
  if (absl::Status s = media_->Write((next.generation % 2) * kBlockSize, b.span()); !s.ok())
    return s;
  state_->counters.media_bytes += kBlockSize;
  if (absl::Status s = durability_->Sync(); !s.ok()) {
    // Whether the new copy reached the media is unknown: writing another
    // checkpoint could overwrite the slot it names. No more checkpoints.
    failed_ = absl::DataLossError(
        absl::StrCat("superblock sync failed, no more checkpoints until reopened: ", s.message()));
    return failed_;
  }
  sb_ = std::move(next);
  return absl::OkStatus();
}

absl::Status Checkpointer::MarkDirty() {
  log::Superblock next = sb_;
  next.clean = false;
  // Opening upgrades an older format: from now on records may carry ops it
  // lacks.
  next.format_version = log::kFormatVersion;
  return WriteSuperblock(std::move(next));
}

absl::Status Checkpointer::MarkClean() {
  log::Superblock next = sb_;
  next.clean = true;
  return WriteSuperblock(std::move(next));
}

absl::Status Checkpointer::Checkpoint(uint64_t next_seq) {
  if (absl::Status s = Encode(next_seq); !s.ok()) return s;
  return WriteEncoded();
}

absl::Status Checkpointer::StartAsync(uint64_t next_seq) {
  if (absl::Status s = Encode(next_seq); !s.ok()) return s;
  // The slot write and its sync overlap with new commits: the encoded state
  // is complete, records after it stay in the log, and the superblock only
  // names the new slot once it is durable.
  io_thread_ = std::thread([this] {
    if (absl::Status s = WriteEncoded(); !s.ok())
      util::Logger("core")->error("checkpoint failed: {}", s.ToString());
  });
  return absl::OkStatus();
}

void Checkpointer::Join() {
  if (io_thread_.joinable()) io_thread_.join();
}

absl::Status Checkpointer::Encode(uint64_t next_seq) {
  Join();  // the previous one has settled sb_ and its slot
  if (!failed_.ok()) return failed_;
  // buf_ / io_ keep their memory between checkpoints: encoding into fresh
  // map-sized allocations spent most of a checkpoint zeroing pages (and the
  // committer waits for it).
  uint64_t leaves, inners;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    EncodeCheckpointInto(*state_->map, sb_.uuid, next_seq, &buf_);
    leaves = state_->map->tree_context()->leaves;
    inners = state_->map->tree_context()->inners;
  }
  if (buf_.size() > capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "checkpoint of %d bytes does not fit its %d-byte slot", buf_.size(), capacity()));
  }
  const size_t padded = AlignUp(buf_.size(), kBlockSize);
  if (io_.size() < padded) io_ = media::AlignedBuffer(AlignUp(padded + padded / 8, kBlockSize));
  std::memcpy(io_.data(), buf_.data(), buf_.size());
  std::memset(io_.data() + buf_.size(), 0, padded - buf_.size());
  pending_ = {next_seq, buf_.size(), util::Xxh3(buf_), padded, durability_->last_written()};
  last_size_ = buf_.size();
  last_leaves_ = leaves;
  last_inners_ = inners;
  last_time_ = std::chrono::steady_clock::now();
  last_seq_ = next_seq;
  state_->checkpoint_encoded_seq = std::max(state_->checkpoint_encoded_seq, next_seq);
  return absl::OkStatus();
}

absl::Status Checkpointer::WriteEncoded() {
  const Pending& p = pending_;
  int slot = 1 - sb_.newest_slot;
  std::span<const std::byte> buf(io_.data(), p.padded);
  if (absl::Status s = media_->Write(SlotOffset(sb_, slot), buf); !s.ok()) return s;
  state_->counters.media_bytes += buf.size();
  if (absl::Status s = durability_->Sync(); !s.ok()) return s;
  log::Superblock next = sb_;
  next.slots[slot] = {p.next_seq, p.bytes, p.checksum};
  next.newest_slot = uint8_t(slot);
  if (absl::Status s = WriteSuperblock(std::move(next)); !s.ok()) return s;
  durability_->CheckpointDurable(p.next_seq, p.covered);
  gate_seq_ = std::min(sb_.slots[0].next_seq, sb_.slots[1].next_seq);
  ++state_->counters.ckpt_count;
  state_->counters.ckpt_bytes += buf.size();
  state_->counters.NoteCheckpoint();
  return absl::OkStatus();
}

void Checkpointer::NoteMapSize(uint64_t leaves, uint64_t inners) {
  leaves_now_ = leaves;
  inners_now_ = inners;
}

void Checkpointer::Started(uint64_t next_seq) {
  if (last_size_ == 0) {
    last_size_ = sb_.slots[sb_.newest_slot].bytes;
    last_leaves_ = leaves_now_.load();
    last_inners_ = inners_now_.load();
  }
  last_time_ = std::chrono::steady_clock::now();
  last_seq_ = next_seq;
}

absl::Status Checkpointer::CheckRoom(uint32_t reserve_divisor,
                                     const std::function<absl::Status()>& checkpoint) {
  const uint64_t cap = capacity();
  const uint64_t reserve = cap / reserve_divisor;
  uint64_t estimate = 0, grown = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    // New nodes since the last checkpoint at their largest encoding.
    uint64_t leaves = leaves_now_, inners = inners_now_;
    grown = (leaves > last_leaves_ ? leaves - last_leaves_ : 0) * 15 * map::kLeafCap +
            (inners > last_inners_ ? inners - last_inners_ : 0) * 10 * map::kInnerCap;
    estimate = last_size_ + grown;
    if (estimate + reserve <= cap) return absl::OkStatus();
    // The estimate counts new nodes at their largest; a checkpoint measures
    // them. Only worth it when that part is large (at most one checkpoint
    // per 1/64 of the slot of growth).
    if (grown < cap / 64 || !checkpoint || attempt > 0) break;
    if (absl::Status s = checkpoint(); !s.ok()) break;
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "metadata area full: the map needs about %d of %d bytes of checkpoint space; delete "
      "snapshots or clones, or reformat with more space",
      estimate, cap));
}

}  // namespace ftl::checkpoint
