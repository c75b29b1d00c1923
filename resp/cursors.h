#pragma once
// SCAN cursors. Redis clients treat a cursor as a decimal integer (redis-py
// and redis-cli parse it), but an ordered store continues from a key, so
// the server keeps the key each cursor stands for: cursor 0 starts a scan,
// every reply names a new cursor for the next key (0 when the scan is
// done). The table keeps the newest kMaxCursors; an older or unknown cursor
// is an error ("ERR invalid cursor"), never a silent restart.
// Thread safety: every method is safe from any thread (one leaf lock).

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ftl::resp {

inline constexpr size_t kMaxCursors = 16384;

class CursorTable {
 public:
  // A new cursor (never 0) for continuing the scan of `db` at `key`.
  uint64_t Put(const std::string& db, const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // The key cursor `id` of `db` continues at; NotFound if it is unknown,
  // evicted, or belongs to another database.
  absl::StatusOr<std::string> Get(uint64_t id, const std::string& db) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::string db;
    std::string key;
  };
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> cursors_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace ftl::resp
