// Scrubber: see scrubber.h.
//
// Details fixed here:
// - Live blocks are listed per segment under map_mu shared and read in
//   runs of up to 64 consecutive blocks; the rate is kept between
//   segments (a segment is read at once, then the pass sleeps). A block that has died since is
//   still intact (a pinned segment is not rewritten), so it verifies too.
// - Record headers are scanned only in full segments with live blocks:
//   nothing writes them any more, and a full segment without live blocks
//   may be one the cleaner freed and the writer began to reuse before a
//   crash (core/consistency.cc has the same rule).
// - Counts: errors = bad copies the media found (ReadOutcome::bad_copies)
//   plus blocks still failing after the read; repaired = bad copies
//   rewritten; unrecoverable = blocks, headers or metadata still failing.
// - A pass that repaired something syncs the media at its end.

#include "scrub/scrubber.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "log/segment_reader.h"
#include "media/aligned_buffer.h"
#include "util/checksum.h"
#include "util/logging.h"

namespace ftl::scrub {
namespace {

constexpr uint32_t kRunBlocks = 64;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Scrubber::Scrubber(state::PoolState* state, std::shared_ptr<Media> media,
                   const checkpoint::Checkpointer* checkpointer, uint64_t data_offset, uint32_t segment_blocks,
                   const log::Uuid& uuid)
    : state_(state),
      media_(std::move(media)),
      checkpointer_(checkpointer),
      data_offset_(data_offset),
      segment_blocks_(segment_blocks),
      uuid_(uuid) {}

Scrubber::~Scrubber() { Stop(); }

absl::Status Scrubber::Start(const ScrubOptions& opts) {
  std::thread old;
  {
    absl::MutexLock l(&mu_);
    if (running_) return absl::FailedPreconditionError("a scrub is running");
    old = std::move(thread_);
  }
  if (old.joinable()) old.join();
  absl::MutexLock l(&mu_);
  if (running_) return absl::FailedPreconditionError("a scrub is running");
  running_ = true;
  stop_ = false;
  status_.state = "running";
  thread_ = std::thread([this, opts] { Pass(opts); });
  return absl::OkStatus();
}

void Scrubber::Stop() {
  stop_ = true;
  std::thread t;
  {
    absl::MutexLock l(&mu_);
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

ScrubStatus Scrubber::Status() const {
  absl::MutexLock l(&mu_);
  ScrubStatus s = status_;
  if (running_) s.elapsed_s = Now() - started_;
  return s;
}

absl::StatusOr<ScrubStatus> Scrubber::Run(const ScrubOptions& opts) {
  {
    absl::MutexLock l(&mu_);
    if (running_) return absl::FailedPreconditionError("a scrub is running");
    running_ = true;
    stop_ = false;
  }
  Pass(opts);
  return Status();
}

void Scrubber::Damage(const std::string& what) {
  util::Logger("core")->error("scrub: {}", what);
  absl::MutexLock l(&mu_);
  ++status_.unrecoverable;
  ++status_.errors;
  if (status_.damage.size() < 100) status_.damage.push_back(what);
}

bool Scrubber::Pace(const ScrubOptions& opts, double t0, uint64_t bytes_read) {
  if (opts.rate_bytes_per_sec == 0) return !stop_;
  while (!stop_) {
    double wait = t0 + double(bytes_read) / double(opts.rate_bytes_per_sec) - Now();
    if (wait <= 0) return true;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, 0.05)));
  }
  return false;
}

void Scrubber::Pass(const ScrubOptions& opts) {
  auto log = util::Logger("core");
  const double t0 = Now();
  struct Seg {
    uint32_t seg;
    log::SegmentState state;
    uint32_t write_ptr;
    uint32_t live;
  };
  std::vector<Seg> segs;
  uint64_t total = 0;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    const auto& table = state_->map->segments();
    for (uint32_t s = 0; s < table.count(); ++s) {
      const auto& si = table.at(s);
      if (si.state != log::SegmentState::kFull && si.state != log::SegmentState::kOpen) continue;
      segs.push_back({s, si.state, si.write_ptr, si.live});
      total += si.live;
    }
  }
  {
    absl::MutexLock l(&mu_);
    uint64_t passes = status_.passes;
    status_ = ScrubStatus();
    status_.state = "running";
    status_.passes = passes;
    status_.total_bytes = total * kBlockSize;
    started_ = t0;
  }
  log->info("scrub: started ({} MiB of live data, {} segments)", (total * kBlockSize) >> 20, segs.size());
  ReadOutcome outcome;
  uint64_t bytes_read = 0;

