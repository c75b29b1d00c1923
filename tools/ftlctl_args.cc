#include "tools/ftlctl_args.h"

#include <algorithm>
#include <iostream>

#include "control/control_protocol.h"

namespace ftl::ctl {

int Fail(const std::string& what, const std::string& error, int status) {
  std::cerr << "ftlctl: " << what << ": " << error << "\n";
  return status;
}

int Call(const RoundtripFn& roundtrip, const std::string& what, const nlohmann::json& request,
         nlohmann::json* reply, std::string* line) {
  std::string error;
  if (!roundtrip(request.dump(), line, &error)) return Fail(what, error, 2);
  *reply = nlohmann::json::parse(*line, nullptr, false);
  if (reply->is_discarded() || !reply->is_object()) {
    return Fail(what, "the daemon sent something that is not JSON: " + *line, 2);
  }
  if (!reply->value(control::kFieldOk, false)) {
    return Fail(what, reply->value(control::kFieldError, std::string("failed")), 1);
  }
  return -1;
}

bool ParseSubArgs(const std::vector<std::string>& args, const std::set<std::string>& value_opts,
                  const std::set<std::string>& flag_opts, SubArgs* out, std::string* error) {
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done) {
      out->pos.push_back(a);
    } else if (a == "--") {
      options_done = true;
    } else if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        has_value = true;
      }
      if (flag_opts.count(name)) {
        if (has_value) {
          *error = "--" + name + " takes no value";
          return false;
        }
        out->flags.insert(name);
      } else if (value_opts.count(name)) {
        if (!has_value) {
          if (i + 1 >= args.size()) {
            *error = "--" + name + " needs a value";
            return false;
          }
          value = args[++i];
        }
        out->opts[name] = value;
      } else {
        *error = "unknown option " + a + " for '" + out->action + "'";
        return false;
      }
    } else if (a == "-" || a.empty() || a[0] != '-') {
      out->pos.push_back(a);
    } else {
      *error = "unknown option " + a + " for '" + out->action + "'";
      return false;
    }
  }
  return true;
}


void PrintRows(const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) {
    std::cout << "(none)\n";
    return;
  }
  std::vector<size_t> width;
  for (const auto& h : header) width.push_back(h.size());
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  auto emit = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out += std::string(width[i] - line[i].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  emit(header);
  for (const auto& row : rows) emit(row);
}

}  // namespace ftl::ctl
