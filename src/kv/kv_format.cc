// Encoding and decoding of the key-value dataset format (kv_format.h), and
// KvGeometry (include/ftl/kv.h).

#include "kv/kv_format.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "util/checksum.h"
#include "util/encoding.h"

namespace ftl {

absl::Status KvGeometry::Validate() const {
  if (page_bytes < 4096 || page_bytes > 65536 || page_bytes % 4096 != 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("page size %d: must be a multiple of 4096 from 4096 to 65536", page_bytes));
  if (pages_per_unit < 1 || pages_per_unit > 1024)
    return absl::InvalidArgumentError(
        absl::StrFormat("pages per erase unit %d: must be 1 to 1024", pages_per_unit));
  if (sectors_per_page < 1 || sectors_per_page > 64)
    return absl::InvalidArgumentError(
        absl::StrFormat("log sectors per page %d: must be 1 to 64", sectors_per_page));
  if (uint64_t(log_sectors_per_unit) < uint64_t(pages_per_unit) * sectors_per_page)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d log sectors per erase unit cannot give %d pages %d sectors each",
        log_sectors_per_unit, pages_per_unit, sectors_per_page));
  if (log_sectors_per_unit > 8192)
    return absl::InvalidArgumentError("at most 8192 log sectors per erase unit");
  if (unit_blocks() > 256)
    return absl::InvalidArgumentError(
        absl::StrFormat("an erase unit of %d blocks: at most 256 (1 MiB)", unit_blocks()));
  return absl::OkStatus();
}

uint32_t KvGeometry::unit_blocks() const {
  uint32_t log_blocks = (log_sectors_per_unit * kSectorBytes + 4095) / 4096;
  return pages_per_unit * (page_bytes / 4096) + log_blocks;
}

std::string KvGeometry::ToString() const {
  return absl::StrFormat("page=%d,pages=%d,sectors=%d,per-page=%d", page_bytes, pages_per_unit,
                         log_sectors_per_unit, sectors_per_page);
}

absl::StatusOr<KvGeometry> KvGeometry::Parse(std::string_view text) {
  KvGeometry g;
  if (text.empty()) return g;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    std::string part(text.substr(at, comma - at));
    at = comma + 1;
    size_t eq = part.find('=');
    uint32_t v = 0;
    std::string key = part.substr(0, eq == std::string::npos ? part.size() : eq);
    if (eq == std::string::npos || !absl::SimpleAtoi(part.substr(eq + 1), &v))
      return absl::InvalidArgumentError(
          absl::StrFormat("geometry \"%s\": \"%s\" is not KEY=NUMBER", std::string(text), part));
    if (key == "page") g.page_bytes = v;
    else if (key == "pages") g.pages_per_unit = v;
    else if (key == "sectors") g.log_sectors_per_unit = v;
    else if (key == "per-page") g.sectors_per_page = v;
    else
      return absl::InvalidArgumentError(absl::StrFormat(
          "geometry \"%s\": unknown key \"%s\" (page, pages, sectors, per-page)", std::string(text), key));
  }
  if (absl::Status s = g.Validate(); !s.ok()) return s;
  return g;
}

}  // namespace ftl

