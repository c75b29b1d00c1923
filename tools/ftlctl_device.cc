#include "tools/ftlctl_device.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "control/control_protocol.h"
#include "ftl/size.h"
#include "tools/ftlctl_args.h"

namespace ftl::ctl {

using namespace ftl::control;
using Json = nlohmann::json;

const char* const kDeviceUsage = R"(  device list
  device offline DEVICE
  device online DEVICE [--path PATH]
  device replace OLD NEW [--force] [--wait]
               The pool's devices, as `zpool status` shows them: state
               (ONLINE, OFFLINE, FAULTED, RESILVERING), read / write /
               checksum errors, bytes healed. DEVICE: a path, index or
               guid. offline: stop using a device (it goes stale); online:
               bring it back (a full resilver copies the mirror to it;
               --path if it was missing at start); replace: resilver the
               new device NEW (a file or block device at least as large)
               in OLD's place while serving (--force: NEW may hold a pool).
               --wait: until the resilver is done, with progress.
  scrub start [--rate R] [--wait]
  scrub stop
  scrub status
               Read every live block (and record header, superblock) in
               the background at R bytes a second (default 64M; 0: no
               limit), check each copy's checksum, repair a bad copy from
               a good one; status says what it found. Exit 3 after --wait
               if something could not be repaired.
)";

namespace {

uint64_t U(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<uint64_t>() : 0;
}

std::string Pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * f);
  return buf;
}

void PrintDevices(const Json& r) {
  std::cout << r.value("vdev", std::string("?"));
  if (r.contains("uuid")) std::cout << " " << r.value("uuid", std::string());
  std::cout << "  " << r.value("state", std::string("?")) << "\n";
  if (r.contains("resilver")) {
    const Json& rs = r["resilver"];
    if (rs.value("active", false)) {
      std::cout << "resilver: " << Pct(rs.value("progress", 0.0)) << " (" << FormatSize(U(rs, "done_bytes"))
                << " of " << FormatSize(U(rs, "total_bytes")) << "), " << rs.value("elapsed_s", 0.0) << " s\n";
    } else if (!rs.value("last_result", std::string()).empty()) {
      std::cout << "resilver: " << rs.value("last_result", std::string()) << "\n";
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (const Json& d : r.value("devices", Json::array())) {
    rows.push_back({std::to_string(U(d, "index")), d.value("name", std::string()),
                    d.value("state", std::string()), std::to_string(U(d, "read_errors")),
                    std::to_string(U(d, "write_errors")), std::to_string(U(d, "checksum_errors")),
                    FormatSize(U(d, "repaired_bytes")),
                    d.value("present", true) ? d.value("reason", std::string()) : "missing: " + d.value("reason", std::string())});
  }
  PrintRows({"INDEX", "NAME", "STATE", "READ", "WRITE", "CKSUM", "HEALED", "NOTE"}, rows);
  if (r.contains("healed_units"))
    std::cout << "self-heal: " << U(r, "healed_units") << " block(s) rewritten (" << FormatSize(U(r, "healed_bytes"))
              << "), " << U(r, "unrecovered_units") << " read(s) with no good copy\n";
}

void PrintScrub(const Json& r) {
  std::cout << "scrub " << r.value("state", std::string("?")) << ": " << Pct(r.value("progress", 0.0)) << " of "
            << FormatSize(U(r, "total_bytes")) << " in " << r.value("elapsed_s", 0.0) << " s; "
            << U(r, "blocks_verified") << " blocks, " << U(r, "headers_verified") << " headers, "
            << U(r, "metadata_verified") << " metadata copies verified; " << U(r, "errors") << " errors, "
            << U(r, "repaired") << " repaired, " << U(r, "unrecoverable") << " unrecoverable\n";
  for (const Json& d : r.value("damage", Json::array())) std::cout << "  damage: " << d.get<std::string>() << "\n";
}

}  // namespace

int RunDevice(const std::string& cmd, const std::vector<std::string>& args, bool json,
              const RoundtripFn& roundtrip) {
  if (args.empty()) {
    std::cerr << "ftlctl: " << cmd << " needs an action ("
              << (cmd == kCmdDevice ? "list, offline, online, replace" : "start, stop, status") << ")\n";
    return 2;
  }
  SubArgs a;
  std::string error;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (!ParseSubArgs(rest, {"path", "rate"}, {"force", "wait"}, &a, &error)) return Fail(cmd, error, 2);
  a.action = args[0];
  const std::string what = cmd + " " + a.action;
  auto usage = [&](const std::string& text) {
    std::cerr << "ftlctl: usage: ftlctl " << cmd << " " << a.action << " " << text << "\n";
    return 2;
  };
  Json r = {{kFieldCmd, cmd}, {kFieldAction, a.action}};
  bool wait = a.flags.count("wait") > 0;
  if (cmd == kCmdDevice) {
    if (a.action == kActionList) {
      if (!a.pos.empty()) return usage("");
    } else if (a.action == kActionOffline) {
      if (a.pos.size() != 1) return usage("DEVICE");
      r[kArgDevice] = a.pos[0];
    } else if (a.action == kActionOnline) {
      if (a.pos.size() != 1) return usage("DEVICE [--path PATH]");
      r[kArgDevice] = a.pos[0];
      if (a.opts.count("path")) r[kArgPath] = a.opts["path"];
      wait = wait || false;
    } else if (a.action == kActionReplace) {
      if (a.pos.size() != 2) return usage("OLD NEW [--force] [--wait]");
      r[kArgOld] = a.pos[0];
      r[kArgNew] = a.pos[1];
      if (a.flags.count("force")) r[kArgForce] = true;
    } else {
      return Fail(cmd, "unknown action '" + a.action + "' (list, offline, online, replace)", 2);
    }
  } else {
    if (a.action == kActionStart) {
      if (!a.pos.empty()) return usage("[--rate R] [--wait]");
      if (a.opts.count("rate")) r[kArgRate] = a.opts["rate"];
    } else if (a.action == kActionStop || a.action == kActionStatus) {
      if (!a.pos.empty()) return usage("");
    } else {
      return Fail(cmd, "unknown action '" + a.action + "' (start, stop, status)", 2);
    }
  }
  Json reply;
  std::string line;
  if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
  if (wait) {
    // Poll the state until the resilver / scrub has ended.
    Json q = {{kFieldCmd, cmd}, {kFieldAction, cmd == kCmdDevice ? kActionList : kActionStatus}};
    int last_pct = -1;
    for (;;) {
      bool running = cmd == kCmdDevice ? reply.contains("resilver") && reply["resilver"].value("active", false)
                                       : reply.value("state", std::string()) == "running";
      if (!running) break;
      double p = cmd == kCmdDevice ? reply["resilver"].value("progress", 0.0) : reply.value("progress", 0.0);
      if (!json && int(p * 10) != last_pct) {
        last_pct = int(p * 10);
        std::cerr << what << ": " << Pct(p) << "\n";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (int st = Call(roundtrip, what, q, &reply, &line); st >= 0) return st;
    }
  }
  if (json) {
    std::cout << line << "\n";
  } else if (cmd == kCmdDevice) {
    PrintDevices(reply);
  } else {
    PrintScrub(reply);
  }
  if (cmd == kCmdScrub && wait && U(reply, "unrecoverable") > 0) return 3;
  if (cmd == kCmdDevice && wait && reply.contains("resilver") &&
      reply["resilver"].value("last_result", std::string()).find("failed") != std::string::npos)
    return 1;
  return 0;
}

}  // namespace ftl::ctl
