#pragma once
// MirrorMediaImpl: the mirror vdev of ftl/mirror.h. It owns its members
// (the device Media, each with its label, state and error counters), the
// resilver thread, and the self-heal of ReadVerified. The label format is
// media/mirror_label.h; the design is docs/decisions.md, "Issue 22:
// mirrors and scrub".
//
// Offsets: the mirror's byte o is byte kLabelAreaBytes + o of every device.
//
// Thread-safety: every public method may be called concurrently.
// Locks, in this order (docs/architecture.md, "Locks"):
//   stripe locks  stripes_[i], 1 MiB stripes of the data area hashed onto
//                 64 locks; writes and discards hold the stripes they touch
//                 shared, a resilver chunk copy and a self-heal rewrite one
//                 exclusively (so neither can interleave with a write of the
//                 same bytes). Several are taken in ascending index order.
//   mu_           member states, their media, names, the label generation.
//                 Data I/O holds it shared for the duration of the I/O; a
//                 state change holds it exclusively while it writes the new
//                 labels, so no write skips a device before the labels that
//                 say why are durable.
//   resilver_mu_  the resilver thread's request flags and progress (leaf).
// Nothing takes a stripe lock while holding mu_.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ftl/mirror.h"
#include "media/mirror_label.h"

namespace ftl::media {

class MirrorMediaImpl : public MirrorMedia {
 public:
  // Use CreateMirror / OpenMirror (ftl/mirror.h).
  static absl::StatusOr<std::shared_ptr<MirrorMediaImpl>> Create(std::vector<MirrorDevice> devices,
                                                                  const MirrorOptions& opts);
  static absl::StatusOr<std::shared_ptr<MirrorMediaImpl>> Open(std::vector<MirrorDevice> devices,
                                                                const MirrorOptions& opts);
  ~MirrorMediaImpl() override;

  // Media
  uint64_t size() const override { return data_bytes_; }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override;
  absl::Status ReadVerified(uint64_t offset, std::span<std::byte> out, size_t unit_bytes,
                            ReadCheck check, ReadOutcome* outcome) override;
  absl::Status VerifyCopies(uint64_t offset, std::span<std::byte> out, size_t unit_bytes, ReadCheck check,
                            ReadOutcome* outcome) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override;
  absl::Status WriteGather(uint64_t offset,
                           std::span<const std::span<const std::byte>> pieces) override;
  bool gathers_writes() const override { return gathers_; }
  absl::Status Sync() override;
  absl::Status Discard(uint64_t offset, uint64_t length) override;
  void Prepare(uint64_t offset, uint64_t length) override;
  void StartWriteback(uint64_t offset, uint64_t length) override;
  bool discard_zeroes() const override { return false; }
  std::string Describe() const override;

  // MirrorMedia
  std::string uuid() const override { return GuidToString(set_uuid_); }
  std::string State() const override;
  std::vector<DeviceInfo> Devices() const override;
  MirrorCounters Counters() const override;
  ResilverStatus Resilver() const override;
  absl::Status Offline(const std::string& device) override;
  absl::Status Online(const std::string& device, std::shared_ptr<Media> media) override;
  absl::Status Replace(const std::string& old_device, MirrorDevice replacement) override;
  absl::Status WaitForResilver() override;
  void Shutdown() override;

 private:
  struct Member {
    Guid guid{};
    std::string name;
    std::shared_ptr<Media> media;  // null: missing
    MemberState state = MemberState::kOnline;
    std::string reason;
    // Bumped whenever it starts resilvering, so that a pass promotes only
    // the incarnation it copied everything to.
    uint64_t incarnation = 0;
    std::atomic<uint64_t> reads{0}, writes{0}, read_errors{0}, write_errors{0},
        checksum_errors{0}, repaired_bytes{0};
  };
  // The stripes an I/O touches, locked on construction (ascending), unlocked
  // on destruction.
  class StripeLock {
   public:
    StripeLock(MirrorMediaImpl* m, uint64_t offset, uint64_t length, bool exclusive);
    ~StripeLock();
    StripeLock(const StripeLock&) = delete;
    StripeLock& operator=(const StripeLock&) = delete;

   private:
    MirrorMediaImpl* m_;
    bool exclusive_;
    uint64_t mask_ = 0;  // bit i: stripes_[i] held
  };
  // A thread that runs I/O for one member, so that a big write or a sync
  // goes to all devices at once (ToAll with parallel).
  class Helper {
   public:
    Helper();
    ~Helper();
    void Run(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);

   private:
    bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }
    void Loop();
    absl::Mutex mu_;
    std::vector<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
    bool stop_ ABSL_GUARDED_BY(mu_) = false;
    std::thread thread_;
  };
  // Writes from this size on go to the devices in parallel (smaller ones
  // one after the other: on a busy host a thread hand-off can cost more
  // than the copy; bench/JOURNAL.md, "Mirror writes"). Syncs always do.
  static constexpr uint64_t kParallelBytes = 256 << 10;
  static constexpr int kStripes = 64;
  static constexpr uint64_t kStripeBytes = 1ull << 20;

