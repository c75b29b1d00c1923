#pragma once
// Phase 2 of a connection: option haggling. Parsing (Parse*) is separate
// from execution (HandleOption); neither touches a socket, so both are unit
// tested on bytes. The connection reads one option, calls HandleOption, sends
// the reply bytes and acts on the outcome.
//
// Supported: EXPORT_NAME, ABORT, LIST, STARTTLS, INFO, GO, STRUCTURED_REPLY,
// LIST_META_CONTEXT and SET_META_CONTEXT with "base:allocation". Anything
// else gets ERR_UNSUP.
//
// TLS (NBD spec, "TLS support"; docs/decisions.md, "Issue 24: TLS"), by
// TlsMode:
//   kOff      NOTLS: STARTTLS gets ERR_POLICY.
//   kOn       SELECTIVETLS with no TLS-only export: STARTTLS is acknowledged
//             (the connection then runs the handshake), every option works
//             with or without it.
//   kRequire  FORCEDTLS: before TLS every option but STARTTLS and ABORT gets
//             ERR_TLS_REQD (unknown ones too), and EXPORT_NAME, which cannot
//             fail politely, closes the connection.
// STARTTLS once TLS is up gets ERR_INVALID; an acknowledged STARTTLS drops
// what was negotiated before it (structured replies, meta contexts), as
// the spec demands.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nbd/exports.h"
#include "nbd/protocol.h"

namespace ftl::nbd {

// Option data longer than this is drained and answered ERR_TOO_BIG; longer
// than kMaxDrainedOptionLength closes the connection.
inline constexpr uint32_t kMaxOptionLength = 64 * 1024;
inline constexpr uint32_t kMaxDrainedOptionLength = 16u << 20;

struct OptionHeader {
  uint32_t option = 0;
  uint32_t length = 0;
};
// InvalidArgument if the magic is not IHAVEOPT (a framing violation).
absl::StatusOr<OptionHeader> DecodeOptionHeader(std::span<const std::byte, kOptionHeaderSize> raw);

// Payload of NBD_OPT_INFO / NBD_OPT_GO.
struct InfoRequest {
  std::string name;
  std::vector<uint16_t> items;
};
absl::StatusOr<InfoRequest> ParseInfoRequest(std::span<const std::byte> data);

// Payload of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT.
struct MetaContextRequest {
  std::string name;
  std::vector<std::string> queries;
};
absl::StatusOr<MetaContextRequest> ParseMetaContextRequest(std::span<const std::byte> data);

enum class TlsMode { kOff, kOn, kRequire };
// "off", "on", "require".
const char* TlsModeName(TlsMode mode);

// What haggling has agreed so far.
struct Negotiation {
  bool no_zeroes = false;
  TlsMode tls_mode = TlsMode::kOff;  // the server's policy
  bool tls_active = false;           // the TLS handshake has completed
  bool structured_replies = false;
  // NBD_OPT_GO asked for NBD_INFO_BLOCK_SIZE: the client MUST honour the
  // block sizes it was sent (spec, "Block size constraints").
  bool block_sizes_agreed = false;
  bool base_allocation = false;           // selected by SET_META_CONTEXT
  const Volume* meta_volume = nullptr;    // the export it was selected for
  std::optional<Export> chosen;           // set when entering transmission

  // The alignment requests must have in transmission: kMinBlockSize for a
  // client that agreed to block sizes, otherwise 1 (any byte).
  uint32_t min_block_size() const {
    return block_sizes_agreed ? kMinBlockSize : kDefaultMinBlockSize;
  }
};

enum class OptionOutcome {
  kContinue,      // read the next option
  kTransmission,  // send the reply, then start the transmission phase
  kStartTls,      // send the reply (ACK), then run the TLS handshake
  kClose,         // send the reply (if any), then close the connection
};

struct OptionResult {
  std::vector<std::byte> reply;
  OptionOutcome outcome = OptionOutcome::kContinue;
  std::string error;  // non-empty: worth one log line
};

// True if `option` must be refused with ERR_TLS_REQD in this state (also
// for options whose data was too long to read).
bool TlsRequiredFor(uint32_t option, const Negotiation& n);

// Executes one option against `exports`, updating `*n`.
OptionResult HandleOption(uint32_t option, std::span<const std::byte> data,
                          const ExportTable& exports, Negotiation* n);

// One fixed-newstyle option reply.
void AppendOptionReply(std::vector<std::byte>* out, uint32_t option, uint32_t type,
                       std::span<const std::byte> data = {});
// An error reply carrying a human-readable message.
void AppendOptionError(std::vector<std::byte>* out, uint32_t option, uint32_t type,
                       std::string_view message);

}  // namespace ftl::nbd
