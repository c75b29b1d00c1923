#pragma once
// Opening the daemon's BACKING: the create / format / open rules of issue 3.
//   missing file        + --size  -> create sparse, format
//   missing file        - --size  -> error
//   no ftld superblock  + --format -> format
//   no ftld superblock  - --format -> error ("empty" or "foreign data")
//   ftld pool           - --format -> open (recovering if needed)
//   ftld pool           + --format -> error unless --force, then format
// Every error is one line naming BACKING.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/daemon_options.h"
#include "ftl/media.h"
#include "ftl/mirror.h"
#include "ftl/pool.h"

namespace ftl::daemon {

struct OpenedBacking {
  std::shared_ptr<Media> media;
  std::shared_ptr<MirrorMedia> mirror;  // the same Media, if it is a mirror
  std::vector<int> more_lock_fds;       // a mirror's other devices' locks
  std::unique_ptr<Pool> pool;
  std::string report;  // "created 1.0 GiB and formatted", "opened: clean", ...
  int lock_fd = -1;    // flock(2) held for the daemon's lifetime
};

// What ftld will do with BACKING, decided from facts (pure, unit tested).
enum class BackingAction { kCreateAndFormat, kFormat, kOpen };
struct BackingFacts {
  bool exists = false;
  bool formatted = false;       // Pool::LooksFormatted
  bool looks_empty = false;     // the first MiB is all zeros
};
absl::StatusOr<BackingAction> DecideBackingAction(const DaemonOptions& o, const BackingFacts& f);

// Does it: stat, lock, OpenMedia, LooksFormatted, Format or Open. With
// --mirror, several BACKINGs, or one that carries a mirror label:
// OpenMirrorBacking.
absl::StatusOr<OpenedBacking> OpenBacking(const DaemonOptions& o);

// The mirror rules: each BACKING is created
// (--size) or opened and locked; all carrying labels of one mirror ->
// open it (the pool on it as above); none carrying one -> lay a new
// mirror (2 or more devices; each must be new, unformatted with
// --format, or an ftld pool with --format --force) and format it; a mix
// -> refused (add devices with `ftlctl device replace`).
absl::StatusOr<OpenedBacking> OpenMirrorBacking(const DaemonOptions& o);

// Pool options from the daemon options (shared by both paths).
void ApplyPoolOptions(const DaemonOptions& o, bool formatting, bool fully_allocated,
                      FormatOptions* f, OpenOptions* open);

}  // namespace ftl::daemon
