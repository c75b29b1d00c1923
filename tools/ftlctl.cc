// ftlctl: operate a running ftld through its control socket.
//
//   ftlctl [--control PATH] [--json] [--timeout SEC] COMMAND [ARG...]
//
// COMMAND is sent as {"cmd":COMMAND}; an ARG "key=value" becomes a field
// (value parsed as JSON when it is valid JSON, else a string), any other ARG
// is appended to "args". So new daemon commands work without changing ftlctl.
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
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/size_parse.h"

namespace {

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
Any other COMMAND is passed through: ARGs "key=value" become request
fields, other ARGs go to "args".

Options:
  --control PATH  control socket (default $FTLD_CONTROL, else the only
                  socket in /run/ftld)
  --json          print the daemon's JSON reply as is
  --timeout SEC   give up waiting for a reply after SEC seconds (default 600)
)";

int Usage(const std::string& error) {
  if (!error.empty()) std::cerr << "ftlctl: " << error << "\n";
  std::cerr << kUsage;
  return 2;
}

std::string ResolveControl(const std::string& given, std::string* error) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("FTLD_CONTROL"); env != nullptr && *env) return env;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/ftld", ec)) {
    if (e.path().extension() == ".sock") found.push_back(e.path().string());
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
  if (path.size() >= sizeof(addr.sun_path)) {
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
  std::string line = request + "\n";
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
    if (reply->find('\n') != std::string::npos) break;
  }
  ::close(fd);
  if (auto nl = reply->find('\n'); nl != std::string::npos) reply->resize(nl);
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
      return ftl::util::FormatSize(uint64_t(d));
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
    if (v.is_number_unsigned()) return Count(v.get<uint64_t>());
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
  reply.erase("ok");
  reply.erase("id");
  if (command == "exports" && reply.contains("exports")) {
    PrintTable(reply["exports"], "");
    return;
  }
  if (command == "help" && reply.contains("commands")) {
    size_t w = 0;
    for (const auto& c : reply["commands"]) w = std::max(w, c["cmd"].get<std::string>().size());
    for (const auto& c : reply["commands"]) {
      std::string name = c["cmd"].get<std::string>();
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
      std::cout << kUsage;
      return 0;
    } else if (rest.empty() && a.size() > 1 && a[0] == '-') {
      return Usage("unknown option " + a);
    } else {
      rest.push_back(a);
    }
  }
  if (rest.empty()) return Usage("missing COMMAND");

  Json request = {{"cmd", rest[0]}};
  for (size_t i = 1; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    auto eq = a.find('=');
    if (eq != std::string::npos && eq > 0) {
      std::string value = a.substr(eq + 1);
      Json parsed = Json::parse(value, nullptr, false);
      request[a.substr(0, eq)] = parsed.is_discarded() ? Json(value) : parsed;
    } else {
      request["args"].push_back(a);
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
  bool ok = reply.value("ok", false);
  if (json) {
    std::cout << line << "\n";
  } else if (!ok) {
    std::cerr << "ftlctl: " << rest[0] << ": " << reply.value("error", std::string("failed"))
              << "\n";
  } else {
    PrintHuman(rest[0], reply);
  }
  return ok ? 0 : 1;
}
