#pragma once
// The control socket: a Unix stream socket speaking JSON lines. Each request
// is one JSON object on one line, {"cmd":"NAME", ...arguments}; each reply is
// one line, {"ok":true, ...results} or {"ok":false,"error":"..."}. A request
// "id" is echoed back. Framing, limits and names: control_protocol.h (shared
// with ftlctl); every command's fields: the README, "Control protocol".
//
// ControlDispatcher maps a command name to a handler; adding a command
// (e.g. "snapshot", "range") is one Register call, see control_commands.h.
// ControlServer accepts clients on the io_context and runs every handler on
// its own single thread, so handlers never run concurrently with each other
// and may block (checkpoint, gc).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "control/control_protocol.h"
#include "nbd/asio.h"

namespace ftl::control {

namespace asio = boost::asio;
using Json = nlohmann::json;

// Gets the whole request object (with "cmd"); returns the result fields
// (a JSON object, merged into the reply) or an error status.
using ControlHandler = std::function<absl::StatusOr<Json>(const Json& request)>;

class ControlDispatcher {
 public:
  ControlDispatcher();  // registers "help"
  // REQUIRES: `command` not registered yet.
  void Register(std::string command, std::string summary, ControlHandler handler);
  // One request line (without '\n') to one reply line (without '\n').
  // Never throws: malformed JSON, nesting deeper than kMaxControlDepth, a
  // non-object, a missing or unknown "cmd", a handler error or exception
  // all become {"ok":false,"error":...}.
  std::string Dispatch(std::string_view line) const;
  std::vector<std::string> Commands() const;

 private:
  struct Entry {
    std::string summary;
    ControlHandler handler;
  };
  std::map<std::string, Entry> handlers_;
};

// Helpers for handlers: typed access to request arguments with errors that
// name the argument.
absl::StatusOr<std::string> StringArg(const Json& request, const std::string& key);
absl::StatusOr<uint64_t> U64Arg(const Json& request, const std::string& key,
                                std::optional<uint64_t> fallback = std::nullopt);
// A string that may be absent or null (then `fallback`).
absl::StatusOr<std::string> OptStringArg(const Json& request, const std::string& key,
                                         const std::string& fallback = "");
// true or false; absent or null is false.
absl::StatusOr<bool> BoolArg(const Json& request, const std::string& key);
// A size: a non-negative JSON integer (bytes) or a string with an optional
// K/M/G/T suffix (binary units, ftl/size.h).
absl::StatusOr<uint64_t> SizeArg(const Json& request, const std::string& key,
                                 std::optional<uint64_t> fallback = std::nullopt);
// `s` with `prefix` before its message ("ops[3]: ...").
absl::Status Prefixed(const absl::Status& s, const std::string& prefix);

// Commands with a verb, {"cmd":CMD,"action":VERB,...}: RunAction runs
// actions[VERB]; the error for a missing or unknown action lists the
// valid ones.
using Actions = std::map<std::string, std::function<absl::StatusOr<Json>(const Json&)>>;
absl::StatusOr<Json> RunAction(const std::string& cmd, const Actions& actions,
                               const Json& request);

class ControlServer {
 public:
  ControlServer(asio::io_context& io, const ControlDispatcher* dispatcher);
  ~ControlServer();

  // Creates the parent directory if needed, refuses a path where another
  // server answers, replaces a stale socket, binds with mode 0600.
  absl::Status Listen(const std::string& path);
  void Start();
  // Closes the listener and removes the socket file; running handlers
  // finish. Call before the io_context stops.
  void Stop();
  const std::string& path() const { return path_; }

 private:
  // Accepts until the acceptor closes. Failures for lack of descriptors or
  // memory (EMFILE, ENFILE, ENOBUFS, ENOMEM, or anything else unexpected)
  // leave the connection queued, so retrying at once would spin: it waits
  // 10 ms, doubling up to 1 s, logs the first failure of an episode and
  // the recovery, nothing in between.
  asio::awaitable<void> AcceptLoop();
  static asio::awaitable<void> Session(ControlServer* server,
                                       asio::local::stream_protocol::socket socket);

  asio::io_context& io_;
  const ControlDispatcher* dispatcher_;
  std::shared_ptr<spdlog::logger> log_;
  std::optional<asio::local::stream_protocol::acceptor> acceptor_;
  asio::thread_pool handler_thread_{1};
  std::string path_;
};

}  // namespace ftl::control
