// The command table and the commands (commands.h). Over 600 lines on
// purpose: one table, and one short function per Redis command, which
// share the argument checks and the transaction view (docs/decisions.md,
// "Files over 600 lines" and "Issue 23").

#include "resp/commands.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "ftl/kv.h"
#include "resp/match.h"

namespace ftl::resp {
namespace {

// ---------------------------------------------------------------------------
// The transaction view: what one command (or one MULTI/EXEC) reads and
// writes. Writes gather in one batch, applied by Commit; in a MULTI, reads
// see the transaction's own earlier writes.

class Txn {
 public:
  Txn(KvStore* store, bool overlay) : store_(store), overlay_(overlay) {}

  // The store (null: a numbered database never written, read as empty).
  KvStore* store() const { return store_; }

  absl::StatusOr<std::optional<std::string>> Get(std::string_view key) {
    if (overlay_) {
      auto it = pending_.find(std::string(key));
      if (it != pending_.end()) return it->second;
    }
    if (store_ == nullptr || key.empty() || key.size() > kMaxKeyBytes) return std::nullopt;
    absl::StatusOr<std::string> v = store_->Get(key);
    if (absl::IsNotFound(v.status())) return std::nullopt;
    if (!v.ok()) return v.status();
    return std::optional<std::string>(std::move(*v));
  }
  void Put(std::string_view key, std::string_view value) {
    batch_.Put(key, value);
    if (overlay_) pending_[std::string(key)] = std::string(value);
  }
  void Delete(std::string_view key) {
    batch_.Delete(key);
    if (overlay_) pending_[std::string(key)] = std::nullopt;
  }
  size_t pending_ops() const { return batch_.size(); }
  size_t pending_bytes() const { return batch_.bytes(); }
  // Writes made outside the batch (FLUSHDB's chunks, Modify).
  void MarkWritten() { wrote_ = true; }
  // The store, if a command may change it directly: nothing is pending
  // and no transaction reads its own writes.
  KvStore* direct() const { return overlay_ || batch_.size() > 0 ? nullptr : store_; }
  bool wrote() const { return wrote_ || batch_.size() > 0; }

  // Applies the batch, unsynced (the connection waits for durability).
  absl::Status Commit() {
    if (batch_.size() == 0) return absl::OkStatus();
    return store_->Write(batch_, KvWriteOptions{.sync = false});
  }

 private:
  KvStore* store_;
  bool overlay_;
  KvWriteBatch batch_;
  std::map<std::string, std::optional<std::string>> pending_;
  bool wrote_ = false;
};

// ---------------------------------------------------------------------------
// The table.

enum Flags : uint32_t {
  kWrite = 1,       // changes the database
  kRead = 2,        // reads the database
  kNoDb = 4,        // needs no database
  kNoMulti = 8,     // refused inside MULTI
  kTxnControl = 16,  // MULTI, EXEC, DISCARD, WATCH, UNWATCH: run, never queued
  kQuick = 32        // may run on the connection's strand (IsQuick): reads of
                    // a few keys, and writes of a few keys, which apply
                    // unsynced and wait for durability asynchronously
};

struct Call {
  const CommandEnv& env;
  Session& session;
  const Argv& argv;
  std::string& out;
  Txn* txn;            // null for kNoDb commands
  Outcome* outcome;    // EXEC's: what the transaction's reply waits for
};

using Handler = void (*)(Call&);

struct Spec {
  std::string_view name;
  int arity;  // > 0: exactly; < 0: at least -arity (the name counts)
  uint32_t flags;
  int first_key, last_key, step;
  Handler fn;
};

void Err(Call& c, std::string_view text) { AppendError(&c.out, text); }
void Ok(Call& c) { AppendSimple(&c.out, "OK"); }
// The null of the session's protocol ("$-1" or RESP3's "_").
void Null(Call& c) { AppendNull(&c.out, c.session.proto); }

std::string Lower(std::string_view s) { return absl::AsciiStrToLower(std::string(s)); }

// A status from the store as a Redis error text.
std::string StatusError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kResourceExhausted:
      return absl::StrCat("OOM ", s.message());
    case absl::StatusCode::kFailedPrecondition:
      return absl::StrCat(s.message().find("read-only") != std::string_view::npos ? "READONLY "
                                                                                  : "ERR ",
                          s.message());
    case absl::StatusCode::kInvalidArgument:
      return absl::StrCat("ERR ", s.message());
    default:
      return absl::StrCat("ERR ", absl::StatusCodeToString(s.code()), ": ", s.message());
  }
}

// Checks a key and value about to be written; appends the error if bad.
bool CheckWrite(Call& c, std::string_view key, std::string_view value) {
  if (key.empty()) {
    Err(c, "ERR empty keys are not supported by ftld (keys are 1 to 1024 bytes)");
    return false;
  }
  if (key.size() > kMaxKeyBytes) {
    Err(c, absl::StrCat("ERR key of ", key.size(), " bytes: ftld keys are at most ", kMaxKeyBytes,
                        " bytes"));
    return false;
  }
  if (value.size() > kMaxValueBytes) {
    Err(c, absl::StrCat("ERR value of ", value.size(), " bytes: ftld values are at most ",
                        kMaxValueBytes, " bytes"));
    return false;
  }
  return true;
}

// Reads `key` through the transaction; appends the error if reading failed.
bool Read(Call& c, std::string_view key, std::optional<std::string>* out) {
  auto v = c.txn->Get(key);
  if (!v.ok()) {
    Err(c, StatusError(v.status()));
    return false;
  }
  *out = std::move(*v);
  return true;
}

// --- connection and server commands ---------------------------------------

void Ping(Call& c) {
  if (c.argv.size() > 2) return Err(c, "ERR wrong number of arguments for 'ping' command");
  if (c.argv.size() == 2) return AppendBulk(&c.out, c.argv[1]);
  AppendSimple(&c.out, "PONG");
}

void Echo(Call& c) { AppendBulk(&c.out, c.argv[1]); }

void Quit(Call& c) {
  c.session.quit = true;
  Ok(c);
}

void Select(Call& c) {
  auto db = c.env.databases->Resolve(c.argv[1]);
  if (!db.ok()) return Err(c, std::string(db.status().message()));
  c.session.db = std::move(*db);
  Ok(c);
}

void Auth(Call& c) {
  Err(c, "ERR AUTH <password> called without any password configured for the default user. "
         "Are you sure your configuration is correct?");
}

