// ftl-tool: offline inspection and repair of an ftld pool (the daemon must
// not be running on it). check and dump never write to the backing store:
// recovery runs in memory only. repair opens the pool read-write.
//
//   ftl-tool check [--no-data] [--accept-loss] BACKING
//                              verify checksums, redundancy, map consistency
//   ftl-tool repair [--accept-loss] BACKING
//                              recover, rewrite both checkpoints and both
//                              superblock copies, then check
//   ftl-tool dump [--accept-loss] BACKING
//                              print geometry, recovery, volumes, usage
//   ftl-tool scrub [--accept-loss] BACKING
//                              read every live block, record header,
//                              superblock and checkpoint copy and check it;
//                              on a mirror rewrite bad copies from good ones
//   ftl-tool format [--size SIZE] [--segment SIZE] [--force] BACKING
//                              lay a new pool (files are created with --size)
//
// BACKING is one file or block device, or with --mirror several: the
// devices of one mirror (include/ftl/mirror.h). check and dump of a
// mirror read only the devices given, so `ftl-tool check A` and
// `ftl-tool check B` check each device of a mirror on its own. A single
// BACKING that carries a mirror label is opened as its mirror.
//
// The last line of check and repair is "status: S"; the exit status says S:
//   0 clean     everything verified, all redundancy present
//   1 damaged   data or metadata lost or inconsistent (PROBLEM lines)
//   2           cannot open (not a pool, newer version, a damaged durable
//               record without --accept-loss) or usage
//   3 degraded  nothing lost, but redundancy is gone (DEGRADED lines: a
//               superblock copy, a checkpoint slot, a map rebuilt from the log)
//   4 repaired  repair restored what was degraded, or scrub rewrote every
//               bad copy it found; the pool is clean now

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ftl/log.h"
#include "ftl/mirror.h"
#include "ftl/pool.h"
#include "ftl/size.h"

