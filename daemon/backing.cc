#include "daemon/backing.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ftl/log.h"
#include "ftl/size.h"
#include "nbd/errors.h"

namespace ftl::daemon {

using nbd::StatusMessage;

namespace {

std::string Msg(const absl::Status& s) { return std::string(StatusMessage(s)); }

// Prefixes an engine error with the backing path unless it names it already.
absl::Status About(const std::string& backing, const absl::Status& s) {
  std::string m = Msg(s);
  if (m.find(backing) != std::string::npos) return absl::Status(s.code(), m);
  return absl::Status(s.code(), absl::StrCat(backing, ": ", m));
}

bool FirstMiBIsZero(Media& media) {
  uint64_t n = std::min<uint64_t>(media.size(), 1 << 20) & ~uint64_t(4095);
  if (n == 0) return true;
  std::vector<std::byte> buf(n);
  if (!media.Read(0, buf).ok()) return false;
  for (std::byte b : buf) {
    if (b != std::byte{0}) return false;
  }
  return true;
}

// A seed for --simulate-volatile-cache without one: the clock and the pid.
uint64_t ClockSeed() {
  uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  return (t ^ (uint64_t(::getpid()) << 40)) * 0x9E3779B97F4A7C15ull;
}

// A missing path here names a device that is not there: ftld never creates
// a file under /dev (a mistyped /dev/sdX would become a file in the RAM of
// devtmpfs), except under /dev/shm, the tmpfs meant for files.
bool DeviceOnlyPath(const std::string& path) {
  return path.starts_with("/dev/") && !path.starts_with("/dev/shm/");
}

}  // namespace

absl::StatusOr<BackingAction> DecideBackingAction(const DaemonOptions& o, const BackingFacts& f) {
  const std::string& b = o.backing;
  if (!f.exists) {
    if (!o.size) {
      return absl::NotFoundError(
          absl::StrCat(b, ": no such file or device (pass --size SIZE to create a file)"));
    }
    return BackingAction::kCreateAndFormat;
  }
  if (f.formatted) {
    if (!o.format) return BackingAction::kOpen;
    if (!o.force) {
      return absl::FailedPreconditionError(absl::StrCat(
          b, " already holds an ftld pool; add --force to --format to destroy it"));
    }
    return BackingAction::kFormat;
  }
  if (o.format) return BackingAction::kFormat;
  if (f.looks_empty) {
    return absl::FailedPreconditionError(
        absl::StrCat(b, " is not formatted (pass --format to create a pool on it)"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      b, " holds foreign data, not an ftld pool (pass --format to overwrite it)"));
}

void ApplyPoolOptions(const DaemonOptions& o, bool formatting, bool fully_allocated, FormatOptions* fopts,
                      OpenOptions* oopts) {
  fopts->preallocate = o.preallocate && formatting;
  oopts->placement = o.placement == "on"    ? OpenOptions::Placement::kOn
                     : o.placement == "off" ? OpenOptions::Placement::kOff
                                            : OpenOptions::Placement::kAuto;
  oopts->discard = o.discard && !fopts->preallocate && !fully_allocated;
  oopts->accept_loss = o.accept_loss;
  oopts->proof_delay = std::chrono::milliseconds(o.proof_delay_ms);
  oopts->sector_headers = o.sector_headers;
}

absl::StatusOr<OpenedBacking> OpenBacking(const DaemonOptions& o) {
  auto log = Logger("nbd");
  const std::string& b = o.backing;
  if (o.mirror || o.backings.size() > 1) return OpenMirrorBacking(o);
  OpenedBacking out;
  BackingFacts facts;
  struct stat st;
  if (::stat(b.c_str(), &st) == 0) {
    facts.exists = true;
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(b, ": not a regular file or block device"));
    }
    if (o.size && S_ISREG(st.st_mode) && uint64_t(st.st_size) != *o.size) {
      log->warn("{} exists ({}); --size {} ignored", b, FormatSize(st.st_size),
                FormatSize(*o.size));
    }
  } else if (errno != ENOENT) {
    return absl::UnavailableError(absl::StrCat(b, ": ", std::strerror(errno)));
  } else if (DeviceOnlyPath(b)) {
    return absl::NotFoundError(absl::StrCat(b, ": no such device"));
  }
  if (!facts.exists && !o.size) {
    auto a = DecideBackingAction(o, facts);
    return a.status();
  }

  auto media = OpenMedia(b, facts.exists ? 0 : *o.size, o.direct_io);
  if (!media.ok()) return About(b, media.status());
  out.media = *media;

