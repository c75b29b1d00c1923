#include "resp/resp_protocol.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "absl/strings/str_cat.h"

namespace ftl::resp {
namespace {

// Bytes a "$len" or "*count" line may take before its CRLF.
constexpr size_t kMaxCountLine = 32;
// What one finished argument costs besides its bytes (the std::string).
constexpr size_t kArgOverhead = 32;

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
// "<type><count>\r\n": the header of a bulk or an aggregate.
void AppendHeader(std::string* out, char type, size_t count) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, count);
  out->push_back(type);
  out->append(buf, end);
  out->append("\r\n");
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

}  // namespace

bool ParseInt64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  if (s[i] == '0' && s.size() > i + 1) return false;  // leading zeros
  if (s == "-0") return false;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return false;
  *out = v;
  return true;
}

Parser::Result Parser::Fail(std::string message) {
  error_ = std::move(message);
  args_.clear();
  held_ = 0;
  return Result::kProtocolError;
}

Parser::Result Parser::Parse(std::string_view in, size_t* used, Argv* out) {
  *used = 0;
  want_ = 1;
  size_t pos = 0;
  if (state_ == State::kStart) {
    if (in.empty()) return Result::kNeedMore;
    if (in[0] != '*') return ParseInline(in, used, out);
    size_t cr = in.find("\r\n");
    if (cr == std::string_view::npos) {
      if (in.size() > kMaxCountLine) return Fail("Protocol error: too big mbulk count string");
      return Result::kNeedMore;
    }
    int64_t count = 0;
    if (cr > kMaxCountLine || !ParseInt64(in.substr(1, cr - 1), &count) ||
        count > int64_t(kMaxArgs)) {
      return Fail("Protocol error: invalid multibulk length");
    }
    pos = cr + 2;
    if (count <= 0) {  // "*0" and "*-1": nothing to run
      *used = pos;
      out->clear();
      return Result::kRequest;
    }
    state_ = State::kArgs;
    remaining_ = count;
    args_.clear();
    args_.reserve(size_t(std::min<int64_t>(count, 1024)));
    held_ = 0;
  }
  while (remaining_ > 0) {
    std::string_view rest = in.substr(pos);
    if (rest.empty()) {
      *used = pos;
      return Result::kNeedMore;
    }
    if (rest[0] != '$') {
      std::string got = std::isprint(static_cast<unsigned char>(rest[0]))
                            ? std::string(1, rest[0])
                            : absl::StrCat("\\x", absl::Hex(uint8_t(rest[0]), absl::kZeroPad2));
      return Fail(absl::StrCat("Protocol error: expected '$', got '", got, "'"));
    }
    size_t cr = rest.find("\r\n");
    if (cr == std::string_view::npos) {
      if (rest.size() > kMaxCountLine) return Fail("Protocol error: too big bulk count string");
      *used = pos;
      return Result::kNeedMore;
    }
    int64_t len = 0;
    if (cr > kMaxCountLine || !ParseInt64(rest.substr(1, cr - 1), &len) || len < 0 ||
        uint64_t(len) > kMaxBulkBytes) {
      return Fail("Protocol error: invalid bulk length");
    }
    if (held_ + size_t(len) + kArgOverhead > kMaxRequestBytes) {
      return Fail(absl::StrCat("Protocol error: request larger than ", kMaxRequestBytes, " bytes"));
    }
    size_t total = cr + 2 + size_t(len) + 2;
    if (rest.size() < total) {
      want_ = total - rest.size();
      *used = pos;
      return Result::kNeedMore;
    }
    if (rest[cr + 2 + size_t(len)] != '\r' || rest[cr + 3 + size_t(len)] != '\n') {
      return Fail("Protocol error: bulk string not followed by CRLF");
    }
    args_.emplace_back(rest.substr(cr + 2, size_t(len)));
    held_ += size_t(len) + kArgOverhead;
    pos += total;
    --remaining_;
  }
  *out = std::move(args_);
  args_ = Argv();
  state_ = State::kStart;
  held_ = 0;
  *used = pos;
  return Result::kRequest;
}

