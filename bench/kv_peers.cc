// ftld's key-value store against the embedded stores users would pick
// instead (issue 21, "Benchmarks"): RocksDB, LevelDB and LMDB, one engine
// per process (so peak memory is the engine's own), each in its own
// subdirectory of --dir (one file system for all). bench/kv_compare.sh runs
// every engine, alternating their order, and tabulates the output.
//
//   kv_peers --engine ftld|rocksdb|leveldb|lmdb --dir /var/tmp/kvbench
//            [--mode nosync|sync] [--keys N] [--sync-ops M] [--scans S]
//            [--kv-mode ipl|merge|inplace|pdl] [--kv-buffer-pages P]
//            [--kv-diff-mib M] [--keep]
//
// Keys are 16 bytes ("%016llu" of an index), values 100 random bytes
// (incompressible). One thread; every write is its own operation (no
// batches), and LMDB gets one transaction per write.
//
// --mode nosync (writes not synced; see "Durability" below):
//   fillrandom  N puts of keys 0..N-1 in a random order, into an empty store
//   overwrite   N puts of uniformly random existing keys (update random)
//   readrandom  N gets of uniformly random existing keys (all must be found)
//   scan        S scans of 1000 keys each from a random existing key
// --mode sync (every write synced; M ops, default 20000, because a sync
// costs milliseconds): the store is first loaded with N keys unsynced
// ("load", reported but not a result), then
//   fillrandom  M synced puts of new keys N..N+M-1 in a random order
//   overwrite   M synced puts of random existing keys
//
// After each write phase the store is "settled" outside the timed part:
// ftld Flush(), LMDB mdb_env_sync; then the program waits
// until the process has written nothing for 1 s and RocksDB reports no
// running flush or compaction. A phase's bytes run from its start to the
// end of its settling; "total" covers the whole process including Close.
//
// Measurements, one "RESULT key=value ..." line per phase:
//   ops_s       ops / wall time of the timed loop
//   p50_us/p99_us  per-operation latency (a log histogram, ~2% buckets)
//   dev_mib     bytes the process sent towards the device: /proc/self/io
//               write_bytes - cancelled_write_bytes (counted when a page
//               of the page cache turns dirty, so rewriting a page that is
//               still dirty counts once; background threads included)
//   wa          dev bytes / user bytes (user bytes: puts x 116)
//   ftld_media_wa  ftld's own count (PoolStats media_write_bytes, log
//               headers, cleaning and checkpoints included) / user bytes
// and at the end peak RSS (VmHWM, which counts LMDB's mapped file pages),
// anonymous RSS at the end of the last phase, and the disk space the
// engine's directory holds.
//
// Durability: unsynced RocksDB and LevelDB writes reach the OS with each
// operation (their write-ahead log), so they survive a crash of the
// process; unsynced LMDB (MDB_NOSYNC) too. Unsynced ftld writes stay in the
// store's buffer until the next flush (include/ftl/kv.h): a crash of the
// process loses them. Synced writes are durable on return in every engine.

#include <dirent.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "leveldb/db.h"
#include "leveldb/options.h"
#include "leveldb/write_batch.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

#ifdef FTL_KV_PEERS_HAVE_FTLD
#include "ftl/kv.h"
#include "ftl/log.h"
#include "ftl/media.h"
#include "ftl/pool.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKeyBytes = 16;
constexpr size_t kValueBytes = 100;
constexpr size_t kScanKeys = 1000;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kv_peers: %s\n", what.c_str());
  std::exit(1);
}
void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

// ---- Process counters.

// Bytes this process sent towards the storage layer (see the header).
uint64_t DeviceWriteBytes() {
  std::ifstream in("/proc/self/io");
  std::string k;
  uint64_t v, write = 0, cancelled = 0;
  while (in >> k >> v) {
    if (k == "write_bytes:") write = v;
    if (k == "cancelled_write_bytes:") cancelled = v;
  }
  return write >= cancelled ? write - cancelled : 0;
}

// A field of /proc/self/status in KiB ("VmHWM", "RssAnon").
uint64_t StatusKiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
  }
  return 0;
}

// Bytes allocated to the files under `dir`.
uint64_t DiskBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += uint64_t(st.st_blocks) * 512;
    }
  }
  return total;
}

