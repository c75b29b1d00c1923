#include "nbd/transmission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nbd/errors.h"

namespace ftl::nbd {
namespace {

// Flags each command may carry (FUA is accepted on every command, as the
// spec requires once SEND_FUA is advertised).
uint16_t AllowedFlags(uint16_t type, const TransmissionContext& ctx) {
  switch (type) {
    case kCmdRead:
      return kCmdFlagFua | (ctx.structured_replies ? kCmdFlagDf : 0);
    case kCmdWriteZeroes:
      return kCmdFlagFua | kCmdFlagNoHole | kCmdFlagFastZero;
    case kCmdBlockStatus:
      return kCmdFlagFua | kCmdFlagReqOne;
    default:
      return kCmdFlagFua;
  }
}

bool IsWriteLike(uint16_t type) {
  return type == kCmdWrite || type == kCmdTrim || type == kCmdWriteZeroes;
}

// Largest BLOCK_STATUS reply we build: the spec allows fewer descriptors
// than the range needs.
constexpr size_t kMaxDescriptors = 64 * 1024;

}  // namespace

bool DecodeRequest(std::span<const std::byte, kRequestSize> raw, Request* out) {
  if (GetBe32(raw.data()) != kRequestMagic) return false;
  out->flags = GetBe16(raw.data() + 4);
  out->type = GetBe16(raw.data() + 6);
  out->cookie = GetBe64(raw.data() + 8);
  out->offset = GetBe64(raw.data() + 16);
  out->length = GetBe32(raw.data() + 24);
  return true;
}

void EncodeRequest(const Request& r, std::span<std::byte, kRequestSize> out) {
  PutBe32(out.data(), kRequestMagic);
  PutBe16(out.data() + 4, r.flags);
  PutBe16(out.data() + 6, r.type);
  PutBe64(out.data() + 8, r.cookie);
  PutBe64(out.data() + 16, r.offset);
  PutBe32(out.data() + 24, r.length);
}

absl::Status ValidateRequest(const Request& r, const TransmissionContext& ctx) {
  switch (r.type) {
    case kCmdDisc:
      return absl::OkStatus();
    case kCmdRead:
    case kCmdWrite:
    case kCmdFlush:
    case kCmdTrim:
    case kCmdCache:
    case kCmdWriteZeroes:
    case kCmdBlockStatus:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown command ", r.type));
  }
  const std::string name = CommandName(r.type);
  if (uint16_t bad = r.flags & ~AllowedFlags(r.type, ctx)) {
    return absl::InvalidArgumentError(absl::StrCat("flags 0x", absl::Hex(bad),
                                                   " not valid for ", name));
  }
  if (r.type == kCmdFlush) {
    if (r.offset != 0 || r.length != 0) {
      return absl::InvalidArgumentError("FLUSH with non-zero offset or length");
    }
    return absl::OkStatus();
  }
  if (r.type == kCmdBlockStatus && !ctx.base_allocation) {
    return absl::InvalidArgumentError("BLOCK_STATUS without a negotiated meta context");
  }
  if ((r.type == kCmdRead || r.type == kCmdWrite) && r.length > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " of ", r.length, " bytes exceeds the maximum ", kMaxPayload));
  }
  if (ctx.read_only && IsWriteLike(r.type)) {
    return absl::PermissionDeniedError(absl::StrCat(name, " on a read-only export"));
  }
  if (r.length == 0) return absl::InvalidArgumentError(absl::StrCat(name, " of zero bytes"));
  if (r.offset % ctx.min_block_size != 0 || r.length % ctx.min_block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " of ", r.length, " bytes at ", r.offset, " not aligned to the ",
        ctx.min_block_size, "-byte minimum block size the client agreed to"));
  }
  if (r.offset > ctx.size || r.length > ctx.size - r.offset) {
    std::string msg = absl::StrCat(name, " of ", r.length, " bytes at ", r.offset,
                                   " is past the end (", ctx.size, ")");
    if (r.type == kCmdWrite || r.type == kCmdWriteZeroes) return absl::OutOfRangeError(msg);
    return absl::InvalidArgumentError(msg);
  }
  return absl::OkStatus();
}

