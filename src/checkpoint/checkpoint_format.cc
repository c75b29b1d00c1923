#include "checkpoint/checkpoint_format.h"

#include <cstring>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"

#include "absl/strings/str_cat.h"
#include "util/checksum.h"
#include "util/encoding.h"

namespace ftl::checkpoint {

using log::Bno;
using log::kNoBlock;
using state::TreeKind;
using state::kNoTree;
using state::VolumeMeta;
using util::Decoder;
using util::Encoder;

namespace {

// Appends the node count and the nodes to `out` (through `ne`).
void EncodeNodes(const MapState& state, Encoder& ne, std::vector<std::byte>* out,
                 absl::flat_hash_map<const map::Node*, uint32_t>* ids) {
  const size_t count_at = out->size();
  ne.U32(0);  // patched below
  uint32_t count = 0;
  // Post-order DFS so children get indices before their parents.
  std::function<uint32_t(const map::Node*)> emit = [&](const map::Node* n) -> uint32_t {
    auto it = ids->find(n);
    if (it != ids->end()) return it->second;
    if (n->leaf) {
      const auto* l = static_cast<const map::Leaf*>(n);
      ne.U8(0);
      ne.U16(l->count);
      uint64_t prev_end = 0;
      int64_t prev_vba = 0;
      for (int i = 0; i < l->count; ++i) {
        ne.Varint(l->e[i].lba - prev_end);
        ne.Varint(l->e[i].len);
        ne.Svarint(int64_t(l->e[i].vba) - prev_vba);
        prev_end = l->e[i].end();
        prev_vba = int64_t(l->e[i].vba) + l->e[i].len;
      }
    } else {
      const auto* in = static_cast<const map::Inner*>(n);
      std::vector<uint32_t> kids(in->count);
      for (int i = 0; i < in->count; ++i) kids[i] = emit(in->kid[i]);
      ne.U8(1);
      ne.U16(in->count);
      int64_t prev_key = 0;
      for (int i = 0; i < in->count; ++i) {
        ne.Svarint(int64_t(in->key[i]) - prev_key);
        ne.Varint(count - kids[i]);  // how far back the child is
        prev_key = in->key[i];
      }
    }
    (*ids)[n] = count;
    return count++;
  };
  for (const auto& [id, v] : state.volumes()) {
    if (v->tree.root()) emit(v->tree.root());
  }
  util::PutU32(out->data() + count_at, count);
}
}  // namespace

void EncodeCheckpointInto(const MapState& state, const log::Uuid& uuid, uint64_t next_seq,
                          std::vector<std::byte>* out) {
  // Header first with the body's length and checksum patched in at the end,
  // so the body is encoded in place (no copies of a map-sized buffer).
  out->clear();
  Encoder e(out);
  e.U64(kCheckpointMagic);
  e.U32(kCheckpointVersion);
  e.Bytes(uuid);
  e.U64(next_seq);
  e.U64(0);  // body length
  e.U64(0);  // body checksum
  const size_t body_at = out->size();
  const auto& segs = state.segments();
  e.U32(segs.count());
  for (uint32_t s = 0; s < segs.count(); ++s) {
    const auto& si = segs.at(s);
    e.U8(uint8_t(si.state));
    e.U8(uint8_t(si.stream));
    e.U32(si.write_ptr);
    e.U64(si.max_seq);
    e.U64(si.sealed_seq);
  }
  e.U32(state.vbas().size());
  state.vbas().ForEachRun(0, state.vbas().size(), [&](Bno, Bno len, Bno pba, uint32_t refs) {
    for (Bno i = 0; i < len; ++i) {
      e.U32(pba == kNoBlock ? kNoBlock : pba + i);
      e.U32(refs);
    }
  });
  const auto& csums = state.block_csums();
  e.U32(uint32_t(csums.size()));
  for (uint32_t c : csums) e.U32(c);
  absl::flat_hash_map<const map::Node*, uint32_t> ids;
  ids.reserve(size_t(state.tree_context().leaves + state.tree_context().inners));
  EncodeNodes(state, e, out, &ids);
  e.U32(uint32_t(state.volumes().size()));
  for (const auto& [id, v] : state.volumes()) {
    e.U32(id);
    e.String(v->name);
    e.U64(v->size_blocks);
    e.U32(v->tree.root() ? ids[v->tree.root()] : uint32_t(-1));
    e.U64(v->tree.mapped_blocks());
    e.U8(uint8_t(v->kind));
    e.U8(v->read_only ? 1 : 0);
    e.U32(v->origin);
    e.String(v->origin_name);
    e.U32(v->parent);
    e.U64(v->created_ns);
    e.U64(v->seq);
    std::vector<map::AttrRange> attrs = v->attrs.All();
    e.U32(uint32_t(attrs.size()));
    for (const map::AttrRange& a : attrs) {
      e.U32(a.lba);
      e.U32(a.count);
      e.U8(a.bits);
    }
    e.U8(uint8_t(v->dataset));
  }
  e.U32(state.next_tree_id());
  std::span<const std::byte> body(out->data() + body_at, out->size() - body_at);
  util::PutU64(out->data() + body_at - 16, body.size());
  util::PutU64(out->data() + body_at - 8, util::Xxh3(body));
}

std::vector<std::byte> EncodeCheckpoint(const MapState& state, const log::Uuid& uuid,
                                        uint64_t next_seq) {
  std::vector<std::byte> out;
  EncodeCheckpointInto(state, uuid, next_seq, &out);
  return out;
}

absl::StatusOr<LoadedCheckpoint> DecodeCheckpoint(std::span<const std::byte> bytes,
                                                  const log::Uuid& uuid, MapState* state) {
  Decoder h(bytes);
  if (h.U64() != kCheckpointMagic) return absl::DataLossError("checkpoint: bad magic");
  const uint32_t version = h.U32();
  if (version < 1 || version > kCheckpointVersion)
    return absl::DataLossError("checkpoint: unknown version");
  auto id = h.Bytes(16);
  if (!h.ok() || std::memcmp(id.data(), uuid.data(), 16) != 0)
    return absl::DataLossError("checkpoint: belongs to another pool");
  LoadedCheckpoint out;
  out.next_seq = h.U64();
  uint64_t body_len = h.U64();
  uint64_t sum = h.U64();
  if (!h.ok() || body_len > h.remaining()) return absl::DataLossError("checkpoint: truncated");
  auto body = h.Bytes(body_len);
  if (util::Xxh3(body) != sum) return absl::DataLossError("checkpoint: checksum mismatch");

  Decoder d(body);
  auto& segs = state->segments();
  if (d.U32() != segs.count()) return absl::DataLossError("checkpoint: segment count differs");
  for (uint32_t s = 0; s < segs.count(); ++s) {
    auto st = log::SegmentState(d.U8());
    if (uint8_t(st) > uint8_t(log::SegmentState::kCleaning))
      return absl::DataLossError("checkpoint: bad segment state");
    segs.Load(s, st);
    auto& si = segs.at(s);
    si.stream = log::Stream(d.U8());
    si.write_ptr = d.U32();
    si.max_seq = d.U64();
    si.sealed_seq = d.U64();
    if (si.write_ptr > segs.segment_blocks())
      return absl::DataLossError("checkpoint: bad write pointer");
  }
  uint32_t nvba = d.U32();
  if (!d.ok() || nvba > d.remaining() / 8) return absl::DataLossError("checkpoint: bad VBA table");
  std::vector<map::VbaTable::Entry> entries(nvba);
  uint64_t physical = uint64_t(segs.count()) * segs.segment_blocks();
  for (auto& en : entries) {
    en.pba = d.U32();
    en.refs = d.U32();
    if (en.pba != kNoBlock && en.pba >= physical)
      return absl::DataLossError("checkpoint: PBA out of range");
  }
  uint32_t ncsum = d.U32();
  if (ncsum != physical || ncsum > d.remaining() / 4)
    return absl::DataLossError("checkpoint: bad checksum table");
  auto& csums = state->block_csums();
  for (uint32_t i = 0; i < ncsum; ++i) csums[i] = d.U32();

  uint32_t nnodes = d.U32();
  if (!d.ok() || nnodes > d.remaining() / 3) return absl::DataLossError("checkpoint: bad nodes");
  std::vector<map::Node*> nodes;
  nodes.reserve(nnodes);
  auto fail = [&](const char* what) {
    // Nodes already built hold no VBA references of their own (the table is
    // loaded separately), so just free the memory.
    for (map::Node* n : nodes) {
      if (n->leaf) {
        --state->tree_context()->leaves;
        delete static_cast<map::Leaf*>(n);
      } else {
        --state->tree_context()->inners;
        delete static_cast<map::Inner*>(n);
      }
    }
    return absl::DataLossError(absl::StrCat("checkpoint: ", what));
  };
  for (uint32_t i = 0; i < nnodes; ++i) {
    uint8_t kind = d.U8();
    uint16_t n = d.U16();
    if (kind == 0) {
      if (n > map::kLeafCap) return fail("leaf too large");
      map::Leaf* l = map::ExtentTree::NewLeaf(state->tree_context());
      l->refs = 0;
      l->count = n;
      uint64_t prev_end = 0;
      int64_t prev_vba = 0;
      for (int k = 0; k < n; ++k) {
        map::Extent x;
        if (version >= 2) {
          uint64_t lba = prev_end + d.Varint();
          uint64_t len = d.Varint();
          int64_t vba = prev_vba + d.Svarint();
          if (lba + len > UINT32_MAX || vba < 0 || vba > INT64_C(0xffffffff)) {
            nodes.push_back(l);
            return fail("bad extent");
          }
          x = {Bno(lba), Bno(len), Bno(vba)};
          prev_end = lba + len;
          prev_vba = vba + int64_t(len);
        } else {
          x.lba = d.U32();
          x.len = d.U32();
          x.vba = d.U32();
        }
        // Builds before leaf entries had 16-bit lengths wrote longer
        // entries: such a checkpoint is not used (the log rebuilds it).
        if (x.len > map::kMaxEntryLen) {
          nodes.push_back(l);
          return fail("leaf entry longer than 65535 blocks");
        }
        if (uint64_t(x.vba) + x.len > nvba) {
          nodes.push_back(l);
          return fail("extent names an unknown VBA");
        }
        l->e[k] = x;
      }
      nodes.push_back(l);
    } else if (kind == 1) {
      if (n > map::kInnerCap || n == 0) return fail("inner node size");
      map::Inner* in = map::ExtentTree::NewInner(state->tree_context());
      in->refs = 0;
      in->count = n;
      nodes.push_back(in);
      int64_t prev_key = 0;
      for (int k = 0; k < n; ++k) {
        uint32_t child;
        if (version >= 2) {
          int64_t key = prev_key + d.Svarint();
          uint64_t back = d.Varint();
          if (key < 0 || key > INT64_C(0xffffffff) || back == 0 || back > i)
            return fail("bad inner node entry");
          in->key[k] = Bno(key);
          prev_key = key;
          child = uint32_t(i - back);
        } else {
          in->key[k] = d.U32();
          child = d.U32();
        }
        if (child >= i) return fail("child index not before parent");
        in->kid[k] = nodes[child];
        ++nodes[child]->refs;
      }
    } else {
      return fail("bad node kind");
    }
    if (!d.ok()) return fail("truncated nodes");
  }
  uint32_t nvol = d.U32();
  struct VolIn {
    uint32_t id;
    std::string name;
    uint64_t size;
    uint32_t root;
    uint64_t mapped;
    uint8_t kind = 0;
    uint8_t dataset = 0;
    bool read_only = false;
    uint32_t origin = kNoTree;
    std::string origin_name;
    uint32_t parent = kNoTree;
    uint64_t created_ns = 0, seq = 0;
    std::vector<map::AttrRange> attrs;
  };
  std::vector<VolIn> vols;
  for (uint32_t i = 0; i < nvol && d.ok(); ++i) {
    VolIn v;
    v.id = d.U32();
    v.name = d.String();
    v.size = d.U64();
    v.root = d.U32();
    v.mapped = d.U64();
    if (version >= 2) {
      v.kind = d.U8();
      v.read_only = d.U8() != 0;
      v.origin = d.U32();
      v.origin_name = d.String();
      v.parent = d.U32();
      v.created_ns = d.U64();
      v.seq = d.U64();
      uint32_t na = d.U32();
      if (!d.ok() || v.kind > 1 || na > d.remaining() / 9) return fail("bad volume entry");
      for (uint32_t k = 0; k < na; ++k) {
        map::AttrRange a;
        a.lba = d.U32();
        a.count = d.U32();
        a.bits = d.U8();
        if (uint64_t(a.lba) + a.count > v.size) return fail("attribute range out of bounds");
        v.attrs.push_back(a);
      }
    }
    if (version >= 3) {
      v.dataset = d.U8();
      if (v.dataset > log::kMaxDatasetKind) return fail("bad dataset kind");
    }
    if (v.root != uint32_t(-1)) {
      if (v.root >= nodes.size()) return fail("bad root index");
      ++nodes[v.root]->refs;
    }
    vols.push_back(std::move(v));
  }
  uint32_t next_tree_id = version >= 2 ? d.U32() : 1;
  if (!d.ok() || d.remaining() != 0) return fail("trailing or truncated body");
  for (map::Node* n : nodes) {
    if (n->refs == 0) return fail("unreferenced node");
  }
  for (const auto& en : entries) {
    if (en.refs > 0 && en.pba != kNoBlock) {
      if (segs.IsValid(en.pba)) return absl::DataLossError("checkpoint: PBA used twice");
      segs.SetValid(en.pba);
    }
  }
  state->vbas().Load(entries);
  for (VolIn& v : vols) {
    VolumeMeta* meta = state->AddVolume(v.id, v.name, v.size);
    if (v.root != uint32_t(-1)) meta->tree.AdoptRoot(nodes[v.root], v.mapped);
    meta->kind = TreeKind(v.kind);
    meta->dataset = DatasetKind(v.dataset);
    meta->read_only = v.read_only;
    meta->origin = v.origin;
    meta->origin_name = std::move(v.origin_name);
    meta->parent = v.parent;
    meta->created_ns = v.created_ns;
    meta->seq = v.seq;
    for (const map::AttrRange& a : v.attrs) meta->attrs.Apply(a.lba, a.count, a.bits, 0);
  }
  state->set_next_tree_id(std::max(state->next_tree_id(), next_tree_id));
  return out;
}

}  // namespace ftl::checkpoint
