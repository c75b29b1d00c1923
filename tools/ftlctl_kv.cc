#include "tools/ftlctl_kv.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>

#include "control/control_protocol.h"
#include "control/kv_wire.h"
#include "ftl/kv.h"
#include "ftl/size.h"
#include "tools/ftlctl_args.h"

namespace ftl::ctl {

using namespace ftl::control;
using Json = nlohmann::json;

const char* const kKvUsage = R"(  kv create NAME [--geometry page=4096,pages=28,sectors=32,per-page=1]
  kv list
  kv destroy NAME [--force]
  kv put NAME KEY VALUE [--no-sync] [--hex]
  kv put NAME KEY --value-file FILE|- [--no-sync] [--hex]
  kv get NAME[@SNAP] KEY [--hex]
  kv del NAME KEY [--no-sync] [--hex]
  kv scan NAME[@SNAP] [--from KEY] [--to KEY] [--limit N] [--hex]
  kv stats NAME[@SNAP]
               Key-value datasets. Keys and values are the bytes given
               (1 KiB and 64 KiB at most); --hex: KEY, VALUE, --from and
               --to are hex digits and get/scan print hex; a KEY starting
               with '-' goes after "--". put and del are durable when they
               answer unless --no-sync. get prints the raw value (exit 1 if
               the key is missing); scan prints KEY<TAB>VALUE lines with
               bytes outside printable text as \xNN, keys in [--from, --to),
               all of them unless --limit. destroy --force also deletes the
               dataset's snapshots. NAME@SNAP reads a snapshot (ftlctl
               snapshot create NAME@SNAP).
)";

namespace {

int Nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool FromHex(const std::string& text, std::string* out) {
  if (text.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = Nibble(text[i]), lo = Nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(char(hi * 16 + lo));
  }
  return true;
}

std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// Bytes for a terminal line: text stays as it is (when it is UTF-8), control
// characters, '\\' and bytes of invalid UTF-8 become \xNN.
std::string Shown(const std::string& bytes) {
  bool utf8 = IsUtf8(bytes);
  std::string out;
  for (unsigned char c : bytes) {
    if (c == '\\' || c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(char(c));
    }
  }
  return out;
}

// Reads at most kMaxValueBytes + 1 bytes of FILE ("-" = stdin).
bool ReadValueFile(const std::string& path, std::string* out, std::string* error) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) {
      *error = path + ": " + std::strerror(errno);
      return false;
    }
    in = &file;
  }
  out->assign(kMaxValueBytes + 1, '\0');
  in->read(out->data(), std::streamsize(out->size()));
  out->resize(size_t(in->gcount()));
  if (in->bad()) {
    *error = (path == "-" ? std::string("stdin") : path) + ": read error";
    return false;
  }
  if (out->size() > kMaxValueBytes) {
    *error = (path == "-" ? std::string("stdin") : path) + ": the value is larger than " +
             std::to_string(kMaxValueBytes) + " bytes (the limit)";
    return false;
  }
  return true;
}

// A byte-string field of a reply ("" if missing or undecodable).
std::string Bytes(const Json& j, const std::string& field) {
  auto v = GetBytes(j, field);
  return v.ok() && v->has_value() ? **v : std::string();
}

std::string U64(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number_unsigned() ? std::to_string(j[key].get<uint64_t>())
                                                        : "-";
}

void PrintDatasets(const Json& list) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& d : list) {
    auto size = [&](const char* k) {
      return d.contains(k) && d[k].is_number_unsigned() ? ftl::FormatSize(d[k].get<uint64_t>())
                                                        : std::string("-");
    };
    std::string geo = d.contains("geometry") && d["geometry"].is_string()
                          ? d["geometry"].get<std::string>()
                          : "(" + d.value("error", std::string("unknown")) + ")";
    rows.push_back({d.value("name", std::string("?")), geo, size("size_bytes"),
                    size("mapped_bytes"), U64(d, "snapshots")});
  }
  PrintRows({"NAME", "GEOMETRY", "SIZE", "MAPPED", "SNAPSHOTS"}, rows);
}

}  // namespace

