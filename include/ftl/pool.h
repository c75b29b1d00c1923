#pragma once
// Public API of the ftld engine: a Pool owns one Media and lays a
// log-structured store on it (docs/architecture.md); it exports Volumes, each a
// virtual block device of fixed size. Everything nbd/ and tools/ need is
// here; they never include src/.
//
// Contracts (docs/architecture.md, "Contracts and errors"):
//  - A write returns once its data is readable by every reader; it is durable
//    after a later Flush() returns, or at once with fua.
//  - Each write of at most Geometry::max_atomic_bytes is atomic across a
//    crash: after recovery it reads entirely old or entirely new.
//  - Offsets and lengths are any byte values; writes and write-zeroes that
//    cover part of a 4 KiB block read-modify-write it inside the same
//    record (so they stay atomic, and concurrent writers to different bytes
//    of one block never lose each other's bytes); trims unmap only the whole
//    blocks inside the range.
//  - Errors: out of range -> OutOfRange (writes) / InvalidArgument (others),
//    device full -> ResourceExhausted,
//    checksum mismatch or media error -> DataLoss, read-only -> PermissionDenied.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ftl/media.h"
#include "ftl/range.h"
#include "ftl/snapshot.h"

namespace ftl {

inline constexpr uint32_t kBlockSize = 4096;
inline constexpr uint32_t kSectorSize = 512;

struct Geometry {
  uint32_t block_size = kBlockSize;
  uint64_t media_bytes = 0;        // size of the Media
  uint32_t segment_blocks = 0;     // blocks per segment (the erase unit)
  uint32_t segment_count = 0;
  uint64_t data_offset = 0;        // byte offset of segment 0
  uint32_t checkpoint_slot_blocks = 0;
  uint64_t logical_blocks = 0;     // capacity available to volumes
  uint64_t max_atomic_bytes = 0;   // largest write that is one record
  uint32_t format_version = 0;
  std::string uuid;                // 32 hex digits
};

struct FormatOptions {
  uint64_t segment_bytes = 4ull << 20;
  // Fraction of the segment area kept from volumes for the cleaner.
  double over_provision = 0.20;
  // Primary volume created at format; size 0 = all logical capacity.
  std::string volume_name = "ftl0";
  uint64_t volume_bytes = 0;
  // Write zeros over the whole data area instead of discarding it, so that
  // a backing file has every block allocated and initialized before the
  // log writes there: on a file system a synced write into a hole or an
  // unwritten extent also commits the file system's journal (about half
  // the speed of synced writes on ext4, docs/decisions.md, "Preallocated
  // backing files"). Open such a pool with OpenOptions::discard false to
  // keep it so. Takes as long as writing the media once.
  bool preallocate = false;
};

struct OpenOptions {
  bool start_cleaner = true;
  // Periodic checkpoint; zero disables the timer (checkpoints still happen
  // on close and when the cleaner needs one).
  std::chrono::milliseconds checkpoint_interval{std::chrono::seconds(30)};
  // Checkpoint automatically (timer above, and after every eighth of the
  // segments has been sealed). When false, checkpoints happen only on
  // Checkpoint(), Close() and when the cleaner needs one (benchmarks of
  // roll-forward use this).
  bool auto_checkpoint = true;
  // Inspect only: recovery runs in memory, nothing is written to the media,
  // volumes are read-only and no threads start (ftl-tool).
  bool read_only = false;
  // Hot/cold placement of user writes (README, "Cleaning and placement"):
  // kAuto separates while a meter says it pays; kOn always separates, kOff
  // never does (for workloads known to be skewed or uniform, and tests).
  enum class Placement { kAuto, kOn, kOff };
  Placement placement = Placement::kAuto;
  // Give freed space back to the media (Media::Discard: BLKDISCARD, punch
  // hole): the whole data area at format, idle free segments afterwards.
  // Off: nothing is ever discarded (devices whose discard is slow or
  // unreliable, backing files that should stay allocated); the format's
  // uuid still keeps an old pool's records from being taken for ours.
  bool discard = true;
  // Recovery only: a log record that a later durable record proves was
  // acknowledged but that is damaged or missing does not stop the open.
  // The blocks its damaged header names answer EIO (DataLoss) until they
  // are written again; each loss is logged by volume and LBA and reported
  // by Check(). Without it such an open fails with DataLoss (README,
  // "What the engine guarantees"). ftld --accept-loss, ftl-tool --accept-loss.
  bool accept_loss = false;
  // A FLUSH (or FUA write) is answered once its records are durable. The
  // durable record that lets recovery tell damage to them from a torn
  // tail (docs/architecture.md, "Durability") may follow up to this much
  // later: a later record usually carries it for free, otherwise a
  // one-block marker is written when the delay runs out. Zero: the proof
  // is durable before the answer (a second sync per flush that ends the
  // log). Either way acknowledged data is durable; the delay only opens a
  // window in which a crash plus damage to the last record would read as
  // a torn tail (docs/decisions.md, "Deferred durability proof").
  std::chrono::milliseconds proof_delay{20};
  // Small records put their headers into 512-byte sectors of an earlier
  // header block where the media writes sectors (Media::writes_sectors;
  // docs/decisions.md, "Sector headers"). False: a header block for every
  // record, as format 8 wrote them (for A/B runs, and for tests that
  // count media writes per record). Either layout reads back the same.
  bool sector_headers = true;
};

// Result of Pool::Check: every inconsistency found, one line each.
struct CheckReport {
  std::vector<std::string> problems;
  uint64_t volumes = 0;
  uint64_t tree_nodes = 0;
  uint64_t extents = 0;
  uint64_t mapped_blocks = 0;
  uint64_t live_vbas = 0;
  uint64_t live_blocks = 0;
  uint64_t blocks_verified = 0;  // data blocks read and checksummed
  uint64_t records = 0;          // record headers verified
  // Redundancy that is gone although nothing was lost: a damaged
  // superblock copy or checkpoint slot, a map rebuilt from the log alone.
  std::vector<std::string> degraded;
};

// Result of BlockStatus: consecutive extents covering the asked range.
struct BlockExtent {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool allocated = false;  // false: a hole that reads as zeros
};

// What a dataset of the pool holds (docs/architecture.md, "Datasets"): a
// block volume (exported over NBD) or a key-value store (include/ftl/kv.h).
// Both are trees of the map and take snapshots the same way.
enum class DatasetKind : uint8_t { kBlock = 0, kKv = 1 };
const char* DatasetKindName(DatasetKind k);  // "volume", "kv"

struct DatasetInfo {
  std::string name;
  DatasetKind kind = DatasetKind::kBlock;
  uint64_t size_bytes = 0;
  uint64_t mapped_bytes = 0;
  bool read_only = false;
  std::string origin;      // "VOL@SNAP" it was activated from, "" if none
  uint32_t snapshots = 0;  // snapshots taken of it
};

struct VolumeStats {
  std::string name;
  uint32_t id = 0;
  uint64_t size_bytes = 0;
  uint64_t mapped_bytes = 0;
  uint64_t reads = 0, writes = 0, trims = 0, zeroes = 0, flushes = 0;
  uint64_t read_bytes = 0, write_bytes = 0;
};

struct PoolStats {
  uint64_t user_write_bytes = 0;    // data blocks written for users
  uint64_t media_write_bytes = 0;   // everything written to the Media
  double write_amplification = 0;   // media / user
  uint64_t gc_relocated_bytes = 0;
  // Hot/cold placement (docs/decisions.md): user bytes and relocated bytes
  // written to the hot segment, and the mean lifespan (in record seqs) of
  // recently cleaned hot segments, the yardstick for "hot" (0: none yet).
  uint64_t user_hot_write_bytes = 0;
  uint64_t gc_hot_relocated_bytes = 0;
  uint64_t hot_lifespan_seqs = 0;
  uint64_t gc_segments_cleaned = 0;
  uint64_t checkpoint_count = 0;
  uint64_t checkpoint_bytes = 0;
  uint32_t segments_total = 0;
  uint32_t segments_free = 0;
  // The other segment states (docs/architecture.md, "Segments"); free +
  // open + full + cleaning = total.
  uint32_t segments_open = 0, segments_full = 0, segments_cleaning = 0;
  // Wall-clock time (Unix ns) of the newest checkpoint written by this open
  // pool, or of the open itself (when the map matched the media).
  int64_t last_checkpoint_unix_ns = 0;
  uint64_t free_bytes = 0;          // physical bytes in free segments
  uint64_t live_bytes = 0;          // physical bytes holding live data
  uint64_t map_memory_bytes = 0;    // volume trees + VBA table
  uint64_t map_vba_table_bytes = 0; // the VBA table's part of it
  uint64_t mapped_blocks = 0;       // blocks mapped over all volumes
  // Thin provisioning (docs/decisions.md, "Issue 22: datasets at will"):
  // the sizes of all block volumes added up (key-value datasets, whose 1 TiB
  // is a sparse address space, and snapshots are not counted), against
  // the capacity the pool offers volumes (Geometry::logical_blocks). The
  // sum may exceed it: provisioned / logical is the over-commit.
  uint64_t provisioned_bytes = 0;
  uint64_t logical_bytes = 0;
  // Pool use: live_bytes / logical_bytes in percent. Above 100 the data
  // eats into the space kept for the cleaner (over-provisioning): writes
  // go on, at a rising cost, until the pool is full (ResourceExhausted).
  double used_percent = 0;
  uint64_t next_seq = 0;
  uint32_t snapshots = 0;
  uint64_t metadata_bytes = 0;      // size of the last checkpoint
  uint64_t metadata_capacity = 0;   // checkpoint slot size
  std::string cleaner_state;        // "idle", "running", "halted"
  // Durable records that no durable record proves yet (OpenOptions::
  // proof_delay): a crash now plus damage to them would read as a torn
  // tail. False once the deferred marker (or any later record) is durable.
  bool proof_pending = false;
};

// Scrub (docs/decisions.md, "Issue 22: mirrors and scrub"): a pass that
// reads every live block in the background and checks it against its
// checksum; on a mirror (ftl/mirror.h) a bad copy is rewritten from a
// good one.
struct ScrubOptions {
  // Read rate limit; 0 = as fast as the media goes.
  uint64_t rate_bytes_per_sec = 64ull << 20;
  // Also the checkpoint slots (only when nothing writes checkpoints
  // meanwhile: ftl-tool scrub).
  bool checkpoints = false;
};

struct ScrubStatus {
  // "none" (never started), "running", "stopped", "finished", "failed".
  std::string state = "none";
  uint64_t total_bytes = 0;     // live data when the pass started
  uint64_t scanned_bytes = 0;   // live data verified so far
  uint64_t blocks_verified = 0;
  uint64_t headers_verified = 0;  // record headers of full segments
  uint64_t metadata_verified = 0; // superblock copies and checkpoint slots
  // Copies found bad (checksum mismatch, unreadable), of them rewritten
  // from a good copy, and blocks (or headers) no copy of which is good.
  uint64_t errors = 0;
  uint64_t repaired = 0;
  uint64_t unrecoverable = 0;
  std::vector<std::string> damage;  // the unrecoverable ones (first 100)
  double elapsed_s = 0;
  uint64_t passes = 0;  // passes finished since open
  std::string error;    // why it failed
};

class Volume {
 public:
  using Callback = std::function<void(absl::Status)>;
  virtual ~Volume() = default;
  virtual const std::string& name() const = 0;
  virtual uint64_t size_bytes() const = 0;
  virtual bool read_only() const = 0;
  virtual DatasetKind kind() const { return DatasetKind::kBlock; }

