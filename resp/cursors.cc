#include "resp/cursors.h"

namespace ftl::resp {

uint64_t CursorTable::Put(const std::string& db, const std::string& key) {
  absl::MutexLock l(&mu_);
  uint64_t id = next_++;
  cursors_[id] = Entry{db, key};
  while (cursors_.size() > kMaxCursors) cursors_.erase(cursors_.begin());
  return id;
}

absl::StatusOr<std::string> CursorTable::Get(uint64_t id, const std::string& db) const {
  absl::MutexLock l(&mu_);
  auto it = cursors_.find(id);
  if (it == cursors_.end() || it->second.db != db) return absl::NotFoundError("ERR invalid cursor");
  return it->second.key;
}

}  // namespace ftl::resp
