#include "nbd/options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nbd/errors.h"

namespace ftl::nbd {
namespace {

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

void AppendInfoExport(std::vector<std::byte>* out, uint32_t option, const Export& e,
                      bool structured) {
  std::vector<std::byte> d;
  BeWriter w(&d);
  w.U16(kInfoExport);
  w.U64(e.volume->size_bytes());
  w.U16(TransmissionFlags(e, structured));
  AppendOptionReply(out, option, kRepInfo, d);
}

void AppendInfoString(std::vector<std::byte>* out, uint32_t option, uint16_t item,
                      std::string_view s) {
  std::vector<std::byte> d;
  BeWriter w(&d);
  w.U16(item);
  w.Str(s);
  AppendOptionReply(out, option, kRepInfo, d);
}

void AppendInfoBlockSize(std::vector<std::byte>* out, uint32_t option, uint32_t min_block) {
  std::vector<std::byte> d;
  BeWriter w(&d);
  w.U16(kInfoBlockSize);
  w.U32(min_block);
  w.U32(kPreferredBlockSize);
  w.U32(kMaxPayload);
  AppendOptionReply(out, option, kRepInfo, d);
}

OptionResult Error(uint32_t option, uint32_t type, std::string message) {
  OptionResult r;
  AppendOptionError(&r.reply, option, type, message);
  r.error = absl::StrCat(OptionName(option), ": ", message);
  return r;
}

OptionResult HandleInfoOrGo(uint32_t option, std::span<const std::byte> data,
                            const ExportTable& exports, Negotiation* n) {
  auto req = ParseInfoRequest(data);
  if (!req.ok()) return Error(option, kRepErrInvalid, std::string(StatusMessage(req.status())));
  std::optional<Export> e = exports.Find(req->name);
  if (!e) return Error(option, kRepErrUnknown, absl::StrCat("no export named '", req->name, "'"));

  OptionResult r;
  bool block_sizes_requested = false;
  for (uint16_t item : req->items) {
    if (item == kInfoName) AppendInfoString(&r.reply, option, kInfoName, e->name);
    if (item == kInfoDescription && !e->description.empty()) {
      AppendInfoString(&r.reply, option, kInfoDescription, e->description);
    }
    block_sizes_requested |= item == kInfoBlockSize;
  }
  // Block sizes are always sent. The minimum is what the transmission phase
  // will enforce: 512 for a GO that asked for them (the client must honour
  // them), 1 for a GO that did not (the spec's default). INFO answers with
  // what a GO asking for them would get, as qemu-nbd does.
  const bool binding = option == kOptInfo || block_sizes_requested;
  AppendInfoBlockSize(&r.reply, option, binding ? kMinBlockSize : kDefaultMinBlockSize);
  AppendInfoExport(&r.reply, option, *e, n->structured_replies);
  AppendOptionReply(&r.reply, option, kRepAck);
  if (option == kOptGo) {
    n->block_sizes_agreed = block_sizes_requested;
    if (n->meta_volume != e->volume) n->base_allocation = false;
    n->chosen = std::move(e);
    r.outcome = OptionOutcome::kTransmission;
  }
  return r;
}

// True if `query` selects base:allocation. LIST accepts the bare namespace.
bool MatchesBaseAllocation(std::string_view query, bool listing) {
  return query == kBaseAllocation || (listing && query == "base:");
}

OptionResult HandleMetaContext(uint32_t option, std::span<const std::byte> data,
                               const ExportTable& exports, Negotiation* n) {
  if (!n->structured_replies) {
    return Error(option, kRepErrInvalid, "structured replies must be negotiated first");
  }
  auto req = ParseMetaContextRequest(data);
  if (!req.ok()) return Error(option, kRepErrInvalid, std::string(StatusMessage(req.status())));
  std::optional<Export> e = exports.Find(req->name);
  if (!e) return Error(option, kRepErrUnknown, absl::StrCat("no export named '", req->name, "'"));

  const bool listing = option == kOptListMetaContext;
  bool selected = listing && req->queries.empty();
  for (const std::string& q : req->queries) selected |= MatchesBaseAllocation(q, listing);

  OptionResult r;
  if (selected) {
    std::vector<std::byte> d;
    BeWriter w(&d);
    w.U32(listing ? 0 : kBaseAllocationId);
    w.Str(kBaseAllocation);
    AppendOptionReply(&r.reply, option, kRepMetaContext, d);
  }
  AppendOptionReply(&r.reply, option, kRepAck);
  if (!listing) {
    n->base_allocation = selected;
    n->meta_volume = e->volume;
  }
  return r;
}

OptionResult HandleList(std::span<const std::byte> data, const ExportTable& exports) {
  if (!data.empty()) return Error(kOptList, kRepErrInvalid, "NBD_OPT_LIST takes no data");
  OptionResult r;
  for (const Export& e : exports.List()) {
    if (!e.listed) continue;
    std::vector<std::byte> d;
    BeWriter w(&d);
    w.U32(uint32_t(e.name.size()));
    w.Str(e.name);
    w.Str(e.description);
    AppendOptionReply(&r.reply, kOptList, kRepServer, d);
  }
  AppendOptionReply(&r.reply, kOptList, kRepAck);
  return r;
}

OptionResult HandleExportName(std::span<const std::byte> data, const ExportTable& exports,
                              Negotiation* n) {
  std::string name(reinterpret_cast<const char*>(data.data()), data.size());
  OptionResult r;
  std::optional<Export> e = exports.Find(name);
  if (!e) {
    // This option cannot fail politely: the spec says close.
    r.outcome = OptionOutcome::kClose;
    r.error = absl::StrCat("NBD_OPT_EXPORT_NAME: no export named '", name, "'");
    return r;
  }
  BeWriter w(&r.reply);
  w.U64(e->volume->size_bytes());
  w.U16(TransmissionFlags(*e, n->structured_replies));
  if (!n->no_zeroes) w.Zeroes(124);
  if (n->meta_volume != e->volume) n->base_allocation = false;
  n->chosen = std::move(e);
  r.outcome = OptionOutcome::kTransmission;
  return r;
}

}  // namespace

absl::StatusOr<OptionHeader> DecodeOptionHeader(
    std::span<const std::byte, kOptionHeaderSize> raw) {
  if (GetBe64(raw.data()) != kOptMagic) {
    return absl::InvalidArgumentError("option without IHAVEOPT magic");
  }
  return OptionHeader{.option = GetBe32(raw.data() + 8), .length = GetBe32(raw.data() + 12)};
}

absl::StatusOr<InfoRequest> ParseInfoRequest(std::span<const std::byte> data) {
  BeReader r(data);
  InfoRequest req;
  uint32_t name_len = r.U32();
  if (!r.ok() || name_len > kMaxString || name_len > r.remaining()) {
    return absl::InvalidArgumentError("bad export name length");
  }
  req.name = r.Str(name_len);
  uint16_t count = r.U16();
  if (!r.ok() || r.remaining() != size_t(count) * 2) {
    return absl::InvalidArgumentError("information request count does not match the length");
  }
  for (uint16_t i = 0; i < count; ++i) req.items.push_back(r.U16());
  return req;
}

absl::StatusOr<MetaContextRequest> ParseMetaContextRequest(std::span<const std::byte> data) {
  BeReader r(data);
  MetaContextRequest req;
  uint32_t name_len = r.U32();
  if (!r.ok() || name_len > kMaxString || name_len > r.remaining()) {
    return absl::InvalidArgumentError("bad export name length");
  }
  req.name = r.Str(name_len);
  uint32_t count = r.U32();
  if (!r.ok()) return absl::InvalidArgumentError("missing query count");
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = r.U32();
    if (!r.ok() || len > kMaxString || len > r.remaining()) {
      return absl::InvalidArgumentError("bad query length");
    }
    req.queries.push_back(r.Str(len));
  }
  if (r.remaining() != 0) return absl::InvalidArgumentError("trailing bytes after queries");
  return req;
}

