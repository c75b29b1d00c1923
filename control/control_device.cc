#include "control/control_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "ftl/size.h"

namespace ftl::control {
namespace {

// Devices added by `device replace` or `device online` stay locked
// (flock, as ftld locks its BACKINGs) for the daemon's life: the
// descriptor is kept open. -1 if the path cannot be opened (OpenMedia
// reports that); Unavailable if another process holds it.
absl::StatusOr<int> LockDevice(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, " is in use by another process"));
  }
  return fd;
}

void Unlock(int fd) {
  if (fd >= 0) ::close(fd);
}

absl::Status NeedMirror(const DaemonContext& ctx) {
  if (ctx.mirror) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "the pool is on one device, not a mirror (start ftld with --mirror BACKING BACKING...)");
}

absl::Status Writable(const DaemonContext& ctx) {
  if (ctx.read_only) return absl::PermissionDeniedError("ftld runs --read-only");
  return absl::OkStatus();
}

absl::StatusOr<Json> DeviceList(const DaemonContext& ctx) { return DevicesJson(ctx); }

absl::StatusOr<Json> DeviceOffline(const DaemonContext& ctx, const Json& r) {
  if (absl::Status s = NeedMirror(ctx); !s.ok()) return s;
  if (absl::Status s = Writable(ctx); !s.ok()) return s;
  auto dev = StringArg(r, kArgDevice);
  if (!dev.ok()) return dev.status();
  if (absl::Status s = ctx.mirror->Offline(*dev); !s.ok()) return s;
  return DevicesJson(ctx);
}

absl::StatusOr<Json> DeviceOnline(const DaemonContext& ctx, const Json& r) {
  if (absl::Status s = NeedMirror(ctx); !s.ok()) return s;
  if (absl::Status s = Writable(ctx); !s.ok()) return s;
  auto dev = StringArg(r, kArgDevice);
  if (!dev.ok()) return dev.status();
  auto path = OptStringArg(r, kArgPath);
  if (!path.ok()) return path.status();
  std::shared_ptr<Media> media;
  int lock = -1;
  // A device that was missing at open is opened again: from `path`, or
  // from the name it has (the path it was last opened as).
  std::string open_path = *path;
  if (open_path.empty()) {
    for (const DeviceInfo& d : ctx.mirror->Devices())
      if ((d.name == *dev || d.guid == *dev || std::to_string(d.index) == *dev) && !d.present) open_path = d.name;
  }
  if (!open_path.empty()) {
    auto m = OpenMedia(open_path, 0, ctx.direct_io);
    if (!m.ok()) return m.status();
    auto fd = LockDevice(open_path);
    if (!fd.ok()) return fd.status();
    lock = *fd;
    media = *m;
  }
  if (absl::Status s = ctx.mirror->Online(*dev, media); !s.ok()) {
    Unlock(lock);
    return s;
  }
  return DevicesJson(ctx);
}

absl::StatusOr<Json> DeviceReplace(const DaemonContext& ctx, const Json& r) {
  if (absl::Status s = NeedMirror(ctx); !s.ok()) return s;
  if (absl::Status s = Writable(ctx); !s.ok()) return s;
  auto old_dev = StringArg(r, kArgOld);
  if (!old_dev.ok()) return old_dev.status();
  auto new_path = StringArg(r, kArgNew);
  if (!new_path.ok()) return new_path.status();
  auto force = BoolArg(r, kArgForce);
  if (!force.ok()) return force.status();
  struct stat st;
  if (::stat(new_path->c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(*new_path, ": no such file or device (create it first)"));
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(*new_path, ": not a regular file or block device"));
  auto media = OpenMedia(*new_path, 0, ctx.direct_io);
  if (!media.ok()) return media.status();
  if (!*force && (Pool::LooksFormatted(**media) || ReadMirrorLabel(**media).ok()))
    return absl::FailedPreconditionError(absl::StrCat(
        *new_path, " holds an ftld pool or mirror device; add force to overwrite it"));
  auto lock = LockDevice(*new_path);
  if (!lock.ok()) return lock.status();
  if (absl::Status s = ctx.mirror->Replace(*old_dev, {*new_path, *media}); !s.ok()) {
    Unlock(*lock);
    return s;
  }
  return DevicesJson(ctx);
}