// HELLO [2|3 [SETNAME name]]: switches the connection's reply protocol
// (none given: keeps it) and describes the server, as a map in RESP3.
void Hello(Call& c) {
  Proto proto = c.session.proto;
  if (c.argv.size() >= 2) {
    int64_t v = 0;
    if (!ParseInt64(c.argv[1], &v)) {
      return Err(c, "ERR Protocol version is not an integer or out of range");
    }
    if (v != 2 && v != 3) {
      return Err(c, "NOPROTO unsupported protocol version (ftld speaks RESP2 and RESP3)");
    }
    proto = v == 3 ? Proto::kResp3 : Proto::kResp2;
    for (size_t i = 2; i < c.argv.size(); ++i) {
      std::string opt = Lower(c.argv[i]);
      if (opt == "setname" && i + 1 < c.argv.size()) {
        c.session.name = c.argv[++i];
      } else if (opt == "auth" && i + 2 < c.argv.size()) {
        return Auth(c);
      } else {
        return Err(c, absl::StrCat("ERR Syntax error in HELLO option '", c.argv[i], "'"));
      }
    }
  }
  c.session.proto = proto;  // this reply is in the new protocol already, as Redis's
  AppendMapHeader(&c.out, 7, proto);
  AppendBulk(&c.out, "server");
  AppendBulk(&c.out, "ftld");
  AppendBulk(&c.out, "version");
  AppendBulk(&c.out, "7.0.0");
  AppendBulk(&c.out, "proto");
  AppendInteger(&c.out, int64_t(proto));
  AppendBulk(&c.out, "id");
  AppendInteger(&c.out, int64_t(c.session.id));
  AppendBulk(&c.out, "mode");
  AppendBulk(&c.out, "standalone");
  AppendBulk(&c.out, "role");
  AppendBulk(&c.out, "master");
  AppendBulk(&c.out, "modules");
  AppendArrayHeader(&c.out, 0);
}

void Client(Call& c) {
  std::string sub = Lower(c.argv[1]);
  if (sub == "setname" && c.argv.size() == 3) {
    if (c.argv[2].find_first_of(" \n") != std::string::npos) {
      return Err(c, "ERR Client names cannot contain spaces, newlines or special characters.");
    }
    c.session.name = c.argv[2];
    return Ok(c);
  }
  if (sub == "getname" && c.argv.size() == 2) {
    if (c.session.name.empty()) return Null(c);
    return AppendBulk(&c.out, c.session.name);
  }
  if (sub == "id" && c.argv.size() == 2) return AppendInteger(&c.out, int64_t(c.session.id));
  if (sub == "setinfo" && c.argv.size() == 4) return Ok(c);
  Err(c, absl::StrCat("ERR unknown subcommand or wrong number of arguments for 'client|",
                      c.argv[1], "' (ftld: SETNAME, GETNAME, ID, SETINFO)"));
}

void Config(Call& c) {
  std::string sub = Lower(c.argv[1]);
  if (sub == "get" && c.argv.size() >= 3) {
    // Enough for tools that print the server's persistence settings
    // (redis-benchmark asks for "save" and "appendonly").
    std::vector<std::pair<std::string, std::string>> params = {
        {"save", ""},
        {"appendonly", "no"},
        {"appendfsync", FsyncName(c.env.fsync)},
        {"databases", absl::StrCat(c.env.databases->numbered())},
        {"maxclients", absl::StrCat(c.env.max_clients)},
        {"port", absl::StrCat(c.env.tcp_port)},
        {"proto-max-bulk-len", absl::StrCat(kMaxBulkBytes)},
        {"client-query-buffer-limit", absl::StrCat(kMaxRequestBytes)},
    };
    std::vector<std::pair<std::string, std::string>> hits;
    for (size_t i = 2; i < c.argv.size(); ++i) {
      std::string pattern = Lower(c.argv[i]);
      for (const auto& p : params) {
        if (GlobMatch(pattern, p.first) &&
            std::find(hits.begin(), hits.end(), p) == hits.end()) {
          hits.push_back(p);
        }
      }
    }
    AppendMapHeader(&c.out, hits.size(), c.session.proto);
    for (const auto& [k, v] : hits) {
      AppendBulk(&c.out, k);
      AppendBulk(&c.out, v);
    }
    return;
  }
  if (sub == "resetstat" && c.argv.size() == 2) return Ok(c);
  Err(c, absl::StrCat("ERR CONFIG ", c.argv[1],
                      " is not supported by ftld (CONFIG GET only; settings are ftld's flags)"));
}

void CommandCmd(Call& c);  // below the table
void Info(Call& c);
void Exec(Call& c);

void Multi(Call& c) {
  if (c.session.in_multi) return Err(c, "ERR MULTI calls can not be nested");
  c.session.in_multi = true;
  c.session.multi_failed = false;
  c.session.queued.clear();
  Ok(c);
}

void Discard(Call& c) {
  if (!c.session.in_multi) return Err(c, "ERR DISCARD without MULTI");
  c.session.in_multi = false;
  c.session.multi_failed = false;
  c.session.queued.clear();
  Ok(c);
}

void Watch(Call& c) {
  Err(c, "ERR WATCH is not supported by ftld (MULTI/EXEC is atomic on its own)");
}

void Unwatch(Call& c) { Ok(c); }

// --- string commands -------------------------------------------------------

void Get(Call& c) {
  std::optional<std::string> v;
  if (!Read(c, c.argv[1], &v)) return;
  if (!v) return Null(c);
  AppendBulk(&c.out, *v);
}

void Set(Call& c) {
  bool nx = false, xx = false, get = false;
  for (size_t i = 3; i < c.argv.size(); ++i) {
    std::string opt = Lower(c.argv[i]);
    if (opt == "nx" && !xx) {
      nx = true;
    } else if (opt == "xx" && !nx) {
      xx = true;
    } else if (opt == "get") {
      get = true;
    } else if (opt == "keepttl") {
      // No key has a time to live, so there is none to keep.
    } else if (opt == "ex" || opt == "px" || opt == "exat" || opt == "pxat") {
      return Err(c, "ERR ftld does not support key expiry (EX, PX, EXAT, PXAT)");
    } else {
      return Err(c, "ERR syntax error");
    }
  }
  const std::string& key = c.argv[1];
  const std::string& value = c.argv[2];
  if (!CheckWrite(c, key, value)) return;
  std::optional<std::string> old;
  if ((nx || xx || get) && !Read(c, key, &old)) return;
  bool write = !(nx && old) && !(xx && !old);
  if (write) c.txn->Put(key, value);
  if (get) {
    if (old) return AppendBulk(&c.out, *old);
    return Null(c);
  }
  if (!write) return Null(c);
  Ok(c);
}