namespace ftl::kv {

using util::Decoder;
using util::Encoder;

uint32_t Layout::log_blocks() const {
  return (geo.log_sectors_per_unit * KvGeometry::kSectorBytes + kBlock - 1) / kBlock;
}

uint32_t Layout::PageLba(uint32_t page) const {
  uint32_t unit = page / geo.pages_per_unit, slot = page % geo.pages_per_unit;
  return unit_base + unit * geo.unit_blocks() + slot * page_blocks();
}

uint32_t Layout::LogLba(uint32_t page) const {
  uint32_t unit = page / geo.pages_per_unit, slot = page % geo.pages_per_unit;
  size_t off = size_t(slot) * log_area_bytes();
  return unit_base + unit * geo.unit_blocks() + geo.pages_per_unit * page_blocks() +
         uint32_t(off / kBlock);
}

size_t Layout::LogOffset(uint32_t page) const {
  uint32_t slot = page % geo.pages_per_unit;
  return (size_t(slot) * log_area_bytes()) % kBlock;
}

bool Layout::CarveDiffLog(uint32_t blob_used) {
  // A quarter of the blob area, at most 2^20 blocks (4 GiB of addresses;
  // thin: only the live part of the ring is mapped), at least 64.
  uint32_t n = std::min<uint32_t>(blob_blocks / 4, 1u << 20);
  if (n < 64 || blob_blocks - n - 1 < blob_used) return false;
  blob_blocks -= n + 1;
  anchor_lba = blob_base + blob_blocks;
  dlog_base = anchor_lba + 1;
  dlog_blocks = n;
  version = kFormatVersion;
  return true;
}

absl::StatusOr<Layout> Layout::Plan(const KvGeometry& geo, uint64_t blocks) {
  if (absl::Status s = geo.Validate(); !s.ok()) return s;
  blocks = std::min<uint64_t>(blocks, 0xFFFFFFF0u);
  Layout l;
  l.geo = geo;
  l.scratch_base = 1;
  l.scratch_blocks = uint32_t(std::min<uint64_t>(16384, blocks / 16));
  l.unit_base = l.scratch_base + l.scratch_blocks;
  uint64_t rest = blocks > l.unit_base ? blocks - l.unit_base : 0;
  l.unit_count = uint32_t((rest / 2) / geo.unit_blocks());
  l.blob_base = l.unit_base + l.unit_count * geo.unit_blocks();
  l.blob_blocks = uint32_t(blocks - l.blob_base);
  if (l.unit_count < 4 || l.scratch_blocks < 64 || !l.CarveDiffLog(0))
    return absl::InvalidArgumentError(absl::StrFormat(
        "a dataset of %d blocks is too small for erase units of %d blocks", blocks, geo.unit_blocks()));
  l.created_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
  return l;
}

std::vector<std::byte> EncodeHeader(const Layout& l) {
  std::vector<std::byte> out;
  Encoder e(&out);
  e.U64(kHeaderMagic);
  e.U32(kFormatVersion);
  e.U32(l.geo.page_bytes);
  e.U32(l.geo.pages_per_unit);
  e.U32(l.geo.log_sectors_per_unit);
  e.U32(l.geo.sectors_per_page);
  e.U32(l.scratch_base);
  e.U32(l.scratch_blocks);
  e.U32(l.unit_base);
  e.U32(l.unit_count);
  e.U32(l.blob_base);
  e.U32(l.blob_blocks);
  e.U64(l.created_ns);
  e.U32(l.anchor_lba);
  e.U32(l.dlog_base);
  e.U32(l.dlog_blocks);
  e.U64(util::Xxh3(out));
  out.resize(kBlock);
  return out;
}

absl::StatusOr<Layout> DecodeHeader(std::span<const std::byte> block) {
  Decoder d(block);
  if (d.U64() != kHeaderMagic) return absl::NotFoundError("no key-value dataset header");
  Layout l;
  uint32_t version = d.U32();
  // A version this build does not know has a layout it cannot check.
  if (version < 1 || version > kFormatVersion)
    return absl::FailedPreconditionError(absl::StrFormat(
        "key-value dataset format %d; this build reads 1 to %d", version, kFormatVersion));
  l.geo.page_bytes = d.U32();
  l.geo.pages_per_unit = d.U32();
  l.geo.log_sectors_per_unit = d.U32();
  l.geo.sectors_per_page = d.U32();
  l.scratch_base = d.U32();
  l.scratch_blocks = d.U32();
  l.unit_base = d.U32();
  l.unit_count = d.U32();
  l.blob_base = d.U32();
  l.blob_blocks = d.U32();
  l.created_ns = d.U64();
  l.version = version;
  if (version >= 2) {
    l.anchor_lba = d.U32();
    l.dlog_base = d.U32();
    l.dlog_blocks = d.U32();
  }
  size_t body = d.pos();
  uint64_t sum = d.U64();
  if (!d.ok() || util::Xxh3(block.first(body)) != sum)
    return absl::DataLossError("key-value dataset header fails its checksum");
  if (absl::Status s = l.geo.Validate(); !s.ok()) return s;
  if (l.has_diff_log() && (uint64_t(l.dlog_base) + l.dlog_blocks > 0xFFFFFFF0u ||
                           l.anchor_lba < uint64_t(l.blob_base) + l.blob_blocks))
    return absl::DataLossError("key-value dataset header: the differential log overlaps");
  return l;
}

size_t EntryBytes(PageType type, size_t klen, size_t vlen, bool blob) {
  if (type == PageType::kInner) return 2 + klen + 4;
  return 3 + klen + (blob ? 12 : 2 + vlen);
}

size_t EntryBytes(PageType type, const Entry& e) {
  return EntryBytes(type, e.key.size(), e.value.size(), e.blob.has_value());
}

void EncodePageHeader(const PageHeader& h, std::span<std::byte> out) {
  std::byte* o = out.data();
  std::memset(o, 0, kPageHeaderBytes);
  util::PutU16(o, kPageMagic);
  o[2] = std::byte(uint8_t(h.type));
  o[3] = std::byte(h.has_log ? 1 : 0);
  util::PutU16(o + 4, h.count);
  util::PutU32(o + 8, h.epoch);
  util::PutU32(o + 12, h.first_child);
  util::PutU32(o + 16, h.meta.next_page);
  util::PutU32(o + 20, h.meta.blob_next);
  util::PutU32(o + 24, h.meta.height);
}

absl::StatusOr<PageHeader> WalkPage(std::span<const std::byte> in,
                                    absl::FunctionRef<void(size_t at, size_t len, size_t klen)> entry,
                                    size_t* bytes) {
  PageHeader h;
  if (bytes) *bytes = kPageHeaderBytes;
  if (in.size() < kPageHeaderBytes) return absl::DataLossError("page shorter than its header");
  const uint16_t magic = util::GetU16(&in[0]);
  if (magic == 0 && std::all_of(in.begin(), in.begin() + kPageHeaderBytes,
                                [](std::byte b) { return b == std::byte{0}; }))
    return h;  // never written
  if (magic != kPageMagic) return absl::DataLossError("page without its magic");
  h.type = PageType(uint8_t(in[2]));
  h.has_log = (uint8_t(in[3]) & 1) != 0;
  h.count = util::GetU16(&in[4]);
  h.epoch = util::GetU32(&in[8]);
  h.first_child = util::GetU32(&in[12]);
  h.meta.next_page = util::GetU32(&in[16]);
  h.meta.blob_next = util::GetU32(&in[20]);
  h.meta.height = util::GetU32(&in[24]);
  if (h.type != PageType::kLeaf && h.type != PageType::kInner)
    return absl::DataLossError(absl::StrFormat("page of unknown type %d", int(h.type)));
  const bool inner = h.type == PageType::kInner;
  const size_t end = in.size();
  size_t at = kPageHeaderBytes;
  for (uint16_t i = 0; i < h.count; ++i) {
    if (at + 3 > end) return absl::DataLossError("page entries run past its end");
    const size_t klen = util::GetU16(&in[at]);
    size_t len;
    if (inner) {
      len = EntryBytes(h.type, klen, 0, false);
    } else if (uint8_t(in[at + 2]) == 1) {
      len = EntryBytes(h.type, klen, 0, true);
    } else {
      if (at + 3 + klen + 2 > end) return absl::DataLossError("page entries run past its end");
      len = EntryBytes(h.type, klen, util::GetU16(&in[at + 3 + klen]), false);
    }
    if (at + len > end) return absl::DataLossError("page entries run past its end");
    entry(at, len, klen);
    at += len;
  }
  if (bytes) *bytes = at;
  return h;
}

void EncodePage(const PageImage& p, std::span<std::byte> out) {
  std::vector<std::byte> b(kPageHeaderBytes);
  EncodePageHeader(PageHeader{p.type, p.has_log, uint16_t(p.entries.size()), p.epoch, p.first_child, p.meta},
                   b);
  Encoder e(&b);
  for (const Entry& x : p.entries) {
    e.U16(uint16_t(x.key.size()));
    if (p.type == PageType::kInner) {
      e.Str(x.key);
      e.U32(x.child);
      continue;
    }
    e.U8(x.blob ? 1 : 0);
    e.Str(x.key);
    if (x.blob) {
      e.U32(x.blob->lba);
      e.U32(x.blob->len);
      e.U32(x.blob->csum);
    } else {
      e.U16(uint16_t(x.value.size()));
      e.Str(x.value);
    }
  }
  std::memcpy(out.data(), b.data(), std::min(b.size(), out.size()));
  if (b.size() < out.size()) std::memset(out.data() + b.size(), 0, out.size() - b.size());
}

absl::Status DecodePageInto(std::span<const std::byte> in, PageImage* out) {
  PageImage& p = *out;
  // Assigning into entries already there reuses their strings' memory.
  size_t n = 0;
  auto str = [&](size_t at, size_t len) { return std::string_view(reinterpret_cast<const char*>(&in[at]), len); };
  PageType type = PageType::kNone;
  auto entry = [&](size_t at, size_t len, size_t klen) {
    if (n == p.entries.size()) p.entries.emplace_back();
    Entry& x = p.entries[n++];
    if (type == PageType::kInner) {
      x.key.assign(str(at + 2, klen));
      x.value.clear();
      x.blob.reset();
      x.child = util::GetU32(&in[at + 2 + klen]);
      return;
    }
    const size_t v = at + 3 + klen;
    x.key.assign(str(at + 3, klen));
    x.child = kNoPage;
    if (uint8_t(in[at + 2]) == 1) {
      x.blob = BlobRef{util::GetU32(&in[v]), util::GetU32(&in[v + 4]), util::GetU32(&in[v + 8])};
      x.value.clear();
    } else {
      x.blob.reset();
      x.value.assign(str(v + 2, len - (v + 2 - at)));
    }
  };
  // The type decides how entries read; WalkPage reports it only at the end,
  // so it is peeked first (WalkPage checks it).
  if (in.size() >= kPageHeaderBytes) type = PageType(uint8_t(in[2]));
  absl::StatusOr<PageHeader> h = WalkPage(in, entry);
  p.entries.resize(n);
  if (!h.ok()) return h.status();
  p.type = h->type;
  p.has_log = h->has_log;
  p.epoch = h->epoch;
  p.first_child = h->first_child;
  p.meta = h->meta;
  return absl::OkStatus();
}

absl::StatusOr<PageImage> DecodePage(std::span<const std::byte> in) {
  PageImage p;
  if (absl::Status s = DecodePageInto(in, &p); !s.ok()) return s;
  return p;
}

absl::StatusOr<KeyFate> FateOfKey(std::span<const std::byte> in, std::string_view key) {
  KeyFate f;
  size_t put_at = 0, put_len = 0;  // the deciding PUT's value, or PUTBLOB's ref
  bool blob = false;
  auto key_at = [&](size_t at, size_t klen) {
    return klen == key.size() && std::memcmp(&in[at], key.data(), klen) == 0;
  };
  size_t at = 0;
  auto need = [&](size_t n) { return at + n <= in.size(); };
  while (at < in.size()) {
    LogOp op = LogOp(in[at]);
    ++at;
    switch (op) {
      case LogOp::kPut: {
        if (!need(4)) return absl::DataLossError("log entry runs past the log's end");
        size_t kl = util::GetU16(&in[at]), vl = util::GetU16(&in[at + 2]);
        at += 4;
        if (!need(kl + vl)) return absl::DataLossError("log entry runs past the log's end");
        if (key_at(at, kl)) {
          f.kind = KeyFate::kPresent;
          blob = false;
          put_at = at + kl;
          put_len = vl;
        }
        at += kl + vl;
        break;
      }
      case LogOp::kPutBlob:
      case LogOp::kDel:
      case LogOp::kTrunc:
      case LogOp::kChild: {
        if (!need(2)) return absl::DataLossError("log entry runs past the log's end");
        size_t kl = util::GetU16(&in[at]);
        at += 2;
        size_t tail = op == LogOp::kPutBlob ? 12 : op == LogOp::kChild ? 4 : 0;
        if (!need(kl + tail)) return absl::DataLossError("log entry runs past the log's end");
        std::string_view k(reinterpret_cast<const char*>(&in[at]), kl);
        if (op == LogOp::kPutBlob && k == key) {
          f.kind = KeyFate::kPresent;
          blob = true;
          put_at = at + kl;
        } else if (op == LogOp::kDel && k == key) {
          f.kind = KeyFate::kAbsent;
        } else if (op == LogOp::kTrunc && key >= k) {
          f.kind = KeyFate::kAbsent;
        }
        at += kl + tail;
        break;
      }
      case LogOp::kMeta:
        if (!need(12)) return absl::DataLossError("log entry runs past the log's end");
        at += 12;
        break;
      default:
        return absl::DataLossError(absl::StrFormat("log entry of unknown op %d", int(op)));
    }
  }
  if (f.kind == KeyFate::kPresent) {
    f.entry.key = std::string(key);
    if (blob) {
      f.entry.blob = BlobRef{util::GetU32(&in[put_at]), util::GetU32(&in[put_at + 4]),
                             util::GetU32(&in[put_at + 8])};
    } else {
      f.entry.value.assign(reinterpret_cast<const char*>(&in[put_at]), put_len);
    }
  }
  return f;
}

absl::StatusOr<PageProbe> ProbePage(std::span<const std::byte> in, std::string_view key,
                                    const std::function<void(std::string_view)>& on_key) {
  PageProbe r;
  const bool inner = in.size() >= kPageHeaderBytes && PageType(uint8_t(in[2])) == PageType::kInner;
  auto entry = [&](size_t at, size_t len, size_t klen) {
    const size_t kat = at + (inner ? 2 : 3);
    if (on_key) on_key(std::string_view(reinterpret_cast<const char*>(&in[kat]), klen));
    if (r.hit || klen != key.size() || std::memcmp(&in[kat], key.data(), klen) != 0) return;
    Entry e;
    e.key = std::string(key);
    if (inner) {
      e.child = util::GetU32(&in[kat + klen]);
    } else if (uint8_t(in[at + 2]) == 1) {
      e.blob = BlobRef{util::GetU32(&in[kat + klen]), util::GetU32(&in[kat + klen + 4]),
                       util::GetU32(&in[kat + klen + 8])};
    } else {
      e.value.assign(reinterpret_cast<const char*>(&in[kat + klen + 2]), len - 5 - klen);
    }
    r.hit = std::move(e);
  };
  absl::StatusOr<PageHeader> h = WalkPage(in, entry, &r.bytes);
  if (!h.ok()) return h.status();
  r.type = h->type;
  r.has_log = h->type == PageType::kNone ? false : h->has_log;
  r.epoch = h->epoch;
  if (h->type == PageType::kNone) r.bytes = 0;
  return r;
}

std::vector<std::byte> EncodeLogEntry(const LogEntry& x) {
  std::vector<std::byte> b;
  Encoder e(&b);
  e.U8(uint8_t(x.op));
  switch (x.op) {
    case LogOp::kPut:
      e.U16(uint16_t(x.key.size()));
      e.U16(uint16_t(x.value.size()));
      e.Str(x.key);
      e.Str(x.value);
      break;
    case LogOp::kPutBlob:
      e.String(x.key);
      e.U32(x.blob.lba);
      e.U32(x.blob.len);
      e.U32(x.blob.csum);
      break;
    case LogOp::kDel:
    case LogOp::kTrunc:
      e.String(x.key);
      break;
    case LogOp::kChild:
      e.String(x.key);
      e.U32(x.child);
      break;
    case LogOp::kMeta:
      e.U32(x.meta.next_page);
      e.U32(x.meta.blob_next);
      e.U32(x.meta.height);
      break;
    case LogOp::kEpoch:
      break;
  }
  return b;
}

size_t EncodePutEntry(std::string_view key, std::string_view value, std::span<std::byte> out) {
  out[0] = std::byte(uint8_t(LogOp::kPut));
  util::PutU16(&out[1], uint16_t(key.size()));
  util::PutU16(&out[3], uint16_t(value.size()));
  std::memcpy(&out[5], key.data(), key.size());
  std::memcpy(&out[5 + key.size()], value.data(), value.size());
  return 5 + key.size() + value.size();
}

size_t EncodeDelEntry(std::string_view key, std::span<std::byte> out) {
  out[0] = std::byte(uint8_t(LogOp::kDel));
  util::PutU16(&out[1], uint16_t(key.size()));
  std::memcpy(&out[3], key.data(), key.size());
  return 3 + key.size();
}

void PutLogHeader(std::span<std::byte> area, uint32_t epoch, size_t used) {
  area[0] = std::byte{kLogMagic};
  area[1] = std::byte{0};
  util::PutU16(&area[2], uint16_t(used));
  util::PutU32(&area[4], epoch);
}

namespace {

// One entry at the decoder's position, viewed in its bytes; false at a
// malformed op.
bool DecodeOneEntry(Decoder& d, LogEntryView* x) {
  x->op = LogOp(d.U8());
  switch (x->op) {
    case LogOp::kPut: {
      uint16_t kl = d.U16(), vl = d.U16();
      x->key = d.View(kl);
      x->value = d.View(vl);
      return true;
    }
    case LogOp::kPutBlob:
      x->key = d.View(d.U16());
      x->blob.lba = d.U32();
      x->blob.len = d.U32();
      x->blob.csum = d.U32();
      return true;
    case LogOp::kDel:
    case LogOp::kTrunc:
      x->key = d.View(d.U16());
      return true;
    case LogOp::kChild:
      x->key = d.View(d.U16());
      x->child = d.U32();
      return true;
    case LogOp::kMeta:
      x->meta.next_page = d.U32();
      x->meta.blob_next = d.U32();
      x->meta.height = d.U32();
      return true;
    case LogOp::kEpoch:
      return true;
  }
  return false;
}

}  // namespace

absl::Status ForEachLogEntry(std::span<const std::byte> bytes,
                             const std::function<absl::Status(const LogEntryView&)>& fn) {
  Decoder d(bytes);
  while (d.ok() && d.remaining() > 0) {
    LogEntryView x;
    if (!DecodeOneEntry(d, &x))
      return absl::DataLossError(absl::StrFormat("log entry of unknown op %d", int(x.op)));
    if (x.op == LogOp::kEpoch) return absl::DataLossError("an epoch record inside a page's log");
    if (!d.ok()) break;
    if (absl::Status s = fn(x); !s.ok()) return s;
  }
  if (!d.ok()) return absl::DataLossError("log entry runs past the log's end");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LogEntry>> DecodeLogEntries(std::span<const std::byte> bytes) {
  std::vector<LogEntry> out;
  absl::Status s = ForEachLogEntry(bytes, [&](const LogEntryView& v) {
    out.push_back(v.ToEntry());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<LogArea> DecodeLogArea(std::span<const std::byte> area) {
  LogArea a;
  if (area[0] != std::byte{kLogMagic}) return a;  // never written: empty
  a.used = util::GetU16(&area[2]);
  a.epoch = util::GetU32(&area[4]);
  if (a.used > area.size() - kLogHeaderBytes) return absl::DataLossError("log area overflows");
  absl::StatusOr<std::vector<LogEntry>> e = DecodeLogEntries(area.subspan(kLogHeaderBytes, a.used));
  if (!e.ok()) return e.status();
  a.entries = std::move(*e);
  return a;
}

std::vector<std::byte> EncodeAnchor(uint64_t tail) {
  std::vector<std::byte> out;
  Encoder e(&out);
  e.U64(kAnchorMagic);
  e.U64(tail);
  e.U64(util::Xxh3(out));
  out.resize(kBlock);
  return out;
}

absl::StatusOr<uint64_t> DecodeAnchor(std::span<const std::byte> block) {
  Decoder d(block);
  uint64_t magic = d.U64();
  if (magic == 0) return 0;  // never written
  uint64_t tail = d.U64();
  uint64_t sum = d.U64();
  if (magic != kAnchorMagic || util::Xxh3(block.first(16)) != sum)
    return absl::DataLossError("the differential log's anchor fails its checks");
  return tail;
}

void PutDiffBlockHeader(std::span<std::byte> block, uint64_t seq, size_t used) {
  util::PutU32(&block[0], kDiffBlockMagic);
  util::PutU16(&block[4], uint16_t(used));
  util::PutU16(&block[6], 0);
  util::PutU64(&block[8], seq);
}

absl::StatusOr<std::optional<std::vector<DiffRecord>>> DecodeDiffBlock(
    std::span<const std::byte> block, uint64_t seq) {
  using Out = std::optional<std::vector<DiffRecord>>;
  if (util::GetU32(&block[0]) != kDiffBlockMagic || util::GetU64(&block[8]) != seq) return Out();
  size_t used = util::GetU16(&block[4]);
  if (used > block.size() - kDiffBlockHeaderBytes)
    return absl::DataLossError(absl::StrFormat("differential log block %d overflows", seq));
  std::vector<DiffRecord> recs;
  std::span<const std::byte> body = block.subspan(kDiffBlockHeaderBytes, used);
  Decoder d(body);
  while (d.ok() && d.remaining() > 0) {
    DiffRecord r;
    r.page = d.U32();
    r.epoch = d.U32();
    size_t at = d.pos();
    LogEntryView x;
    if (!DecodeOneEntry(d, &x) || !d.ok())
      return absl::DataLossError(absl::StrFormat("differential log block %d: a malformed record", seq));
    r.op = x.op;
    r.entry = body.subspan(at, d.pos() - at);
    recs.push_back(r);
  }
  return Out(std::move(recs));
}

}  // namespace ftl::kv
