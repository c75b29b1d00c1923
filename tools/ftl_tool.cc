// ftl-tool: offline inspection of an ftld pool (the daemon must not be
// running on it). It never writes to the backing store: recovery runs in
// memory only.
//
//   ftl-tool check [--no-data] BACKING   verify checksums and map consistency
//   ftl-tool dump BACKING                print geometry, recovery, volumes, usage
//
// Exit status: 0 consistent, 1 inconsistencies found, 2 cannot open / usage.

#include <cstdio>
#include <string>
#include <vector>

#include "ftl/pool.h"
#include "util/logging.h"
#include "util/size_parse.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: ftl-tool check [--no-data] BACKING\n"
               "       ftl-tool dump BACKING\n");
  return 2;
}

void PrintGeometry(const ftl::Pool& pool) {
  const ftl::Geometry& g = pool.geometry();
  using ftl::util::FormatSize;
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

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  std::string cmd = args[0];
  bool verify_data = true;
  std::string backing;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--no-data" && cmd == "check") verify_data = false;
    else if (!args[i].empty() && args[i][0] == '-') return Usage();
    else if (backing.empty()) backing = args[i];
    else return Usage();
  }
  if ((cmd != "check" && cmd != "dump") || backing.empty()) return Usage();
  ftl::util::SetLogLevel("warn");

  auto media = ftl::OpenMedia(backing);
  if (!media.ok()) {
    std::fprintf(stderr, "ftl-tool: %s: %s\n", backing.c_str(),
                 std::string(media.status().message()).c_str());
    return 2;
  }
  ftl::OpenOptions o;
  o.read_only = true;
  auto pool = ftl::Pool::Open(*media, o);
  if (!pool.ok()) {
    std::fprintf(stderr, "ftl-tool: %s: cannot open pool: %s\n", backing.c_str(),
                 pool.status().ToString().c_str());
    return 2;
  }
  ftl::Pool& p = **pool;
  if (cmd == "dump") {
    PrintGeometry(p);
    std::printf("open            %s\n", p.OpenReport().c_str());
    ftl::PoolStats s = p.Stats();
    std::printf("segments free   %u of %u\n", s.segments_free, s.segments_total);
    std::printf("live data       %s\n", ftl::util::FormatSize(s.live_bytes).c_str());
    std::printf("map memory      %s for %llu mapped blocks\n",
                ftl::util::FormatSize(s.map_memory_bytes).c_str(),
                (unsigned long long)s.mapped_blocks);
    std::printf("next seq        %llu\n", (unsigned long long)s.next_seq);
    for (const std::string& name : p.VolumeNames()) {
      ftl::VolumeStats v = p.GetVolume(name)->Stats();
      std::string origin = p.VolumeOrigin(name);
      std::printf("volume          %-16s size %s, mapped %s%s%s\n", name.c_str(),
                  ftl::util::FormatSize(v.size_bytes).c_str(),
                  ftl::util::FormatSize(v.mapped_bytes).c_str(),
                  origin.empty() ? "" : ", activated from ", origin.c_str());
    }
    for (const ftl::SnapshotInfo& si : p.ListSnapshots("")) {
      std::printf("snapshot        %s@%s seq %llu, parent %s, exclusive %s%s%s\n",
                  si.volume.c_str(), si.name.c_str(), (unsigned long long)si.seq,
                  si.parent.empty() ? "-" : si.parent.c_str(),
                  ftl::util::FormatSize(si.exclusive_bytes).c_str(),
                  si.active_as.empty() ? "" : ", active as ", si.active_as.c_str());
    }
    return 0;
  }
  auto rep = p.Check(verify_data);
  if (!rep.ok()) {
    std::fprintf(stderr, "ftl-tool: check failed: %s\n", rep.status().ToString().c_str());
    return 2;
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
  if (!rep->problems.empty()) {
    std::printf("%zu problem(s) found\n", rep->problems.size());
    return 1;
  }
  std::printf("consistent\n");
  return 0;
}
