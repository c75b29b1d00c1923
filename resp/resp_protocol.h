#pragma once
// The Redis serialization protocol, RESP2 and the RESP3 replies, without
// sockets: a resumable request parser with hard limits, and the reply
// encoders. The connection (resp/connection.h) strings them together.
// Requests are the same in both; a connection's replies are RESP2 until
// it sends HELLO 3 (and again after HELLO 2), as with redis-server 7
// (docs/decisions.md, "RESP3").
//
// Grammar (C: client, S: server; every line ends in CRLF):
//   request    C: multibulk | inline
//   multibulk  C: "*" count CRLF bulk{count}       count 1..kMaxArgs
//                                                 (<= 0: an empty request)
//   bulk       C: "$" len CRLF bytes[len] CRLF     len 0..kMaxBulkBytes
//   inline     C: words separated by spaces or tabs, up to LF (a CR before
//              it is dropped), at most kMaxInlineBytes; "..." and '...'
//              quote a word ("\n", "\xHH" and friends inside "...")
//   reply      S: "+" text CRLF                    simple string
//               | "-" PREFIX " " text CRLF         error (ERR, WRONGTYPE, ...)
//               | ":" int64 CRLF                   integer
//               | "$" len CRLF bytes CRLF | "$-1" CRLF   bulk | null
//               | "*" count CRLF reply{count} | "*-1" CRLF  array | null
//   reply3     S: reply, but "_" CRLF instead of "$-1" and "*-1"  (RESP3)
//               | "%" pairs CRLF (reply reply){pairs}  map, where RESP2
//                                                 has an array of 2*pairs
//               | "~" count CRLF reply{count}      set, where RESP2 has an array
//               | "=" len CRLF "txt:" text CRLF    verbatim string, where
//                                                 RESP2 has a bulk (len
//                                                 counts the "txt:")
//
// Limits (what one client can make the daemon hold while it parses): a
// request of at most kMaxArgs arguments, each at most kMaxBulkBytes, and
// at most kMaxRequestBytes in all (arguments plus 32 bytes each); an
// inline request of at most kMaxInlineBytes. Past a limit, or on any
// framing error, Parse returns a ProtocolError whose message is the text
// Redis sends ("Protocol error: invalid bulk length"); the connection
// sends it as "-ERR ..." and closes, as Redis does.
//
// Thread safety: none; one parser per connection.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ftl::resp {

inline constexpr size_t kMaxArgs = 65536;
inline constexpr size_t kMaxBulkBytes = 4u << 20;
inline constexpr size_t kMaxRequestBytes = 16u << 20;
inline constexpr size_t kMaxInlineBytes = 64u << 10;

using Argv = std::vector<std::string>;

class Parser {
 public:
  enum class Result {
    kRequest,        // *out holds one request (possibly empty: skip it)
    kNeedMore,       // everything given was consumed or kept; read more
    kProtocolError,  // error() says why; the stream cannot be resynced
  };

  // Parses from `in`; sets *used to the bytes consumed (the caller drops
  // them; an incomplete bulk's bytes are not consumed until it is whole,
  // partial arguments already parsed are kept here). `in` must start
  // where the last call's *used ended.
  Result Parse(std::string_view in, size_t* used, Argv* out);

  const std::string& error() const { return error_; }
  // Bytes held for the request being parsed (its finished arguments).
  size_t held_bytes() const { return held_; }
  // Bytes of input the parser waits for before it can go on (at least 1
  // when kNeedMore; used by the connection to size its reads).
  size_t want_bytes() const { return want_; }

 private:
  Result Fail(std::string message);
  Result ParseInline(std::string_view in, size_t* used, Argv* out);
  // Splits one inline line into words; false on unbalanced quotes.
  static bool SplitInline(std::string_view line, Argv* out);

  enum class State { kStart, kArgs };
  State state_ = State::kStart;
  int64_t remaining_ = 0;  // bulks still to come in this request
  Argv args_;              // finished bulks of this request
  size_t held_ = 0;
  size_t want_ = 1;
  std::string error_;
};

// The reply protocol of a connection: RESP2 until HELLO 3.
enum class Proto : uint8_t { kResp2 = 2, kResp3 = 3 };

// Reply encoders: each appends one reply (or an aggregate's header) to
// `out`. Those that take a Proto differ between RESP2 and RESP3.
void AppendSimple(std::string* out, std::string_view text);  // no CR/LF in text
// `error` is "PREFIX message" (e.g. "ERR syntax error"); CR/LF become spaces.
void AppendError(std::string* out, std::string_view error);
void AppendInteger(std::string* out, int64_t v);
void AppendBulk(std::string* out, std::string_view bytes);
void AppendNull(std::string* out, Proto p);  // "$-1" | "_"
void AppendArrayHeader(std::string* out, size_t count);
void AppendNullArray(std::string* out, Proto p);  // "*-1" | "_"
// A map of `pairs` key-value pairs (the 2*pairs replies follow).
void AppendMapHeader(std::string* out, size_t pairs, Proto p);  // "*" 2*pairs | "%" pairs
void AppendSetHeader(std::string* out, size_t count, Proto p);  // "*" | "~"
// Plain text (INFO's): a bulk, or a verbatim string of format "txt".
void AppendVerbatim(std::string* out, std::string_view text, Proto p);

// A request in wire form (tests and tools).
std::string EncodeRequest(const Argv& argv);

// Redis's string2ll: an optional '-', then digits without leading zeros
// (except "0"), no spaces or '+', within int64. False otherwise.
bool ParseInt64(std::string_view s, int64_t* out);

}  // namespace ftl::resp