  MirrorMediaImpl(const MirrorOptions& opts, Guid set_uuid, uint64_t data_bytes);

  // Members written to / read from now.
  bool Writable(const Member& m) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return m.media && (m.state == MemberState::kOnline || m.state == MemberState::kResilvering);
  }
  bool Readable(const Member& m) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return m.media && m.state == MemberState::kOnline;
  }
  // Readable members, the preferred one for `offset` first.
  std::vector<int> ReadOrder(uint64_t offset) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int OnlineCount() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Runs `io` on every writable member (the first on this thread, the
  // others at once on threads of their own when `parallel`); returns the
  // failures (member index, status) and the number of ONLINE members that
  // succeeded.
  struct Fanout {
    std::vector<std::pair<int, absl::Status>> failed;
    int online_ok = 0;
    int targets = 0;
  };
  Fanout ToAll(const std::function<absl::Status(Media&)>& io, bool parallel)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // After a fan-out: demotes the members that failed (never the last ONLINE
  // one) and says whether the I/O counts as done.
  absl::Status Settle(const char* what, uint64_t offset, Fanout f) ABSL_LOCKS_EXCLUDED(mu_);
  // Makes member i FAULTED (or OFFLINE) with a reason and writes the labels
  // before returning. OK if it is no longer writable. An error if it is
  // the last ONLINE member or the labels could not be written: then the
  // I/O that failed on it must fail too (a device that missed writes must
  // never be read as if it had them).
  absl::Status Demote(int i, MemberState to, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes a new label generation to every writable member (A, sync, B,
  // sync). A member that fails its label write is demoted and the labels
  // written again.
  absl::Status WriteLabels() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Label LabelFor(int i) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Index of the member `device` names (name, index or guid), or NotFound.
  absl::StatusOr<int> Find(const std::string& device) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Rewrites [offset, +len) of members `to` with the copy on member `from`,
  // if that copy still passes `check` (called per unit as in ReadVerified).
  // Returns the bytes written.
  uint64_t Repair(uint64_t offset, uint64_t len, int from, const std::vector<int>& to,
                  size_t unit_bytes, size_t first_unit, const ReadCheck* check);
  // A unit of a checked read whose copies disagree: the good copy on
  // `from`, the members `to` to rewrite, and how many of them were bad
  // (kBad or unreadable, not kAbsent).
  struct Fix {
    size_t unit;
    int from;
    std::vector<int> to;
    uint64_t bad;
  };
  // Repairs `fixes` of a checked read of [offset, +size) and adds `local`'s
  // counts (with the repairs) to `outcome` (may be null). Without mu_ held.
  void RepairAndCount(uint64_t offset, size_t size, size_t unit_bytes, const std::vector<Fix>& fixes,
                      const ReadCheck& check, ReadOutcome local, ReadOutcome* outcome) ABSL_LOCKS_EXCLUDED(mu_);
  // The resilver thread: copies the whole data area to the RESILVERING
  // members, then makes them ONLINE; again while new ones appear.
  void ResilverLoop();
  void StartResilverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(resilver_mu_);
  void KickResilver();
  absl::Status ResilverPass(const std::vector<std::pair<int, uint64_t>>& targets);
  bool ShuttingDown() const;

  const MirrorOptions opts_;
  const Guid set_uuid_;
  const uint64_t data_bytes_;
  bool gathers_ = true;

  absl::Mutex stripes_[kStripes];
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Member>> members_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;

  std::unique_ptr<Helper> helpers_[kMaxMirrorDevices];  // made at construction
  std::atomic<uint64_t> healed_units_{0}, healed_bytes_{0}, unrecovered_units_{0};
  std::atomic<uint64_t> read_rr_{0};

  mutable absl::Mutex resilver_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::thread resilver_thread_ ABSL_GUARDED_BY(resilver_mu_);
  bool resilver_running_ ABSL_GUARDED_BY(resilver_mu_) = false;
  bool resilver_wanted_ ABSL_GUARDED_BY(resilver_mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(resilver_mu_) = false;
  std::vector<std::string> resilver_names_ ABSL_GUARDED_BY(resilver_mu_);
  uint64_t resilver_done_ ABSL_GUARDED_BY(resilver_mu_) = 0;
  double resilver_started_ ABSL_GUARDED_BY(resilver_mu_) = 0;
  uint64_t resilvers_completed_ ABSL_GUARDED_BY(resilver_mu_) = 0;
  std::string resilver_result_ ABSL_GUARDED_BY(resilver_mu_);
  absl::Status resilver_status_ ABSL_GUARDED_BY(resilver_mu_);
};

}  // namespace ftl::media
