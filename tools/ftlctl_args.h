#pragma once
// ftlctl's parsing of a subcommand's arguments ("ACTION ARG... --opt VALUE
// --flag"), and its aligned tables, shared by its snapshot, range and kv
// verbs. Owns nothing.

#include <map>
#include <set>
#include <string>
#include <vector>

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

}  // namespace ftl::ctl