  // Superblock copies: both must decode.
  {
    media::AlignedBuffer buf(2 * kBlockSize);
    auto check = [](size_t, std::span<const std::byte> b) {
      auto sb = log::DecodeSuperblock(b);
      return sb.ok() ? ReadVerdict::kGood : ReadVerdict::kBad;
    };
    if (absl::Status s = media_->VerifyCopies(0, buf.span(), kBlockSize, check, &outcome); !s.ok()) {
      Damage(absl::StrCat("superblocks unreadable: ", s.message()));
    } else {
      for (int i = 0; i < 2; ++i)
        if (!log::DecodeSuperblock(buf.span().subspan(size_t(i) * kBlockSize, kBlockSize)).ok())
          Damage(absl::StrFormat("superblock copy %d is damaged", i));
    }
    bytes_read += 2 * kBlockSize;
    absl::MutexLock l(&mu_);
    status_.metadata_verified += 2;
  }
  if (opts.checkpoints) {
    const log::Superblock& sb = checkpointer_->superblock();
    for (int slot = 0; slot < 2; ++slot) {
      const log::SlotInfo& si = sb.slots[slot];
      if (si.bytes == 0 || si.bytes > uint64_t(sb.ckpt_slot_blocks) * kBlockSize) continue;
      media::AlignedBuffer buf(media::AlignUp(si.bytes, kBlockSize));
      auto check = [&si](size_t, std::span<const std::byte> b) {
        return util::Xxh3(b.subspan(0, si.bytes)) == si.xxh3 ? ReadVerdict::kGood : ReadVerdict::kBad;
      };
      uint64_t off = (2 + uint64_t(slot) * sb.ckpt_slot_blocks) * kBlockSize;
      if (!media_->VerifyCopies(off, buf.span(), buf.size(), check, &outcome).ok() ||
          util::Xxh3(buf.span().subspan(0, si.bytes)) != si.xxh3)
        Damage(absl::StrFormat("checkpoint slot %d is damaged", slot));
      bytes_read += buf.size();
      absl::MutexLock l(&mu_);
      ++status_.metadata_verified;
    }
  }

  media::AlignedBuffer buf(size_t(kRunBlocks) * kBlockSize);
  bool stopped = false;
  for (const Seg& sg : segs) {
    if (!Pace(opts, t0, bytes_read)) {
      stopped = true;
      break;
    }
    // Its live blocks now, under a pin.
    std::vector<std::pair<uint32_t, uint32_t>> live;  // pba, csum
    bool scan_headers = false;
    uint32_t write_ptr = 0;
    {
      absl::ReaderMutexLock l(&state_->map_mu);
      const auto& table = state_->map->segments();
      const auto& si = table.at(sg.seg);
      if (si.state != log::SegmentState::kFull && si.state != log::SegmentState::kOpen) continue;
      state_->PinSegment(sg.seg);
      const uint32_t first = table.FirstBlock(sg.seg).value();
      write_ptr = si.write_ptr;
      for (uint32_t b = 0; b < si.write_ptr; ++b)
        if (table.IsValid(first + b)) live.emplace_back(first + b, state_->map->block_csum(first + b));
      scan_headers = si.state == log::SegmentState::kFull && si.live > 0;
    }
    for (size_t i = 0; i < live.size();) {
      size_t j = i + 1;
      while (j < live.size() && j - i < kRunBlocks && live[j].first == live[j - 1].first + 1) ++j;
      const size_t n = j - i;
      std::span<std::byte> run = buf.span().subspan(0, n * kBlockSize);
      auto check = [&live, i](size_t u, std::span<const std::byte> b) {
        return util::BlockChecksum(b) == live[i + u].second ? ReadVerdict::kGood : ReadVerdict::kBad;
      };
      absl::Status s = media_->VerifyCopies(MediaOffset(live[i].first), run, kBlockSize, check, &outcome);
      if (!s.ok()) {
        for (size_t k = i; k < j; ++k)
          Damage(absl::StrFormat("physical block %d (segment %d) unreadable: %s", live[k].first, sg.seg,
                                 s.message()));
      } else {
        for (size_t k = i; k < j; ++k) {
          if (util::BlockChecksum(run.subspan((k - i) * kBlockSize, kBlockSize)) != live[k].second)
            Damage(absl::StrFormat("physical block %d (segment %d) fails its checksum on every copy",
                                   live[k].first, sg.seg));
        }
      }
      bytes_read += n * kBlockSize;
      {
        absl::MutexLock l(&mu_);
        status_.blocks_verified += n;
        status_.scanned_bytes += n * kBlockSize;
      }
      i = j;
      // Paced between segments only: the pin is held while reading, not
      // while sleeping (the cleaner waits for pins before reusing a
      // segment).
      if (stop_) {
        stopped = true;
        break;
      }
    }
    if (!stopped && scan_headers) {
      log::ScanOptions so;
      so.segment_blocks = write_ptr;
      so.uuid = uuid_;
      so.verify_data = false;
      so.resync_after_damage = true;
      const uint64_t seg_off = data_offset_ + uint64_t(sg.seg) * segment_blocks_ * kBlockSize;
      log::SegmentScan scan = log::ScanSegment(so, log::MediaSegmentReader(media_.get(), seg_off, /*all_copies=*/true));
      if (scan.damaged > 0)
        Damage(absl::StrFormat("segment %d: %d damaged record header(s), the first at block %d", sg.seg,
                               scan.damaged, scan.first_damaged_block));
      bytes_read += uint64_t(scan.records.size()) * kBlockSize;
      absl::MutexLock l(&mu_);
      status_.headers_verified += scan.records.size();
    }
    state_->Unpin({sg.seg});
    if (stopped) break;
  }
  // Repairs are writes like any other: durable once synced.
  if (outcome.repaired > 0) {
    if (absl::Status s = media_->Sync(); !s.ok()) log->error("scrub: sync after repairs failed: {}", s.ToString());
  }
  absl::MutexLock l(&mu_);
  status_.errors += outcome.bad_copies;
  status_.repaired += outcome.repaired;
  status_.elapsed_s = Now() - t0;
  status_.state = stopped ? "stopped" : "finished";
  if (!stopped) ++status_.passes;
  running_ = false;
  log->info("scrub: {} after {:.1f} s: {} blocks verified, {} headers, {} errors, {} repaired, {} unrecoverable",
            status_.state, status_.elapsed_s, status_.blocks_verified, status_.headers_verified, status_.errors,
            status_.repaired, status_.unrecoverable);
}

}  // namespace ftl::scrub
