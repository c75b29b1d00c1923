// ftlctl: operate a running ftld through its control socket.
//
// Over 600 lines on purpose: one short function per command and its usage
// text; the wire protocol is control/control_protocol.h (docs/decisions.md,
// "Files over 600 lines").
//
//   ftlctl [--control PATH] [--json] [--timeout SEC] COMMAND [ARG...]
//
// COMMAND is sent as {"cmd":COMMAND}; an ARG "key=value" becomes a field
// (value parsed as JSON when it is valid JSON, else a string), any other ARG
// is appended to "args". So new daemon commands work without changing ftlctl.
// "snapshot" and "range" have their own argument syntax (kUsage) and build
// {"cmd":"snapshot"|"range","action":...} requests (README: Control protocol);
// "kv" is tools/ftlctl_kv.h, "volume" tools/ftlctl_volume.h, "device" and
// "scrub" tools/ftlctl_device.h, argument parsing tools/ftlctl_args.h.
// The socket is --control, else $FTLD_CONTROL, else the only *.sock in
// /run/ftld. Exit status: 0 ok, 1 the daemon answered an error, 2 usage or
// connection problems.

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/control_protocol.h"
#include "ftl/size.h"
#include "ftl/tree_ref.h"
#include "tools/ftlctl_args.h"
#include "tools/ftlctl_device.h"
#include "tools/ftlctl_kv.h"
#include "tools/ftlctl_volume.h"

namespace {

using ftl::ctl::PrintRows;
using ftl::ctl::ParseSubArgs;
using ftl::ctl::SubArgs;

// The protocol's names: kField*, kCmd*, kAction*, kArg*, ...
using namespace ftl::control;
using Json = nlohmann::json;

constexpr const char* kUsage = R"(usage: ftlctl [--control PATH] [--json] [--timeout SEC] COMMAND [ARG...]

Commands:
  status       uptime, backing, geometry, exports, connected clients
  stats        I/O counts and bytes, media bytes, write amplification,
               cleaner state, free space, map memory
  exports      the NBD export names
  checkpoint   write a checkpoint now
  gc [min_free_segments=N]
               run the cleaner now (default: reclaim all it can)
  help         the commands the daemon knows

  snapshot create NAME [--volume VOL]
  snapshot list [--volume VOL]
  snapshot delete NAME [--volume VOL] [--force]
  snapshot activate NAME [--volume VOL] [--export EXPORT] [--read-only]
  snapshot deactivate EXPORT
  snapshot rollback NAME [--volume VOL] [--force]
               NAME may also be written VOL@NAME. --force: delete deactivates
               the snapshot's exports first; rollback goes ahead although
               clients are connected to the volume or it changes an
               immutable range (content or attribute).
  range clone SRC DST LEN [--from X] [--to Y]
  range move SRC DST LEN [--from X] [--to Y]
  range merge --base B --dst D --len L [--policy fail|first|last]
              [--from X] [--to Y] SRC...
  range attr OFF LEN immutable|mutable|persistent|non-persistent [--volume VOL]
  range attrs [--volume VOL]
  range batch FILE|-
               Offsets and lengths in bytes or with K/M/G/T suffixes
               (multiples of 4 KiB). --from/--to: a volume or export (default
               the primary volume); --from also VOL@SNAP or @SNAP (a
               snapshot of the primary). batch: one JSON object a line,
               {"op":"move"|"clone","src":..,"dst":..,"len":..[,"from":..,"to":..]},
               all applied atomically. A merge with policy fail that hits
               conflicts changes nothing, lists them and exits 1.
Any other COMMAND is passed through: ARGs "key=value" become request
fields, other ARGs go to "args".

Options:
  --control PATH  control socket (default $FTLD_CONTROL, else the only
                  socket in /run/ftld)
  --json          print the daemon's JSON reply as is
  --timeout SEC   give up waiting for a reply after SEC seconds (default 600)
)";

