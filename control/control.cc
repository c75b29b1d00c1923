#include "control/control.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ftl/size.h"
#include "ftl/log.h"
#include "nbd/accept_backoff.h"
#include "nbd/errors.h"

namespace ftl::control {

using nbd::AcceptBackoff;
using nbd::StatusMessage;

namespace {

using boost::system::error_code;

std::string ErrorReply(std::string_view message, const Json* id = nullptr,
                       std::string_view code = "") {
  Json reply = {{kFieldOk, false}, {kFieldError, message}};
  if (!code.empty()) reply[kFieldCode] = code;
  if (id != nullptr) reply[kFieldId] = *id;
  return reply.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// True if something accepts connections on the Unix socket `path`.
bool SomeoneListens(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Whether arrays and objects nest deeper than `limit` in `line`: counts
// brackets outside strings (a '"' inside a string is escaped). Not a
// validator: the parser rejects whatever else is wrong.
bool NestedDeeperThan(std::string_view line, size_t limit) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skips the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace

ControlDispatcher::ControlDispatcher() {
  Register(kCmdHelp, "list the commands", [this](const Json&) -> absl::StatusOr<Json> {
    Json commands = Json::array();
    for (const auto& [name, e] : handlers_) {
      commands.push_back({{kFieldCmd, name}, {"summary", e.summary}});
    }
    return Json{{"commands", commands}};
  });
}

void ControlDispatcher::Register(std::string command, std::string summary,
                                 ControlHandler handler) {
  handlers_[std::move(command)] = Entry{std::move(summary), std::move(handler)};
}

std::vector<std::string> ControlDispatcher::Commands() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : handlers_) out.push_back(name);
  return out;
}

std::string ControlDispatcher::Dispatch(std::string_view line) const {
  if (NestedDeeperThan(line, kMaxControlDepth)) {
    return ErrorReply(absl::StrCat("request nested deeper than ", kMaxControlDepth,
                                   " levels of arrays and objects"),
                      nullptr, "INVALID_ARGUMENT");
  }
  Json request = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return ErrorReply("malformed JSON", nullptr, "INVALID_ARGUMENT");
  if (!request.is_object()) {
    return ErrorReply("a request must be a JSON object", nullptr, "INVALID_ARGUMENT");
  }
  const Json* id = request.contains(kFieldId) ? &request[kFieldId] : nullptr;
  auto cmd = request.find(kFieldCmd);
  if (cmd == request.end() || !cmd->is_string()) {
    return ErrorReply("missing \"cmd\" (a string)", id, "INVALID_ARGUMENT");
  }
  auto it = handlers_.find(cmd->get<std::string>());
  if (it == handlers_.end()) {
    return ErrorReply(absl::StrCat("unknown command '", cmd->get<std::string>(),
                                   "' (try \"help\")"),
                      id, "INVALID_ARGUMENT");
  }
  absl::StatusOr<Json> result;
  try {
    result = it->second.handler(request);
  } catch (const std::exception& e) {
    result = absl::InternalError(absl::StrCat("handler failed: ", e.what()));
  }
  if (!result.ok()) {
    return ErrorReply(StatusMessage(result.status()), id,
                      absl::StatusCodeToString(result.status().code()));
  }
  Json reply = {{kFieldOk, true}};
  if (result->is_object()) {
    for (auto& [k, v] : result->items()) reply[k] = v;
  } else if (!result->is_null()) {
    reply["result"] = *result;
  }
  if (id != nullptr) reply[kFieldId] = *id;
  return reply.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<std::string> StringArg(const Json& request, const std::string& key) {
  auto it = request.find(key);
  if (it == request.end()) return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<uint64_t> U64Arg(const Json& request, const std::string& key,
                                std::optional<uint64_t> fallback) {
  auto it = request.find(key);
  if (it == request.end()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  }
  if (!it->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", key, "\" must be a non-negative integer"));
  }
  return it->get<uint64_t>();
}

absl::StatusOr<std::string> OptStringArg(const Json& request, const std::string& key,
                                         const std::string& fallback) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> BoolArg(const Json& request, const std::string& key) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be true or false"));
  }
  return it->get<bool>();
}

absl::Status Prefixed(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

absl::StatusOr<Json> RunAction(const std::string& cmd, const Actions& actions,
                               const Json& request) {
  std::vector<std::string> names;
  for (const auto& [name, fn] : actions) names.push_back(name);
  std::string valid = absl::StrJoin(names, ", ");
  auto it = request.find(kFieldAction);
  if (it == request.end() || !it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", cmd, "\" needs \"action\" (a string: one of ", valid, ")"));
  }
  auto a = actions.find(it->get<std::string>());
  if (a == actions.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ", cmd, " action '",
                                                   it->get<std::string>(), "' (one of ",
                                                   valid, ")"));
  }
  return a->second(request);
}