  virtual absl::Status Read(uint64_t offset, std::span<std::byte> out) = 0;
  virtual absl::Status Write(uint64_t offset, std::span<const std::byte> data,
                             bool fua = false) = 0;
  // As Write, but returns at once; `done` runs on an engine thread when the
  // write is readable (and durable if fua). `data` must stay valid until then.
  virtual void WriteAsync(uint64_t offset, std::span<const std::byte> data, bool fua,
                          Callback done) = 0;
  struct AsyncWrite {
    uint64_t offset = 0;
    std::span<const std::byte> data;
    bool fua = false;
    Callback done;
  };
  // Submits several writes at once so the engine can commit them in one
  // record (group commit without waiting). Each completes as WriteAsync,
  // except that small batches may be committed, and their callbacks run, on
  // the calling thread before this returns (no hand-off): callbacks must not
  // need locks the caller holds.
  virtual void WriteAsyncBatch(std::vector<AsyncWrite> writes) {
    for (AsyncWrite& w : writes) WriteAsync(w.offset, w.data, w.fua, std::move(w.done));
  }
  // One piece of an atomic multi-range write.
  struct Piece {
    uint64_t offset = 0;
    std::span<const std::byte> data;
  };
  // Writes every piece in one log record: after a crash all or none of them
  // are in effect. Offsets and lengths are multiples of 4096, pieces do not
  // overlap, and together they are at most Geometry::max_atomic_bytes and
  // few enough for one record header (InvalidArgument otherwise). Durable
  // on return if fua.
  // Errors as Write: Unavailable (removed), PermissionDenied (read-only, an
  // immutable range), OutOfRange (a piece past the end). Empty pieces are
  // ignored. Pieces take their range locks in ascending offset order.
  virtual absl::Status WriteAtomic(std::span<const Piece> pieces, bool fua = false) = 0;
  // As WriteAtomic, for a write that is part of freeing space (a key-value
  // store's flush of deletes that rewrites blocks it already maps and then
  // trims values): like a trim it may use the free segment that other
  // writes leave to space-freeing requests (docs/architecture.md,
  // "Segments"), so it succeeds on a full pool. Callers flag only writes
  // whose net effect frees space or is neutral; the default is WriteAtomic.
  virtual absl::Status WriteAtomicFreeing(std::span<const Piece> pieces, bool fua = false) {
    return WriteAtomic(pieces, fua);
  }
  // Unmaps whole 4 KiB blocks inside the range (partial blocks are left).
  virtual absl::Status Trim(uint64_t offset, uint64_t length, bool fua = false) = 0;
  // Range reads as zeros afterwards. no_hole: keep it allocated (zeros are
  // written). fast_only: fail with Unimplemented instead of writing zeros.
  virtual absl::Status WriteZeroes(uint64_t offset, uint64_t length, bool fua = false,
                                   bool no_hole = false, bool fast_only = false) = 0;
  // Durable: every write completed before the call survives a crash.
  virtual absl::Status Flush() = 0;
  virtual absl::StatusOr<std::vector<BlockExtent>> BlockStatus(uint64_t offset,
                                                               uint64_t length) = 0;
  virtual VolumeStats Stats() const = 0;
};

class Pool {
 public:
  virtual ~Pool() = default;
  // Lays a new pool on `media`, destroying whatever it held.
  static absl::StatusOr<std::unique_ptr<Pool>> Format(std::shared_ptr<Media> media,
                                                      const FormatOptions& opts,
                                                      const OpenOptions& open = {});
  // Opens an existing pool: a clean one from its checkpoint, otherwise by
  // recovery (checkpoint + roll forward, or a rebuild from the log).
  // NotFound if the media holds no pool; FailedPrecondition for a newer
  // format version.
  static absl::StatusOr<std::unique_ptr<Pool>> Open(std::shared_ptr<Media> media,
                                                    const OpenOptions& opts = {});
  // True if the media starts with an ftld superblock (either copy).
  static bool LooksFormatted(Media& media);