// kUsage with the kv and volume verbs (tools/ftlctl_kv.h,
// tools/ftlctl_volume.h) before "Any other COMMAND".
std::string FullUsage() {
  std::string u = kUsage;
  u.insert(u.find("Any other COMMAND"), std::string(ftl::ctl::kKvUsage) + ftl::ctl::kVolumeUsage);
  u.insert(u.find("Any other COMMAND"), ftl::ctl::kDeviceUsage);
  return u;
}

int Usage(const std::string& error) {
  if (!error.empty()) std::cerr << "ftlctl: " << error << "\n";
  std::cerr << FullUsage();
  return 2;
}

std::string ResolveControl(const std::string& given, std::string* error) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv(kSocketEnv); env != nullptr && *env) return env;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kSocketDir, ec)) {
    if (e.path().extension() == kSocketSuffix) found.push_back(e.path().string());
  }
  if (found.size() == 1) return found[0];
  *error = found.empty() ? "no control socket: pass --control PATH or set FTLD_CONTROL"
                         : "several sockets in /run/ftld: pass --control PATH";
  return "";
}

// Sends one request line and reads one reply line.
bool Roundtrip(const std::string& path, const std::string& request, int timeout_s,
               std::string* reply, std::string* error) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::strerror(errno);
    return false;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() > kMaxSocketPath) {
    *error = "control socket path too long";
    ::close(fd);
    return false;
  }
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *error = path + ": " + std::strerror(errno) + " (is ftld running?)";
    ::close(fd);
    return false;
  }
  timeval tv{.tv_sec = timeout_s, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string line = request + kLineEnd;
  size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = std::string("send: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    sent += size_t(n);
  }
  reply->clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = errno == EAGAIN ? "timed out waiting for the reply"
                               : std::string("recv: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    reply->append(buf, size_t(n));
    if (reply->find(kLineEnd) != std::string::npos) break;
  }
  ::close(fd);
  if (auto nl = reply->find(kLineEnd); nl != std::string::npos) reply->resize(nl);
  if (reply->empty()) {
    *error = "the daemon closed the connection without a reply";
    return false;
  }
  return true;
}

