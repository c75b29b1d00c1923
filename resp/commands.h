#pragma once
// The command table of the Redis-protocol server and what runs a request
// (README, "Redis protocol", lists the commands). Pure of sockets: a
// request (resp_protocol.h) goes in, its reply bytes come out, and an
// Outcome says what the reply must wait for.
//
// A command that touches a database runs under that database's exec lock
// (databases.h) inside KvRegistry::Use, so every command is atomic against
// the other clients of the database. Its writes are gathered in one
// KvWriteBatch and applied unsynced when it ends (MSET, DEL of many keys,
// FLUSHDB's chunks excepted: one batch each); MULTI ... EXEC gathers the
// writes of every queued command in one batch, so a transaction is all or
// nothing across a crash. Durability is the connection's business: it
// holds the reply until Outcome::seq is durable (--kv-fsync always).
//
// Errors are Redis's texts where Redis has one ("ERR wrong number of
// arguments for 'get' command", "ERR value is not an integer or out of
// range", "READONLY ...", "EXECABORT ..."), else "ERR" and what is wrong;
// a full pool is "OOM ...".
//
// Thread safety: Execute may run on any thread, for one Session at a time.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "resp/cursors.h"
#include "resp/databases.h"
#include "resp/resp_protocol.h"

namespace ftl::resp {

enum class Fsync { kAlways, kEverysec };
const char* FsyncName(Fsync f);

// Limits on what one request makes the daemon hold (README, "Redis protocol").
inline constexpr size_t kMaxQueuedCommands = 4096;   // MULTI
inline constexpr size_t kMaxReplyBytes = 16u << 20;  // one reply (MGET, KEYS, EXEC)
inline constexpr size_t kMaxKeysReply = 100000;      // KEYS
inline constexpr int64_t kMaxScanCount = 1000;       // SCAN COUNT

// Counters of one server, for INFO. Relaxed atomics.
struct ServerCounters {
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> connections_active{0};
  std::atomic<uint64_t> rejected_connections{0};  // over max_clients
  std::atomic<uint64_t> protocol_errors{0};       // clients closed for garbage
  std::atomic<uint64_t> commands{0};
  std::atomic<uint64_t> error_replies{0};
  std::atomic<uint64_t> net_input_bytes{0};
  std::atomic<uint64_t> net_output_bytes{0};
};

// What commands see of the server. Not owned; outlives every connection.
struct CommandEnv {
  Databases* databases = nullptr;
  CursorTable* cursors = nullptr;
  ServerCounters* counters = nullptr;
  Fsync fsync = Fsync::kAlways;
  bool read_only = false;  // ftld --read-only: every write is refused
  uint16_t tcp_port = 0;
  std::string unix_path;
  uint32_t max_clients = 0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// One client's state, owned by its connection and used by one thread at a time.
struct Session {
  uint64_t id = 0;
  std::string peer;
  std::string name;  // CLIENT SETNAME
  Proto proto = Proto::kResp2;  // HELLO 3 / HELLO 2: how its replies are encoded
  std::shared_ptr<Database> db;
  bool in_multi = false;
  bool multi_failed = false;  // a queued command was refused: EXEC aborts
  std::vector<Argv> queued;
  bool quit = false;  // QUIT: close after this reply
};

// What a request's reply must wait for before it is sent.
struct Outcome {
  std::shared_ptr<Database> db;  // the database it read or wrote, if any
  uint64_t seq = 0;              // db's writes up to seq must be durable (0: none)
  bool wrote = false;            // the reply acknowledges writes
};

// Runs one request (argv not empty) and appends its reply to *reply.
void Execute(const CommandEnv& env, Session& session, const Argv& argv, std::string* reply,
             Outcome* outcome);

// A hint before a run of requests: the keys of its leading quick requests
// on the session's database are prefetched together (KvStore::Prefetch),
// so that their cache misses overlap. Changes nothing.
void Prefetch(const CommandEnv& env, const Session& session, const std::deque<Argv>& requests);

// Runs the leading GETs of `requests` (when there are at least two, on
// the session's database, outside MULTI) together: one hold of the
// database's exec lock and of the store (KvStore::GetMany), their keys'
// cache misses overlapped, replies as Execute would append them, one by
// one, until the replies pass `max_reply_bytes`. Returns how many requests
// it answered (0: none; run them one by one); `outcome` covers them all
// (they read, so they wait for what they read to be durable with
// --kv-fsync always, as a single GET does).
size_t ExecuteGets(const CommandEnv& env, Session& session, const std::deque<Argv>& requests,
                   size_t max_reply_bytes, std::string* reply, Outcome* outcome);
// Runs the leading INCR, DECR, INCRBY and DECRBY requests of `requests`
// (when there are at least two, with valid keys and increments, on the
// session's database, outside MULTI, writable) together: one hold of the
// database's exec lock and of the registry, their keys prefetched together,
// each a KvStore::Modify, replies as Execute would append them. Stops
// before a request whose Modify fails (it changed nothing; its own run
// answers it). Returns how many requests it answered (0: none); `outcome`
// covers them all, and every one of them wrote.
size_t ExecuteCounters(const CommandEnv& env, Session& session, const std::deque<Argv>& requests,
                       std::string* reply, Outcome* outcome);
// Whether a request is a quick read that may run on the connection's
// strand instead of the worker pool (as NBD runs small reads inline):
// GET, MGET, EXISTS, STRLEN, TYPE, TTL, PTTL, PING, ECHO outside MULTI.
// They take the database's exec lock and the store's lock, and a buffer
// miss reads one page from the pool; nothing that writes, flushes, scans
// or opens a store.
bool IsQuick(const Session& session, const Argv& argv);

// The text of the reply that replaces a write's reply when the flush that
// should have made it durable failed.
std::string SyncFailedError(const absl::Status& s);

}  // namespace ftl::resp
