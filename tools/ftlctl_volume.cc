#include "tools/ftlctl_volume.h"

#include <cstdio>
#include <iostream>

#include "control/control_protocol.h"
#include "ftl/size.h"

namespace ftl::ctl {

using namespace ftl::control;
using Json = nlohmann::json;

const char* const kVolumeUsage = R"(  volume create NAME SIZE
  volume resize NAME SIZE [--force]
  volume destroy NAME [--force]
  volume list
               Datasets at will: create makes a thin block volume, exported
               over NBD at once under NAME; resize grows at once and shrinks
               only while no data lies past the new end (--force discards
               it); destroy refuses while NBD clients are connected or
               snapshots exist (--force: they get ESHUTDOWN, the snapshots
               go too); list shows volumes and key-value datasets with
               their kind, and the pool's over-commit. SIZE in bytes or
               K/M/G/T, a multiple of 4K.
)";

namespace {

std::string Str(const Json& j, const char* key, const std::string& none = "-") {
  if (!j.contains(key) || j[key].is_null()) return none;
  if (j[key].is_string()) {
    std::string s = j[key].get<std::string>();
    return s.empty() ? "\"\"" : s;
  }
  return j[key].dump();
}

uint64_t U64(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
}

double Double(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0;
}

std::string Exports(const Json& v) {
  std::string out;
  for (const Json& e : v.value("exports", Json::array())) {
    if (!out.empty()) out += ",";
    std::string name = e.is_string() ? e.get<std::string>() : e.dump();
    out += name.empty() ? "\"\"" : name;
  }
  return out.empty() ? "-" : out;
}

void PrintList(const Json& reply) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& v : reply.value("volumes", Json::array())) {
    std::string name = Str(v, "name");
    if (v.value("primary", false)) name += " (primary)";
    std::string kind = Str(v, "kind");
    if (v.value("read_only", false)) kind += ", read-only";
    rows.push_back({name, kind, FormatSize(U64(v, "size_bytes")), FormatSize(U64(v, "mapped_bytes")),
                    std::to_string(U64(v, "snapshots")), Exports(v),
                    std::to_string(U64(v, "clients")), Str(v, "origin")});
  }
  PrintRows({"NAME", "KIND", "SIZE", "MAPPED", "SNAPSHOTS", "EXPORTS", "CLIENTS", "ORIGIN"}, rows);
  char line[256];
  std::snprintf(line, sizeof line,
                "block volumes provisioned %s of %s capacity (over-commit %.2fx); pool use %.1f%%\n",
                FormatSize(U64(reply, "provisioned_bytes")).c_str(),
                FormatSize(U64(reply, "logical_bytes")).c_str(), Double(reply, "overcommit"),
                Double(reply, "used_percent"));
  std::cout << line;
}

}  // namespace

int RunVolume(const std::vector<std::string>& args, bool json, const RoundtripFn& roundtrip) {
  if (args.empty()) {
    std::cerr << "ftlctl: volume needs an action (create, resize, destroy, list)\n";
    return 2;
  }
  SubArgs a;
  a.action = args[0];
  const std::string what = "volume " + a.action;
  std::string error;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  auto usage = [&](const std::string& text) {
    std::cerr << "ftlctl: usage: ftlctl volume " << a.action << " " << text << "\n";
    return 2;
  };
  auto bad = [&]() { return Fail(what, error, 2); };
  // SIZE as bytes (the daemon checks alignment and bounds).
  auto size_arg = [&](const std::string& text, Json* out) {
    auto v = ParseSize(text);
    if (!v.ok()) {
      error = "SIZE '" + text + "': " + std::string(v.status().message());
      return false;
    }
    *out = *v;
    return true;
  };
  Json r = {{kFieldCmd, kCmdVolume}, {kFieldAction, a.action}};
  Json reply;
  std::string line;
  if (a.action == kActionCreate) {
    if (!ParseSubArgs(rest, {}, {}, &a, &error)) return bad();
    if (a.pos.size() != 2) return usage("NAME SIZE");
    r[kArgName] = a.pos[0];
    if (!size_arg(a.pos[1], &r[kArgSize])) return bad();
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      const Json& v = reply["volume"];
      std::cout << "created volume " << Str(v, "name") << " ("
                << FormatSize(U64(v, "size_bytes")) << "), exported as '" << Exports(v) << "'\n";
    }
    return 0;
  }
  if (a.action == kActionResize) {
    if (!ParseSubArgs(rest, {}, {"force"}, &a, &error)) return bad();
    if (a.pos.size() != 2) return usage("NAME SIZE [--force]");
    r[kArgName] = a.pos[0];
    if (!size_arg(a.pos[1], &r[kArgSize])) return bad();
    if (a.flags.count("force")) r[kArgForce] = true;
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      std::cout << "resized volume " << Str(reply, "volume") << " from "
                << FormatSize(U64(reply, "previous_size_bytes")) << " to "
                << FormatSize(U64(reply, "size_bytes"));
      if (uint64_t n = U64(reply, "clients_connected"); n > 0) {
        std::cout << " (" << n << " connected client(s) see it when they reconnect)";
      }
      std::cout << "\n";
    }
    return 0;
  }
  if (a.action == kActionDestroy) {
    if (!ParseSubArgs(rest, {}, {"force"}, &a, &error)) return bad();
    if (a.pos.size() != 1) return usage("NAME [--force]");
    r[kArgName] = a.pos[0];
    if (a.flags.count("force")) r[kArgForce] = true;
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      std::cout << "destroyed " << (Str(reply, "kind") == "kv" ? "key-value dataset " : "volume ")
                << Str(reply, "destroyed");
      if (uint64_t n = U64(reply, "snapshots_deleted"); n > 0) {
        std::cout << " and " << n << " snapshot(s)";
      }
      if (uint64_t n = U64(reply, "clients_disconnected"); n > 0) {
        std::cout << "; " << n << " client(s) now get ESHUTDOWN";
      }
      std::cout << "\n";
    }
    return 0;
  }
  if (a.action == kActionList) {
    if (!ParseSubArgs(rest, {}, {}, &a, &error)) return bad();
    if (!a.pos.empty()) return usage("");
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      PrintList(reply);
    }
    return 0;
  }
  std::cerr << "ftlctl: unknown volume action '" << a.action
            << "' (create, resize, destroy, list)\n";
  return 2;
}

}  // namespace ftl::ctl
