#include "metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"

namespace ftl::metrics {
namespace {

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];  // the shortest text that reads back as v: "2.5e-05", "1795730023.441"
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

// HELP text escapes only backslash and newline.
std::string EscapeHelp(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Debian's abseil has its own string_view, which StrCat wants: join std ones here.
void Append(std::string* out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) out->append(p);
}

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  Append(&out, parts);
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Exposition::Family(std::string_view name, std::string_view type, std::string_view help) {
  Append(&out_, {"# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type, "\n"});
}

void Exposition::Line(std::string_view name, const Labels& labels, std::string_view value,
                      const std::pair<std::string_view, std::string>* extra) {
  out_.append(name);
  if (!labels.empty() || extra != nullptr) {
    out_ += '{';
    bool first = true;
    auto add = [&](std::string_view k, std::string_view v) {
      if (!first) out_ += ',';
      first = false;
      Append(&out_, {k, "=\"", EscapeLabelValue(v), "\""});
    };
    for (const auto& [k, v] : labels) add(k, v);
    if (extra != nullptr) add(extra->first, extra->second);
    out_ += '}';
  }
  Append(&out_, {" ", value, "\n"});
}

void Exposition::Sample(std::string_view name, const Labels& labels, double value) {
  Line(name, labels, FormatDouble(value));
}

void Exposition::Sample(std::string_view name, const Labels& labels, uint64_t value) {
  Line(name, labels, absl::StrCat(value));
}

void Exposition::Histogram(std::string_view name, const Labels& labels,
                           std::span<const uint64_t> counts, std::span<const uint64_t> bounds_ns,
                           double sum_seconds) {
  const std::string bucket = Cat({name, "_bucket"});
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    std::pair<std::string_view, std::string> le{
        "le", i < bounds_ns.size() ? FormatDouble(double(bounds_ns[i]) / 1e9) : "+Inf"};
    Line(bucket, labels, absl::StrCat(cumulative), &le);
  }
  Line(Cat({name, "_sum"}), labels, FormatDouble(sum_seconds));
  Line(Cat({name, "_count"}), labels, absl::StrCat(cumulative));
}

}  // namespace ftl::metrics
