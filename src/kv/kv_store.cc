// KvStore: opening, the public calls, group commit (kv_store.h).

#include "kv/kv_store.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"
#include "ftl/tree_ref.h"

namespace ftl {

namespace {

constexpr uint64_t kDatasetBytes = 1ull << 40;  // thin: 1 TiB of addresses

absl::Status CheckKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > kMaxKeyBytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("key of %d bytes: at most %d", key.size(), kMaxKeyBytes));
  return absl::OkStatus();
}

absl::Status CheckValue(std::string_view value) {
  if (value.size() > kMaxValueBytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("value of %d bytes: at most %d", value.size(), kMaxValueBytes));
  return absl::OkStatus();
}

}  // namespace

const char* KvModeName(KvMode m) {
  switch (m) {
    case KvMode::kIpl: return "ipl";
    case KvMode::kIplMerge: return "ipl-merge";
    case KvMode::kInPlace: return "in-place";
    case KvMode::kPdl: return "pdl";
  }
  return "?";
}

std::optional<KvMode> ParseKvMode(std::string_view name) {
  for (KvMode m : {KvMode::kIpl, KvMode::kIplMerge, KvMode::kInPlace, KvMode::kPdl})
    if (name == KvModeName(m)) return m;
  return std::nullopt;
}

absl::Status KvStore::Format(Volume* volume, const KvGeometry& geo) {
  absl::StatusOr<kv::Layout> l = kv::Layout::Plan(geo, volume->size_bytes() / kv::kBlock);
  if (!l.ok()) return l.status();
  if (absl::Status s = volume->Trim(0, volume->size_bytes()); !s.ok()) return s;
  std::vector<std::byte> header = kv::EncodeHeader(*l);
  kv::PageImage root;
  root.type = kv::PageType::kLeaf;
  root.epoch = 1;
  std::vector<std::byte> page(l->geo.page_bytes);
  kv::EncodePage(root, page);
  std::vector<Volume::Piece> pieces = {{0, header},
                                       {uint64_t(l->PageLba(0)) * kv::kBlock, page}};
  return volume->WriteAtomic(pieces, true);
}

absl::Status KvStore::Create(Pool* pool, const std::string& name, const KvGeometry& geo) {
  if (absl::Status s = geo.Validate(); !s.ok()) return s;
  absl::StatusOr<Volume*> v = pool->CreateDataset(name, DatasetKind::kKv, kDatasetBytes);
  if (!v.ok()) return v.status();
  absl::Status s = Format(*v, geo);
  if (s.ok()) {
    absl::StatusOr<kv::Layout> l = kv::Layout::Plan(geo, (*v)->size_bytes() / kv::kBlock);
    s = pool->SetRangeAttr(name, uint64_t(l->scratch_base) * kv::kBlock,
                           uint64_t(l->scratch_blocks) * kv::kBlock, RangeAttr::kNonPersistent);
  }
  if (!s.ok()) (void)pool->DestroyDataset(name, true);
  return s;
}

absl::StatusOr<std::unique_ptr<KvStore>> KvStore::Open(Pool* pool, const std::string& ref,
                                                       const KvOptions& opts) {
  absl::StatusOr<TreeRef> r = TreeRef::Parse(ref);
  if (!r.ok()) return r.status();
  if (r->volume.empty()) return absl::InvalidArgumentError("name a key-value dataset");
  Volume* v = nullptr;
  if (r->is_snapshot()) {
    absl::StatusOr<Volume*> sv = pool->SnapshotVolume(r->volume, r->snapshot);
    if (!sv.ok()) return sv.status();
    v = *sv;
  } else {
    v = pool->GetVolume(r->volume);
    if (!v) return absl::NotFoundError("no dataset " + r->volume);
  }
  if (v->kind() != DatasetKind::kKv)
    return absl::FailedPreconditionError(ref + " is not a key-value dataset");
  KvOptions o = opts;
  if (o.max_atomic_bytes == 0) o.max_atomic_bytes = pool->geometry().max_atomic_bytes;
  return kv::KvStoreImpl::OpenOn(v, pool, r->volume, r->is_snapshot() || opts.read_only, o);
}