// ---- human output -----------------------------------------------------

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Duration(double s) {
  if (s < 1) {
    std::ostringstream o;
    o.precision(3);
    o << s * 1000 << " ms";
    return o.str();
  }
  uint64_t t = uint64_t(s);
  char buf[64];
  if (t < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (t < 3600) {
    std::snprintf(buf, sizeof buf, "%llum %02llus", (unsigned long long)(t / 60),
                  (unsigned long long)(t % 60));
  } else if (t < 86400) {
    std::snprintf(buf, sizeof buf, "%lluh %02llum %02llus", (unsigned long long)(t / 3600),
                  (unsigned long long)(t / 60 % 60), (unsigned long long)(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llud %02lluh %02llum", (unsigned long long)(t / 86400),
                  (unsigned long long)(t / 3600 % 24), (unsigned long long)(t / 60 % 60));
  }
  return buf;
}

std::string Count(uint64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// Keys whose numbers name something (a process, a client, a log position)
// rather than count it: printed without thousands separators.
bool IsIdentifier(const std::string& key) {
  return key == "pid" || key == "id" || EndsWith(key, "_id") || key == "seq" ||
         EndsWith(key, "_seq") || key == "format_version" || key == "port";
}

// A value with the unit its key implies.
std::string Pretty(const std::string& key, const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    return s.empty() ? "\"\"" : s;
  }
  if (v.is_number()) {
    double d = v.get<double>();
    if ((EndsWith(key, "_bytes") || key == "block_size") && d >= 0) {
      return ftl::FormatSize(uint64_t(d));
    }
    if (EndsWith(key, "_s")) return Duration(d);
    if (key == "write_amplification") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2fx", d);
      return buf;
    }
    if (v.is_number_float()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", d);
      return buf;
    }
    if (v.is_number_unsigned()) {
      return IsIdentifier(key) ? std::to_string(v.get<uint64_t>()) : Count(v.get<uint64_t>());
    }
    return std::to_string(v.get<int64_t>());
  }
  return v.dump();
}

std::string Label(std::string key) {
  for (const char* suffix : {"_bytes", "_s"}) {
    if (EndsWith(key, suffix) && key != suffix) key.resize(key.size() - std::strlen(suffix));
  }
  for (char& c : key) {
    if (c == '_') c = ' ';
  }
  return key;
}

void PrintTable(const Json& rows, const std::string& indent) {
  if (rows.empty()) {
    std::cout << indent << "(none)\n";
    return;
  }
  std::vector<std::string> cols;
  for (const auto& row : rows) {
    if (!row.is_object()) {
      std::cout << indent << row.dump() << "\n";
      continue;
    }
    for (const auto& [k, v] : row.items()) {
      if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
    }
  }
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width;
  for (const auto& c : cols) width.push_back(Label(c).size());
  for (const auto& row : rows) {
    if (!row.is_object()) continue;
    std::vector<std::string> line;
    for (size_t i = 0; i < cols.size(); ++i) {
      std::string s = row.contains(cols[i]) ? Pretty(cols[i], row[cols[i]]) : "";
      width[i] = std::max(width[i], s.size());
      line.push_back(s);
    }
    cells.push_back(line);
  }
  auto emit = [&](const std::vector<std::string>& line) {
    std::string out = indent;
    for (size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out += std::string(width[i] - line[i].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  std::vector<std::string> header;
  for (const auto& c : cols) header.push_back(Label(c));
  for (auto& h : header) {
    for (char& ch : h) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  }
  emit(header);
  for (const auto& line : cells) emit(line);
}

// Scalars first as aligned "label  value" lines, nested objects as
// indented sections, arrays of objects as tables.
void PrintObject(const Json& obj, const std::string& indent) {
  size_t w = 0;
  for (const auto& [k, v] : obj.items()) {
    if (!v.is_object() && !v.is_array()) w = std::max(w, Label(k).size());
  }
  for (const auto& [k, v] : obj.items()) {
    if (v.is_object() || v.is_array()) continue;
    std::string l = Label(k);
    std::cout << indent << l << std::string(w - l.size() + 2, ' ') << Pretty(k, v) << "\n";
  }
  for (const auto& [k, v] : obj.items()) {
    if (v.is_object()) {
      std::cout << indent << Label(k) << ":\n";
      PrintObject(v, indent + "  ");
    } else if (v.is_array()) {
      std::cout << indent << Label(k) << ":\n";
      bool scalars = std::all_of(v.begin(), v.end(), [](const Json& x) { return !x.is_structured(); });
      if (scalars) {
        for (const auto& x : v) std::cout << indent << "  " << Pretty(k, x) << "\n";
      } else {
        PrintTable(v, indent + "  ");
      }
    }
  }
}

void PrintHuman(const std::string& command, Json reply) {
  reply.erase(kFieldOk);
  reply.erase(kFieldId);
  if (command == kCmdExports && reply.contains("exports")) {
    PrintTable(reply["exports"], "");
    return;
  }
  if (command == kCmdHelp && reply.contains("commands")) {
    size_t w = 0;
    for (const auto& c : reply["commands"]) w = std::max(w, c[kFieldCmd].get<std::string>().size());
    for (const auto& c : reply["commands"]) {
      std::string name = c[kFieldCmd].get<std::string>();
      std::cout << name << std::string(w - name.size() + 2, ' ')
                << c.value("summary", std::string()) << "\n";
    }
    return;
  }
  if (reply.empty()) {
    std::cout << "ok\n";
    return;
  }
  PrintObject(reply, "");
}


// ---- snapshot and range subcommands ------------------------------------

bool ParseSizeArg(const std::string& what, const std::string& text, Json* out,
                  std::string* error) {
  auto v = ftl::ParseSize(text);
  if (!v.ok()) {
    *error = what + ": " + std::string(v.status().message());
    return false;
  }
  *out = *v;
  return true;
}

// NAME or VOL@NAME (with --volume VOL) into request fields.
bool SnapshotName(const SubArgs& a, Json* request, std::string* error) {
  if (a.pos.size() != 1) {
    *error = "snapshot " + a.action + " needs exactly one NAME";
    return false;
  }
  std::string name = a.pos[0];
  std::string volume = a.opts.count("volume") ? a.opts.at("volume") : "";
  if (name.find('@') != std::string::npos) {
    if (a.opts.count("volume")) {
      *error = "give either VOL@NAME or --volume VOL, not both";
      return false;
    }
    auto ref = ftl::TreeRef::Parse(name);
    if (!ref.ok()) {
      *error = std::string(ref.status().message());
      return false;
    }
    volume = ref->volume;
    name = ref->snapshot;
  }
  (*request)[kArgName] = name;
  if (!volume.empty()) (*request)[kArgVolume] = volume;
  return true;
}

// Reads a batch file ("-" = stdin): one JSON object per line; blank lines
// and lines starting with '#' are skipped.
bool ReadBatch(const std::string& path, Json* ops, std::string* error) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) {
      *error = path + ": " + std::strerror(errno);
      return false;
    }
    in = &file;
  }
  *ops = Json::array();
  std::string line;
  for (int n = 1; std::getline(*in, line); ++n) {
    std::string where = (path == "-" ? std::string("stdin") : path) + ":" + std::to_string(n);
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    Json op = Json::parse(line, nullptr, false);
    if (op.is_discarded() || !op.is_object()) {
      *error = where + ": not a JSON object";
      return false;
    }
    std::string kind = op.value(kArgOp, std::string());
    if (kind != kActionClone && kind != kActionMove) {
      *error = where + ": \"op\" must be \"clone\" or \"move\"";
      return false;
    }
    for (const char* key : {kArgSrc, kArgDst, kArgLen}) {
      if (!op.contains(key)) {
        *error = where + ": missing \"" + key + "\"";
        return false;
      }
      const Json& v = op[key];
      if (v.is_string()) {
        if (auto p = ftl::ParseSize(v.get<std::string>()); !p.ok()) {
          *error = where + ": \"" + key + "\": " + std::string(p.status().message());
          return false;
        }
      } else if (!v.is_number_unsigned()) {
        *error = where + ": \"" + key + "\" must be a byte count or a size like \"1M\"";
        return false;
      }
    }
    for (const auto& [k, v] : op.items()) {
      if (k != kArgOp && k != kArgSrc && k != kArgDst && k != kArgLen && k != kArgFrom &&
          k != kArgTo) {
        *error = where + ": unknown field \"" + k + "\"";
        return false;
      }
    }
    ops->push_back(op);
  }
  if (ops->empty()) {
    *error = (path == "-" ? std::string("stdin") : path) + ": no operations";
    return false;
  }
  return true;
}

// Builds the request for "snapshot ..." / "range ..."; false with `error`
// on a usage problem.
bool BuildSubRequest(const std::vector<std::string>& rest, Json* request, std::string* error) {
  const std::string& cmd = rest[0];
  if (rest.size() < 2) {
    *error = cmd + " needs an action";
    return false;
  }
  SubArgs a;
  a.action = rest[1];
  std::vector<std::string> args(rest.begin() + 2, rest.end());
  *request = {{kFieldCmd, cmd}, {kFieldAction, a.action}};
  Json& r = *request;
  auto parse = [&](std::set<std::string> values, std::set<std::string> flags) {
    return ParseSubArgs(args, values, flags, &a, error);
  };
  auto no_pos = [&](size_t n, const std::string& usage) {
    if (a.pos.size() != n) {
      *error = "usage: ftlctl " + cmd + " " + a.action + " " + usage;
      return false;
    }
    return true;
  };
  if (cmd == kCmdSnapshot) {
    if (a.action == kActionCreate) {
      if (!parse({"volume"}, {}) || !SnapshotName(a, request, error)) return false;
    } else if (a.action == kActionList) {
      if (!parse({"volume"}, {}) || !no_pos(0, "[--volume VOL]")) return false;
      if (a.opts.count("volume")) r[kArgVolume] = a.opts["volume"];
    } else if (a.action == kActionDelete || a.action == kActionRollback) {
      if (!parse({"volume"}, {"force"}) || !SnapshotName(a, request, error)) return false;
      if (a.flags.count("force")) r[kArgForce] = true;
    } else if (a.action == kActionActivate) {
      if (!parse({"volume", "export"}, {"read-only"}) || !SnapshotName(a, request, error)) {
        return false;
      }
      if (a.opts.count("export")) r[kArgExport] = a.opts["export"];
      if (a.flags.count("read-only")) r[kArgReadOnly] = true;
    } else if (a.action == kActionDeactivate) {
      if (!parse({}, {}) || !no_pos(1, "EXPORT")) return false;
      r[kArgExport] = a.pos[0];
    } else {
      *error = "unknown snapshot action '" + a.action +
               "' (create, list, delete, activate, deactivate, rollback)";
      return false;
    }
    return true;
  }
  // range
  if (a.action == kActionClone || a.action == kActionMove) {
    if (!parse({"from", "to"}, {}) || !no_pos(3, "SRC DST LEN [--from X] [--to Y]")) {
      return false;
    }
    if (!ParseSizeArg("SRC", a.pos[0], &r[kArgSrc], error) ||
        !ParseSizeArg("DST", a.pos[1], &r[kArgDst], error) ||
        !ParseSizeArg("LEN", a.pos[2], &r[kArgLen], error)) {
      return false;
    }
    if (a.opts.count("from")) r[kArgFrom] = a.opts["from"];
    if (a.opts.count("to")) r[kArgTo] = a.opts["to"];
  } else if (a.action == kActionMerge) {
    if (!parse({"base", "dst", "len", "policy", "from", "to"}, {})) return false;
    for (const char* key : {kArgBase, kArgDst, kArgLen}) {  // --base etc. name the fields
      if (!a.opts.count(key)) {
        *error = std::string("range merge needs --") + key;
        return false;
      }
      if (!ParseSizeArg(std::string("--") + key, a.opts[key], &r[key], error)) return false;
    }
    if (a.pos.empty()) {
      *error = "range merge needs at least one SRC offset";
      return false;
    }
    r[kArgSources] = Json::array();
    for (const std::string& p : a.pos) {
      Json v;
      if (!ParseSizeArg("SRC", p, &v, error)) return false;
      r[kArgSources].push_back(v);
    }
    std::string policy = a.opts.count("policy") ? a.opts["policy"] : kPolicyFail;
    if (policy != kPolicyFail && policy != kPolicyFirst && policy != kPolicyLast) {
      *error = "--policy must be fail, first or last";
      return false;
    }
    r[kArgPolicy] = policy;
    if (a.opts.count("from")) r[kArgFrom] = a.opts["from"];
    if (a.opts.count("to")) r[kArgTo] = a.opts["to"];
  } else if (a.action == kActionAttr) {
    if (!parse({"volume"}, {}) ||
        !no_pos(3, "OFF LEN immutable|mutable|persistent|non-persistent [--volume VOL]")) {
      return false;
    }
    if (!ParseSizeArg("OFF", a.pos[0], &r[kArgOffset], error) ||
        !ParseSizeArg("LEN", a.pos[1], &r[kArgLength], error)) {
      return false;
    }
    static const std::set<std::string> kAttrs = {kAttrImmutable, kAttrMutable, kAttrPersistent,
                                                  kAttrNonPersistent};
    if (!kAttrs.count(a.pos[2])) {
      *error = "attribute must be immutable, mutable, persistent or non-persistent";
      return false;
    }
    r[kArgAttr] = a.pos[2];
    if (a.opts.count("volume")) r[kArgVolume] = a.opts["volume"];
  } else if (a.action == kActionAttrs) {
    if (!parse({"volume"}, {}) || !no_pos(0, "[--volume VOL]")) return false;
    if (a.opts.count("volume")) r[kArgVolume] = a.opts["volume"];
  } else if (a.action == kActionBatch) {
    if (!parse({}, {}) || !no_pos(1, "FILE|-")) return false;
    if (!ReadBatch(a.pos[0], &r[kArgOps], error)) return false;
  } else {
    *error = "unknown range action '" + a.action +
             "' (clone, move, merge, attr, attrs, batch)";
    return false;
  }
  return true;
}

// An offset or length exactly, in the largest binary unit that divides it.
std::string Exact(uint64_t n) {
  static const std::pair<uint64_t, const char*> kUnits[] = {
      {1ull << 40, "T"}, {1ull << 30, "G"}, {1ull << 20, "M"}, {1ull << 10, "K"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (n != 0 && n % unit == 0) return std::to_string(n / unit) + suffix;
  }
  return std::to_string(n);
}

std::string LocalTime(uint64_t unix_ns) {
  if (unix_ns == 0) return "-";
  time_t t = time_t(unix_ns / 1000000000ull);
  tm local{};
  localtime_r(&t, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::string Str(const Json& j, const char* key, const std::string& none = "-") {
  if (!j.contains(key) || j[key].is_null()) return none;
  if (j[key].is_string()) {
    std::string s = j[key].get<std::string>();
    return s.empty() ? none : s;
  }
  return j[key].dump();
}

uint64_t U64(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
}


// Every export a snapshot is active as, comma-separated ("-" if none).
std::string ActiveExports(const Json& s) {
  auto it = s.find("active_exports");
  if (it == s.end() || !it->is_array()) return Str(s, "active_export");  // older daemon
  std::string out;
  for (const Json& e : *it) {
    if (!out.empty()) out += ",";
    out += e.is_string() ? (e.get<std::string>().empty() ? "\"\"" : e.get<std::string>())
                         : e.dump();
  }
  return out.empty() ? "-" : out;
}

void PrintSnapshots(const Json& list) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& s : list) {
    rows.push_back({Str(s, "name"), Str(s, "volume"), LocalTime(U64(s, "created_unix_ns")),
                    std::to_string(U64(s, "seq")), Str(s, "parent"),
                    ftl::FormatSize(U64(s, "exclusive_bytes")),
                    ftl::FormatSize(U64(s, "size_bytes")), ActiveExports(s)});
  }
  PrintRows({"NAME", "VOLUME", "CREATED", "SEQ", "PARENT", "EXCLUSIVE", "SIZE", "ACTIVE EXPORTS"},
            rows);
}

void PrintAttrs(const Json& reply) {
  std::cout << "volume " << Str(reply, "volume") << "\n";
  std::vector<std::vector<std::string>> rows;
  for (const Json& a : reply.value("attrs", Json::array())) {
    uint64_t off = U64(a, "offset"), len = U64(a, "length");
    std::vector<std::string> what;
    if (a.value("immutable", false)) what.push_back("immutable");
    if (a.value("non_persistent", false)) what.push_back("non-persistent");
    std::string attrs;
    for (const auto& w : what) attrs += (attrs.empty() ? "" : ", ") + w;
    rows.push_back({Exact(off), Exact(off + len), ftl::FormatSize(len),
                    attrs.empty() ? "-" : attrs});
  }
  PrintRows({"OFFSET", "END", "LENGTH", "ATTRIBUTES"}, rows);
}

std::string Tree(const Json& request, const char* key) {
  std::string t = Str(request, key, "");
  return t.empty() ? "primary volume" : t;
}

// Prints a successful reply to a snapshot/range request; returns the exit
// status (a merge that hit conflicts under policy fail is 1).
int PrintSub(const Json& request, const Json& reply, const std::string& line, bool json) {
  std::string cmd = request[kFieldCmd], action = request[kFieldAction];
  bool merge_failed = cmd == kCmdRange && action == kActionMerge && !reply.value("applied", true);
  if (merge_failed) {
    const Json& c = reply["conflicts"];
    std::cerr << "ftlctl: range merge: " << c.size()
              << " conflicting block(s), nothing changed; offsets from the range start:";
    size_t shown = 0;
    for (const Json& o : c) {
      if (++shown > 64) {
        std::cerr << " ... (" << c.size() - 64 << " more; --json lists all)";
        break;
      }
      std::cerr << " " << o.get<uint64_t>();
    }
    std::cerr << "\n";
  }
  if (json) {
    std::cout << line << "\n";
    return merge_failed ? 1 : 0;
  }
  if (merge_failed) return 1;
  if (cmd == kCmdSnapshot) {
    if (action == kActionCreate) {
      const Json& s = reply["snapshot"];
      std::cout << "created snapshot " << Str(s, "ref") << " (seq " << U64(s, "seq") << ", "
                << ftl::FormatSize(U64(s, "size_bytes")) << ")\n";
    } else if (action == kActionList) {
      PrintSnapshots(reply["snapshots"]);
    } else if (action == kActionDelete) {
      for (const Json& v : reply.value("deactivated", Json::array())) {
        std::cout << "deactivated " << v.get<std::string>() << "\n";
      }
      std::cout << "deleted snapshot " << Str(reply, "deleted") << "\n";
    } else if (action == kActionActivate) {
      const Json& e = reply["export"];
      std::cout << "activated " << Str(reply, "snapshot") << " as export '" << Str(e, "name")
                << "' (" << ftl::FormatSize(U64(e, "size_bytes")) << ", "
                << (e.value("read_only", false) ? "read-only" : "writable") << ")\n";
    } else if (action == kActionDeactivate) {
      std::cout << "deactivated export '" << Str(reply, "deactivated") << "' (volume "
                << Str(reply, "volume") << ")\n";
    } else if (action == kActionRollback) {
      std::cout << "rolled back " << Str(reply, "volume") << " to " << Str(reply, "snapshot");
      if (U64(reply, "clients_connected") > 0) {
        std::cout << " (" << U64(reply, "clients_connected") << " client(s) connected)";
      }
      std::cout << "\n";
    }
    return 0;
  }
  if (action == kActionClone || action == kActionMove) {
    std::cout << (action == kActionClone ? "cloned " : "moved ")
              << ftl::FormatSize(U64(request, kArgLen)) << ": " << Tree(request, kArgFrom)
              << " " << Exact(U64(request, kArgSrc)) << " -> " << Tree(request, kArgTo) << " "
              << Exact(U64(request, kArgDst)) << "\n";
  } else if (action == kActionBatch) {
    std::cout << "applied " << U64(reply, "ops") << " operation(s) atomically\n";
  } else if (action == kActionMerge) {
    std::cout << "merged " << U64(reply, "blocks") << " block(s) into "
              << Tree(request, kArgTo) << " " << Exact(U64(request, kArgDst)) << " (policy "
              << Str(reply, "policy") << ")\n";
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"base " + Exact(U64(request, kArgBase)), Count(U64(reply, "unchanged"))});
    for (const Json& t : reply.value("taken", Json::array())) {
      rows.push_back({"source " + Exact(U64(t, "source")), Count(U64(t, "blocks"))});
    }
    PrintRows({"FROM", "BLOCKS"}, rows);
    size_t conflicts = reply.value("conflicts", Json::array()).size();
    if (conflicts > 0) std::cout << conflicts << " conflict(s) resolved by policy\n";
  } else if (action == kActionAttr || action == kActionAttrs) {
    PrintAttrs(reply);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string control;
  bool json = false;
  int timeout_s = 600;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--control" || a.rfind("--control=", 0) == 0) {
      if (a == "--control") {
        if (++i >= argc) return Usage("--control needs a path");
        control = argv[i];
      } else {
        control = a.substr(10);
      }
    } else if (a == "--timeout") {
      if (++i >= argc) return Usage("--timeout needs seconds");
      timeout_s = std::atoi(argv[i]);
      if (timeout_s <= 0) return Usage("--timeout must be positive");
    } else if (a == "-h" || a == "--help") {
      std::cout << FullUsage();
      return 0;
    } else if (rest.empty() && a.size() > 1 && a[0] == '-') {
      return Usage("unknown option " + a);
    } else {
      rest.push_back(a);
    }
  }
  if (rest.empty()) return Usage("missing COMMAND");

  // The socket is looked for at the first request, after the arguments
  // are checked.
  std::string sub_path;
  auto roundtrip = [&](const std::string& request, std::string* reply, std::string* err) {
    if (sub_path.empty()) sub_path = ResolveControl(control, err);
    return !sub_path.empty() && Roundtrip(sub_path, request, timeout_s, reply, err);
  };
  if (rest[0] == kCmdKv) {
    return ftl::ctl::RunKv(std::vector<std::string>(rest.begin() + 1, rest.end()), json,
                           roundtrip, [](const Json& reply) { PrintObject(reply, ""); });
  }
  if (rest[0] == kCmdVolume) {
    return ftl::ctl::RunVolume(std::vector<std::string>(rest.begin() + 1, rest.end()), json,
                               roundtrip);
  }

  if (rest[0] == kCmdDevice || rest[0] == kCmdScrub) {
    std::string path;
    return ftl::ctl::RunDevice(rest[0], std::vector<std::string>(rest.begin() + 1, rest.end()), json,
                               [&](const std::string& request, std::string* reply, std::string* err) {
                                 if (path.empty()) path = ResolveControl(control, err);
                                 return !path.empty() && Roundtrip(path, request, timeout_s, reply, err);
                               });
  }

  bool sub = rest[0] == kCmdSnapshot || rest[0] == kCmdRange;
  Json request = {{kFieldCmd, rest[0]}};
  if (sub) {
    std::string error;
    if (!BuildSubRequest(rest, &request, &error)) {
      std::cerr << "ftlctl: " << error << "\n";
      return 2;
    }
  }
  for (size_t i = 1; !sub && i < rest.size(); ++i) {
    const std::string& a = rest[i];
    auto eq = a.find('=');
    if (eq != std::string::npos && eq > 0) {
      std::string value = a.substr(eq + 1);
      Json parsed = Json::parse(value, nullptr, false);
      request[a.substr(0, eq)] = parsed.is_discarded() ? Json(value) : parsed;
    } else {
      request[kFieldArgs].push_back(a);
    }
  }

  std::string error;
  std::string path = ResolveControl(control, &error);
  if (path.empty()) {
    std::cerr << "ftlctl: " << error << "\n";
    return 2;
  }
  std::string line;
  if (!Roundtrip(path, request.dump(), timeout_s, &line, &error)) {
    std::cerr << "ftlctl: " << error << "\n";
    return 2;
  }
  Json reply = Json::parse(line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    std::cerr << "ftlctl: the daemon sent something that is not JSON: " << line << "\n";
    return 2;
  }
  bool ok = reply.value(kFieldOk, false);
  if (sub && ok) return PrintSub(request, reply, line, json);
  if (json) {
    std::cout << line << "\n";
  } else if (!ok) {
    std::cerr << "ftlctl: " << (sub ? rest[0] + " " + rest[1] : rest[0]) << ": "
              << reply.value(kFieldError, std::string("failed"))
              << "\n";
  } else {
    PrintHuman(rest[0], reply);
  }
  return ok ? 0 : 1;
}