int RunKv(const std::vector<std::string>& args, bool json, const RoundtripFn& roundtrip,
          const std::function<void(const Json&)>& print_object) {
  if (args.empty()) {
    std::cerr << "ftlctl: kv needs an action (create, list, destroy, put, get, del, scan, stats)\n";
    return 2;
  }
  SubArgs a;
  a.action = args[0];
  std::string what = "kv " + a.action;
  std::string error;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  auto parse = [&](std::set<std::string> values, std::set<std::string> flags) {
    if (!ParseSubArgs(rest, values, flags, &a, &error)) return false;
    return true;
  };
  auto usage = [&](const std::string& text) {
    std::cerr << "ftlctl: usage: ftlctl kv " << a.action << " " << text << "\n";
    return 2;
  };
  Json r = {{kFieldCmd, kCmdKv}, {kFieldAction, a.action}};
  bool hex = false;
  // A byte string from the command line (hex digits with --hex).
  auto bytes_arg = [&](const std::string& field, const std::string& text) {
    std::string b = text;
    if (hex && !FromHex(text, &b)) {
      error = field + " '" + text + "' is not hex digits (--hex)";
      return false;
    }
    PutBytes(r, field, b);
    return true;
  };
  auto bad = [&]() { return Fail(what, error, 2); };

  Json reply;
  std::string line;
  if (a.action == kActionCreate) {
    if (!parse({"geometry"}, {})) return bad();
    if (a.pos.size() != 1) return usage("NAME [--geometry page=4096,pages=28,sectors=32,per-page=1]");
    r[kArgName] = a.pos[0];
    if (a.opts.count("geometry")) r[kArgGeometry] = a.opts["geometry"];
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      const Json& d = reply["dataset"];
      std::cout << "created key-value dataset " << d.value("name", std::string()) << " ("
                << d.value("geometry", std::string("?")) << ")\n";
    }
    return 0;
  }
  if (a.action == kActionList) {
    if (!parse({}, {})) return bad();
    if (!a.pos.empty()) return usage("");
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      PrintDatasets(reply.value("datasets", Json::array()));
    }
    return 0;
  }
  if (a.action == kActionDestroy) {
    if (!parse({}, {"force"})) return bad();
    if (a.pos.size() != 1) return usage("NAME [--force]");
    r[kArgName] = a.pos[0];
    if (a.flags.count("force")) r[kArgForce] = true;
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      std::cout << "destroyed key-value dataset " << reply.value("destroyed", std::string());
      if (reply.value("snapshots_deleted", 0) > 0) {
        std::cout << " and " << reply.value("snapshots_deleted", 0) << " snapshot(s)";
      }
      std::cout << "\n";
    }
    return 0;
  }
  if (a.action == kActionStats) {
    if (!parse({}, {})) return bad();
    if (a.pos.size() != 1) return usage("NAME[@SNAP]");
    r[kArgName] = a.pos[0];
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      reply.erase(kFieldOk);
      reply.erase(kFieldId);
      print_object(reply);
    }
    return 0;
  }
  if (a.action == kActionPut) {
    if (!parse({"value-file"}, {"no-sync", "hex"})) return bad();
    hex = a.flags.count("hex") > 0;
    bool from_file = a.opts.count("value-file") > 0;
    if (a.pos.size() != (from_file ? 2u : 3u)) {
      return usage("NAME KEY VALUE | NAME KEY --value-file FILE|- [--no-sync] [--hex]");
    }
    r[kArgName] = a.pos[0];
    if (!bytes_arg(kArgKey, a.pos[1])) return bad();
    if (from_file) {
      std::string value;
      if (!ReadValueFile(a.opts["value-file"], &value, &error)) return bad();
      PutBytes(r, kArgValue, value);
    } else if (!bytes_arg(kArgValue, a.pos[2])) {
      return bad();
    }
    r[kArgSync] = a.flags.count("no-sync") == 0;
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) std::cout << line << "\n";
    return 0;
  }
  if (a.action == kActionGet) {
    if (!parse({}, {"hex"})) return bad();
    hex = a.flags.count("hex") > 0;
    if (a.pos.size() != 2) return usage("NAME[@SNAP] KEY [--hex]");
    r[kArgName] = a.pos[0];
    if (!bytes_arg(kArgKey, a.pos[1])) return bad();
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) {
      std::cout << line << "\n";
    } else {
      std::string value = Bytes(reply, kArgValue);
      if (hex) {
        std::cout << ToHex(value) << "\n";
      } else {
        std::cout.write(value.data(), std::streamsize(value.size()));
      }
      std::cout.flush();
    }
    return 0;
  }
  if (a.action == "del" || a.action == kActionDelete) {
    if (!parse({}, {"no-sync", "hex"})) return bad();
    hex = a.flags.count("hex") > 0;
    if (a.pos.size() != 2) return usage("NAME KEY [--no-sync] [--hex]");
    r[kFieldAction] = kActionDelete;
    r[kArgName] = a.pos[0];
    if (!bytes_arg(kArgKey, a.pos[1])) return bad();
    r[kArgSync] = a.flags.count("no-sync") == 0;
    if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
    if (json) std::cout << line << "\n";
    return 0;
  }
  if (a.action == kActionScan) {
    if (!parse({"from", "to", "limit"}, {"hex"})) return bad();
    hex = a.flags.count("hex") > 0;
    if (a.pos.size() != 1) return usage("NAME[@SNAP] [--from KEY] [--to KEY] [--limit N] [--hex]");
    r[kArgName] = a.pos[0];
    if (a.opts.count("from") && !bytes_arg(kArgFrom, a.opts["from"])) return bad();
    if (a.opts.count("to") && !bytes_arg(kArgTo, a.opts["to"])) return bad();
    uint64_t left = UINT64_MAX;
    if (a.opts.count("limit")) {
      const std::string& l = a.opts["limit"];
      char* end = nullptr;
      errno = 0;
      unsigned long long n = std::strtoull(l.c_str(), &end, 10);
      if (l.empty() || *end != '\0' || errno != 0 || n == 0 || l[0] == '-') {
        error = "--limit must be a positive number";
        return bad();
      }
      left = n;
    }
    // Pages of at most kMaxKvScanLimit entries, each continuing at the
    // previous one's "next", until the range or --limit ends.
    Json all = Json::array();
    Json last;
    for (;;) {
      r[kArgLimit] = std::min<uint64_t>(left, kMaxKvScanLimit);
      if (int st = Call(roundtrip, what, r, &reply, &line); st >= 0) return st;
      Json entries = reply.value("entries", Json::array());
      for (Json& e : entries) {
        if (!json) {
          std::string k = Bytes(e, kArgKey), v = Bytes(e, kArgValue);
          std::cout << (hex ? ToHex(k) : Shown(k)) << "\t" << (hex ? ToHex(v) : Shown(v)) << "\n";
        } else {
          all.push_back(std::move(e));
        }
      }
      left -= std::min<uint64_t>(left, entries.size());
      last = reply;
      if (!reply.value("more", false) || left == 0) break;
      r.erase(kArgFrom);
      r.erase(std::string(kArgFrom) + kBase64Suffix);
      PutBytes(r, kArgFrom, Bytes(reply, "next"));
    }
    if (json) {
      last["entries"] = std::move(all);
      last["count"] = last["entries"].size();
      std::cout << last.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    }
    return 0;
  }
  std::cerr << "ftlctl: unknown kv action '" << a.action
            << "' (create, list, destroy, put, get, del, scan, stats)\n";
  return 2;
}

}  // namespace ftl::ctl
