#pragma once
// ftlctl's parsing of a subcommand's arguments ("ACTION ARG... --opt VALUE
// --flag"), its aligned tables and its request round trip with error
// reporting, shared by its snapshot, range, kv and volume verbs. Owns
// nothing.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftl::ctl {

// Parsed "ACTION ARG... --opt VALUE --flag" after the command word.
struct SubArgs {
  std::string action;
  std::vector<std::string> pos;
  std::map<std::string, std::string> opts;
  std::set<std::string> flags;
};

// `value_opts` take a value ("--opt V" or "--opt=V"); `flag_opts` do not.
bool ParseSubArgs(const std::vector<std::string>& args, const std::set<std::string>& value_opts,
                  const std::set<std::string>& flag_opts, SubArgs* out, std::string* error);

// Prints rows of cells aligned under a header to stdout ("(none)" if no rows).
void PrintRows(const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows);

// Sends one request line, returns its reply line; false with `error` on a
// connection problem.
using RoundtripFn =
    std::function<bool(const std::string& request, std::string* reply, std::string* error)>;

// Prints "ftlctl: WHAT: ERROR" to stderr and returns `status`.
int Fail(const std::string& what, const std::string& error, int status);

// One request; `reply` is the parsed reply, `line` its text. Returns -1
// when the daemon answered ok, else the exit status (after printing the
// error as Fail does): 1 for an error reply, 2 for a connection problem or
// a reply that is no JSON object.
int Call(const RoundtripFn& roundtrip, const std::string& what, const nlohmann::json& request,
         nlohmann::json* reply, std::string* line);

}  // namespace ftl::ctl