absl::Status ExecuteSimple(Volume& v, const Request& r) {
  const bool fua = r.flags & kCmdFlagFua;
  switch (r.type) {
    case kCmdFlush:
      return v.Flush();
    case kCmdTrim:
      return v.Trim(r.offset, r.length, fua);
    case kCmdWriteZeroes:
      return v.WriteZeroes(r.offset, r.length, fua, (r.flags & kCmdFlagNoHole) != 0,
                           (r.flags & kCmdFlagFastZero) != 0);
    case kCmdCache:
      // Reads always come from the media; there is nothing to prefetch.
      return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("ExecuteSimple cannot run ", CommandName(r.type)));
}

absl::StatusOr<std::vector<Descriptor>> ExecuteBlockStatus(Volume& v, const Request& r) {
  auto extents = v.BlockStatus(r.offset, r.length);
  if (!extents.ok()) return extents.status();
  std::vector<Descriptor> out;
  uint64_t covered = 0;
  for (const BlockExtent& e : *extents) {
    if (e.length == 0) continue;
    // Clip to the request: the sum must not exceed the asked length.
    uint64_t len = std::min<uint64_t>(e.length, uint64_t(r.length) - covered);
    if (len == 0) break;
    uint32_t flags = e.allocated ? 0 : (kStateHole | kStateZero);
    if (!out.empty() && out.back().flags == flags &&
        uint64_t(out.back().length) + len <= UINT32_MAX) {
      out.back().length += uint32_t(len);
    } else {
      if (out.size() == kMaxDescriptors) break;
      out.push_back({uint32_t(len), flags});
    }
    covered += len;
  }
  if (out.empty()) {
    // The engine said nothing: "status 0" (allocated) is always safe.
    out.push_back({r.length, 0});
  }
  if (r.flags & kCmdFlagReqOne) out.resize(1);
  return out;
}

void EncodeSimpleReply(std::vector<std::byte>* out, uint64_t cookie, uint32_t error) {
  BeWriter w(out);
  w.U32(kSimpleReplyMagic);
  w.U32(error);
  w.U64(cookie);
}

void EncodeChunkHeader(std::vector<std::byte>* out, uint16_t flags, uint16_t type,
                       uint64_t cookie, uint32_t length) {
  BeWriter w(out);
  w.U32(kStructuredReplyMagic);
  w.U16(flags);
  w.U16(type);
  w.U64(cookie);
  w.U32(length);
}

void EncodeDone(std::vector<std::byte>* out, uint64_t cookie) {
  EncodeChunkHeader(out, kReplyFlagDone, kReplyTypeNone, cookie, 0);
}

void EncodeErrorChunk(std::vector<std::byte>* out, uint64_t cookie, uint32_t error,
                      std::string_view message) {
  message = message.substr(0, kMaxString);
  EncodeChunkHeader(out, kReplyFlagDone, kReplyTypeError, cookie, uint32_t(6 + message.size()));
  BeWriter w(out);
  w.U32(error);
  w.U16(uint16_t(message.size()));
  w.Str(message);
}

void EncodeReadChunkHeader(std::vector<std::byte>* out, uint64_t cookie, uint64_t offset,
                           uint32_t data_length) {
  EncodeChunkHeader(out, kReplyFlagDone, kReplyTypeOffsetData, cookie, 8 + data_length);
  BeWriter(out).U64(offset);
}

void EncodeBlockStatusChunk(std::vector<std::byte>* out, uint64_t cookie,
                            std::span<const Descriptor> descriptors) {
  EncodeChunkHeader(out, kReplyFlagDone, kReplyTypeBlockStatus, cookie,
                    uint32_t(4 + 8 * descriptors.size()));
  BeWriter w(out);
  w.U32(kBaseAllocationId);
  for (const Descriptor& d : descriptors) {
    w.U32(d.length);
    w.U32(d.flags);
  }
}

void EncodeErrorReply(std::vector<std::byte>* out, const Request& r, bool structured,
                      const absl::Status& status) {
  uint32_t error = StatusToNbdError(status);
  if (error == 0) error = kEIo;  // Invariant: an error reply carries an error.
  if (structured) {
    EncodeErrorChunk(out, r.cookie, error, StatusMessage(status));
  } else {
    EncodeSimpleReply(out, r.cookie, error);
  }
}

void EncodeOkReply(std::vector<std::byte>* out, const Request& r, bool structured) {
  // A simple reply is allowed for everything but READ and BLOCK_STATUS,
  // even with structured replies negotiated, and it is shorter.
  EncodeSimpleReply(out, r.cookie, 0);
}

}  // namespace ftl::nbd