namespace {

enum Exit { kClean = 0, kDamaged = 1, kCannotOpen = 2, kDegraded = 3, kRepaired = 4 };

int Usage() {
  std::fprintf(stderr,
               "usage: ftl-tool check [--no-data] [--accept-loss] [--mirror] BACKING...\n"
               "       ftl-tool repair [--accept-loss] [--mirror] BACKING...\n"
               "       ftl-tool dump [--accept-loss] [--mirror] BACKING...\n"
               "       ftl-tool scrub [--accept-loss] [--mirror] BACKING...\n"
               "       ftl-tool format [--size SIZE] [--segment SIZE] [--force] [--mirror] BACKING...\n");
  return kCannotOpen;
}

// The media of BACKING(s): a file or block device, or a mirror of them
// (read_only: no label is written and no resilver starts).
absl::StatusOr<std::shared_ptr<ftl::Media>> OpenBackings(const std::vector<std::string>& backings, bool mirror,
                                                        bool read_only,
                                                        std::shared_ptr<ftl::MirrorMedia>* as_mirror) {
  std::vector<ftl::MirrorDevice> devices;
  for (const std::string& b : backings) {
    auto media = ftl::OpenMedia(b);
    if (!media.ok()) return absl::Status(media.status().code(), b + ": " + std::string(media.status().message()));
    devices.push_back({b, *media});
  }
  if (!mirror && devices.size() == 1 && !ftl::ReadMirrorLabel(*devices[0].media).ok()) return devices[0].media;
  ftl::MirrorOptions mo;
  mo.read_only = read_only;
  mo.defer_resilver = true;
  auto m = ftl::OpenMirror(devices, mo);
  if (!m.ok()) return m.status();
  *as_mirror = *m;
  return std::shared_ptr<ftl::Media>(*m);
}

absl::StatusOr<std::unique_ptr<ftl::Pool>> OpenPool(const std::vector<std::string>& backings, bool mirror,
                                                   bool read_only, bool accept_loss,
                                                   std::shared_ptr<ftl::MirrorMedia>* as_mirror = nullptr) {
  std::shared_ptr<ftl::MirrorMedia> m;
  auto media = OpenBackings(backings, mirror, read_only, &m);
  if (!media.ok()) return media.status();
  if (as_mirror) *as_mirror = m;
  ftl::OpenOptions o;
  o.read_only = read_only;
  o.accept_loss = accept_loss;
  o.start_cleaner = false;
  o.checkpoint_interval = std::chrono::milliseconds(0);
  o.auto_checkpoint = false;
  return ftl::Pool::Open(*media, o);
}

void PrintDevices(const ftl::MirrorMedia& m) {
  std::printf("mirror          %s, %s\n", m.uuid().c_str(), m.State().c_str());
  for (const ftl::DeviceInfo& d : m.Devices()) {
    std::printf("device %u        %s %s%s%s%s\n", d.index, d.name.c_str(), ftl::DeviceStateName(d.state),
                d.present ? "" : " (not given)", d.reason.empty() ? "" : ": ", d.reason.c_str());
  }
}

int Format(const std::vector<std::string>& backings, bool mirror, uint64_t size, uint64_t segment, bool force) {
  std::vector<ftl::MirrorDevice> devices;
  for (const std::string& b : backings) {
    auto media = ftl::OpenMedia(b, size);
    if (!media.ok()) {
      std::fprintf(stderr, "ftl-tool: %s: %s\n", b.c_str(), media.status().ToString().c_str());
      return kCannotOpen;
    }
    if (!force && (ftl::Pool::LooksFormatted(**media) || ftl::ReadMirrorLabel(**media).ok())) {
      std::fprintf(stderr, "ftl-tool: %s already holds an ftld pool (--force to destroy it)\n", b.c_str());
      return kCannotOpen;
    }
    devices.push_back({b, *media});
  }
  std::shared_ptr<ftl::Media> media = devices[0].media;
  if (mirror) {
    auto m = ftl::CreateMirror(devices);
    if (!m.ok()) {
      std::fprintf(stderr, "ftl-tool: format: %s\n", m.status().ToString().c_str());
      return kCannotOpen;
    }
    media = *m;
  }
  ftl::FormatOptions f;
  if (segment) f.segment_bytes = segment;
  ftl::OpenOptions o;
  o.start_cleaner = false;
  auto pool = ftl::Pool::Format(media, f, o);
  if (!pool.ok() || !(*pool)->Close().ok()) {
    std::fprintf(stderr, "ftl-tool: format: %s\n", pool.status().ToString().c_str());
    return kCannotOpen;
  }
  std::printf("formatted %s (%s%s)\nstatus: clean\n", media->Describe().c_str(),
              ftl::FormatSize(media->size()).c_str(), mirror ? " on each device" : "");
  return kClean;
}

void PrintGeometry(const ftl::Pool& pool) {
  const ftl::Geometry& g = pool.geometry();
  using ftl::FormatSize;
  std::printf("pool            %s (format version %u)\n", g.uuid.c_str(), g.format_version);
  std::printf("media           %s\n", FormatSize(g.media_bytes).c_str());
  std::printf("segments        %u x %s, from byte %llu\n", g.segment_count,
              FormatSize(uint64_t(g.segment_blocks) * g.block_size).c_str(),
              (unsigned long long)g.data_offset);
  std::printf("checkpoint slot %s x 2\n",
              FormatSize(uint64_t(g.checkpoint_slot_blocks) * g.block_size).c_str());
  std::printf("logical         %s\n", FormatSize(g.logical_blocks * g.block_size).c_str());
  std::printf("atomic write    %s\n", FormatSize(g.max_atomic_bytes).c_str());
}

}  // namespace

