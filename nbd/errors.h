#pragma once
// The one mapping from absl::Status to an NBD error value (docs/architecture.md, "Contracts and errors").
// Request validation and the engine both speak absl::Status; only this
// function decides what the client sees.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ftl::nbd {

// OK -> 0; PermissionDenied -> EPERM; OutOfRange (write past the end) and
// ResourceExhausted (device full) -> ENOSPC; InvalidArgument -> EINVAL;
// Unimplemented (FAST_ZERO not possible) -> ENOTSUP; Unavailable and
// Cancelled (shutting down) -> ESHUTDOWN; everything else, notably DataLoss
// (checksum/media error) -> EIO. Never ENOMEM.
uint32_t StatusToNbdError(const absl::Status& status);

// status.message() as std::string_view (Debian's abseil has its own
// string_view type).
inline std::string_view StatusMessage(const absl::Status& status) {
  return std::string_view(status.message().data(), status.message().size());
}

// "EINVAL", "ENOSPC", ...: for logs and tests.
std::string NbdErrorName(uint32_t error);

}  // namespace ftl::nbd