  // Stops the cleaner, writes a checkpoint, marks the pool clean. The pool
  // must not be used afterwards. Destroying a pool without Close() is a
  // crash as far as the media is concerned (the next Open recovers).
  virtual absl::Status Close() = 0;

  virtual const Geometry& geometry() const = 0;
  virtual std::vector<std::string> VolumeNames() const = 0;
  // nullptr if there is no such volume. The pointer lives as long as the Pool.
  virtual Volume* GetVolume(const std::string& name) = 0;
  virtual Volume* PrimaryVolume() = 0;

  virtual absl::Status Checkpoint() = 0;
  // Runs the cleaner in the calling thread until `min_free_segments` are free
  // or nothing is reclaimable; returns the number of segments cleaned.
  virtual absl::StatusOr<uint32_t> RunCleaner(uint32_t min_free_segments) = 0;
  virtual void HaltCleaner() = 0;
  virtual void ResumeCleaner() = 0;
  virtual PoolStats Stats() const = 0;
  // Verifies the map: tree order and bounds, node and VBA refcounts against
  // the references that exist, VBA -> PBA uniqueness, validity bitmaps and
  // live counts, segment states; with verify_data also reads every live
  // block and checks its checksum. Holds the map lock shared meanwhile.
  virtual absl::StatusOr<CheckReport> Check(bool verify_data) = 0;