void SetNx(Call& c) {
  if (!CheckWrite(c, c.argv[1], c.argv[2])) return;
  std::optional<std::string> old;
  if (!Read(c, c.argv[1], &old)) return;
  if (old) return AppendInteger(&c.out, 0);
  c.txn->Put(c.argv[1], c.argv[2]);
  AppendInteger(&c.out, 1);
}

void GetDel(Call& c) {
  std::optional<std::string> old;
  if (!Read(c, c.argv[1], &old)) return;
  if (!old) return Null(c);
  c.txn->Delete(c.argv[1]);
  AppendBulk(&c.out, *old);
}

void Del(Call& c) {
  std::set<std::string_view> gone;
  int64_t n = 0;
  for (size_t i = 1; i < c.argv.size(); ++i) {
    if (gone.count(c.argv[i])) continue;
    std::optional<std::string> v;
    if (!Read(c, c.argv[i], &v)) return;
    if (!v) continue;
    gone.insert(c.argv[i]);
    c.txn->Delete(c.argv[i]);
    ++n;
  }
  if (c.txn->pending_ops() > kMaxBatchOps) {
    return Err(c, absl::StrCat("ERR DEL of more than ", kMaxBatchOps, " keys: ftld applies one "
                               "command as one batch of at most ", kMaxBatchOps, " changes"));
  }
  AppendInteger(&c.out, n);
}

void Exists(Call& c) {
  int64_t n = 0;
  for (size_t i = 1; i < c.argv.size(); ++i) {
    std::optional<std::string> v;
    if (!Read(c, c.argv[i], &v)) return;
    n += v ? 1 : 0;
  }
  AppendInteger(&c.out, n);
}

void Type(Call& c) {
  std::optional<std::string> v;
  if (!Read(c, c.argv[1], &v)) return;
  AppendSimple(&c.out, v ? "string" : "none");
}

void Ttl(Call& c) {
  std::optional<std::string> v;
  if (!Read(c, c.argv[1], &v)) return;
  AppendInteger(&c.out, v ? -1 : -2);
}

void MGet(Call& c) {
  std::string body;
  for (size_t i = 1; i < c.argv.size(); ++i) {
    std::optional<std::string> v;
    if (!Read(c, c.argv[i], &v)) return;
    if (v) {
      AppendBulk(&body, *v);
    } else {
      AppendNull(&body, c.session.proto);
    }
    if (body.size() > kMaxReplyBytes) {
      return Err(c, absl::StrCat("ERR the reply would exceed ", kMaxReplyBytes,
                                 " bytes: ask for fewer keys"));
    }
  }
  AppendArrayHeader(&c.out, c.argv.size() - 1);
  c.out.append(body);
}

// MSET / MSETNX: pairs of key value; one batch.
bool MSetPairs(Call& c) {
  if (c.argv.size() % 2 != 1) {
    Err(c, absl::StrCat("ERR wrong number of arguments for '", Lower(c.argv[0]), "' command"));
    return false;
  }
  size_t pairs = (c.argv.size() - 1) / 2;
  size_t bytes = 0;
  for (size_t i = 1; i < c.argv.size(); i += 2) {
    if (!CheckWrite(c, c.argv[i], c.argv[i + 1])) return false;
    bytes += c.argv[i].size() + c.argv[i + 1].size();
  }
  if (pairs + c.txn->pending_ops() > kMaxBatchOps ||
      bytes + c.txn->pending_bytes() > kMaxBatchBytes) {
    Err(c, absl::StrCat("ERR ", Lower(c.argv[0]), " of ", pairs, " keys and ", bytes,
                        " bytes: ftld applies it as one atomic batch of at most ", kMaxBatchOps,
                        " keys and ", kMaxBatchBytes, " bytes"));
    return false;
  }
  return true;
}

void MSet(Call& c) {
  if (!MSetPairs(c)) return;
  for (size_t i = 1; i < c.argv.size(); i += 2) c.txn->Put(c.argv[i], c.argv[i + 1]);
  Ok(c);
}

void MSetNx(Call& c) {
  if (!MSetPairs(c)) return;
  for (size_t i = 1; i < c.argv.size(); i += 2) {
    std::optional<std::string> v;
    if (!Read(c, c.argv[i], &v)) return;
    if (v) return AppendInteger(&c.out, 0);
  }
  for (size_t i = 1; i < c.argv.size(); i += 2) c.txn->Put(c.argv[i], c.argv[i + 1]);
  AppendInteger(&c.out, 1);
}

// `old` (absent: 0) plus `delta`, or the error Redis gives.
absl::StatusOr<int64_t> Incremented(std::optional<std::string_view> old, int64_t delta) {
  int64_t v = 0;
  if (old && !ParseInt64(*old, &v))
    return absl::InvalidArgumentError("value is not an integer or out of range");
  if ((delta > 0 && v > std::numeric_limits<int64_t>::max() - delta) ||
      (delta < 0 && v < std::numeric_limits<int64_t>::min() - delta)) {
    return absl::InvalidArgumentError("increment or decrement would overflow");
  }
  return v + delta;
}

// Adds `delta` to the counter `key` of `store` in one search of the tree
// (KvStore::Modify): the new value in *result, or the error (nothing changed).
absl::Status ModifyCounter(KvStore& store, std::string_view key, int64_t delta, int64_t* result) {
  return store.Modify(
      key, [&](std::optional<std::string_view> old) -> absl::StatusOr<std::optional<std::string>> {
        absl::StatusOr<int64_t> v = Incremented(old, delta);
        if (!v.ok()) return v.status();
        *result = *v;
        return std::optional<std::string>(absl::StrCat(*v));
      });
}

void IncrBy(Call& c, int64_t delta) {
  const std::string& key = c.argv[1];
  if (!CheckWrite(c, key, "")) return;
  if (KvStore* store = c.txn->direct()) {
    int64_t result = 0;
    absl::Status s = ModifyCounter(*store, key, delta, &result);
    if (!s.ok()) return Err(c, StatusError(s));
    c.txn->MarkWritten();
    return AppendInteger(&c.out, result);
  }
  std::optional<std::string> old;
  if (!Read(c, key, &old)) return;
  absl::StatusOr<int64_t> v = Incremented(old, delta);
  if (!v.ok()) return Err(c, StatusError(v.status()));
  c.txn->Put(key, absl::StrCat(*v));
  AppendInteger(&c.out, *v);
}