absl::Status KvStore::GetMany(std::span<const std::string_view> keys, GetManyFn fn) {
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<std::string_view> view;
    absl::StatusOr<std::string> v;
    if (CheckKey(keys[i]).ok()) {
      v = Get(keys[i]);
      if (v.ok()) view = *v;
      else if (!absl::IsNotFound(v.status())) return v.status();
    }
    if (!fn(i, view)) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvStore>> KvStore::Open(Volume* volume, const KvOptions& opts) {
  KvOptions o = opts;
  if (o.max_atomic_bytes == 0) o.max_atomic_bytes = 256 << 10;
  return kv::KvStoreImpl::OpenOn(volume, nullptr, "", opts.read_only || volume->read_only(), o);
}

}  // namespace ftl

namespace ftl::kv {

KvStoreImpl::KvStoreImpl(Volume* volume, Pool* pool, const std::string& name, const Layout& layout,
                         bool read_only, const KvOptions& opts)
    : volume_(volume),
      layout_(layout),
      read_only_(read_only),
      buf_(volume, layout, opts.mode, opts.buffer_pages),
      tree_(&buf_),
      flusher_(&buf_, pool, name, opts.max_atomic_bytes),
      mode_(opts.mode),
      diff_budget_(opts.diff_budget_bytes) {
  // Dirty blocks the buffer may gather before an unsynced flush: three
  // quarters of an atomic write, so that a flush stays one record (the
  // scratch path costs a sync and range moves; measured in bench/RESULTS.md,
  // "Key-value datasets").
  dirty_limit_ = std::max<uint64_t>(8, flusher_.max_atomic_blocks() * 3 / 4);
}

absl::StatusOr<std::unique_ptr<KvStore>> KvStoreImpl::OpenOn(Volume* volume, Pool* pool,
                                                             const std::string& name,
                                                             bool read_only, const KvOptions& opts) {
  std::vector<std::byte> block(kBlock);
  if (absl::Status s = volume->Read(0, block); !s.ok()) return s;
  absl::StatusOr<Layout> l = DecodeHeader(block);
  if (!l.ok()) {
    if (absl::IsNotFound(l.status()))
      return absl::FailedPreconditionError(volume->name() + " holds no key-value store");
    return l.status();
  }
  if (l->version < 2 && !read_only) {
    // A version 1 dataset (no differential log): read its root for the
    // blob area in use, then rewrite the header as version 2 with the
    // anchor and the log carved out of the blob area's unused end.
    uint32_t blob_used = 0;
    {
      std::unique_ptr<KvStoreImpl> old(new KvStoreImpl(volume, pool, name, *l, true, opts));
      absl::MutexLock lock(&old->mu_);
      if (absl::Status st = old->Start(); !st.ok()) return st;
      blob_used = old->buf_.meta().blob_next;
    }
    Layout up = *l;
    if (!up.CarveDiffLog(blob_used))
      return absl::FailedPreconditionError(
          volume->name() + ": a version 1 key-value dataset whose blob area has no room for the "
          "differential log of version 2; open it read-only and copy it");
    std::vector<std::byte> header = EncodeHeader(up);
    if (absl::Status st = volume->WriteAtomic({{Volume::Piece{0, header}}}, true); !st.ok()) return st;
    *l = up;
  }
  std::unique_ptr<KvStoreImpl> s(new KvStoreImpl(volume, pool, name, *l, read_only, opts));
  {
    absl::MutexLock lock(&s->mu_);
    if (absl::Status st = s->Start(); !st.ok()) return st;
  }
  if (opts.background_flush && !read_only)
    s->bg_thread_ = std::thread([p = s.get()] { p->BackgroundFlushes(); });
  return std::unique_ptr<KvStore>(std::move(s));
}

absl::Status KvStoreImpl::Start() {
  if (absl::Status s = buf_.LoadDiffs(); !s.ok()) return s;
  absl::StatusOr<Frame*> root = buf_.Get(0);  // next_page starts at 1
  if (!root.ok()) return root.status();
  buf_.meta() = (*root)->page.meta();
  buf_.Unpin(*root);
  if (read_only_ || mode_ == KvMode::kPdl || buf_.diffs().pages() == 0) return absl::OkStatus();
  // Another mode than kPdl keeps no differentials: write every page that
  // has one whole, in flushes of at most the dirty limit.
  return buf_.MergeAllDiffs(dirty_limit_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return FlushLocked(); });
}

