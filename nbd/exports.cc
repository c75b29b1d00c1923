#include "nbd/exports.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nbd/protocol.h"

namespace ftl::nbd {
namespace {
// Add refuses other kinds; this keeps one that changed since (never, as
// of now) from being served.
bool IsBlock(const Export& e) { return e.volume->kind() == DatasetKind::kBlock; }
}  // namespace

uint16_t TransmissionFlags(const Export& e, bool structured_replies) {
  uint16_t flags = kTxHasFlags | kTxSendFlush | kTxCanMultiConn | kTxSendCache;
  if (e.effective_read_only()) {
    flags |= kTxReadOnly;
  } else {
    flags |= kTxSendFua | kTxSendTrim | kTxSendWriteZeroes | kTxSendFastZero;
  }
  if (structured_replies) flags |= kTxSendDf;
  return flags;
}

absl::Status ExportTable::Add(Export e) {
  if (e.volume == nullptr) return absl::InvalidArgumentError("export without a volume");
  if (e.volume->kind() != DatasetKind::kBlock) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", e.volume->name(), "' is a ", DatasetKindName(e.volume->kind()),
        " dataset, not a block device"));
  }
  if (e.name.size() > kMaxString) {
    return absl::InvalidArgumentError("export name longer than 4096 bytes");
  }
  absl::MutexLock lock(&mu_);
  for (const Export& x : exports_) {
    if (x.name == e.name) {
      return absl::AlreadyExistsError(absl::StrCat("export '", e.name, "' already exists"));
    }
  }
  exports_.push_back(std::move(e));
  return absl::OkStatus();
}

bool ExportTable::Remove(std::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(exports_.begin(), exports_.end(),
                         [&](const Export& x) { return x.name == name; });
  if (it == exports_.end()) return false;
  exports_.erase(it);
  return true;
}

std::optional<Export> ExportTable::Find(std::string_view name) const {
  absl::MutexLock lock(&mu_);
  for (const Export& x : exports_) {
    if (x.name == name && IsBlock(x)) return x;
  }
  return std::nullopt;
}

std::vector<Export> ExportTable::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Export> out;
  for (const Export& x : exports_) {
    if (IsBlock(x)) out.push_back(x);
  }
  return out;
}

}  // namespace ftl::nbd
