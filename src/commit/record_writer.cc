#include "commit/record_writer.h"

#include <cstring>
#include <optional>

#include "state/resolve.h"

namespace ftl::commit {

absl::StatusOr<RecordWriter::Written> RecordWriter::Write(std::vector<Request*>& batch,
                                                          log::Stream stream, gc::Slot slot,
                                                          bool joined, bool sync, bool sync_fua) {
  state::MapState& map = *state_->map;
  const uint32_t seg = segments_->open(slot);
  log::RecordHeader h;
  h.seq = next_seq_;
  h.durable_seq = durability_->durable();
  h.uuid = uuid_;
  h.stream = stream;
  h.joined = joined;
  bool fua = false, catalog = false;
  uint64_t user_blocks = 0, reloc_blocks = 0;
  size_t payload = 0;
  // Requests refused at commit time (their volume is gone, or a note no
  // longer applies); completed after the locks are dropped.
  std::vector<std::pair<Request*, absl::Status>> refused;
  {
    absl::MutexLock l(&state_->map_mu);
    uint32_t next_tree = map.next_tree_id();
    size_t kept = 0;
    // The writes to the batch's first written volume (a batch rarely spans
    // volumes) are looked up all at once, for PlanWrite and ApplyRecord.
    prefetch_lbas_.clear();
    uint32_t prefetch_vol = UINT32_MAX;
    for (Request* r : batch) {
      if (r->note) continue;
      for (const ReqOp& op : r->ops) {
        if (op.type() != log::OpType::kWrite) continue;
        if (prefetch_vol == UINT32_MAX) prefetch_vol = op.vol();
        if (op.vol() == prefetch_vol) prefetch_lbas_.push_back(op.lba());
      }
    }
    if (!prefetch_lbas_.empty()) map.LookupWrites(prefetch_vol, prefetch_lbas_);
    for (Request* r : batch) {
      absl::Status ok;
      std::vector<uint32_t> dropped;  // by earlier ops of this request
      for (ReqOp& op : r->ops) {
        log::Op& o = op.op;
        if (r->note) {
          if (o.type == log::OpType::kTree) o.tree.id = next_tree;
          if (o.type == log::OpType::kDataset) o.dataset.id = next_tree;
          ok = map.ValidateNote(o, dropped);
          if (!ok.ok()) break;
          if (o.type == log::OpType::kDrop) dropped.push_back(o.drop);
          continue;
        }
        if (o.type == log::OpType::kWrite || o.type == log::OpType::kTrim) {
          // The volume may have gone or shrunk since the request was
          // checked (a RESIZE is applied before the Volume learns it).
          ok = state::CheckUserRange(map, op.vol(), op.lba(), op.count());
          if (!ok.ok()) break;
        }
      }
      if (!ok.ok()) {
        refused.push_back({r, ok});
        continue;
      }
      batch[kept++] = r;
      fua |= r->fua;
      catalog |= r->barrier;
      for (ReqOp& op : r->ops) {
        log::Op& o = op.op;
        if (o.type == log::OpType::kTree || o.type == log::OpType::kDataset) ++next_tree;
        // Catalogue notes go with barrier requests; the op types decide.
        catalog |= o.type == log::OpType::kTree || o.type == log::OpType::kDrop ||
                   o.type == log::OpType::kRollback || o.type == log::OpType::kAttr ||
                   o.type == log::OpType::kDataset || o.type == log::OpType::kResize;
        if (!r->note) {
          if (o.type == log::OpType::kWrite) {
            map.PlanWrite(o.write.vol, o.write.lba, o.write.count(), &o.write.vba);
            user_blocks += o.write.count();
          } else if (o.type == log::OpType::kReloc) {
            reloc_blocks += o.reloc.blocks.size();
          }
        }
        payload += log::OpPayloadBytes(o);
        h.ops.push_back(std::move(o));
      }
    }
    batch.resize(kept);
  }
  for (auto& [r, why] : refused) {
    r->done(why);
    delete r;
  }
  if (batch.empty()) return Written{};
  const bool synced = sync || (fua && sync_fua);
  const uint32_t data_blocks = uint32_t(user_blocks + reloc_blocks);
  const uint32_t seg_first = map.segments().FirstBlock(seg).value();
  const uint32_t write_ptr = map.segments().at(seg).write_ptr;
  const log::Pba pba(seg_first + write_ptr);
  // A small header joins the slot's sector chain when the chain is still
  // the newest thing in this segment and no checkpoint was encoded since
  // it began (log/log_format.h, "Sector chains").
  Chain& chain = chains_[int(slot)];
  const bool small = sectors_ && log::SectorHeaderFits(payload);
  const bool join = small && chain.seg == seg && chain.next_sector < log::kSectorsPerBlock &&
                    chain.end == write_ptr && chain.last_seq == map.segments().at(seg).max_seq &&
                    chain.first_seq >= state_->checkpoint_encoded_seq;
  if (join) {
    h.sector = uint8_t(chain.next_sector);
    h.data_start = write_ptr;
  }
  chain.seg = UINT32_MAX;  // set again below once written
  const uint32_t hb = join ? 0 : log::HeaderBlocksFor(payload);
  // The record buffer is reused from batch to batch. The data follows the
  // header in request order: handed to the media as pieces when it
  // gathers (no copy), else copied behind the header. A sector header is
  // encoded apart and written into its sector after the data.
  const bool gather = media_->gathers_writes();
  const size_t record_bytes = size_t(hb + data_blocks) * kBlockSize;
  const size_t buf_bytes = gather ? size_t(hb) * kBlockSize : record_bytes;
  if (record_buf_.size() < buf_bytes) record_buf_ = media::AlignedBuffer(buf_bytes);
  std::span<std::byte> buf = record_buf_.span().subspan(0, buf_bytes);
  if (join) {
    if (sector_buf_.size() < log::kSectorBytes) sector_buf_ = media::AlignedBuffer(kBlockSize);
    log::EncodeRecordHeader(h, sector_buf_.span().subspan(0, log::kSectorBytes));
  } else {
    log::EncodeRecordHeader(h, buf.subspan(0, size_t(hb) * kBlockSize));
  }
  gather_.clear();
  if (gather && hb > 0) gather_.push_back(buf.subspan(0, size_t(hb) * kBlockSize));
  std::byte* p = buf.data() + size_t(hb) * kBlockSize;
  {
    // Data blocks in record order: the ops of h (moved from the requests)
    // say how many, the requests say where.
    size_t k = 0;
    for (Request* r : batch) {
      for (const ReqOp& op : r->ops) {
        const log::Op& o = h.ops[k++];
        const size_t bytes = size_t(o.data_blocks()) * kBlockSize;
        if (r->note || bytes == 0) continue;
        if (gather) {
          gather_.emplace_back(op.data, bytes);
        } else {
          std::memcpy(p, op.data, bytes);
          p += bytes;
        }
      }
    }
  }
  // A sector written apart from the record's data: a joining record's
  // header in its chain's header block, or (Media::writes_lone_sectors) a
  // chain's first header as sector 0 alone, its data from the next block.
  // Both go to the media together where it can; either without the other
  // is no record (recovery drops it).
  const bool lone_head = !join && small && lone_heads_ && hb == 1;
  absl::Status s;
  if (join || lone_head) {
    const std::span<const std::byte> head =
        join ? sector_buf_.span().subspan(0, log::kSectorBytes) : buf.subspan(0, log::kSectorBytes);
    const uint64_t head_offset =
        join ? MediaOffset(chain.header_pba) + uint64_t(h.sector) * log::kSectorBytes : MediaOffset(pba);
    std::span<const std::span<const std::byte>> data;
    std::span<const std::byte> copied;  // the data copied behind the header (no gather)
    if (gather) {
      data = std::span(gather_).subspan(size_t(hb));
    } else {
      copied = buf.subspan(size_t(hb) * kBlockSize);
      data = std::span(&copied, 1);
    }
    const Media::WriteAt writes[2] = {{MediaOffset(pba) + uint64_t(hb) * kBlockSize, data},
                                      {head_offset, std::span(&head, 1)}};
    s = media_->WriteEach(data_blocks > 0 ? std::span(writes) : std::span(writes).subspan(1));
  } else {
    s = gather ? media_->WriteGather(MediaOffset(pba), gather_) : media_->Write(MediaOffset(pba), buf);
  }
  if (s.ok()) {
    durability_->NoteWritten(h.seq, h.durable_seq, joined, !h.ops.empty());
    // Joined records sync once, after the last of them.
    if (synced) s = durability_->Sync();
  }
  if (!s.ok()) {
    // The record may or may not be on the media; recovery decides.
    absl::MutexLock l(&state_->map_mu);
    for (const log::Op& o : h.ops)
      if (o.type == log::OpType::kWrite) map.UnplanWrite(o.write.vba);
    return s;
  }
  if (join) {
    chain.seg = seg;
    ++chain.next_sector;
    chain.last_seq = h.seq;
    chain.end = write_ptr + data_blocks;
  } else if (small && hb == 1) {
    chain = Chain{seg, h.seq, h.seq, pba, 1, write_ptr + hb + data_blocks};
  }
  state::PoolCounters& c = state_->counters;
  c.media_bytes += join ? record_bytes + log::kSectorBytes
                        : lone_head ? record_bytes - (kBlockSize - log::kSectorBytes) : record_bytes;
  c.NoteIo();
  c.user_bytes += user_blocks * kBlockSize;
  c.reloc_bytes += reloc_blocks * kBlockSize;
  if (gc::IsHot(slot)) {
    c.user_hot_bytes += user_blocks * kBlockSize;
    c.reloc_hot_bytes += reloc_blocks * kBlockSize;
  }
  ++next_seq_;
  {
    // A catalogue note changes what range operations check under
    // tree_meta_mu alone (state/pool_state.h).
    std::optional<absl::MutexLock> meta;
    if (catalog) meta.emplace(&state_->tree_meta_mu);
    absl::MutexLock l(&state_->map_mu);
    map.ApplyRecord(h, pba.value());
    segments_->SealIfFullLocked(slot, stream, h.seq);
  }
  return Written{h.seq, !h.ops.empty(), synced, catalog};
}

}  // namespace ftl::commit