void Incr(Call& c) { IncrBy(c, 1); }
void Decr(Call& c) { IncrBy(c, -1); }

void IncrByCmd(Call& c) {
  int64_t d = 0;
  if (!ParseInt64(c.argv[2], &d)) return Err(c, "ERR value is not an integer or out of range");
  IncrBy(c, d);
}

void DecrByCmd(Call& c) {
  int64_t d = 0;
  if (!ParseInt64(c.argv[2], &d)) return Err(c, "ERR value is not an integer or out of range");
  if (d == std::numeric_limits<int64_t>::min()) return Err(c, "ERR decrement would overflow");
  IncrBy(c, -d);
}

void Append(Call& c) {
  const std::string& key = c.argv[1];
  if (!CheckWrite(c, key, "")) return;
  std::optional<std::string> old;
  if (!Read(c, key, &old)) return;
  std::string v = old ? std::move(*old) : std::string();
  if (v.size() + c.argv[2].size() > kMaxValueBytes) {
    return Err(c, absl::StrCat("ERR string exceeds maximum allowed size (", kMaxValueBytes,
                               " bytes in ftld)"));
  }
  v += c.argv[2];
  c.txn->Put(key, v);
  AppendInteger(&c.out, int64_t(v.size()));
}

void StrLen(Call& c) {
  std::optional<std::string> v;
  if (!Read(c, c.argv[1], &v)) return;
  AppendInteger(&c.out, v ? int64_t(v->size()) : 0);
}

// --- keyspace commands -----------------------------------------------------

// Calls fn(key) for every key in [from, to) ("" as to: the end), reading
// `chunk` entries at a time; stops when fn returns false. Error: the store's.
template <typename Fn>
absl::Status ForEachKey(KvStore* store, std::string from, const std::string& to, size_t chunk,
                        Fn fn) {
  if (store == nullptr) return absl::OkStatus();
  for (;;) {
    auto r = store->Scan(from, to, chunk);
    if (!r.ok()) return r.status();
    for (auto& [key, value] : *r) {
      if (!fn(key)) return absl::OkStatus();
    }
    if (r->size() < chunk) return absl::OkStatus();
    from = r->back().first;
    from.push_back('\0');  // the smallest key after it
  }
}

void Scan(Call& c) {
  const std::string& ref = c.session.db->ref();
  std::string from;
  if (c.argv[1] != "0") {
    int64_t id = 0;
    if (!ParseInt64(c.argv[1], &id) || id < 0) return Err(c, "ERR invalid cursor");
    auto key = c.env.cursors->Get(uint64_t(id), ref);
    if (!key.ok()) return Err(c, std::string(key.status().message()));
    from = std::move(*key);
  }
  std::string pattern = "*";
  int64_t count = 10;
  bool strings = true;
  for (size_t i = 2; i < c.argv.size(); ++i) {
    std::string opt = Lower(c.argv[i]);
    if (i + 1 >= c.argv.size()) return Err(c, "ERR syntax error");
    if (opt == "match") {
      pattern = c.argv[++i];
    } else if (opt == "count") {
      if (!ParseInt64(c.argv[++i], &count)) {
        return Err(c, "ERR value is not an integer or out of range");
      }
      if (count < 1) return Err(c, "ERR syntax error");
    } else if (opt == "type") {
      strings = Lower(c.argv[++i]) == "string";
    } else {
      return Err(c, "ERR syntax error");
    }
  }
  count = std::min(count, kMaxScanCount);
  std::string prefix = LiteralPrefix(pattern);
  std::string lo = std::max(from, prefix), hi = PrefixEnd(prefix);
  std::vector<std::string> keys;
  std::string next;
  if (KvStore* store = c.txn->store()) {
    auto r = store->Scan(lo, hi, size_t(count) + 1);
    if (!r.ok()) return Err(c, StatusError(r.status()));
    for (size_t i = 0; i < r->size(); ++i) {
      if (i == size_t(count)) {
        next = (*r)[i].first;
        break;
      }
      if (strings && GlobMatch(pattern, (*r)[i].first)) keys.push_back(std::move((*r)[i].first));
    }
  }
  uint64_t cursor = next.empty() ? 0 : c.env.cursors->Put(ref, next);
  AppendArrayHeader(&c.out, 2);
  AppendBulk(&c.out, absl::StrCat(cursor));
  AppendArrayHeader(&c.out, keys.size());
  for (const std::string& k : keys) AppendBulk(&c.out, k);
}

void Keys(Call& c) {
  const std::string& pattern = c.argv[1];
  std::string prefix = LiteralPrefix(pattern);
  std::vector<std::string> keys;
  size_t bytes = 0;
  bool too_many = false;
  absl::Status s = ForEachKey(c.txn->store(), prefix, PrefixEnd(prefix), 256,
                              [&](const std::string& key) {
                                if (!GlobMatch(pattern, key)) return true;
                                if (keys.size() >= kMaxKeysReply || bytes > kMaxReplyBytes) {
                                  too_many = true;
                                  return false;
                                }
                                bytes += key.size() + 16;
                                keys.push_back(key);
                                return true;
                              });
  if (!s.ok()) return Err(c, StatusError(s));
  if (too_many) {
    return Err(c, absl::StrCat("ERR KEYS matches more than ", kMaxKeysReply, " keys or ",
                               kMaxReplyBytes, " bytes: use SCAN"));
  }
  AppendArrayHeader(&c.out, keys.size());
  for (const std::string& k : keys) AppendBulk(&c.out, k);
}

void DbSize(Call& c) {
  int64_t n = 0;
  absl::Status s = ForEachKey(c.txn->store(), "", "", 256, [&](const std::string&) {
    ++n;
    return true;
  });
  if (!s.ok()) return Err(c, StatusError(s));
  AppendInteger(&c.out, n);
}