KvStoreImpl::~KvStoreImpl() { (void)Close(); }

absl::Status KvStoreImpl::FlushLocked(bool frees) {
  // After the background flight: its completion must not wait for this
  // write's (both need mu_; this one holds it).
  AwaitBackgroundLocked();
  absl::StatusOr<FlushPlan> p = flusher_.Plan(op_seq_);
  if (!p.ok()) return p.status();
  absl::Status s = flusher_.Write(*p, false, frees);
  flusher_.Complete(*p, s);
  NoteFlush(s);
  return s;
}

void KvStoreImpl::AwaitBackgroundLocked() {
  mu_.Await(absl::Condition(+[](bool* busy) { return !*busy; }, &bg_busy_));
}

void KvStoreImpl::FlushFullLocked(bool frees) {
  if (bg_thread_.joinable() && !frees && !full_) {
    // One flight at a time; while it flies, the buffer may gather up to
    // seven eighths of an atomic write before this writer waits for it
    // (a plan above the atomic size would take the slower scratch path).
    if (bg_busy_) {
      if (buf_.Footprint() <= flusher_.max_atomic_blocks() * 7 / 8) return;
      AwaitBackgroundLocked();
      if (buf_.Footprint() <= dirty_limit_ && !buf_.over_capacity()) return;
    }
    absl::StatusOr<FlushPlan> p = flusher_.Plan(op_seq_);
    if (!p.ok()) return;  // as an inline flush's error: the next change tries again
    bg_plan_ = std::move(*p);
    bg_busy_ = true;
    bg_cv_.Signal();
    return;
  }
  // An error here is no error of the caller's change (it is applied; the
  // next flush tries again).
  if (absl::Status s = FlushLocked(); !s.ok() && frees && absl::IsResourceExhausted(s))
    (void)FlushLocked(true);
}

void KvStoreImpl::BackgroundFlushes() {
  mu_.Lock();
  for (;;) {
    while (!bg_plan_ && !bg_stop_) bg_cv_.Wait(&mu_);
    if (!bg_plan_) break;  // stopped, nothing in flight
    FlushPlan p = std::move(*bg_plan_);
    bg_plan_.reset();
    mu_.Unlock();
    absl::Status s = flusher_.Write(p, /*sync=*/false);
    mu_.Lock();
    flusher_.Complete(p, s);
    NoteFlush(s);
    bg_busy_ = false;
  }
  mu_.Unlock();
}

void KvStoreImpl::NoteFlush(const absl::Status& s) {
  if (s.ok()) full_ = false;
  else if (absl::IsResourceExhausted(s)) full_ = true;
}

absl::Status KvStoreImpl::SyncTo(uint64_t seq, bool frees) {
  // Two steps: the flush is written (one record, under flush_mu_, in plan
  // order), then the volume is synced without the lock, so the next flush
  // is written while this one's sync runs and their syncs overlap
  // (docs/kv.md, "Flushes").
  absl::Status s;
  bool as_freeing = false;
  uint64_t written = 0;  // what the sync below makes durable
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::MutexLock f(&flush_mu_);
    absl::StatusOr<FlushPlan> p;
    {
      absl::MutexLock l(&mu_);
      if (durable_seq_ >= seq) return absl::OkStatus();
      written = written_seq_;
      if (written >= seq) break;  // written already: its sync is all that is missing
      // After a background flight: a failed one is marked for rewriting
      // before this plan is made (else this plan is refused for it).
      AwaitBackgroundLocked();
      written = written_seq_;
      if (written >= seq) break;
      p = flusher_.Plan(op_seq_);
      if (!p.ok()) return p.status();
    }
    s = flusher_.Write(*p, /*sync=*/false, as_freeing);
    absl::MutexLock l(&mu_);
    flusher_.Complete(*p, s);
    NoteFlush(s);
    if (s.ok()) {
      written_seq_ = std::max(written_seq_, p->op_seq);
      written = written_seq_;
      break;
    }
    if (frees && !as_freeing && absl::IsResourceExhausted(s)) {
      as_freeing = true;  // a flush of deletes on a full pool: once more from the reserve
      continue;
    }
    if (!absl::IsAborted(s)) return s;  // Aborted: an earlier plan failed; plan again
  }
  if (!s.ok()) return s;
  // Every operation up to `seq` is in a record now; the sync shares one in
  // flight that covers it (log::Durability::SyncRecords).
  s = volume_->Flush();
  if (!s.ok()) return s;
  absl::MutexLock l(&mu_);
  durable_seq_ = std::max(durable_seq_, written);
  return absl::OkStatus();
}

