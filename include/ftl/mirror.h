#pragma once
// Mirror vdevs: one Media over two or more devices that hold the same bytes
// (docs/decisions.md, "Issue 22: mirrors and scrub"; docs/architecture.md,
// "Devices"). Every write goes to each device and returns when every
// ONLINE device has it; with a device failed the mirror is DEGRADED and
// writes return when the survivors have it. Reads go to one device
// (spread by offset); ReadVerified (ftl/media.h) reads another copy of
// what the engine's checksums reject, answers with it and rewrites the bad
// copy (self-heal). Each device starts with a label (src/media/
// mirror_label.h) naming the mirror and its members and their states, so
// that a stale or foreign device is refused and a device that missed
// writes is resilvered (copied from a good device, whole, while the mirror
// serves) before it is read.
//
// Thread-safety: all methods may be called concurrently.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ftl/media.h"

namespace ftl {

// As `zpool status` shows a device. Only ONLINE devices are read; all but
// OFFLINE and FAULTED ones are written.
enum class DeviceState { kOnline, kOffline, kFaulted, kResilvering };
const char* DeviceStateName(DeviceState s);  // "ONLINE", "OFFLINE", "FAULTED", "RESILVERING"

struct DeviceInfo {
  uint32_t index = 0;
  std::string name;  // the path it was opened as (from the label if missing)
  std::string guid;  // 32 hex digits
  DeviceState state = DeviceState::kOnline;
  bool present = true;  // false: not opened (missing at open, or unreadable)
  std::string reason;   // why it is not ONLINE ("" if it is)
  uint64_t reads = 0, writes = 0;
  uint64_t read_errors = 0, write_errors = 0, checksum_errors = 0;
  uint64_t repaired_bytes = 0;  // rewritten on this device by self-heal
};

struct ResilverStatus {
  bool active = false;
  std::vector<std::string> devices;  // being resilvered now
  uint64_t done_bytes = 0, total_bytes = 0;
  double elapsed_s = 0;
  uint64_t completed = 0;    // resilvers finished since open
  std::string last_result;   // "" none yet, "resilvered NAME: ..." or "failed: ..."
};

struct MirrorCounters {
  uint64_t healed_units = 0;       // units (blocks, headers) rewritten from a good copy
  uint64_t healed_bytes = 0;
  uint64_t unrecovered_units = 0;  // reads where no copy passed the check
};

struct MirrorDevice {
  std::string name;              // for logs and `device list` (the path)
  std::shared_ptr<Media> media;  // the whole device, label area included
};

struct MirrorOptions {
  // Resilver copy rate; 0 = as fast as the devices go.
  uint64_t resilver_bytes_per_sec = 512ull << 20;
  // Inspect only: no label is written, no resilver starts (ftl-tool check).
  bool read_only = false;
  // Do not start resilvering devices found stale at open (tests).
  bool defer_resilver = false;
};

class MirrorMedia : public Media {
 public:
  virtual std::string uuid() const = 0;  // the mirror's (all its devices carry it)
  // "ONLINE" if every device is ONLINE, "DEGRADED" otherwise.
  virtual std::string State() const = 0;
  virtual std::vector<DeviceInfo> Devices() const = 0;
  virtual MirrorCounters Counters() const = 0;
  virtual ResilverStatus Resilver() const = 0;

  // A device is named by its name, its index or its guid.
  // Takes an ONLINE device out of service (FailedPrecondition for the
  // last ONLINE one); it keeps its data but misses writes from now on.
  virtual absl::Status Offline(const std::string& device) = 0;
  // Brings an OFFLINE or FAULTED device back: it is written at once and
  // read once a full resilver has copied the mirror to it. `media`: the
  // device opened again (its label must name it), or null to use the one
  // still open.
  virtual absl::Status Online(const std::string& device, std::shared_ptr<Media> media = nullptr) = 0;
  // Puts `replacement` (a new device, at least as large; any content) in
  // the place of `old_device` and resilvers it. The old device is no
  // member afterwards (its label is left alone). FailedPrecondition if
  // `old_device` is the only ONLINE device.
  virtual absl::Status Replace(const std::string& old_device, MirrorDevice replacement) = 0;
  // Waits until no resilver runs; its last result.
  virtual absl::Status WaitForResilver() = 0;
  // Stops the resilver thread (Close of the daemon); devices being
  // resilvered stay RESILVERING and start over at the next open.
  virtual void Shutdown() = 0;
};

// Lays labels for a new mirror on `devices` (two or more, up to 8) and
// opens it. Its size: the smallest device less the 1 MiB label area.
absl::StatusOr<std::shared_ptr<MirrorMedia>> CreateMirror(std::vector<MirrorDevice> devices,
                                                          const MirrorOptions& opts = {});
// Opens a mirror from some or all of its devices: each must carry a label
// of the same mirror naming it a member; at least one must hold the newest
// data. Members not given are FAULTED (missing); members found stale are
// resilvered. NotFound if a device has no label; FailedPrecondition for a
// foreign, replaced or diverged device.
absl::StatusOr<std::shared_ptr<MirrorMedia>> OpenMirror(std::vector<MirrorDevice> devices,
                                                        const MirrorOptions& opts = {});

// What one device's label says, without opening the mirror (ftld, ftl-tool).
struct MirrorLabelInfo {
  std::string uuid;
  std::string device_guid;
  int index = -1;  // this device's place in members
  uint64_t generation = 0;
  uint64_t data_bytes = 0;
  struct Member {
    std::string guid;
    std::string name;
    DeviceState state = DeviceState::kOnline;
  };
  std::vector<Member> members;
};
// NotFound if `media` has no mirror label.
absl::StatusOr<MirrorLabelInfo> ReadMirrorLabel(Media& media);

}  // namespace ftl