void FlushDb(Call& c) {
  if (c.argv.size() > 2 ||
      (c.argv.size() == 2 && Lower(c.argv[1]) != "sync" && Lower(c.argv[1]) != "async")) {
    return Err(c, "ERR syntax error");
  }
  KvStore* store = c.txn->store();
  if (store == nullptr) return Ok(c);
  // Chunks of one batch each: not atomic as a whole (a crash may leave a
  // prefix of the keys deleted; README, "Redis protocol").
  constexpr size_t kChunk = 256;
  std::string from;
  for (;;) {
    auto r = store->Scan(from, "", kChunk);
    if (!r.ok()) return Err(c, StatusError(r.status()));
    if (r->empty()) break;
    KvWriteBatch b;
    for (const auto& [key, value] : *r) b.Delete(key);
    if (absl::Status s = store->Write(b, KvWriteOptions{.sync = false}); !s.ok()) {
      c.txn->MarkWritten();
      return Err(c, StatusError(s));
    }
    c.txn->MarkWritten();
    if (r->size() < kChunk) break;
    from = r->back().first;
    from.push_back('\0');
  }
  Ok(c);
}

constexpr Spec kSpecs[] = {
    // name, arity, flags, first key, last key, step
    {"append", 3, kWrite | kQuick, 1, 1, 1, Append},
    {"auth", -2, kNoDb, 0, 0, 0, Auth},
    {"client", -2, kNoDb, 0, 0, 0, Client},
    {"command", -1, kNoDb, 0, 0, 0, CommandCmd},
    {"config", -2, kNoDb, 0, 0, 0, Config},
    {"dbsize", 1, kRead | kNoMulti, 0, 0, 0, DbSize},
    {"decr", 2, kWrite | kQuick, 1, 1, 1, Decr},
    {"decrby", 3, kWrite | kQuick, 1, 1, 1, DecrByCmd},
    {"del", -2, kWrite | kQuick, 1, -1, 1, Del},
    {"discard", 1, kNoDb | kTxnControl, 0, 0, 0, Discard},
    {"echo", 2, kNoDb | kQuick, 0, 0, 0, Echo},
    {"exec", 1, kNoDb | kTxnControl, 0, 0, 0, Exec},
    {"exists", -2, kRead | kQuick, 1, -1, 1, Exists},
    {"flushdb", -1, kWrite | kNoMulti, 0, 0, 0, FlushDb},
    {"get", 2, kRead | kQuick, 1, 1, 1, Get},
    {"getdel", 2, kWrite | kQuick, 1, 1, 1, GetDel},
    {"hello", -1, kNoDb | kNoMulti, 0, 0, 0, Hello},
    {"incr", 2, kWrite | kQuick, 1, 1, 1, Incr},
    {"incrby", 3, kWrite | kQuick, 1, 1, 1, IncrByCmd},
    {"info", -1, kNoDb | kNoMulti, 0, 0, 0, Info},
    {"keys", 2, kRead | kNoMulti, 0, 0, 0, Keys},
    {"mget", -2, kRead | kQuick, 1, -1, 1, MGet},
    {"mset", -3, kWrite | kQuick, 1, -1, 2, MSet},
    {"msetnx", -3, kWrite | kQuick, 1, -1, 2, MSetNx},
    {"multi", 1, kNoDb | kTxnControl, 0, 0, 0, Multi},
    {"ping", -1, kNoDb | kQuick, 0, 0, 0, Ping},
    {"pttl", 2, kRead | kQuick, 1, 1, 1, Ttl},
    {"quit", -1, kNoDb, 0, 0, 0, Quit},
    {"scan", -2, kRead | kNoMulti, 0, 0, 0, Scan},
    {"select", 2, kNoDb | kNoMulti, 0, 0, 0, Select},
    {"set", -3, kWrite | kQuick, 1, 1, 1, Set},
    {"setnx", 3, kWrite | kQuick, 1, 1, 1, SetNx},
    {"strlen", 2, kRead | kQuick, 1, 1, 1, StrLen},
    {"ttl", 2, kRead | kQuick, 1, 1, 1, Ttl},
    {"type", 2, kRead | kQuick, 1, 1, 1, Type},
    {"unwatch", 1, kNoDb | kTxnControl, 0, 0, 0, Unwatch},
    {"watch", -2, kNoDb | kTxnControl, 1, -1, 1, Watch},
};

// kSpecs is in name order: Find searches it by halves.
constexpr bool SpecsSorted() {
  for (size_t i = 1; i < std::size(kSpecs); ++i) {
    if (!(kSpecs[i - 1].name < kSpecs[i].name)) return false;
  }
  return true;
}
static_assert(SpecsSorted(), "kSpecs must be in name order");

// The command named `name` in any case, or null. Lowers the name into a
// buffer on the stack: run once or twice per request, it allocates nothing.
const Spec* Find(std::string_view name) {
  constexpr size_t kLongestName = 16;
  if (name.empty() || name.size() > kLongestName) return nullptr;
  char buf[kLongestName];
  for (size_t i = 0; i < name.size(); ++i) buf[i] = absl::ascii_tolower(static_cast<unsigned char>(name[i]));
  const std::string_view lower(buf, name.size());
  const Spec* end = std::end(kSpecs);
  const Spec* it = std::lower_bound(std::begin(kSpecs), end, lower,
                                    [](const Spec& s, std::string_view n) { return s.name < n; });
  return it != end && it->name == lower ? it : nullptr;
}

// One command's entry of COMMAND and COMMAND INFO: the six fields of
// Redis 6 (Redis 7 has four more), the flags a set in RESP3 as in Redis.
void AppendCommandInfo(std::string* out, const Spec& s, Proto proto) {
  std::vector<const char*> flags;
  if (s.flags & kWrite) flags.push_back("write");
  if (s.flags & kRead) flags.push_back("readonly");
  if (s.flags & kNoDb) flags.push_back("fast");
  AppendArrayHeader(out, 6);
  AppendBulk(out, s.name);
  AppendInteger(out, s.arity);
  AppendSetHeader(out, flags.size(), proto);
  for (const char* f : flags) AppendSimple(out, f);
  AppendInteger(out, s.first_key);
  AppendInteger(out, s.last_key);
  AppendInteger(out, s.step);
}