// Latencies in buckets of 1/32 of a power of two (~2.2% wide).
class Histogram {
 public:
  void Add(uint64_t ns) {
    size_t b = ns == 0 ? 0 : size_t(std::log2(double(ns)) * kPerOctave) + 1;
    if (b >= counts_.size()) b = counts_.size() - 1;
    ++counts_[b];
    ++n_;
  }
  // The q-quantile in microseconds (the middle of its bucket).
  double PctUs(double q) const {
    if (n_ == 0) return 0;
    uint64_t want = uint64_t(std::ceil(q * double(n_))), seen = 0;
    for (size_t b = 0; b < counts_.size(); ++b) {
      seen += counts_[b];
      if (seen >= want && counts_[b] > 0) {
        if (b == 0) return 0;
        return std::exp2((double(b - 1) + 0.5) / kPerOctave) / 1000.0;
      }
    }
    return 0;
  }

 private:
  static constexpr double kPerOctave = 32;
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(48 * 32 + 2);
  uint64_t n_ = 0;
};

// ---- Engines.

class Engine {
 public:
  virtual ~Engine() = default;
  virtual absl::Status Open(const std::string& dir) = 0;
  virtual absl::Status Put(std::string_view key, std::string_view value, bool sync) = 0;
  // NotFound if absent; `value` gets the value.
  virtual absl::Status Get(std::string_view key, std::string* value) = 0;
  // Reads up to `n` pairs from the first key >= `from`; returns the count
  // and adds the bytes seen to *bytes.
  virtual absl::StatusOr<size_t> Scan(std::string_view from, size_t n, uint64_t* bytes) = 0;
  // Makes the writes so far durable if the engine keeps them in memory
  // (ftld Flush, LMDB env sync); nothing for engines with a write-ahead log.
  virtual absl::Status Settle() { return absl::OkStatus(); }
  // True while the engine has background work running (RocksDB).
  virtual bool Busy() { return false; }
  virtual absl::Status Close() = 0;
  // Engine counters for the "total" line ("key=value ...").
  virtual std::string Extra() { return ""; }
  // ftld's own media bytes, 0 for the others.
  virtual uint64_t MediaWriteBytes() { return 0; }
};

class RocksEngine : public Engine {
 public:
  absl::Status Open(const std::string& dir) override {
    rocksdb::Options o;  // defaults, as a user would start
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, dir, &db);
    if (!s.ok()) return absl::InternalError(s.ToString());
    db_.reset(db);
    return absl::OkStatus();
  }
  absl::Status Put(std::string_view key, std::string_view value, bool sync) override {
    rocksdb::WriteOptions w;
    w.sync = sync;
    return Conv(db_->Put(w, rocksdb::Slice(key.data(), key.size()),
                         rocksdb::Slice(value.data(), value.size())));
  }
  absl::Status Get(std::string_view key, std::string* value) override {
    return Conv(db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), value));
  }
  absl::StatusOr<size_t> Scan(std::string_view from, size_t n, uint64_t* bytes) override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    size_t got = 0;
    for (it->Seek(rocksdb::Slice(from.data(), from.size())); it->Valid() && got < n; it->Next()) {
      *bytes += it->key().size() + it->value().size();
      ++got;
    }
    if (!it->status().ok()) return absl::InternalError(it->status().ToString());
    return got;
  }
  bool Busy() override {
    uint64_t v = 0;
    for (const char* p : {"rocksdb.num-running-compactions", "rocksdb.num-running-flushes",
                          "rocksdb.compaction-pending", "rocksdb.mem-table-flush-pending"}) {
      if (db_->GetIntProperty(p, &v) && v > 0) return true;
    }
    return false;
  }
  std::string Extra() override {
    uint64_t mem = 0, sst = 0;
    db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &mem);
    db_->GetIntProperty("rocksdb.total-sst-files-size", &sst);
    return absl::StrFormat("memtables_mib=%.1f sst_mib=%.1f", mem / 1048576.0, sst / 1048576.0);
  }
  absl::Status Close() override {
    rocksdb::Status s = db_->Close();
    db_.reset();
    return Conv(s);
  }

 private:
  static absl::Status Conv(const rocksdb::Status& s) {
    if (s.ok()) return absl::OkStatus();
    if (s.IsNotFound()) return absl::NotFoundError("not found");
    return absl::InternalError(s.ToString());
  }
  std::unique_ptr<rocksdb::DB> db_;
};