void AppendOptionReply(std::vector<std::byte>* out, uint32_t option, uint32_t type,
                       std::span<const std::byte> data) {
  BeWriter w(out);
  w.U64(kOptReplyMagic);
  w.U32(option);
  w.U32(type);
  w.U32(uint32_t(data.size()));
  w.Bytes(data);
}

void AppendOptionError(std::vector<std::byte>* out, uint32_t option, uint32_t type,
                       std::string_view message) {
  AppendOptionReply(out, option, type, AsBytes(message.substr(0, kMaxString)));
}

const char* TlsModeName(TlsMode mode) {
  switch (mode) {
    case TlsMode::kOff: return "off";
    case TlsMode::kOn: return "on";
    case TlsMode::kRequire: return "require";
  }
  return "?";
}

bool TlsRequiredFor(uint32_t option, const Negotiation& n) {
  return n.tls_mode == TlsMode::kRequire && !n.tls_active && option != kOptStartTls &&
         option != kOptAbort;
}

OptionResult HandleOption(uint32_t option, std::span<const std::byte> data,
                          const ExportTable& exports, Negotiation* n) {
  if (TlsRequiredFor(option, *n)) {
    if (option == kOptExportName) {
      // It cannot be answered with an error: the spec says close.
      OptionResult r;
      r.outcome = OptionOutcome::kClose;
      r.error = "NBD_OPT_EXPORT_NAME without TLS, which this server requires; closing";
      return r;
    }
    return Error(option, kRepErrTlsReqd, "TLS is required: send NBD_OPT_STARTTLS first");
  }
  switch (option) {
    case kOptExportName:
      return HandleExportName(data, exports, n);
    case kOptAbort: {
      OptionResult r;
      AppendOptionReply(&r.reply, option, kRepAck);
      r.outcome = OptionOutcome::kClose;
      return r;
    }
    case kOptList:
      return HandleList(data, exports);
    case kOptStartTls: {
      if (n->tls_mode == TlsMode::kOff) {
        return Error(option, kRepErrPolicy, "TLS is not enabled on this server (ftld --tls)");
      }
      if (n->tls_active) return Error(option, kRepErrInvalid, "TLS is already running");
      if (!data.empty()) return Error(option, kRepErrInvalid, "NBD_OPT_STARTTLS takes no data");
      OptionResult r;
      AppendOptionReply(&r.reply, option, kRepAck);
      // Nothing agreed before TLS survives it (spec, NBD_OPT_STARTTLS).
      Negotiation fresh;
      fresh.no_zeroes = n->no_zeroes;
      fresh.tls_mode = n->tls_mode;
      *n = std::move(fresh);
      r.outcome = OptionOutcome::kStartTls;
      return r;
    }
    case kOptInfo:
    case kOptGo:
      return HandleInfoOrGo(option, data, exports, n);
    case kOptStructuredReply: {
      if (!data.empty()) return Error(option, kRepErrInvalid, "option takes no data");
      OptionResult r;
      n->structured_replies = true;
      AppendOptionReply(&r.reply, option, kRepAck);
      return r;
    }
    case kOptListMetaContext:
    case kOptSetMetaContext:
      return HandleMetaContext(option, data, exports, n);
  }
  OptionResult r;
  AppendOptionError(&r.reply, option, kRepErrUnsup,
                    absl::StrCat("unsupported option ", option));
  // Unknown options are normal client probing, not worth a log line.
  return r;
}

}  // namespace ftl::nbd