void CommandCmd(Call& c) {
  std::string sub = c.argv.size() > 1 ? Lower(c.argv[1]) : "";
  if (sub.empty()) {
    AppendArrayHeader(&c.out, std::size(kSpecs));
    for (const Spec& s : kSpecs) AppendCommandInfo(&c.out, s, c.session.proto);
    return;
  }
  if (sub == "count") return AppendInteger(&c.out, int64_t(std::size(kSpecs)));
  if (sub == "info") {
    AppendArrayHeader(&c.out, c.argv.size() - 2);
    for (size_t i = 2; i < c.argv.size(); ++i) {
      if (const Spec* s = Find(c.argv[i])) {
        AppendCommandInfo(&c.out, *s, c.session.proto);
      } else {
        AppendNullArray(&c.out, c.session.proto);
      }
    }
    return;
  }
  if (sub == "list") {
    AppendArrayHeader(&c.out, std::size(kSpecs));
    for (const Spec& s : kSpecs) AppendBulk(&c.out, s.name);
    return;
  }
  // COMMAND DOCS: no documentation (an empty map); redis-cli then uses its
  // own help.
  if (sub == "docs") return AppendMapHeader(&c.out, 0, c.session.proto);
  Err(c, absl::StrCat("ERR unknown subcommand '", c.argv[1],
                      "'. Try COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND LIST, COMMAND DOCS."));
}

// --- INFO -------------------------------------------------------------------

void InfoLine(std::string* s, std::string_view k, const auto& v) {
  absl::StrAppend(s, std::string(k), ":", v, "\r\n");
}

void Info(Call& c) {
  std::set<std::string> want;
  for (size_t i = 1; i < c.argv.size(); ++i) want.insert(Lower(c.argv[i]));
  bool all = want.empty() || want.count("all") || want.count("everything") || want.count("default");
  auto on = [&](const char* section) { return all || want.count(section) > 0; };
  const CommandEnv& e = c.env;
  const ServerCounters& n = *e.counters;
  std::string s;
  if (on("server")) {
    auto up = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                               e.started);
    s += "# Server\r\n";
    InfoLine(&s, "redis_version", "7.0.0");
    InfoLine(&s, "ftld_server", "ftld key-value datasets over RESP2 and RESP3 (issue 23)");
    InfoLine(&s, "redis_mode", "standalone");
    InfoLine(&s, "process_id", int64_t(::getpid()));
    InfoLine(&s, "tcp_port", e.tcp_port);
    InfoLine(&s, "unix_socket", e.unix_path);
    InfoLine(&s, "uptime_in_seconds", int64_t(up.count()));
    InfoLine(&s, "uptime_in_days", int64_t(up.count() / 86400));
    s += "\r\n";
  }
  if (on("clients")) {
    s += "# Clients\r\n";
    InfoLine(&s, "connected_clients", n.connections_active.load());
    InfoLine(&s, "maxclients", e.max_clients);
    InfoLine(&s, "client_query_buffer_limit", kMaxRequestBytes);
    s += "\r\n";
  }
  if (on("persistence")) {
    const CommitCounters& cc = e.databases->counters();
    s += "# Persistence\r\n";
    InfoLine(&s, "loading", 0);
    InfoLine(&s, "aof_enabled", 0);
    InfoLine(&s, "ftld_kv_fsync", FsyncName(e.fsync));
    InfoLine(&s, "ftld_flushes", cc.flushes.load());
    InfoLine(&s, "ftld_flush_errors", cc.flush_errors.load());
    InfoLine(&s, "ftld_flushed_writes", cc.flushed_writes.load());
    s += "\r\n";
  }
  if (on("stats")) {
    s += "# Stats\r\n";
    InfoLine(&s, "total_connections_received", n.connections_total.load());
    InfoLine(&s, "total_commands_processed", n.commands.load());
    InfoLine(&s, "total_net_input_bytes", n.net_input_bytes.load());
    InfoLine(&s, "total_net_output_bytes", n.net_output_bytes.load());
    InfoLine(&s, "rejected_connections", n.rejected_connections.load());
    InfoLine(&s, "total_error_replies", n.error_replies.load());
    InfoLine(&s, "ftld_protocol_errors", n.protocol_errors.load());
    s += "\r\n";
  }
  registry::KvRegistry* kv = e.databases->registry();
  if (on("ipl")) {
    // The in-page logging counters of the selected database's store
    // (include/ftl/kv.h, KvStats; docs/kv.md).
    s += "# Ipl\r\n";
    InfoLine(&s, "db", c.session.db->ref());
    absl::Status st = kv->Use(c.session.db->ref(), [&](KvStore& store) {
      KvStats k = store.Stats();
      InfoLine(&s, "geometry", store.geometry().ToString());
      InfoLine(&s, "page_reads", k.page_reads);
      InfoLine(&s, "log_reads", k.log_reads);
      InfoLine(&s, "page_writes", k.page_writes);
      InfoLine(&s, "log_sector_writes", k.log_sector_writes);
      InfoLine(&s, "log_block_writes", k.log_block_writes);
      InfoLine(&s, "unit_merges", k.unit_merges);
      InfoLine(&s, "bombs", k.bombs);
      InfoLine(&s, "buffer_hits", k.buffer_hits);
      InfoLine(&s, "buffer_misses", k.buffer_misses);
      InfoLine(&s, "evictions", k.evictions);
      InfoLine(&s, "flushes", k.flushes);
      InfoLine(&s, "scratch_flushes", k.scratch_flushes);
      InfoLine(&s, "synced_writes", k.synced_writes);
      InfoLine(&s, "blob_writes", k.blob_writes);
      InfoLine(&s, "media_write_bytes", k.media_write_bytes);
      InfoLine(&s, "pages", k.pages);
      InfoLine(&s, "buffer_pages", k.buffer_pages);
      InfoLine(&s, "tree_height", k.tree_height);
      return absl::OkStatus();
    });
    if (!st.ok()) InfoLine(&s, "error", std::string(st.message()));
    s += "\r\n";
  }
  if (on("keyspace")) {
    // Counted by reading the keys: O(keys) (README, "Redis protocol").
    s += "# Keyspace\r\n";
    for (const DatasetInfo& d : kv->pool()->ListDatasets()) {
      if (d.kind != DatasetKind::kKv) continue;
      int64_t keys = 0;
      absl::Status st = kv->Use(d.name, [&](KvStore& store) {
        return ForEachKey(&store, "", "", 256, [&](const std::string&) {
          ++keys;
          return true;
        });
      });
      if (!st.ok() || keys == 0) continue;
      InfoLine(&s, d.name, absl::StrCat("keys=", keys, ",expires=0,avg_ttl=0"));
    }
    s += "\r\n";
  }
  AppendVerbatim(&c.out, s, c.session.proto);  // RESP3: "=" len "txt:...", as Redis's
}

// --- running a request -------------------------------------------------------