  // ---- Scrub. StartScrub begins a pass on a thread of its own
  // (FailedPrecondition while one runs, or on a read-only pool); StopScrub
  // ends it early (its counts stay); ScrubStatus reports the current or
  // last pass. Scrub runs a whole pass in the calling thread.
  virtual absl::Status StartScrub(const ScrubOptions& opts) = 0;
  virtual void StopScrub() = 0;
  virtual ScrubStatus GetScrubStatus() const = 0;
  virtual absl::StatusOr<ScrubStatus> Scrub(const ScrubOptions& opts) = 0;
  // Human-readable recovery summary of the last Open ("clean", "recovered
  // N records from checkpoint seq S", "rebuilt from log").
  virtual std::string OpenReport() const = 0;

  // ---- Snapshots (docs/architecture.md, "The map"). Every call below is durable when it
  // returns (its note is in the log and synced). Errors: NotFound (no such
  // volume/snapshot), AlreadyExists, InvalidArgument (bad name),
  // FailedPrecondition (e.g. deleting an active snapshot),
  // ResourceExhausted (device or metadata area full).

  // A point-in-time image of `volume`: every write completed before the call
  // is in it, none issued after it returns is. O(1).
  virtual absl::StatusOr<SnapshotInfo> CreateSnapshot(const std::string& volume,
                                                      const std::string& name) = 0;
  // volume "" = all volumes. Ordered by creation (seq).
  virtual std::vector<SnapshotInfo> ListSnapshots(const std::string& volume) = 0;
  // Frees what only the snapshot held (the cleaner reclaims it).
  // FailedPrecondition while a volume activated from it exists, unless
  // `force`: then those volumes are removed in the same note (atomically).
  virtual absl::Status DeleteSnapshot(const std::string& volume, const std::string& name,
                                      bool force = false) = 0;
  // A new volume showing the snapshot's content, named `new_volume`
  // ("" = "VOLUME-SNAPSHOT"). O(1). Writes to it never change the snapshot.
  virtual absl::StatusOr<Volume*> ActivateSnapshot(const std::string& volume,
                                                   const std::string& snapshot,
                                                   const std::string& new_volume,
                                                   bool read_only) = 0;
  // Removes a volume activated from a snapshot and frees its private data.
  // Its Volume object stays valid but fails every request with Unavailable.
  // The primary volume cannot be removed.
  virtual absl::Status DeactivateVolume(const std::string& name) = 0;
  // The volume reads as the snapshot again (its later writes are dropped)
  // and takes the snapshot's range attributes. FailedPrecondition if that
  // would change an immutable range of the volume (its content, or drop its
  // attribute), unless `force`.
  virtual absl::Status Rollback(const std::string& volume, const std::string& snapshot,
                                bool force = false) = 0;
  // The snapshot a volume was activated from ("VOL@SNAP"), "" if none.
  virtual std::string VolumeOrigin(const std::string& volume) = 0;
  // A read-only Volume showing snapshot `snapshot` of `volume` (of any
  // kind), for readers such as KvStore. Lives as long as the Pool; fails
  // every request with Unavailable once the snapshot is deleted.
  // NotFound if there is no such snapshot. Not a volume of VolumeNames()
  // or GetVolume() (never exported); asking twice gives the same object.
  virtual absl::StatusOr<Volume*> SnapshotVolume(const std::string& volume,
                                                 const std::string& snapshot) = 0;