absl::Status KvStoreImpl::ApplyLocked(const KvWriteBatch& batch) {
  // Everything that can fail for the caller is checked before the first
  // change, so a batch is applied whole or not at all.
  // Insert and Update are checked against the keys as the batch's earlier
  // operations leave them (only batches holding one pay for the map).
  bool checks = std::any_of(batch.ops().begin(), batch.ops().end(), [](const KvWriteBatch::Op& op) {
    return op.kind == KvWriteBatch::Kind::kInsert || op.kind == KvWriteBatch::Kind::kUpdate;
  });
  std::map<std::string_view, bool> present;  // keys the batch has touched
  for (const KvWriteBatch::Op& op : batch.ops()) {
    if (!checks) break;
    if (op.kind != KvWriteBatch::Kind::kInsert && op.kind != KvWriteBatch::Kind::kUpdate) {
      present[op.key] = op.kind != KvWriteBatch::Kind::kDelete;
      continue;
    }
    bool exists;
    if (auto it = present.find(op.key); it != present.end()) {
      exists = it->second;
    } else {
      absl::StatusOr<bool> c = tree_.Contains(op.key);
      if (!c.ok()) return c.status();
      exists = *c;
    }
    if (op.kind == KvWriteBatch::Kind::kInsert && exists)
      return absl::AlreadyExistsError("key exists");
    if (op.kind == KvWriteBatch::Kind::kUpdate && !exists) return absl::NotFoundError("no such key");
    present[op.key] = true;
  }
  uint64_t blob_need = 0;
  for (const KvWriteBatch::Op& op : batch.ops())
    if (op.kind != KvWriteBatch::Kind::kDelete && !tree_.FitsInline(op.key.size(), op.value.size()))
      blob_need += (op.value.size() + kBlock - 1) / kBlock + 1;
  if (absl::Status s = RoomLocked(batch.size(), blob_need); !s.ok()) return s;
  // kPdl: puts and deletes need not read their leaf (Insert and Update
  // were checked above, which read it).
  const bool blind = mode_ == KvMode::kPdl;
  for (const KvWriteBatch::Op& op : batch.ops()) {
    absl::Status s;
    if (op.kind == KvWriteBatch::Kind::kDelete) {
      s = tree_.Delete(op.key, blind).status();
    } else {
      s = tree_.Put(op.key, op.value, blind);
    }
    if (!s.ok()) {
      broken_ = absl::DataLossError(absl::StrFormat(
          "a change failed half-applied (%s); the store refuses writes until reopened",
          s.message()));
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status KvStoreImpl::RoomLocked(size_t ops, uint64_t blob_blocks) const {
  uint64_t need = uint64_t(buf_.meta().height + 2) * 2 * ops;
  if (buf_.meta().next_page + need > layout_.max_pages())
    return absl::ResourceExhaustedError("the dataset's pages are all in use");
  if (buf_.meta().blob_next + blob_blocks > layout_.blob_blocks)
    return absl::ResourceExhaustedError("the dataset's area for large values is used up");
  return absl::OkStatus();
}

absl::Status KvStoreImpl::WritableLocked() const {
  if (closed_) return absl::FailedPreconditionError("the store is closed");
  if (read_only_) return absl::FailedPreconditionError("the store is read-only");
  return broken_;
}

absl::Status KvStoreImpl::AdmitLocked(bool frees) {
  if (absl::Status s = WritableLocked(); !s.ok()) return s;
  if (full_) {
    // The last flush found the pool full: write what waits first, and
    // refuse this change (unapplied) while that still fails.
    absl::Status s = FlushLocked();
    if (!s.ok() && frees && absl::IsResourceExhausted(s)) s = FlushLocked(true);
    if (!s.ok())
      return absl::ResourceExhaustedError(
          absl::StrFormat("the pool is full; nothing of this change was applied (%s)", s.message()));
  }
  return absl::OkStatus();
}

uint64_t KvStoreImpl::AppliedLocked(bool sync, bool frees) {
  ++op_seq_;
  // Differentials that outgrew their budget are merged now (an error
  // leaves them as they are: the operation is applied, the next one tries
  // again, and a page that cannot be read fails its own readers).
  (void)buf_.MaintainDiffs(diff_budget_);
  // The buffer is full of dirty pages: write them (not synced).
  if (!sync && (buf_.over_capacity() || buf_.Footprint() > dirty_limit_)) FlushFullLocked(frees);
  if (sync) ++synced_writes_;
  return op_seq_;
}

absl::Status KvStoreImpl::Apply(const KvWriteBatch& batch, bool sync) {
  if (batch.size() > kMaxBatchOps)
    return absl::InvalidArgumentError(
        absl::StrFormat("a batch of %d operations: at most %d", batch.size(), kMaxBatchOps));
  if (batch.bytes() > kMaxBatchBytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("a batch of %d bytes: at most %d", batch.bytes(), kMaxBatchBytes));
  for (const KvWriteBatch::Op& op : batch.ops()) {
    if (absl::Status s = CheckKey(op.key); !s.ok()) return s;
    if (absl::Status s = CheckValue(op.value); !s.ok()) return s;
  }
  // Deletes free space: on a full pool their flushes may use the pool's
  // reserve for space-freeing writes (docs/kv.md, "Errors").
  const bool frees = std::all_of(batch.ops().begin(), batch.ops().end(), [](const KvWriteBatch::Op& op) {
    return op.kind == KvWriteBatch::Kind::kDelete;
  });
  uint64_t seq;
  {
    absl::MutexLock l(&mu_);
    if (batch.size() == 0) return WritableLocked();
    if (absl::Status s = AdmitLocked(frees); !s.ok()) return s;
    if (absl::Status s = ApplyLocked(batch); !s.ok()) return s;
    seq = AppliedLocked(sync, frees);
  }
  if (!sync) return absl::OkStatus();
  return SyncTo(seq, frees);
}

absl::Status KvStoreImpl::Modify(std::string_view key, ModifyFn fn, const KvWriteOptions& w) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  uint64_t seq;
  {
    absl::MutexLock l(&mu_);
    if (absl::Status s = AdmitLocked(/*frees=*/false); !s.ok()) return s;
    // The new value passes Put's checks before anything changes.
    auto checked = [&](std::optional<std::string_view> old) -> absl::StatusOr<std::optional<std::string>> {
      mu_.AssertHeld();  // taken above; the lambda is analysed alone
      absl::StatusOr<std::optional<std::string>> v = fn(old);
      if (!v.ok() || !v->has_value()) return v;
      if (absl::Status s = CheckValue(**v); !s.ok()) return s;
      const bool large = !tree_.FitsInline(key.size(), (*v)->size());
      if (absl::Status s = RoomLocked(1, large ? ((*v)->size() + kBlock - 1) / kBlock + 1 : 0); !s.ok())
        return s;
      return v;
    };
    bool changing = false;
    absl::Status s = tree_.Modify(key, checked, mode_ == KvMode::kPdl, &changing);
    if (!s.ok()) {
      if (changing)
        broken_ = absl::DataLossError(absl::StrFormat(
            "a change failed half-applied (%s); the store refuses writes until reopened", s.message()));
      return s;
    }
    if (!changing) return absl::OkStatus();  // `fn` left the key as it was
    seq = AppliedLocked(w.sync, /*frees=*/false);
  }
  if (!w.sync) return absl::OkStatus();
  return SyncTo(seq);
}

void KvStoreImpl::Prefetch(std::span<const std::string_view> keys) {
  if (keys.size() < 2 || !mu_.TryLock()) return;
  if (!closed_) tree_.Prefetch(keys);
  mu_.Unlock();
}

absl::Status KvStoreImpl::Put(std::string_view key, std::string_view value, const KvWriteOptions& w) {
  KvWriteBatch b;
  b.Put(key, value);
  return Apply(b, w.sync);
}

absl::Status KvStoreImpl::Insert(std::string_view key, std::string_view value,
                                 const KvWriteOptions& w) {
  KvWriteBatch b;
  b.Insert(key, value);
  return Apply(b, w.sync);
}

absl::Status KvStoreImpl::Update(std::string_view key, std::string_view value,
                                 const KvWriteOptions& w) {
  KvWriteBatch b;
  b.Update(key, value);
  return Apply(b, w.sync);
}

absl::Status KvStoreImpl::Delete(std::string_view key, const KvWriteOptions& w) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<bool> c = tree_.Contains(key);
    if (!c.ok()) return c.status();
    if (!*c) return absl::NotFoundError("no such key");
  }
  KvWriteBatch b;
  b.Delete(key);
  return Apply(b, w.sync);
}