std::string ReadOnlyError(const CommandEnv& env, const Database& db) {
  if (env.read_only) return "READONLY ftld runs with --read-only: every database is read-only";
  std::string base = db.ref().substr(0, db.ref().find('@'));
  return absl::StrCat("READONLY database '", db.ref(), "' is a snapshot: write to ", base);
}

bool IsWrite(const Spec& s) { return (s.flags & kWrite) != 0; }

// Runs `specs`/`argvs` (one command, or EXEC's queue) on the session's
// database under its exec lock: each reply appended to *out, the writes
// applied as one batch. Returns the batch's error (then *out is to be
// dropped) and fills *outcome.
absl::Status RunOnDatabase(const CommandEnv& env, Session& session,
                           const std::vector<const Spec*>& specs, const std::vector<const Argv*>& argvs,
                           bool transaction, std::string* out, Outcome* outcome) {
  Database& db = *session.db;
  bool writes = std::any_of(specs.begin(), specs.end(), [](const Spec* s) { return IsWrite(*s); });
  bool refuse_writes = db.read_only() || env.read_only;
  absl::MutexLock lock(&db.exec_mu());
  uint64_t seq = 0;
  bool wrote = false;
  auto run = [&](KvStore* store) -> absl::Status {
    out->clear();
    Txn txn(store, transaction);
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& spec = *specs[i];
      if (IsWrite(spec) && refuse_writes) {
        AppendError(out, ReadOnlyError(env, db));
        continue;
      }
      Call call{env, session, *argvs[i], *out, (spec.flags & kNoDb) ? nullptr : &txn, nullptr};
      spec.fn(call);
    }
    if (absl::Status s = txn.Commit(); !s.ok()) return s;
    if (txn.wrote()) {
      db.exec_mu().AssertHeld();  // taken above; the lambda is analysed alone
      seq = db.NoteWrite();
      wrote = true;
    }
    return absl::OkStatus();
  };
  registry::KvRegistry* kv = env.databases->registry();
  absl::Status s = kv->Use(db.ref(), [&](KvStore& store) { return run(&store); });
  if (absl::IsNotFound(s) && db.numbered()) {
    // A numbered database that was never written: created by its first
    // write, read as empty until then.
    if (writes && !refuse_writes) {
      s = env.databases->CreateNumbered(db);
      if (s.ok()) s = kv->Use(db.ref(), [&](KvStore& store) { return run(&store); });
    } else {
      s = run(nullptr);
    }
  }
  outcome->db = session.db;
  outcome->wrote = wrote;
  // With --kv-fsync always no reply leaves before what it read or wrote is
  // durable: a reader of another client's unsynced write waits too.
  if (env.fsync == Fsync::kAlways) outcome->seq = std::max(seq, db.applied());
  return s;
}

void Exec(Call& c) {
  Session& s = c.session;
  if (!s.in_multi) return Err(c, "ERR EXEC without MULTI");
  std::vector<Argv> queued = std::move(s.queued);
  bool failed = s.multi_failed;
  s.in_multi = false;
  s.multi_failed = false;
  s.queued.clear();
  if (failed) return Err(c, "EXECABORT Transaction discarded because of previous errors.");
  std::vector<const Spec*> specs;
  std::vector<const Argv*> argvs;
  for (const Argv& a : queued) {
    specs.push_back(Find(a[0]));
    argvs.push_back(&a);
  }
  std::string body;
  absl::Status st = RunOnDatabase(c.env, s, specs, argvs, /*transaction=*/true, &body,
                                  c.outcome);
  if (!st.ok()) {
    return Err(c, absl::StrCat("EXECABORT nothing of the transaction was applied: ",
                               StatusError(st)));
  }
  if (body.size() > kMaxReplyBytes) {
    // Applied already; only the reply is too large to hold.
    return Err(c, absl::StrCat("ERR the transaction was applied but its reply exceeds ",
                               kMaxReplyBytes, " bytes"));
  }
  AppendArrayHeader(&c.out, queued.size());
  c.out.append(body);
}

}  // namespace

void Prefetch(const CommandEnv& env, const Session& session, const std::deque<Argv>& requests) {
  if (!session.db || session.in_multi) return;
  constexpr size_t kMaxKeys = 64;
  std::array<std::string_view, kMaxKeys> keys;  // (no allocation per batch)
  size_t n = 0;
  for (const Argv& argv : requests) {
    if (argv.empty()) break;
    const Spec* spec = Find(argv[0]);
    if (spec == nullptr || !(spec->flags & kQuick) || (spec->flags & kNoDb) || spec->first_key <= 0) break;
    const int last = spec->last_key < 0 ? int(argv.size()) + spec->last_key : spec->last_key;
    for (int i = spec->first_key; i <= last && i < int(argv.size()) && n < kMaxKeys;
         i += std::max(spec->step, 1))
      keys[n++] = argv[size_t(i)];
    if (n >= kMaxKeys) break;
  }
  if (n < 2) return;
  (void)env.databases->registry()->Use(session.db->ref(), [&](KvStore& store) {
    store.Prefetch(std::span<const std::string_view>(keys.data(), n));
    return absl::OkStatus();
  });
}

size_t ExecuteGets(const CommandEnv& env, Session& session, const std::deque<Argv>& requests,
                   size_t max_reply_bytes, std::string* reply, Outcome* outcome) {
  if (!session.db || session.in_multi) return 0;
  constexpr size_t kMaxKeys = 64;
  std::array<std::string_view, kMaxKeys> keys;  // (no allocation per batch)
  size_t n = 0;
  for (const Argv& argv : requests) {
    if (n == kMaxKeys || argv.size() != 2 || argv[0].size() != 3) break;
    const Spec* spec = Find(argv[0]);
    if (spec == nullptr || spec->fn != &Get) break;
    keys[n++] = argv[1];
  }
  if (n < 2) return 0;
  Database& db = *session.db;
  const size_t start = reply->size();
  size_t done = 0;
  auto answer = [&](size_t i, std::optional<std::string_view> v) {
    if (v) AppendBulk(reply, *v); else AppendNull(reply, session.proto);
    done = i + 1;
    return reply->size() - start < max_reply_bytes;
  };
  absl::Status s;
  {
    absl::MutexLock lock(&db.exec_mu());
    s = env.databases->registry()->Use(db.ref(), [&](KvStore& store) {
      return store.GetMany(std::span<const std::string_view>(keys.data(), n), answer);
    });
    if (absl::IsNotFound(s) && db.numbered() && done == 0) {
      // A numbered database never written: read as empty (RunOnDatabase).
      for (size_t i = 0; i < n; ++i) AppendNull(reply, session.proto);
      done = n;
      s = absl::OkStatus();
    }
  }
  if (!s.ok()) {
    // The key after the answered ones failed: its request's reply.
    AppendError(reply, StatusError(s));
    env.counters->error_replies.fetch_add(1, std::memory_order_relaxed);
    ++done;
  }
  env.counters->commands.fetch_add(done, std::memory_order_relaxed);
  outcome->db = session.db;
  outcome->wrote = false;
  if (env.fsync == Fsync::kAlways) outcome->seq = db.applied();
  return done;
}