Exit repair_before = kClean;  // set by repair: what check found before it

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  std::string cmd = args[0];
  bool verify_data = true, accept_loss = false, mirror = false, force = false;
  uint64_t size = 0, segment = 0;
  std::vector<std::string> backings;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--no-data" && cmd == "check") verify_data = false;
    else if (args[i] == "--accept-loss") accept_loss = true;
    else if (args[i] == "--mirror") mirror = true;
    else if (args[i] == "--force" && cmd == "format") force = true;
    else if ((args[i] == "--size" || args[i] == "--segment") && cmd == "format" && i + 1 < args.size()) {
      auto v = ftl::ParseSize(args[i + 1]);
      if (!v.ok()) return Usage();
      (args[i] == "--size" ? size : segment) = *v;
      ++i;
    } else if (!args[i].empty() && args[i][0] == '-') return Usage();
    else backings.push_back(args[i]);
  }
  if ((cmd != "check" && cmd != "dump" && cmd != "repair" && cmd != "scrub" && cmd != "format") || backings.empty())
    return Usage();
  if (backings.size() > 1 && !mirror) {
    std::fprintf(stderr, "ftl-tool: several BACKINGs are a mirror's devices: add --mirror\n");
    return Usage();
  }
  if (cmd == "format" && mirror && backings.size() < 2) {
    std::fprintf(stderr, "ftl-tool: a new mirror needs at least two BACKINGs\n");
    return kCannotOpen;
  }
  ftl::SetLogLevel(cmd == "repair" || cmd == "scrub" ? "info" : "warn");
  const std::string backing = backings.size() == 1 ? backings[0] : "mirror";
  if (cmd == "format") return Format(backings, mirror, size, segment, force);

  if (cmd == "scrub") {
    std::shared_ptr<ftl::MirrorMedia> m;
    auto rw = OpenPool(backings, mirror, false, accept_loss, &m);
    if (!rw.ok()) {
      std::fprintf(stderr, "ftl-tool: %s: cannot open pool: %s\n", backing.c_str(), rw.status().ToString().c_str());
      return kCannotOpen;
    }
    ftl::ScrubOptions so;
    so.rate_bytes_per_sec = 0;
    so.checkpoints = true;
    auto st = (*rw)->Scrub(so);
    absl::Status closed = (*rw)->Close();
    if (!st.ok() || !closed.ok()) {
      std::fprintf(stderr, "ftl-tool: scrub failed: %s\n", (!st.ok() ? st.status() : closed).ToString().c_str());
      return kDamaged;
    }
    if (m) PrintDevices(*m);
    std::printf("scrubbed        %s of live data: %llu blocks, %llu record headers, %llu metadata copies\n",
                ftl::FormatSize(st->total_bytes).c_str(), (unsigned long long)st->blocks_verified,
                (unsigned long long)st->headers_verified, (unsigned long long)st->metadata_verified);
    std::printf("found           %llu bad copies, %llu repaired, %llu unrecoverable\n",
                (unsigned long long)st->errors, (unsigned long long)st->repaired,
                (unsigned long long)st->unrecoverable);
    for (const std::string& d : st->damage) std::printf("PROBLEM: %s\n", d.c_str());
    if (st->unrecoverable > 0) {
      std::printf("status: damaged\n");
      return kDamaged;
    }
    if (st->errors > 0) {
      std::printf("status: repaired\n");
      return kRepaired;
    }
    std::printf("status: clean\n");
    return kClean;
  }

  if (cmd == "repair") {
    // What a check finds before, so that "repaired" means something was.
    Exit before = kClean;
    if (auto ro = OpenPool(backings, mirror, true, accept_loss); ro.ok()) {
      auto rep = (*ro)->Check(false);
      if (rep.ok()) before = !rep->problems.empty() ? kDamaged : !rep->degraded.empty() ? kDegraded : kClean;
    } else {
      before = kDamaged;  // e.g. a damaged durable record, accepted below
    }
    auto rw = OpenPool(backings, mirror, false, accept_loss);
    if (!rw.ok()) {
      std::fprintf(stderr, "ftl-tool: %s: cannot open pool: %s\n", backing.c_str(),
                   rw.status().ToString().c_str());
      return kCannotOpen;
    }
    // Two checkpoints: both slots and both superblock copies are written.
    for (int i = 0; i < 2; ++i) {
      if (absl::Status s = (*rw)->Checkpoint(); !s.ok()) {
        std::fprintf(stderr, "ftl-tool: repair: checkpoint failed: %s\n", s.ToString().c_str());
        return kDamaged;
      }
    }
    if (absl::Status s = (*rw)->Close(); !s.ok()) {
      std::fprintf(stderr, "ftl-tool: repair: close failed: %s\n", s.ToString().c_str());
      return kDamaged;
    }
    rw->reset();
    cmd = "check";
    accept_loss = false;  // what was accepted is now in the checkpoints
    repair_before = before;
  }

  std::shared_ptr<ftl::MirrorMedia> as_mirror;
  auto pool = OpenPool(backings, mirror, true, accept_loss, &as_mirror);
  if (!pool.ok()) {
    std::fprintf(stderr, "ftl-tool: %s: cannot open pool: %s\n", backing.c_str(),
                 pool.status().ToString().c_str());
    return kCannotOpen;
  }
  ftl::Pool& p = **pool;
  if (cmd == "dump") {
    PrintGeometry(p);
    std::printf("open            %s\n", p.OpenReport().c_str());
    ftl::PoolStats s = p.Stats();
    std::printf("segments free   %u of %u\n", s.segments_free, s.segments_total);
    std::printf("live data       %s\n", ftl::FormatSize(s.live_bytes).c_str());
    std::printf("map memory      %s for %llu mapped blocks\n",
                ftl::FormatSize(s.map_memory_bytes).c_str(),
                (unsigned long long)s.mapped_blocks);
    std::printf("next seq        %llu\n", (unsigned long long)s.next_seq);
    for (const std::string& name : p.VolumeNames()) {
      ftl::VolumeStats v = p.GetVolume(name)->Stats();
      std::string origin = p.VolumeOrigin(name);
      ftl::DatasetKind kind = p.GetVolume(name)->kind();
      std::printf("volume          %-16s size %s, mapped %s%s%s%s%s\n", name.c_str(),
                  ftl::FormatSize(v.size_bytes).c_str(),
                  ftl::FormatSize(v.mapped_bytes).c_str(),
                  origin.empty() ? "" : ", activated from ", origin.c_str(),
                  kind == ftl::DatasetKind::kBlock ? "" : ", kind ",
                  kind == ftl::DatasetKind::kBlock ? "" : ftl::DatasetKindName(kind));
    }
    for (const ftl::SnapshotInfo& si : p.ListSnapshots("")) {
      std::string active;  // every volume activated from it
      for (const std::string& v : si.active_volumes) active += (active.empty() ? "" : ",") + v;
      std::printf("snapshot        %s@%s seq %llu, parent %s, exclusive %s%s%s\n",
                  si.volume.c_str(), si.name.c_str(), (unsigned long long)si.seq,
                  si.parent.empty() ? "-" : si.parent.c_str(),
                  ftl::FormatSize(si.exclusive_bytes).c_str(),
                  active.empty() ? "" : ", active as ", active.c_str());
    }
    return 0;
  }
  auto rep = p.Check(verify_data);
  if (!rep.ok()) {
    std::fprintf(stderr, "ftl-tool: check failed: %s\n", rep.status().ToString().c_str());
    return kCannotOpen;
  }
  PrintGeometry(p);
  if (as_mirror) PrintDevices(*as_mirror);
  std::printf("open            %s\n", p.OpenReport().c_str());
  std::printf("checked         %llu volumes, %llu tree nodes, %llu extents, %llu mapped blocks, "
              "%llu live VBAs, %llu records, %llu data blocks read\n",
              (unsigned long long)rep->volumes, (unsigned long long)rep->tree_nodes,
              (unsigned long long)rep->extents, (unsigned long long)rep->mapped_blocks,
              (unsigned long long)rep->live_vbas, (unsigned long long)rep->records,
              (unsigned long long)rep->blocks_verified);
  for (const std::string& problem : rep->problems) std::printf("PROBLEM: %s\n", problem.c_str());
  for (const std::string& d : rep->degraded) std::printf("DEGRADED: %s\n", d.c_str());
  if (!rep->problems.empty()) {
    std::printf("%zu problem(s) found\nstatus: damaged\n", rep->problems.size());
    return kDamaged;
  }
  if (!rep->degraded.empty()) {
    std::printf("status: degraded\n");
    return kDegraded;
  }
  if (repair_before != kClean) {
    std::printf("consistent\nstatus: repaired\n");
    return kRepaired;
  }
  std::printf("consistent\nstatus: clean\n");
  return kClean;
}
