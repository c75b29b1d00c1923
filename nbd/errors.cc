#include "nbd/errors.h"

#include "absl/strings/str_cat.h"
#include "nbd/protocol.h"

namespace ftl::nbd {

uint32_t StatusToNbdError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kPermissionDenied:
      return kEPerm;
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return kENoSpc;
    case absl::StatusCode::kInvalidArgument:
      return kEInval;
    case absl::StatusCode::kUnimplemented:
      return kENotSup;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      return kEShutdown;
    default:
      return kEIo;
  }
}

std::string NbdErrorName(uint32_t error) {
  switch (error) {
    case 0: return "OK";
    case kEPerm: return "EPERM";
    case kEIo: return "EIO";
    case kENoMem: return "ENOMEM";
    case kEInval: return "EINVAL";
    case kENoSpc: return "ENOSPC";
    case kEOverflow: return "EOVERFLOW";
    case kENotSup: return "ENOTSUP";
    case kEShutdown: return "ESHUTDOWN";
  }
  return absl::StrCat("errno ", error);
}

}  // namespace ftl::nbd
