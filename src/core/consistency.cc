// Pool::Check: verifies that the in-memory map is self-consistent (and,
// optionally, that every live block still matches its checksum). Used by
// ftl-tool and the crash tests.

#include <algorithm>
#include <set>
#include <unordered_map>

#include "absl/strings/str_format.h"
#include "core/pool_impl.h"
#include "media/aligned_buffer.h"
#include "log/segment_reader.h"
#include "util/checksum.h"

namespace ftl::core {

using state::kNoTree;
using state::VolumeMeta;

absl::StatusOr<CheckReport> PoolImpl::Check(bool verify_data) {
  CheckReport rep;
  auto problem = [&](std::string s) {
    if (rep.problems.size() < 100) rep.problems.push_back(std::move(s));
  };
  for (const std::string& loss : losses_) problem("lost in recovery: " + loss);
  rep.degraded = degraded_;
  if (read_only_) {
    // Offline (nothing writes the slots now): both checkpoint slots must
    // still hold what the superblock says, or one failure away from a
    // rebuild from the log alone.
    for (int slot = 0; slot < 2; ++slot) {
      const log::SlotInfo& si = checkpointer_.superblock().slots[slot];
      if (si.bytes == 0 || si.bytes > uint64_t(checkpointer_.superblock().ckpt_slot_blocks) * kBlockSize) continue;
      media::AlignedBuffer buf((si.bytes + kBlockSize - 1) / kBlockSize * kBlockSize);
      uint64_t off = (2 + uint64_t(slot) * checkpointer_.superblock().ckpt_slot_blocks) * kBlockSize;
      auto slot_check = [&si](size_t, std::span<const std::byte> b) {
        return util::Xxh3(b.subspan(0, si.bytes)) == si.xxh3 ? ReadVerdict::kGood : ReadVerdict::kBad;
      };
      if (!media_->ReadVerified(off, buf.span(), buf.size(), slot_check).ok() ||
          util::Xxh3(buf.span().subspan(0, si.bytes)) != si.xxh3) {
        std::string d = absl::StrFormat("checkpoint slot %d is damaged (checksum mismatch or unreadable)", slot);
        if (std::find(rep.degraded.begin(), rep.degraded.end(), d) == rep.degraded.end())
          rep.degraded.push_back(d);
      }
    }
  }
  absl::ReaderMutexLock l(&state_.map_mu);
  const state::MapState& st = *state_.map;
  const auto& vbas = st.vbas();
  const auto& segs = st.segments();
  std::vector<uint64_t> vba_refs(vbas.size(), 0);
  std::unordered_map<const map::Node*, uint64_t> node_refs;
  // Walk every distinct node once, counting references to nodes and VBAs.
  std::vector<std::pair<const map::Node*, uint32_t>> stack;  // node, volume id
  for (const auto& entry : st.volumes()) {
    // Named, not structured bindings: lambdas below capture them.
    const uint32_t id = entry.first;
    const VolumeMeta* v = entry.second.get();
    ++rep.volumes;
    rep.mapped_blocks += v->tree.mapped_blocks();
    if (v->tree.root() && node_refs[v->tree.root()]++ == 0) stack.push_back({v->tree.root(), id});
    uint64_t counted = 0;
    Bno prev_end = 0;
    bool first = true;
    v->tree.ForEach([&](const map::Extent& e) {
      counted += e.len;
      if (e.len == 0) problem(absl::StrFormat("volume %s: empty extent at lba %d", v->name, e.lba));
      if (!first && e.lba < prev_end)
        problem(absl::StrFormat("volume %s: extents out of order at lba %d", v->name, e.lba));
      if (uint64_t(e.lba) + e.len > v->size_blocks)
        problem(absl::StrFormat("volume %s: extent at lba %d runs past the end", v->name, e.lba));
      prev_end = e.end();
      first = false;
      ++rep.extents;
    });
    if (counted != v->tree.mapped_blocks())
      problem(absl::StrFormat("volume %s: mapped count %d but extents cover %d", v->name,
                              v->tree.mapped_blocks(), counted));
  }
  // The catalogue: links name existing trees of the right kind, names are
  // unique, attributes lie inside their volume, ids are below next_tree_id.
  std::set<std::string> vol_names, snap_names;
  for (const auto& [id, v] : st.volumes()) {
    const std::string what = v->is_snapshot() ? "snapshot " + v->origin_name + "@" + v->name
                                              : "volume " + v->name;
    if (id >= st.next_tree_id()) problem(absl::StrFormat("%s: id %d >= next id %d", what, id, st.next_tree_id()));
    if (v->parent != kNoTree) {
      const VolumeMeta* p = st.volume(v->parent);
      if (!p || !p->is_snapshot()) problem(absl::StrFormat("%s: parent %d is no snapshot", what, v->parent));
    }
    if (v->is_snapshot()) {
      if (!snap_names.insert(v->origin_name + "@" + v->name).second)
        problem(absl::StrFormat("%s: name used twice", what));
      if (!v->read_only) problem(absl::StrFormat("%s: not read-only", what));
      // A snapshot holds what its volume holds (datasets: DATASET notes).
      if (const VolumeMeta* o = st.volume(v->origin); o && !o->is_snapshot() && o->dataset != v->dataset)
        problem(absl::StrFormat("%s: dataset kind %d, its volume's is %d", what, int(v->dataset),
                                int(o->dataset)));
    } else {
      if (!vol_names.insert(v->name).second) problem(absl::StrFormat("%s: name used twice", what));
      if (v->origin != kNoTree) {
        const VolumeMeta* o = st.volume(v->origin);
        if (!o || !o->is_snapshot())
          problem(absl::StrFormat("%s: activated from %d, which is no snapshot", what, v->origin));
        else if (o->dataset != v->dataset)
          problem(absl::StrFormat("%s: dataset kind %d, its snapshot's is %d", what,
                                  int(v->dataset), int(o->dataset)));
      }
    }
    for (const map::AttrRange& a : v->attrs.All()) {
      if (uint64_t(a.lba) + a.count > v->size_blocks)
        problem(absl::StrFormat("%s: attribute range at %d runs past the end", what, a.lba));
    }
  }
  while (!stack.empty()) {
    auto [n, vol] = stack.back();
    stack.pop_back();
    ++rep.tree_nodes;
    if (n->leaf) {
      const auto* leaf = static_cast<const map::Leaf*>(n);
      for (int i = 0; i < leaf->count; ++i) {
        const map::Extent& e = leaf->e[i];
        if (uint64_t(e.vba) + e.len > vbas.size()) {
          problem(absl::StrFormat("extent at lba %d names VBAs past the table", e.lba));
          continue;
        }
        for (Bno k = 0; k < e.len; ++k) ++vba_refs[e.vba + k];
      }
    } else {
      const auto* in = static_cast<const map::Inner*>(n);
      for (int i = 0; i < in->count; ++i) {
        if (i > 1 && in->key[i] <= in->key[i - 1]) problem("inner node keys out of order");
        if (node_refs[in->kid[i]]++ == 0) stack.push_back({in->kid[i], vol});
      }
    }
  }
  for (const auto& [n, refs] : node_refs) {
    if (n->refs != refs)
      problem(absl::StrFormat("tree node refcount %d but %d references", n->refs, refs));
  }
  std::vector<uint32_t> live_per_seg(segs.count(), 0);
  std::unordered_map<Bno, Bno> seen_pba;
  for (Bno v = 0; v < vbas.size(); ++v) {
    const auto& en = vbas.Get(v);
    if (en.refs != vba_refs[v])
      problem(absl::StrFormat("VBA %d has refcount %d but %d references", v, en.refs, vba_refs[v]));
    if (en.refs == 0) {
      if (en.pba != kNoBlock) problem(absl::StrFormat("free VBA %d still points at PBA %d", v, en.pba));
      continue;
    }
    ++rep.live_vbas;
    if (en.pba == kNoBlock) {
      problem(absl::StrFormat("VBA %d is referenced but has no physical block", v));
      continue;
    }
    if (uint64_t(en.pba) >= uint64_t(segs.count()) * segs.segment_blocks()) {
      problem(absl::StrFormat("VBA %d points past the media (PBA %d)", v, en.pba));
      continue;
    }
    auto [it, fresh] = seen_pba.emplace(en.pba, v);
    if (!fresh) problem(absl::StrFormat("PBA %d is used by VBAs %d and %d", en.pba, it->second, v));
    if (!segs.IsValid(en.pba)) problem(absl::StrFormat("live PBA %d is not marked valid", en.pba));
    ++live_per_seg[segs.SegmentOf(log::Pba(en.pba))];
  }
  uint32_t open = 0;
  for (uint32_t s = 0; s < segs.count(); ++s) {
    const auto& si = segs.at(s);
    if (si.live != live_per_seg[s])
      problem(absl::StrFormat("segment %d live count %d but %d live blocks", s, si.live, live_per_seg[s]));
    if (si.state == log::SegmentState::kFree && si.live != 0)
      problem(absl::StrFormat("free segment %d holds live blocks", s));
    if (si.state == log::SegmentState::kOpen) ++open;
    rep.live_blocks += si.live;
  }
  if (open > gc::kSlotCount)
    problem(absl::StrFormat("%d segments open (at most %d slots)", open, gc::kSlotCount));
  if (segs.live_blocks() != rep.live_blocks) problem("total live count disagrees with segments");
  if (verify_data) {
    // Every record header in the used part of every segment must verify,
    // except in a full segment without live blocks whose records both
    // checkpoints cover: nobody reads it again (the cleaner frees it
    // unread), and after a crash it may be one the cleaner had freed and
    // the writer had begun to reuse with records that were never durable
    // (recovery rightly ignores them, but they overwrote the old ones).
    for (uint32_t seg = 0; seg < segs.count(); ++seg) {
      const auto& si = segs.at(seg);
      if (si.state == log::SegmentState::kFree || si.write_ptr == 0) continue;
      if (si.state == log::SegmentState::kFull && si.live == 0 && si.max_seq < checkpointer_.gate_seq()) continue;
      log::ScanOptions so;
      so.segment_blocks = si.write_ptr;
      so.uuid = checkpointer_.superblock().uuid;
      so.verify_data = false;
      so.resync_after_damage = true;
      log::Pba first = segs.FirstBlock(seg);
      log::SegmentScan scan = log::ScanSegment(so, log::MediaSegmentReader(media_.get(), MediaOffset(first)));
      rep.records += scan.records.size();
      if (scan.damaged > 0)
        problem(absl::StrFormat(
            "segment %d: %d damaged record header(s), the first at block %d (state %d, stream %d, "
            "write_ptr %d, live %d, %d valid records, max_seq %d, gate %d)",
            seg, scan.damaged, scan.first_damaged_block, int(si.state), int(si.stream), si.write_ptr,
            si.live, scan.records.size(), si.max_seq, checkpointer_.gate_seq()));
    }
    media::AlignedBuffer buf(kBlockSize);
    std::set<Bno> bad_vbas;
    for (const auto& [pba, v] : seen_pba) {
      const uint32_t want = st.block_csum(pba);
      auto check = [want](size_t, std::span<const std::byte> b) {
        return util::BlockChecksum(b) == want ? ReadVerdict::kGood : ReadVerdict::kBad;
      };
      absl::Status s = media_->ReadVerified(MediaOffset(log::Pba(pba)), buf.span(), kBlockSize, check);
      ++rep.blocks_verified;
      if (!s.ok()) {
        problem(absl::StrFormat("PBA %d unreadable: %s", pba, s.message()));
        bad_vbas.insert(v);
      } else if (util::BlockChecksum(buf.span()) != st.block_csum(pba)) {
        problem(absl::StrFormat("PBA %d (VBA %d) fails its checksum", pba, v));
        bad_vbas.insert(v);
      }
    }
    // Who reads them: every volume and snapshot block mapped to a bad VBA
    // (these answer EIO), in runs.
    if (!bad_vbas.empty()) {
      for (const auto& entry : st.volumes()) {
        // Named, not structured bindings: lambdas below capture them.
        const VolumeMeta* v = entry.second.get();
        const std::string what = v->is_snapshot() ? v->origin_name + "@" + v->name : v->name;
        Bno run_lo = 0, run_hi = 0;  // [lo, hi) of unreadable LBAs
        auto flush = [&] {
          if (run_hi > run_lo)
            problem(absl::StrFormat("%s %s blocks %d-%d read as EIO (damaged data)",
                                    v->is_snapshot() ? "snapshot" : "volume", what, run_lo, run_hi - 1));
          run_lo = run_hi = 0;
        };
        v->tree.ForEach([&](const map::Extent& e) {
          for (Bno k = 0; k < e.len; ++k) {
            if (!bad_vbas.count(e.vba + k)) continue;
            if (run_hi != e.lba + k) flush(), run_lo = e.lba + k;
            run_hi = e.lba + k + 1;
          }
        });
        flush();
      }
    }
  }
  return rep;
}

}  // namespace ftl::core