size_t ExecuteCounters(const CommandEnv& env, Session& session, const std::deque<Argv>& requests,
                       std::string* reply, Outcome* outcome) {
  if (!session.db || session.in_multi || session.db->read_only() || env.read_only) return 0;
  constexpr size_t kMaxKeys = 64;
  std::array<std::string_view, kMaxKeys> keys;  // (no allocation per batch)
  std::array<int64_t, kMaxKeys> deltas;
  size_t n = 0;
  for (const Argv& argv : requests) {
    if (n == kMaxKeys || argv.size() < 2 || argv.size() > 3) break;
    const Spec* spec = Find(argv[0]);
    if (spec == nullptr || argv.size() != size_t(spec->arity)) break;
    int64_t d = 0;
    if (spec->fn == &Incr) {
      d = 1;
    } else if (spec->fn == &Decr) {
      d = -1;
    } else if (spec->fn == &IncrByCmd || spec->fn == &DecrByCmd) {
      // A bad increment is left to the request's own run (its error).
      if (!ParseInt64(argv[2], &d) || d == std::numeric_limits<int64_t>::min()) break;
      if (spec->fn == &DecrByCmd) d = -d;
    } else {
      break;
    }
    if (argv[1].empty() || argv[1].size() > kMaxKeyBytes) break;
    keys[n] = argv[1];
    deltas[n++] = d;
  }
  if (n < 2) return 0;
  // Room for every reply first (an integer reply is at most 23 bytes, and
  // the out-of-memory error below), so no reply to an applied request fails
  // to be appended.
  reply->reserve(reply->size() + n * 24 + 64);
  Database& db = *session.db;
  size_t done = 0;
  uint64_t seq = 0;
  absl::Status s;
  {
    absl::MutexLock lock(&db.exec_mu());
    s = env.databases->registry()->Use(db.ref(), [&](KvStore& store) {
      store.Prefetch(std::span<const std::string_view>(keys.data(), n));
      for (size_t i = 0; i < n; ++i) {
        int64_t result = 0;
        absl::Status m;
        try {
          m = ModifyCounter(store, keys[i], deltas[i], &result);
        } catch (const std::bad_alloc&) {
          // As Connection::Execute answers a request that ran out of
          // memory; the requests before it were applied and answered.
          AppendError(reply, "OOM ftld could not allocate memory for this command");
          ++done;
          break;
        }
        // A request that fails changed nothing: its own run answers it.
        if (!m.ok()) break;
        AppendInteger(reply, result);
        ++done;
      }
      return absl::OkStatus();
    });
    if (done > 0) seq = db.NoteWrite();
  }
  // The store could not be used (a numbered database never written is
  // created by the first request's own run): nothing ran.
  if (!s.ok() || done == 0) return 0;
  env.counters->commands.fetch_add(done, std::memory_order_relaxed);
  outcome->db = session.db;
  outcome->wrote = true;
  if (env.fsync == Fsync::kAlways) outcome->seq = std::max(seq, db.applied());
  return done;
}

bool IsQuick(const Session& session, const Argv& argv) {
  if (session.in_multi || argv.empty()) return false;
  const Spec* spec = Find(argv[0]);
  return spec != nullptr && (spec->flags & kQuick) != 0;
}

const char* FsyncName(Fsync f) { return f == Fsync::kAlways ? "always" : "everysec"; }

std::string SyncFailedError(const absl::Status& s) {
  return absl::StrCat("ERR the write was applied but the flush that makes it durable failed "
                      "(a crash may lose it): ",
                      s.message());
}

void Execute(const CommandEnv& env, Session& session, const Argv& argv, std::string* reply,
             Outcome* outcome) {
  env.counters->commands.fetch_add(1, std::memory_order_relaxed);
  size_t start = reply->size();
  const Spec* spec = Find(argv[0]);
  auto fail = [&](std::string text) {
    if (session.in_multi) session.multi_failed = true;
    AppendError(reply, text);
  };
  if (spec == nullptr) {
    std::string text = absl::StrCat("ERR unknown command '", argv[0], "', with args beginning with:");
    for (size_t i = 1; i < argv.size() && i < 4; ++i) absl::StrAppend(&text, " '", argv[i], "'");
    fail(std::move(text));
  } else if ((spec->arity > 0 && argv.size() != size_t(spec->arity)) ||
             (spec->arity < 0 && argv.size() < size_t(-spec->arity))) {
    fail(absl::StrCat("ERR wrong number of arguments for '", std::string(spec->name), "' command"));
  } else if (session.in_multi && !(spec->flags & kTxnControl)) {
    if (spec->flags & kNoMulti) {
      fail(absl::StrCat("ERR '", std::string(spec->name), "' is not allowed inside MULTI on ftld"));
    } else if (session.queued.size() >= kMaxQueuedCommands) {
      fail(absl::StrCat("ERR a transaction holds at most ", kMaxQueuedCommands, " commands"));
    } else {
      session.queued.push_back(argv);
      AppendSimple(reply, "QUEUED");
    }
  } else if (std::string_view(spec->name) == "exec") {
    // EXEC runs the queue on the database like one command.
    Call call{env, session, argv, *reply, nullptr, outcome};
    Exec(call);
  } else if (spec->flags & kNoDb) {
    Call call{env, session, argv, *reply, nullptr, nullptr};
    spec->fn(call);
  } else {
    std::string body;
    absl::Status s = RunOnDatabase(env, session, {spec}, {&argv}, /*transaction=*/false, &body,
                                   outcome);
    if (s.ok()) {
      reply->append(body);
    } else {
      outcome->wrote = false;
      AppendError(reply, StatusError(s));
    }
  }
  if (reply->size() > start && (*reply)[start] == '-') {
    env.counters->error_replies.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace ftl::resp
