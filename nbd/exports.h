#pragma once
// ExportTable: the names NBD clients can open, each bound to a Volume.
// The daemon fills it from the Pool at start (every volume by name, plus ""
// for the primary volume); later features (snapshot activation) may add and
// remove entries while clients are connected.
// Only block volumes are exports: a key-value dataset (Volume::kind() !=
// kBlock, include/ftl/pool.h) is no block device, Add refuses it and
// Find/List never show one (NBD_OPT_LIST, _INFO and _GO do not know it).
// Thread-safety: all methods may be called concurrently. Volumes are not
// owned; each must outlive its entry and every connection using it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ftl/pool.h"

namespace ftl::nbd {

struct Export {
  std::string name;         // what the client sends; "" is the default export
  std::string description;  // NBD_INFO_DESCRIPTION and NBD_OPT_LIST
  Volume* volume = nullptr;
  bool read_only = false;   // forced read-only (the volume may also be)
  bool listed = true;       // shown by NBD_OPT_LIST (ftld's all are, "" too)

  bool effective_read_only() const { return read_only || volume->read_only(); }
};

// Transmission flags for `e`; DF only when structured replies are on.
uint16_t TransmissionFlags(const Export& e, bool structured_replies);

class ExportTable {
 public:
  // AlreadyExists if the name is taken; InvalidArgument if volume is null or
  // the name is longer than 4096 bytes; FailedPrecondition if the volume is
  // not a block volume.
  absl::Status Add(Export e);
  bool Remove(std::string_view name);
  std::optional<Export> Find(std::string_view name) const;
  // All entries in insertion order.
  std::vector<Export> List() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<Export> exports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ftl::nbd