  // ---- Datasets (docs/architecture.md, "Datasets"). Durable when they return
  // (one note each); a crash leaves the old or the new state.

  // A new empty dataset of `size_bytes` (a multiple of 4096, at most
  // (2^32 - 2) * 4096; thin: it and the sum of sizes may exceed the pool).
  // Its name follows the catalogue rules (ftl/snapshot.h) and is no
  // volume's. AlreadyExists (a volume of that name, or snapshots left of a
  // removed volume of that name), InvalidArgument (name, kind, size),
  // ResourceExhausted (metadata area full).
  virtual absl::StatusOr<Volume*> CreateDataset(const std::string& name, DatasetKind kind,
                                                uint64_t size_bytes) = 0;
  // Removes a dataset and frees its data for the cleaner; its Volume object
  // fails every request with Unavailable afterwards. FailedPrecondition for
  // the primary volume, or while snapshots of it exist unless `force`
  // (then they are deleted in the same note).
  // NotFound if there is no such dataset; with force, FailedPrecondition
  // while one of its snapshots is activated as a volume (deactivate it
  // first). Any volume but the primary can be destroyed, activated ones
  // too.
  virtual absl::Status DestroyDataset(const std::string& name, bool force = false) = 0;
  // Sets block volume `name`'s size ("" = the primary; a multiple of 4096, at most
  // (2^32 - 2) * 4096; thin, like CreateDataset's). A grow adds unmapped
  // blocks (reading zeros). A shrink is refused (FailedPrecondition) while
  // data or an immutable range lies past the new end, unless `force`: then
  // those blocks are unmapped with the size change, in the same note. Any
  // volume may be resized, the primary too; snapshots keep the size they
  // were taken with (a rollback restores it). The Volume object stays and
  // reports the new size; a write past the new end gets OutOfRange.
  // NotFound, InvalidArgument (size), FailedPrecondition (a key-value
  // dataset: its store lays out its own address space), PermissionDenied
  // (read-only), ResourceExhausted (metadata area; a grow on a full pool).
  // The current size is no change.
  virtual absl::Status ResizeDataset(const std::string& name, uint64_t size_bytes,
                                     bool force = false) = 0;
  // Every dataset (volumes, activated snapshots, key-value stores), by name.
  virtual std::vector<DatasetInfo> ListDatasets() = 0;

  // ---- Range operations (include/ftl/range.h). Durable when they return;
  // concurrent calls are group-committed into shared notes.

  // Applies all ops atomically, in order (one note): after a crash either all
  // or none are in effect. Nothing changes if any op is invalid.
  virtual absl::Status ApplyRangeOps(const std::vector<RangeOp>& ops) = 0;
  // As ApplyRangeOps, but returns at once; `done` runs on an engine thread.
  virtual void ApplyRangeOpsAsync(const std::vector<RangeOp>& ops,
                                  std::function<void(absl::Status)> done) = 0;
  // Three-way merge per block against the base range, by VBA identity (no
  // data is read). With policy kFail and conflicts, nothing changes: the
  // result lists them and says applied = false.
  virtual absl::StatusOr<MergeResult> Merge(const MergeRequest& req) = 0;
  virtual absl::Status SetRangeAttr(const std::string& volume, uint64_t offset, uint64_t length,
                                    RangeAttr attr) = 0;
  virtual absl::StatusOr<std::vector<AttrExtent>> RangeAttrs(const std::string& volume) = 0;
};

}  // namespace ftl