absl::StatusOr<uint64_t> SizeArg(const Json& request, const std::string& key,
                                 std::optional<uint64_t> fallback) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  }
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_string()) {
    auto v = ParseSize(it->get<std::string>());
    if (!v.ok()) return Prefixed(v.status(), absl::StrCat("\"", key, "\": "));
    return *v;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", key, "\" must be a non-negative integer or a size string like \"64K\", \"8M\""));
}

ControlServer::ControlServer(asio::io_context& io, const ControlDispatcher* dispatcher)
    : io_(io), dispatcher_(dispatcher), log_(Logger("ctl")) {}

ControlServer::~ControlServer() {
  handler_thread_.join();
}

absl::Status ControlServer::Listen(const std::string& path) {
  if (path.size() > kMaxSocketPath) {
    return absl::InvalidArgumentError(absl::StrCat("control socket path too long: ", path));
  }
  std::filesystem::path p(path);
  std::error_code fec;
  if (p.has_parent_path()) {
    std::filesystem::create_directories(p.parent_path(), fec);
    if (fec) {
      return absl::UnavailableError(
          absl::StrCat("cannot create ", p.parent_path().string(), ": ", fec.message()));
    }
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrCat("control socket path ", path, " exists and is not a socket"));
    }
    if (SomeoneListens(path)) {
      return absl::AlreadyExistsError(
          absl::StrCat("control socket ", path, " is in use (is another ftld running?)"));
    }
    ::unlink(path.c_str());
  }
  error_code ec;
  acceptor_.emplace(io_);
  acceptor_->open(asio::local::stream_protocol(), ec);
  if (!ec) {
    // Created with mode 0600 from the start: no window with wider access.
    mode_t old = ::umask(0177);
    acceptor_->bind(asio::local::stream_protocol::endpoint(path), ec);
    ::umask(old);
  }
  if (!ec) acceptor_->listen(16, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("control socket ", path, ": ", ec.message()));
  ::chmod(path.c_str(), 0600);
  path_ = path;
  return absl::OkStatus();
}

void ControlServer::Start() {
  log_->info("control socket {}", path_);
  asio::co_spawn(io_, AcceptLoop(), asio::detached);
}

void ControlServer::Stop() {
  asio::post(io_, [this] {
    error_code ec;
    if (acceptor_) acceptor_->close(ec);
  });
  if (!path_.empty()) ::unlink(path_.c_str());
}

asio::awaitable<void> ControlServer::AcceptLoop() {
  // Out of descriptors: back off and log once per episode (accept_backoff.h).
  AcceptBackoff backoff(log_, absl::StrCat("control socket ", path_));
  for (;;) {
    asio::local::stream_protocol::socket socket(asio::make_strand(io_));
    error_code ec;
    co_await acceptor_->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
    if (ec) {
      co_await backoff.Failed(ec);
      if (!acceptor_->is_open()) co_return;
      continue;
    }
    backoff.Succeeded();
    auto ex = socket.get_executor();
    asio::co_spawn(ex, Session(this, std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> ControlServer::Session(ControlServer* server,
                                             asio::local::stream_protocol::socket socket) {
  error_code ec;
  auto token = asio::redirect_error(asio::use_awaitable, ec);
  std::string buffer;
  for (;;) {
    size_t n = co_await asio::async_read_until(
        socket, asio::dynamic_buffer(buffer, kMaxControlLine), kLineEnd, token);
    if (ec == asio::error::not_found) {
      std::string reply = ErrorReply("request line too long", nullptr, "INVALID_ARGUMENT") + kLineEnd;
      server->log_->warn("control request longer than {} bytes; closing", kMaxControlLine);
      co_await asio::async_write(socket, asio::buffer(reply), token);
      // Swallow the rest for a while so closing does not reset the
      // connection before the client has read the reply.
      socket.shutdown(asio::socket_base::shutdown_send, ec);
      asio::steady_timer limit(socket.get_executor(), std::chrono::seconds(5));
      limit.async_wait([&socket](error_code e) {
        if (!e) socket.close(e);
      });
      std::vector<char> sink(64 * 1024);
      for (size_t total = 0; total < 64 * kMaxControlLine;) {
        size_t got = co_await socket.async_read_some(asio::buffer(sink), token);
        if (ec) break;
        total += got;
      }
      limit.cancel();
      co_return;
    }
    if (ec) co_return;  // client closed (a partial last line is dropped)
    std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;

    // Run the handler on the handler thread; wake this strand when done.
    std::string reply;
    asio::steady_timer done(socket.get_executor(), asio::steady_timer::time_point::max());
    auto strand = socket.get_executor();
    asio::post(server->handler_thread_, [&, strand] {
      reply = server->dispatcher_->Dispatch(line);
      asio::post(strand, [&] { done.cancel(); });
    });
    co_await done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (reply.find("\"ok\":false") != std::string::npos) {
      server->log_->info("control request failed: {}", reply);
    }
    reply += kLineEnd;
    co_await asio::async_write(socket, asio::buffer(reply), token);
    if (ec) co_return;
  }
}

}  // namespace ftl::control