Parser::Result Parser::ParseInline(std::string_view in, size_t* used, Argv* out) {
  size_t nl = in.find('\n');
  if (nl == std::string_view::npos) {
    if (in.size() > kMaxInlineBytes) return Fail("Protocol error: too big inline request");
    return Result::kNeedMore;
  }
  if (nl > kMaxInlineBytes) return Fail("Protocol error: too big inline request");
  std::string_view line = in.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  out->clear();
  if (!SplitInline(line, out)) return Fail("Protocol error: unbalanced quotes in request");
  *used = nl + 1;
  return Result::kRequest;
}

bool Parser::SplitInline(std::string_view line, Argv* out) {
  size_t i = 0, n = line.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  for (;;) {
    while (i < n && space(line[i])) ++i;
    if (i == n) return true;
    std::string word;
    bool in_double = false, in_single = false;
    for (;;) {
      if (in_double) {
        if (i == n) return false;
        char c = line[i];
        if (c == '\\' && i + 3 < n && line[i + 1] == 'x' && IsHex(line[i + 2]) && IsHex(line[i + 3])) {
          word.push_back(char(HexValue(line[i + 2]) * 16 + HexValue(line[i + 3])));
          i += 4;
        } else if (c == '\\' && i + 1 < n) {
          char e = line[i + 1];
          switch (e) {
            case 'n': word.push_back('\n'); break;
            case 'r': word.push_back('\r'); break;
            case 't': word.push_back('\t'); break;
            case 'b': word.push_back('\b'); break;
            case 'a': word.push_back('\a'); break;
            default: word.push_back(e); break;
          }
          i += 2;
        } else if (c == '"') {
          ++i;
          if (i < n && !space(line[i])) return false;  // "foo"bar
          break;
        } else {
          word.push_back(c);
          ++i;
        }
      } else if (in_single) {
        if (i == n) return false;
        char c = line[i];
        if (c == '\\' && i + 1 < n && line[i + 1] == '\'') {
          word.push_back('\'');
          i += 2;
        } else if (c == '\'') {
          ++i;
          if (i < n && !space(line[i])) return false;
          break;
        } else {
          word.push_back(c);
          ++i;
        }
      } else {
        if (i == n || space(line[i])) break;
        char c = line[i];
        if (c == '"' && word.empty()) {
          in_double = true;
        } else if (c == '\'' && word.empty()) {
          in_single = true;
        } else {
          word.push_back(c);
        }
        ++i;
      }
    }
    out->push_back(std::move(word));
  }
}

void AppendSimple(std::string* out, std::string_view text) {
  out->push_back('+');
  out->append(text);
  out->append("\r\n");
}

void AppendError(std::string* out, std::string_view error) {
  out->push_back('-');
  size_t start = out->size();
  out->append(error);
  std::replace_if(out->begin() + ptrdiff_t(start), out->end(),
                  [](char c) { return c == '\r' || c == '\n'; }, ' ');
  out->append("\r\n");
}

void AppendInteger(std::string* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out->push_back(':');
  out->append(buf, end);
  out->append("\r\n");
}

void AppendBulk(std::string* out, std::string_view bytes) {
  AppendHeader(out, '$', bytes.size());
  out->append(bytes);
  out->append("\r\n");
}

void AppendNull(std::string* out, Proto p) {
  out->append(p == Proto::kResp3 ? "_\r\n" : "$-1\r\n");
}

void AppendArrayHeader(std::string* out, size_t count) { AppendHeader(out, '*', count); }

void AppendNullArray(std::string* out, Proto p) {
  out->append(p == Proto::kResp3 ? "_\r\n" : "*-1\r\n");
}

void AppendMapHeader(std::string* out, size_t pairs, Proto p) {
  if (p == Proto::kResp3) return AppendHeader(out, '%', pairs);
  AppendHeader(out, '*', 2 * pairs);
}

void AppendSetHeader(std::string* out, size_t count, Proto p) {
  AppendHeader(out, p == Proto::kResp3 ? '~' : '*', count);
}

void AppendVerbatim(std::string* out, std::string_view text, Proto p) {
  if (p != Proto::kResp3) return AppendBulk(out, text);
  AppendHeader(out, '=', text.size() + 4);
  out->append("txt:");
  out->append(text);
  out->append("\r\n");
}

std::string EncodeRequest(const Argv& argv) {
  std::string out;
  AppendArrayHeader(&out, argv.size());
  for (const std::string& a : argv) AppendBulk(&out, a);
  return out;
}

}  // namespace ftl::resp