  // One daemon per backing: an advisory lock on our own descriptor.
  out.lock_fd = ::open(b.c_str(), O_RDONLY | O_CLOEXEC);
  if (out.lock_fd >= 0 && ::flock(out.lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(out.lock_fd);
    return absl::UnavailableError(absl::StrCat(b, " is in use by another process"));
  }
  if (o.simulate_volatile_cache) {
    const uint64_t seed = o.volatile_cache_seed.value_or(ClockSeed());
    log->warn("{} is wrapped in a simulated volatile write cache (--simulate-volatile-cache={}): "
              "writes reach it only when flushed, so kill -9 loses what a power cut would. "
              "For power-cut tests only",
              b, seed);
    out.media = NewVolatileCacheMedia(out.media, seed);
  }

  if (facts.exists && ReadMirrorLabel(*out.media).ok()) {
    // One device of a mirror: open the mirror from it (DEGRADED without
    // the others).
    log->warn("{} is a device of a mirror: opening the mirror from it alone (pass its other devices "
              "with --mirror to open it whole)",
              b);
    ::close(out.lock_fd);
    return OpenMirrorBacking(o);
  }
  if (facts.exists) {
    facts.formatted = Pool::LooksFormatted(*out.media);
    if (!facts.formatted) facts.looks_empty = FirstMiBIsZero(*out.media);
  }
  auto action = DecideBackingAction(o, facts);
  if (!action.ok()) return action.status();

  FormatOptions fopts;
  OpenOptions oopts;
  const bool formatting = *action != BackingAction::kOpen;
  // A backing file with every block allocated (--preallocate, or made so
  // by its owner) stays so: punching holes into it would make synced
  // writes wait for the file system to allocate again (docs/decisions.md,
  // "Preallocated backing files").
  const bool fully_allocated = facts.exists && S_ISREG(st.st_mode) &&
                               uint64_t(st.st_blocks) * 512 >= uint64_t(st.st_size);
  ApplyPoolOptions(o, formatting, fully_allocated, &fopts, &oopts);
  if (o.discard && !oopts.discard) {
    log->info("{} is {}: freed space is not discarded (no hole punching)", b,
              fopts.preallocate ? "being preallocated" : "fully allocated");
  }
  switch (*action) {
    case BackingAction::kCreateAndFormat:
    case BackingAction::kFormat: {
      log->info("formatting {} ({}{})", b, FormatSize(out.media->size()),
                fopts.preallocate ? ", writing zeros over it" : "");
      auto pool = Pool::Format(out.media, fopts, oopts);
      if (!pool.ok()) return About(b, pool.status());
      out.pool = std::move(*pool);
      out.report = absl::StrCat(*action == BackingAction::kCreateAndFormat ? "created " : "",
                                FormatSize(out.media->size()), " and formatted");
      break;
    }
    case BackingAction::kOpen: {
      auto pool = Pool::Open(out.media, oopts);
      if (!pool.ok()) return About(b, pool.status());
      out.pool = std::move(*pool);
      out.report = out.pool->OpenReport();
      break;
    }
  }
  return out;
}

absl::StatusOr<OpenedBacking> OpenMirrorBacking(const DaemonOptions& o) {
  auto log = Logger("nbd");
  OpenedBacking out;
  std::vector<MirrorDevice> devices;
  std::vector<bool> created, labeled, pooled, empty;
  bool fully_allocated = true;
  auto unlock_all = [&] {
    for (int fd : out.more_lock_fds) ::close(fd);
    out.more_lock_fds.clear();
  };
  for (size_t i = 0; i < o.backings.size(); ++i) {
    const std::string& b = o.backings[i];
    struct stat st;
    bool exists = ::stat(b.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      unlock_all();
      return absl::InvalidArgumentError(absl::StrCat(b, ": not a regular file or block device"));
    }
    if (!exists && DeviceOnlyPath(b)) {
      unlock_all();
      return absl::NotFoundError(absl::StrCat(b, ": no such device"));
    }
    if (!exists && !o.size) {
      unlock_all();
      return absl::NotFoundError(absl::StrCat(b, ": no such file or device (pass --size SIZE to create files)"));
    }
    if (exists && S_ISREG(st.st_mode) && uint64_t(st.st_blocks) * 512 < uint64_t(st.st_size)) fully_allocated = false;
    if (!exists || !S_ISREG(st.st_mode)) fully_allocated = false;
    auto media = OpenMedia(b, exists ? 0 : *o.size, o.direct_io);
    if (!media.ok()) {
      unlock_all();
      return About(b, media.status());
    }
    int fd = ::open(b.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      unlock_all();
      return absl::UnavailableError(absl::StrCat(b, " is in use by another process"));
    }
    out.more_lock_fds.push_back(fd);
    std::shared_ptr<Media> m = *media;
    if (o.simulate_volatile_cache) {
      const uint64_t seed = o.volatile_cache_seed.value_or(ClockSeed()) + i;
      log->warn("{} is wrapped in a simulated volatile write cache (seed {}): for power-cut tests only", b, seed);
      m = NewVolatileCacheMedia(m, seed);
    }
    created.push_back(!exists);
    labeled.push_back(exists && ReadMirrorLabel(*m).ok());
    pooled.push_back(exists && !labeled.back() && Pool::LooksFormatted(*m));
    empty.push_back(!exists || (!labeled.back() && !pooled.back() && FirstMiBIsZero(*m)));
    devices.push_back({b, std::move(m)});
  }
  // The first device's lock is the one OpenBacking's callers know.
  out.lock_fd = out.more_lock_fds.front();
  out.more_lock_fds.erase(out.more_lock_fds.begin());

  MirrorOptions mo;
  mo.resilver_bytes_per_sec = o.resilver_rate;
  size_t n_labeled = 0;
  for (bool l : labeled) n_labeled += l;
  const bool relabel = o.format && o.force;
  bool fresh = false;
  if (n_labeled == devices.size() && !relabel) {
    auto mirror = OpenMirror(devices, mo);
    if (!mirror.ok()) {
      unlock_all();
      ::close(out.lock_fd);
      return mirror.status();
    }
    out.mirror = *mirror;
  } else if (n_labeled > 0 && !relabel) {
    std::string with, without;
    for (size_t i = 0; i < devices.size(); ++i) (labeled[i] ? with : without) = devices[i].name;
    unlock_all();
    ::close(out.lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        without, " is no device of the mirror ", with,
        " belongs to: open the mirror without it, then add it with `ftlctl device replace` (or "
        "--format --force to lay a new mirror over all of them)"));
  } else {
    // A new mirror: the same rules as one new BACKING, for each device.
    if (devices.size() < 2) {
      unlock_all();
      ::close(out.lock_fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "a new mirror needs at least two BACKINGs (", devices[0].name, " carries no mirror label)"));
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string& b = devices[i].name;
      absl::Status refuse;
      if ((pooled[i] || labeled[i]) && !relabel) {
        refuse = absl::FailedPreconditionError(absl::StrCat(
            b, " already holds an ftld pool; add --force to --format to destroy it"));
      } else if (!created[i] && !o.format && empty[i]) {
        refuse = absl::FailedPreconditionError(
            absl::StrCat(b, " is not formatted (pass --format to create a mirror on it)"));
      } else if (!created[i] && !o.format) {
        refuse = absl::FailedPreconditionError(
            absl::StrCat(b, " holds foreign data, not an ftld pool (pass --format to overwrite it)"));
      }
      if (!refuse.ok()) {
        unlock_all();
        ::close(out.lock_fd);
        return refuse;
      }
    }
    auto mirror = CreateMirror(devices, mo);
    if (!mirror.ok()) {
      unlock_all();
      ::close(out.lock_fd);
      return mirror.status();
    }
    out.mirror = *mirror;
    fresh = true;
  }
  out.media = out.mirror;
  const std::string what = absl::StrCat("mirror ", out.mirror->uuid());
  FormatOptions fopts;
  OpenOptions oopts;
  const bool has_pool = !fresh && Pool::LooksFormatted(*out.media);
  bool formatting = fresh || !has_pool;
  if (!fresh && has_pool && o.format) {
    if (!o.force) {
      unlock_all();
      ::close(out.lock_fd);
      return absl::FailedPreconditionError(
          absl::StrCat(what, " already holds an ftld pool; add --force to --format to destroy it"));
    }
    formatting = true;
  }
  if (!fresh && !has_pool && !o.format) {
    unlock_all();
    ::close(out.lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(what, " holds no pool (pass --format to create one)"));
  }
  ApplyPoolOptions(o, formatting, fully_allocated, &fopts, &oopts);
  absl::StatusOr<std::unique_ptr<Pool>> pool;
  if (formatting) {
    log->info("formatting {} ({} of each device)", what, FormatSize(out.media->size()));
    pool = Pool::Format(out.media, fopts, oopts);
    out.report = absl::StrCat(fresh ? "new mirror of " : "", devices.size(), " devices, ",
                              FormatSize(out.media->size()), " each, formatted");
  } else {
    pool = Pool::Open(out.media, oopts);
    if (pool.ok()) out.report = (*pool)->OpenReport();
  }
  if (!pool.ok()) {
    out.mirror->Shutdown();
    unlock_all();
    ::close(out.lock_fd);
    return absl::Status(pool.status().code(), absl::StrCat(what, ": ", Msg(pool.status())));
  }
  out.pool = std::move(*pool);
  log->info("{} is {}: {}", what, out.mirror->State(), out.mirror->Describe());
  return out;
}

}  // namespace ftl::daemon