class LevelEngine : public Engine {
 public:
  absl::Status Open(const std::string& dir) override {
    leveldb::Options o;  // defaults
    o.create_if_missing = true;
    leveldb::DB* db = nullptr;
    leveldb::Status s = leveldb::DB::Open(o, dir, &db);
    if (!s.ok()) return absl::InternalError(s.ToString());
    db_.reset(db);
    return absl::OkStatus();
  }
  absl::Status Put(std::string_view key, std::string_view value, bool sync) override {
    leveldb::WriteOptions w;
    w.sync = sync;
    return Conv(db_->Put(w, leveldb::Slice(key.data(), key.size()),
                         leveldb::Slice(value.data(), value.size())));
  }
  absl::Status Get(std::string_view key, std::string* value) override {
    return Conv(db_->Get(leveldb::ReadOptions(), leveldb::Slice(key.data(), key.size()), value));
  }
  absl::StatusOr<size_t> Scan(std::string_view from, size_t n, uint64_t* bytes) override {
    std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(leveldb::ReadOptions()));
    size_t got = 0;
    for (it->Seek(leveldb::Slice(from.data(), from.size())); it->Valid() && got < n; it->Next()) {
      *bytes += it->key().size() + it->value().size();
      ++got;
    }
    if (!it->status().ok()) return absl::InternalError(it->status().ToString());
    return got;
  }
  absl::Status Close() override {
    db_.reset();
    return absl::OkStatus();
  }

 private:
  static absl::Status Conv(const leveldb::Status& s) {
    if (s.ok()) return absl::OkStatus();
    if (s.IsNotFound()) return absl::NotFoundError("not found");
    return absl::InternalError(s.ToString());
  }
  std::unique_ptr<leveldb::DB> db_;
};

// Returns Err(rc, what) from the enclosing member when an LMDB call fails.
#define RETURN(expr, what)                                 \
  do {                                                     \
    if (int rc_ = (expr); rc_ != 0) return Err(rc_, what); \
  } while (0)

class LmdbEngine : public Engine {
 public:
  explicit LmdbEngine(uint64_t map_bytes) : map_bytes_(map_bytes) {}
  absl::Status Open(const std::string& dir) override {
    RETURN(mdb_env_create(&env_), "mdb_env_create");
    RETURN(mdb_env_set_mapsize(env_, map_bytes_), "mdb_env_set_mapsize");
    RETURN(mdb_env_open(env_, dir.c_str(), MDB_NOSYNC, 0644), "mdb_env_open");
    MDB_txn* txn;
    RETURN(mdb_txn_begin(env_, nullptr, 0, &txn), "mdb_txn_begin");
    RETURN(mdb_dbi_open(txn, nullptr, 0, &dbi_), "mdb_dbi_open");
    RETURN(mdb_txn_commit(txn), "mdb_txn_commit");
    // One read transaction, reset and renewed around each read (LMDB's
    // documented way for frequent short reads).
    RETURN(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rtxn_), "mdb_txn_begin(rdonly)");
    mdb_txn_reset(rtxn_);
    return absl::OkStatus();
  }
  absl::Status Put(std::string_view key, std::string_view value, bool sync) override {
    // Synced or not is a flag of the environment, set per write.
    if (sync != synced_) {
      RETURN(mdb_env_set_flags(env_, MDB_NOSYNC, sync ? 0 : 1), "mdb_env_set_flags");
      synced_ = sync;
    }
    MDB_txn* txn;
    RETURN(mdb_txn_begin(env_, nullptr, 0, &txn), "mdb_txn_begin");
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    if (int rc = mdb_put(txn, dbi_, &k, &v, 0); rc != 0) {
      mdb_txn_abort(txn);
      return Err(rc, "mdb_put");
    }
    RETURN(mdb_txn_commit(txn), "mdb_txn_commit");
    return absl::OkStatus();
  }
  absl::Status Get(std::string_view key, std::string* value) override {
    RETURN(mdb_txn_renew(rtxn_), "mdb_txn_renew");
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
    int rc = mdb_get(rtxn_, dbi_, &k, &v);
    if (rc == 0) value->assign(static_cast<const char*>(v.mv_data), v.mv_size);
    mdb_txn_reset(rtxn_);
    if (rc == MDB_NOTFOUND) return absl::NotFoundError("not found");
    return rc == 0 ? absl::OkStatus() : Err(rc, "mdb_get");
  }
  absl::StatusOr<size_t> Scan(std::string_view from, size_t n, uint64_t* bytes) override {
    RETURN(mdb_txn_renew(rtxn_), "mdb_txn_renew");
    MDB_cursor* c;
    if (int rc = mdb_cursor_open(rtxn_, dbi_, &c); rc != 0) {
      mdb_txn_reset(rtxn_);
      return Err(rc, "mdb_cursor_open");
    }
    MDB_val k{from.size(), const_cast<char*>(from.data())}, v;
    size_t got = 0;
    int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && got < n) {
      *bytes += k.mv_size + v.mv_size;
      ++got;
      rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    mdb_txn_reset(rtxn_);
    if (rc != 0 && rc != MDB_NOTFOUND) return Err(rc, "mdb_cursor_get");
    return got;
  }
  absl::Status Settle() override {
    RETURN(mdb_env_sync(env_, 1), "mdb_env_sync");
    return absl::OkStatus();
  }
  absl::Status Close() override {
    if (rtxn_ != nullptr) mdb_txn_abort(rtxn_);
    rtxn_ = nullptr;
    if (env_ != nullptr) {
      mdb_env_sync(env_, 1);
      mdb_env_close(env_);
    }
    env_ = nullptr;
    return absl::OkStatus();
  }
  std::string Extra() override {
    MDB_stat st;
    MDB_envinfo info;
    mdb_env_stat(env_, &st);
    mdb_env_info(env_, &info);
    return absl::StrFormat("btree_depth=%u leaf_pages=%zu last_page=%zu", st.ms_depth,
                           st.ms_leaf_pages, info.me_last_pgno);
  }

 private:
  static absl::Status Err(int rc, const char* what) {
    return absl::InternalError(absl::StrCat(what, ": ", mdb_strerror(rc)));
  }
  bool synced_ = false;  // MDB_NOSYNC is off (opened with it on)
  uint64_t map_bytes_;
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
  MDB_txn* rtxn_ = nullptr;
};
#undef RETURN

