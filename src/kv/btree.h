#pragma once
// BTree: the ordered map of a store as a B+tree of pages held by a
// BufferPool (docs/kv.md, "The tree"). Page 0 is always the root: a root
// split moves its entries into two new pages, so no pointer to the root
// ever changes. Leaves hold keys with their values (inline when small,
// else a reference to a value kept outside pages); inner pages hold
// separators and children. Every change to an existing page is one log
// entry (BufferPool::Change); new pages are written whole. Deletes leave
// pages as they are (no merging of underfull pages).
//
// Thread safety: none; the store's lock guards it.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "kv/buffer_pool.h"

namespace ftl::kv {

class BTree {
 public:
  explicit BTree(BufferPool* buf) : buf_(buf) {}

  // The value of `key`, nullopt if absent.
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key);
  absl::StatusOr<bool> Contains(std::string_view key);
  // KvStore::Prefetch: for each key, the leaf of the buffered pages that
  // holds it is brought towards the cache in three passes over the keys
  // (its frame, then its search index, then the key's entry),
  // so that the keys' cache misses overlap. Pins, loads and changes
  // nothing.
  void Prefetch(std::span<const std::string_view> keys);
  // KvStore::GetMany in the tree: keys whose leaves are in the buffer
  // (through buffered inner pages) are answered in passes over up to 64
  // of them, as Prefetch brings them to the cache (frames, then search
  // indexes, then the entries found), with nothing pinned: nothing loads
  // or evicts meanwhile. A key whose way down leaves the buffer is read by
  // Get alone (it may load and evict), and the passes resume after it.
  absl::Status GetMany(std::span<const std::string_view> keys, KvStore::GetManyFn fn);
  // `blind`: in kPdl a put of an inline value to a leaf not in the buffer
  // is logged without reading the leaf (BufferPool::BlindChange).
  absl::Status Put(std::string_view key, std::string_view value, bool blind = false);
  // KvStore::Modify in the tree: one descent finds the key's leaf (or, in
  // kPdl, probes a leaf not in the buffer) for the read and the put that
  // follows. `*changing` turns true when the put begins: an error after
  // that may have left it half-applied.
  using ModifyFn = KvStore::ModifyFn;
  absl::Status Modify(std::string_view key, ModifyFn fn, bool blind, bool* changing);
  // Whether the key was there (nullopt: logged blind, unknown; only with
  // `blind`).
  absl::StatusOr<std::optional<bool>> Delete(std::string_view key, bool blind = false);
  // Keys in [from, to) ("" to: no end), at most `limit`, appended to out.
  absl::Status Scan(std::string_view from, std::string_view to, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out);

  // Whether a value is kept in its leaf (else in the blob area): its
  // entry fits a quarter page, so a page always holds four, and 2 KiB, so
  // a change is one record of a differential log block (kv_format.h).
  bool FitsInline(size_t key_bytes, size_t value_bytes) const;

 private:
  // Pinned frames from the root to the leaf of `key`; pos[i] is the child
  // position taken in path[i] (inner pages).
  struct Path {
    BufferPool* buf;
    // (Inline: a descent allocates nothing up to a height of 8.)
    absl::InlinedVector<Frame*, 8> frames;
    absl::InlinedVector<int, 8> pos;
    ~Path() {
      for (Frame* f : frames) buf->Unpin(f);
    }
  };
  // Where a read of a key ended: its value (nullopt: absent) and either
  // the path to its loaded leaf or, in kPdl, the leaf a probe answered
  // for without loading it.
  struct Located {
    Path path;                       // the descent
    Path full;                       // the whole way down, when needed
    Path* leaf_path = nullptr;       // ends at the key's leaf, if loaded
    std::optional<uint32_t> unread;  // else the leaf the probe read
    std::optional<std::string> value;
  };
  // One descent to `key` (Get, Modify): reads a leaf not in the buffer
  // where it lies (kPdl) unless it needs its in-page log.
  absl::Status Locate(std::string_view key, Located* at);
  absl::Status Descend(std::string_view key, Path* path);
  // The frame of `key`'s leaf (by the tree's height), if it and the inner
  // pages above it are buffered, else null; `*leaf_id` is the leaf's id
  // whenever the inner pages are buffered (else kNoPage). With
  // `count_hits` the inner pages count as hits, as Get counts them
  // (GetMany; Prefetch counts nothing); the leaf is neither read nor
  // counted (callers prefetch it first). Pins nothing.
  const Frame* BufferedLeaf(std::string_view key, uint32_t* leaf_id, bool count_hits);
  // Delete in the leaf `path` ends at.
  absl::StatusOr<std::optional<bool>> DeleteIn(std::string_view key, Path* path);
  // Descends the inner pages to the leaf of `key`; if that leaf could take
  // a change of `bytes` unread (BufferPool::CanChangeBlind), returns its id
  // and leaves `path` at its parent; otherwise loads it too (nullopt).
  absl::StatusOr<std::optional<uint32_t>> DescendBlind(std::string_view key, size_t bytes, Path* path);
  // As DescendBlind, for a read: stops above a leaf not in the buffer (kPdl).
  absl::StatusOr<std::optional<uint32_t>> DescendToRead(std::string_view key, Path* path);
  absl::StatusOr<std::optional<uint32_t>> DescendUntil(std::string_view key, Path* path,
                                                       const std::function<bool(uint32_t)>& stop);
  // Put in the leaf `path` ends at (the whole path from the root: a
  // split may climb it).
  absl::Status PutIn(std::string_view key, std::string_view value, Path* path);
  absl::Status SplitIfFull(Path* path, size_t level);
  absl::Status SplitRoot(Frame* root);
  absl::Status ScanPage(uint32_t id, std::string_view from, std::string_view to, size_t limit,
                        std::vector<std::pair<std::string, std::string>>* out, bool* done);
  absl::StatusOr<std::string> ValueOf(const Entry& e);
  absl::StatusOr<std::string> ValueOf(const Page::Ref& e);

  BufferPool* buf_;
};

}  // namespace ftl::kv