absl::Status KvStoreImpl::Write(const KvWriteBatch& batch, const KvWriteOptions& w) {
  return Apply(batch, w.sync);
}

absl::StatusOr<std::string> KvStoreImpl::Get(std::string_view key) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  if (closed_) return absl::FailedPreconditionError("the store is closed");
  absl::StatusOr<std::optional<std::string>> v = tree_.Get(key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::NotFoundError("no such key");
  buf_.Trim();
  return std::move(**v);
}

absl::Status KvStoreImpl::GetMany(std::span<const std::string_view> keys, GetManyFn fn) {
  absl::MutexLock l(&mu_);
  if (closed_) return absl::FailedPreconditionError("the store is closed");
  absl::Status s = tree_.GetMany(keys, fn);
  buf_.Trim();
  return s;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvStoreImpl::Scan(
    std::string_view from, std::string_view to, size_t limit) {
  absl::MutexLock l(&mu_);
  if (closed_) return absl::FailedPreconditionError("the store is closed");
  std::vector<std::pair<std::string, std::string>> out;
  if (absl::Status s = tree_.Scan(from, to, limit, &out); !s.ok()) return s;
  buf_.Trim();
  return out;
}

namespace {

// Reads ahead a chunk of keys at a time through Scan.
class ChunkIterator : public KvIterator {
 public:
  explicit ChunkIterator(KvStore* store) : store_(store) {}
  void Seek(std::string_view key) override { Fill(std::string(key)); }
  void SeekToFirst() override { Fill(std::string()); }
  bool Valid() const override { return at_ < chunk_.size(); }
  void Next() override {
    if (++at_ < chunk_.size() || !more_) return;
    std::string next = chunk_.back().first;
    next.push_back('\0');  // the smallest key after it
    Fill(next);
  }
  const std::string& key() const override { return chunk_[at_].first; }
  const std::string& value() const override { return chunk_[at_].second; }
  absl::Status status() const override { return status_; }

 private:
  void Fill(const std::string& from) {
    chunk_.clear();
    at_ = 0;
    auto r = store_->Scan(from, "", kChunk);
    if (!r.ok()) {
      status_ = r.status();
      more_ = false;
      return;
    }
    chunk_ = std::move(*r);
    more_ = chunk_.size() == kChunk;
  }
  static constexpr size_t kChunk = 256;
  KvStore* store_;
  std::vector<std::pair<std::string, std::string>> chunk_;
  size_t at_ = 0;
  bool more_ = false;
  absl::Status status_;
};

}  // namespace

std::unique_ptr<KvIterator> KvStoreImpl::NewIterator() { return std::make_unique<ChunkIterator>(this); }

absl::Status KvStoreImpl::Flush() {
  uint64_t seq;
  {
    absl::MutexLock l(&mu_);
    if (closed_ || read_only_) return absl::OkStatus();
    if (!broken_.ok()) return broken_;
    seq = op_seq_;
    if (seq == durable_seq_) {
      if (buf_.dirty()) ++op_seq_, seq = op_seq_;  // unsynced meta only
      else return absl::OkStatus();
    }
  }
  return SyncTo(seq);
}

absl::Status KvStoreImpl::Close() {
  absl::Status s = Flush();
  {
    absl::MutexLock l(&mu_);
    closed_ = true;
    bg_stop_ = true;
    bg_cv_.Signal();
  }
  if (bg_thread_.joinable()) bg_thread_.join();
  return s;
}

KvStats KvStoreImpl::Stats() const {
  absl::MutexLock l(&mu_);
  KvStats s = buf_.stats();
  s.synced_writes = synced_writes_;
  s.tree_height = buf_.meta().height;
  s.pages = buf_.meta().next_page;
  s.buffer_pages = uint32_t(buf_.frame_count());
  s.diff_bytes = buf_.diffs().bytes();
  s.diff_pages = buf_.diffs().pages();
  return s;
}

}  // namespace ftl::kv