#ifdef FTL_KV_PEERS_HAVE_FTLD
// ftld's KvStore in a dataset of a Pool on one backing file (dir/pool.img,
// sparse, `pool_bytes`), the pool formatted and opened with its defaults
// (the cleaner and the 30 s checkpoint timer run, as in the daemon).
class FtldEngine : public Engine {
 public:
  FtldEngine(uint64_t pool_bytes, ftl::KvOptions opts) : pool_bytes_(pool_bytes), opts_(opts) {}
  absl::Status Open(const std::string& dir) override {
    auto media = ftl::OpenFileMedia(dir + "/pool.img", pool_bytes_);
    if (!media.ok()) return media.status();
    ftl::FormatOptions f;
    auto pool = ftl::Pool::Format(*media, f);
    if (!pool.ok()) return pool.status();
    pool_ = std::move(*pool);
    // A key-value dataset of the pool; a pool without datasets yet (the
    // engine's CreateDataset unimplemented) gets the store on its primary
    // volume instead.
    absl::Status c = ftl::KvStore::Create(pool_.get(), "kv");
    if (c.ok()) {
      auto kv = ftl::KvStore::Open(pool_.get(), "kv", opts_);
      if (!kv.ok()) return kv.status();
      kv_ = std::move(*kv);
      where_ = "dataset";
    } else if (absl::IsUnimplemented(c)) {
      ftl::Volume* vol = pool_->PrimaryVolume();
      if (absl::Status s = ftl::KvStore::Format(vol); !s.ok()) return s;
      auto kv = ftl::KvStore::Open(vol, opts_);
      if (!kv.ok()) return kv.status();
      kv_ = std::move(*kv);
      where_ = "primary-volume";
    } else {
      return c;
    }
    return absl::OkStatus();
  }
  absl::Status Put(std::string_view key, std::string_view value, bool sync) override {
    return kv_->Put(key, value, ftl::KvWriteOptions{.sync = sync});
  }
  absl::Status Get(std::string_view key, std::string* value) override {
    auto v = kv_->Get(key);
    if (!v.ok()) return v.status();
    *value = std::move(*v);
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> Scan(std::string_view from, size_t n, uint64_t* bytes) override {
    auto r = kv_->Scan(from, "", n);
    if (!r.ok()) return r.status();
    for (const auto& [k, v] : *r) *bytes += k.size() + v.size();
    return r->size();
  }
  absl::Status Settle() override { return kv_->Flush(); }
  absl::Status Close() override {
    if (kv_) {
      if (absl::Status s = kv_->Close(); !s.ok()) return s;
      kv_.reset();
    }
    if (pool_) {
      if (absl::Status s = pool_->Close(); !s.ok()) return s;
      pool_.reset();
    }
    return absl::OkStatus();
  }
  uint64_t MediaWriteBytes() override { return pool_ ? pool_->Stats().media_write_bytes : 0; }
  std::string Extra() override {
    ftl::KvStats k = kv_->Stats();
    ftl::PoolStats p = pool_->Stats();
    return absl::StrFormat(
        "store=%s pages=%llu height=%u page_reads=%llu log_reads=%llu page_writes=%llu "
        "log_sector_writes=%llu log_block_writes=%llu unit_merges=%llu bombs=%llu "
        "hits=%llu misses=%llu evictions=%llu flushes=%llu kv_media_mib=%.1f "
        "pool_user_mib=%.1f pool_media_mib=%.1f gc_relocated_mib=%.1f checkpoints=%llu "
        "diff_records=%llu blind_writes=%llu diff_block_writes=%llu diff_merges=%llu "
        "diff_relogs=%llu diff_mib=%.1f diff_pages=%llu buffer_pages=%u",
        where_, (unsigned long long)k.pages, k.tree_height, (unsigned long long)k.page_reads,
        (unsigned long long)k.log_reads, (unsigned long long)k.page_writes,
        (unsigned long long)k.log_sector_writes, (unsigned long long)k.log_block_writes,
        (unsigned long long)k.unit_merges, (unsigned long long)k.bombs,
        (unsigned long long)k.buffer_hits, (unsigned long long)k.buffer_misses,
        (unsigned long long)k.evictions, (unsigned long long)k.flushes,
        k.media_write_bytes / 1048576.0, p.user_write_bytes / 1048576.0,
        p.media_write_bytes / 1048576.0, p.gc_relocated_bytes / 1048576.0,
        (unsigned long long)p.checkpoint_count,
        (unsigned long long)k.diff_records, (unsigned long long)k.blind_writes,
        (unsigned long long)k.diff_block_writes, (unsigned long long)k.diff_merges,
        (unsigned long long)k.diff_relogs, k.diff_bytes / 1048576.0, (unsigned long long)k.diff_pages, k.buffer_pages);
  }

 private:
  uint64_t pool_bytes_;
  ftl::KvOptions opts_;
  std::unique_ptr<ftl::Pool> pool_;
  std::unique_ptr<ftl::KvStore> kv_;
  std::string where_;
};
#endif

// ---- Workloads.

struct Flags {
  std::string engine;
  std::string dir;
  std::string mode = "nosync";
  uint64_t keys = 1000000;
  uint64_t sync_ops = 20000;
  uint64_t scans = 0;  // 0: keys / 100, 100..10000
  std::string kv_mode = "pdl";  // KvOptions default
  uint32_t kv_buffer_pages = 0;  // 0: KvOptions' default
  uint64_t kv_diff_mib = 0;      // 0: KvOptions' default
  bool keep = false;
  uint64_t seed = 1;
};

std::string Key(uint64_t i) { return absl::StrFormat("%016llu", (unsigned long long)i); }

class Runner {
 public:
  Runner(const Flags& f, Engine* e, std::string dir)
      : f_(f), e_(e), dir_(std::move(dir)), rng_(f.seed) {
    values_.resize(1 << 20);
    for (auto& c : values_) c = char(rng_());
  }