absl::StatusOr<Json> ScrubStart(const DaemonContext& ctx, const Json& r) {
  ScrubOptions o;
  auto rate = SizeArg(r, kArgRate, o.rate_bytes_per_sec);
  if (!rate.ok()) return rate.status();
  o.rate_bytes_per_sec = *rate;
  if (absl::Status s = ctx.pool->StartScrub(o); !s.ok()) return s;
  return ScrubJson(ctx.pool->GetScrubStatus());
}

}  // namespace

Json DevicesJson(const DaemonContext& ctx) {
  Json devices = Json::array();
  if (!ctx.mirror) {
    devices.push_back({{"index", 0},
                       {"name", ctx.backing},
                       {"state", "ONLINE"},
                       {"present", true},
                       {"reason", ""},
                       {"read_errors", 0},
                       {"write_errors", 0},
                       {"checksum_errors", 0},
                       {"repaired_bytes", 0}});
    return Json{{"vdev", "single"}, {"state", "ONLINE"}, {"devices", devices}};
  }
  for (const DeviceInfo& d : ctx.mirror->Devices()) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"guid", d.guid},
                       {"state", DeviceStateName(d.state)},
                       {"present", d.present},
                       {"reason", d.reason},
                       {"reads", d.reads},
                       {"writes", d.writes},
                       {"read_errors", d.read_errors},
                       {"write_errors", d.write_errors},
                       {"checksum_errors", d.checksum_errors},
                       {"repaired_bytes", d.repaired_bytes}});
  }
  ResilverStatus rs = ctx.mirror->Resilver();
  MirrorCounters c = ctx.mirror->Counters();
  return Json{{"vdev", "mirror"},
              {"uuid", ctx.mirror->uuid()},
              {"state", ctx.mirror->State()},
              {"devices", devices},
              {"healed_units", c.healed_units},
              {"healed_bytes", c.healed_bytes},
              {"unrecovered_units", c.unrecovered_units},
              {"resilver",
               {{"active", rs.active},
                {"devices", rs.devices},
                {"done_bytes", rs.done_bytes},
                {"total_bytes", rs.total_bytes},
                {"progress", rs.total_bytes ? double(rs.done_bytes) / double(rs.total_bytes) : 0.0},
                {"elapsed_s", rs.elapsed_s},
                {"completed", rs.completed},
                {"last_result", rs.last_result}}}};
}

Json ScrubJson(const ScrubStatus& s) {
  return Json{{"state", s.state},
              {"total_bytes", s.total_bytes},
              {"scanned_bytes", s.scanned_bytes},
              {"progress", s.total_bytes ? double(s.scanned_bytes) / double(s.total_bytes)
                                         : (s.state == "finished" ? 1.0 : 0.0)},
              {"blocks_verified", s.blocks_verified},
              {"headers_verified", s.headers_verified},
              {"metadata_verified", s.metadata_verified},
              {"errors", s.errors},
              {"repaired", s.repaired},
              {"unrecoverable", s.unrecoverable},
              {"damage", s.damage},
              {"elapsed_s", s.elapsed_s},
              {"passes", s.passes}};
}

void RegisterDeviceCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  d->Register(kCmdDevice, "the pool's devices: action = list|offline|online|replace",
              [ctx](const Json& r) {
                Actions a = {
                    {kActionList, [ctx](const Json&) { return DeviceList(*ctx); }},
                    {kActionOffline, [ctx](const Json& q) { return DeviceOffline(*ctx, q); }},
                    {kActionOnline, [ctx](const Json& q) { return DeviceOnline(*ctx, q); }},
                    {kActionReplace, [ctx](const Json& q) { return DeviceReplace(*ctx, q); }},
                };
                return RunAction(kCmdDevice, a, r);
              });
  d->Register(kCmdScrub, "verify every live block in the background: action = start|stop|status",
              [ctx](const Json& r) {
                Actions a = {
                    {kActionStart, [ctx](const Json& q) { return ScrubStart(*ctx, q); }},
                    {kActionStop,
                     [ctx](const Json&) -> absl::StatusOr<Json> {
                       ctx->pool->StopScrub();
                       return ScrubJson(ctx->pool->GetScrubStatus());
                     }},
                    {kActionStatus,
                     [ctx](const Json&) -> absl::StatusOr<Json> { return ScrubJson(ctx->pool->GetScrubStatus()); }},
                };
                return RunAction(kCmdScrub, a, r);
              });
}

}  // namespace ftl::control
