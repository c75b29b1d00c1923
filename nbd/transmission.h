#pragma once
// Phase 3 of a connection: the transmission phase, without sockets.
// DecodeRequest frames a request, ValidateRequest decides whether it may run
// (pure: no Volume call), Execute* run it against a Volume, and Encode*
// build reply bytes. The connection (connection.h) strings them together and
// owns concurrency.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "ftl/pool.h"
#include "nbd/protocol.h"

namespace ftl::nbd {

struct Request {
  uint16_t flags = 0;
  uint16_t type = 0;
  uint64_t cookie = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  // Not on the wire: steady-clock ns when the header was decoded, for the
  // latency histograms (nbd/request_metrics.h); 0 when none are kept.
  uint64_t start_ns = 0;
};

// False if the magic is wrong: a framing violation, the connection closes.
bool DecodeRequest(std::span<const std::byte, kRequestSize> raw, Request* out);
void EncodeRequest(const Request& r, std::span<std::byte, kRequestSize> out);

// The facts about a connection that validation needs.
struct TransmissionContext {
  uint64_t size = 0;
  bool read_only = false;
  bool structured_replies = false;
  bool base_allocation = false;
  // Offsets and lengths must be multiples of this (Negotiation::
  // min_block_size(): 512 if the client agreed to block sizes, else 1).
  uint32_t min_block_size = kMinBlockSize;
};

// True if the request is followed by `length` payload bytes on the wire,
// which must be consumed even when the request is refused.
inline bool HasPayload(const Request& r) { return r.type == kCmdWrite; }

// OK, or the status whose NBD error (errors.h) the client gets:
//   InvalidArgument: unknown command, flag not valid for the command, zero
//     length, offset/length not multiples of ctx.min_block_size, READ/WRITE
//     over 32 MiB (for every client: the spec's interoperable maximum),
//     non-zero FLUSH fields, BLOCK_STATUS without base:allocation, ranges
//     past the end for READ/TRIM/CACHE/BLOCK_STATUS;
//   OutOfRange (ENOSPC): WRITE/WRITE_ZEROES past the end;
//   PermissionDenied: WRITE/TRIM/WRITE_ZEROES on a read-only export.
// DISC is always OK (offset and length are ignored). WRITE_ZEROES may carry
// FAST_ZERO and NO_HOLE together: whether that can be fast is the volume's
// call (Unimplemented -> ENOTSUP), not a validation error.
absl::Status ValidateRequest(const Request& r, const TransmissionContext& ctx);

// Executes a validated request that has no payload in either direction
// (FLUSH, TRIM, WRITE_ZEROES, CACHE). Blocking.
absl::Status ExecuteSimple(Volume& v, const Request& r);

// base:allocation descriptors for BLOCK_STATUS: consecutive (length, flags),
// merged where flags repeat, one only with REQ_ONE. Blocking.
struct Descriptor {
  uint32_t length = 0;
  uint32_t flags = 0;
};
absl::StatusOr<std::vector<Descriptor>> ExecuteBlockStatus(Volume& v, const Request& r);

// Reply encoders; each appends to `out`.
void EncodeSimpleReply(std::vector<std::byte>* out, uint64_t cookie, uint32_t error);
void EncodeChunkHeader(std::vector<std::byte>* out, uint16_t flags, uint16_t type,
                       uint64_t cookie, uint32_t length);
// NBD_REPLY_TYPE_NONE with DONE.
void EncodeDone(std::vector<std::byte>* out, uint64_t cookie);
// NBD_REPLY_TYPE_ERROR with DONE and a message.
void EncodeErrorChunk(std::vector<std::byte>* out, uint64_t cookie, uint32_t error,
                      std::string_view message);
// Header and offset of one NBD_REPLY_TYPE_OFFSET_DATA chunk with DONE; the
// `data_length` data bytes follow.
void EncodeReadChunkHeader(std::vector<std::byte>* out, uint64_t cookie, uint64_t offset,
                           uint32_t data_length);
// One NBD_REPLY_TYPE_BLOCK_STATUS chunk for base:allocation, with DONE.
void EncodeBlockStatusChunk(std::vector<std::byte>* out, uint64_t cookie,
                            std::span<const Descriptor> descriptors);

// The reply to a request that failed with `status` (simple or structured).
void EncodeErrorReply(std::vector<std::byte>* out, const Request& r, bool structured,
                      const absl::Status& status);
// The reply to a request without reply payload that succeeded.
void EncodeOkReply(std::vector<std::byte>* out, const Request& r, bool structured);

}  // namespace ftl::nbd
