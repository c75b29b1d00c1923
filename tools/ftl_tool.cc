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
//
// The last line of check and repair is "status: S"; the exit status says S:
//   0 clean     everything verified, all redundancy present
//   1 damaged   data or metadata lost or inconsistent (PROBLEM lines)
//   2           cannot open (not a pool, newer version, a damaged durable
//               record without --accept-loss) or usage
//   3 degraded  nothing lost, but redundancy is gone (DEGRADED lines: a
//               superblock copy, a checkpoint slot, a map rebuilt from the log)
//   4 repaired  repair restored what was degraded; the pool is clean now

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ftl/log.h"
#include "ftl/pool.h"
#include "ftl/size.h"

namespace {

enum Exit { kClean = 0, kDamaged = 1, kCannotOpen = 2, kDegraded = 3, kRepaired = 4 };

int Usage() {
  std::fprintf(stderr,
               "usage: ftl-tool check [--no-data] [--accept-loss] BACKING\n"
               "       ftl-tool repair [--accept-loss] BACKING\n"
               "       ftl-tool dump [--accept-loss] BACKING\n");
  return kCannotOpen;
}

absl::StatusOr<std::unique_ptr<ftl::Pool>> OpenPool(const std::string& backing, bool read_only,
                                                   bool accept_loss) {
  auto media = ftl::OpenMedia(backing);
  if (!media.ok()) return media.status();
  ftl::OpenOptions o;
  o.read_only = read_only;
  o.accept_loss = accept_loss;
  o.start_cleaner = false;
  o.checkpoint_interval = std::chrono::milliseconds(0);
  return ftl::Pool::Open(*media, o);
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
  bool verify_data = true, accept_loss = false;
  std::string backing;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--no-data" && cmd == "check") verify_data = false;
    else if (args[i] == "--accept-loss") accept_loss = true;
    else if (!args[i].empty() && args[i][0] == '-') return Usage();
    else if (backing.empty()) backing = args[i];
    else return Usage();
  }
  if ((cmd != "check" && cmd != "dump" && cmd != "repair") || backing.empty()) return Usage();
  ftl::SetLogLevel(cmd == "repair" ? "info" : "warn");

  if (cmd == "repair") {
    // What a check finds before, so that "repaired" means something was.
    Exit before = kClean;
    if (auto ro = OpenPool(backing, true, accept_loss); ro.ok()) {
      auto rep = (*ro)->Check(false);
      if (rep.ok()) before = !rep->problems.empty() ? kDamaged : !rep->degraded.empty() ? kDegraded : kClean;
    } else {
      before = kDamaged;  // e.g. a damaged durable record, accepted below
    }
    auto rw = OpenPool(backing, false, accept_loss);
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

  auto pool = OpenPool(backing, true, accept_loss);
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