  std::string_view Value() {
    size_t off = rng_() % (values_.size() - kValueBytes);
    return std::string_view(values_).substr(off, kValueBytes);
  }

  // Puts every key of `keys`, synced or not, settles, and prints the phase
  // (a RESULT line, or SETUP when it is not a result).
  void Puts(const char* phase, const std::vector<uint64_t>& keys, bool sync, bool report = true) {
    Histogram h;
    const uint64_t w0 = DeviceWriteBytes(), m0 = e_->MediaWriteBytes();
    auto t0 = Clock::now();
    for (uint64_t k : keys) {
      std::string key = Key(k);
      std::string_view v = Value();
      auto a = Clock::now();
      absl::Status s = e_->Put(key, v, sync);
      h.Add(uint64_t(std::chrono::nanoseconds(Clock::now() - a).count()));
      if (!s.ok()) Die(absl::StrCat(phase, " put: ", s.ToString()));
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    SettleAll();
    const double user = double(keys.size()) * double(kKeyBytes + kValueBytes);
    user_bytes_ += user;
    Emit(phase, keys.size(), secs, h,
         absl::StrFormat("user_mib=%.2f dev_mib=%.2f wa=%.3f ftld_media_wa=%.3f", user / 1048576,
                         (DeviceWriteBytes() - w0) / 1048576.0, (DeviceWriteBytes() - w0) / user,
                         (e_->MediaWriteBytes() - m0) / user),
         report);
  }

  void Reads(uint64_t n) {
    Histogram h;
    std::string v;
    uint64_t bytes = 0;
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      std::string key = Key(rng_() % f_.keys);
      auto a = Clock::now();
      absl::Status s = e_->Get(key, &v);
      h.Add(uint64_t(std::chrono::nanoseconds(Clock::now() - a).count()));
      if (!s.ok()) Die(absl::StrCat("readrandom ", key, ": ", s.ToString()));
      bytes += v.size();
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    Emit("readrandom", n, secs, h, absl::StrFormat("read_mib=%.1f", bytes / 1048576.0));
  }

  void Scans(uint64_t n) {
    Histogram h;
    uint64_t bytes = 0, pairs = 0;
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      std::string from = Key(rng_() % f_.keys);
      auto a = Clock::now();
      auto got = e_->Scan(from, kScanKeys, &bytes);
      h.Add(uint64_t(std::chrono::nanoseconds(Clock::now() - a).count()));
      if (!got.ok()) Die(absl::StrCat("scan: ", got.status().ToString()));
      pairs += *got;
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    Emit("scan", n, secs, h,
         absl::StrFormat("keys_per_scan=%.0f keys_s=%.0f", double(pairs) / double(n),
                         double(pairs) / secs));
  }

  // Settle: the engine's own step, then no write for 1 s and no
  // background work (at most 120 s).
  void SettleAll() {
    Check(e_->Settle(), "settle");
    auto start = Clock::now();
    uint64_t last = DeviceWriteBytes();
    int quiet = 0;
    while (quiet < 4 && Clock::now() - start < std::chrono::seconds(120)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      uint64_t now = DeviceWriteBytes();
      quiet = (now == last && !e_->Busy()) ? quiet + 1 : 0;
      last = now;
    }
  }

  void Emit(const char* phase, uint64_t ops, double secs, const Histogram& h,
            const std::string& extra, bool report = true) {
    std::printf("%s engine=%s mode=%s workload=%s ops=%llu secs=%.3f ops_s=%.0f p50_us=%.2f "
                "p99_us=%.2f %s\n",
                report ? "RESULT" : "SETUP", f_.engine.c_str(), f_.mode.c_str(), phase,
                (unsigned long long)ops, secs, double(ops) / secs, h.PctUs(0.5), h.PctUs(0.99),
                extra.c_str());
    std::fflush(stdout);
  }

  void Run() {
    std::vector<uint64_t> fill(f_.keys);
    std::iota(fill.begin(), fill.end(), 0);
    std::shuffle(fill.begin(), fill.end(), rng_);
    const uint64_t w0 = DeviceWriteBytes();
    if (f_.mode == "nosync") {
      Puts("fillrandom", fill, false);
      std::vector<uint64_t> upd(f_.keys);
      for (auto& k : upd) k = rng_() % f_.keys;
      Puts("overwrite", upd, false);
      Reads(f_.keys);
      uint64_t scans = f_.scans ? f_.scans : std::clamp<uint64_t>(f_.keys / 100, 100, 10000);
      Scans(scans);
    } else {
      Puts("load", fill, false, /*report=*/false);
      std::vector<uint64_t> fresh(f_.sync_ops);
      std::iota(fresh.begin(), fresh.end(), f_.keys);
      std::shuffle(fresh.begin(), fresh.end(), rng_);
      Puts("fillrandom", fresh, true);
      std::vector<uint64_t> upd(f_.sync_ops);
      for (auto& k : upd) k = rng_() % f_.keys;
      Puts("overwrite", upd, true);
    }
    const uint64_t anon_kib = StatusKiB("RssAnon");
    const uint64_t media = e_->MediaWriteBytes();
    const std::string extra = e_->Extra();
    const uint64_t disk = DiskBytes(dir_);
    Check(e_->Close(), "close");
    const uint64_t dev = DeviceWriteBytes() - w0;
    std::printf("RESULT engine=%s mode=%s workload=total user_mib=%.2f dev_mib=%.2f wa=%.3f "
                "ftld_media_wa=%.3f peak_rss_mib=%.1f anon_rss_mib=%.1f disk_mib=%.1f %s\n",
                f_.engine.c_str(), f_.mode.c_str(), user_bytes_ / 1048576, dev / 1048576.0,
                dev / user_bytes_, media / user_bytes_, StatusKiB("VmHWM") / 1024.0,
                anon_kib / 1024.0, disk / 1048576.0, extra.c_str());
    std::fflush(stdout);
  }

 private:
  const Flags& f_;
  Engine* e_;
  std::string dir_;
  std::mt19937_64 rng_;
  std::string values_;
  double user_bytes_ = 0;
};

void Usage() {
  std::fprintf(stderr,
               "usage: kv_peers --engine ftld|rocksdb|leveldb|lmdb --dir DIR [--mode nosync|sync]\n"
               "                [--keys N] [--sync-ops M] [--scans S] [--seed X]\n"
               "                [--kv-mode ipl|merge|inplace|pdl] [--kv-buffer-pages P]\n"
               "                [--kv-diff-mib M] [--keep]\n");
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (a == "--engine") f.engine = next();
    else if (a == "--dir") f.dir = next();
    else if (a == "--mode") f.mode = next();
    else if (a == "--keys") f.keys = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--sync-ops") f.sync_ops = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--scans") f.scans = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--seed") f.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--kv-mode") f.kv_mode = next();
    else if (a == "--kv-buffer-pages") f.kv_buffer_pages = uint32_t(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--kv-diff-mib") f.kv_diff_mib = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--keep") f.keep = true;
    else Usage();
  }
  if (f.engine.empty() || f.dir.empty() || f.keys == 0 || (f.mode != "sync" && f.mode != "nosync")) {
    Usage();
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = ParseFlags(argc, argv);
  const std::string dir = f.dir + "/" + f.engine;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const uint64_t stored = f.keys + f.sync_ops;
  std::unique_ptr<Engine> e;
  if (f.engine == "rocksdb") {
    e = std::make_unique<RocksEngine>();
  } else if (f.engine == "leveldb") {
    e = std::make_unique<LevelEngine>();
  } else if (f.engine == "lmdb") {
    e = std::make_unique<LmdbEngine>(std::max<uint64_t>(1ull << 30, stored * 1024));
  } else if (f.engine == "ftld") {
#ifdef FTL_KV_PEERS_HAVE_FTLD
    ftl::SetLogLevel("warn");
    ftl::KvOptions o;
    if (f.kv_mode == "ipl") o.mode = ftl::KvMode::kIpl;
    else if (f.kv_mode == "merge") o.mode = ftl::KvMode::kIplMerge;
    else if (f.kv_mode == "inplace") o.mode = ftl::KvMode::kInPlace;
    else if (f.kv_mode == "pdl") o.mode = ftl::KvMode::kPdl;
    else Usage();
    if (f.kv_buffer_pages) o.buffer_pages = f.kv_buffer_pages;
    if (f.kv_diff_mib) o.diff_budget_bytes = f.kv_diff_mib << 20;
    // Room for the records several times over (pages part-full, logs,
    // the cleaner's reserve): a sparse file, at least 1 GiB.
    e = std::make_unique<FtldEngine>(std::max<uint64_t>(1ull << 30, stored * 2048), o);
#else
    Die("built without ftld's KV library (src/kv): no --engine ftld");
#endif
  } else {
    Usage();
  }
  Check(e->Open(dir), "open");
  std::printf("# kv_peers engine=%s mode=%s keys=%llu sync_ops=%llu dir=%s kv_mode=%s\n",
              f.engine.c_str(), f.mode.c_str(), (unsigned long long)f.keys,
              (unsigned long long)f.sync_ops, dir.c_str(), f.kv_mode.c_str());
  Runner(f, e.get(), dir).Run();
  e.reset();
  if (!f.keep) std::filesystem::remove_all(dir);
  return 0;
}
