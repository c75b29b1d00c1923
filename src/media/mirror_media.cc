// MirrorMediaImpl: see mirror_media.h (and ftl/mirror.h for the contract).
//
// Details fixed here:
// - A write, discard or sync counts as done when every ONLINE member that
//   is still ONLINE afterwards did it, and at least one did. A member that
//   fails one is FAULTED, its labels written, before the call returns;
//   the last ONLINE member is never demoted (the error is returned, as a
//   single device would).
// - Reads try the readable members in the order ReadOrder gives (the one
//   the offset's 1 MiB stripe prefers first); a unit a check does not call
//   kGood is read from the others. A copy that was kBad, kAbsent or
//   unreadable is rewritten from a kGood copy under the stripe lock taken
//   exclusively, after reading the good copy again and checking it again
//   (a write in between would have changed both).
// - checksum_errors counts kBad copies for which a good copy existed;
//   units no copy of which passed count in unrecovered_units only (after a
//   crash, a torn unsynced record is kBad on every copy and is no error).
// - Resilver copies 1 MiB chunks (one stripe, held exclusively) from a
//   readable member to every member resilvering; a chunk of zeros is
//   discarded instead on media whose discard zeroes.

#include "media/mirror_media.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "media/aligned_buffer.h"
#include "util/logging.h"

namespace ftl {

const char* DeviceStateName(DeviceState s) {
  switch (s) {
    case DeviceState::kOnline: return "ONLINE";
    case DeviceState::kOffline: return "OFFLINE";
    case DeviceState::kFaulted: return "FAULTED";
    case DeviceState::kResilvering: return "RESILVERING";
  }
  return "?";
}

namespace media {
namespace {

DeviceState ToDeviceState(MemberState s) {
  switch (s) {
    case MemberState::kOnline: return DeviceState::kOnline;
    case MemberState::kOffline: return DeviceState::kOffline;
    case MemberState::kFaulted: return DeviceState::kFaulted;
    case MemberState::kResilvering: return DeviceState::kResilvering;
  }
  return DeviceState::kFaulted;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The newest valid label of a device: NotFound if neither copy is a label.
absl::StatusOr<Label> ReadLabel(Media& media) {
  if (media.size() < kLabelAreaBytes) return absl::NotFoundError("too small to hold a mirror label");
  AlignedBuffer buf(2 * 4096);
  if (absl::Status s = media.Read(0, buf.span()); !s.ok()) return s;
  absl::StatusOr<Label> a = DecodeLabel(buf.span().subspan(0, 4096));
  absl::StatusOr<Label> b = DecodeLabel(buf.span().subspan(4096, 4096));
  if (a.ok() && (!b.ok() || a->generation >= b->generation)) return a;
  if (b.ok()) return b;
  if (absl::IsNotFound(a.status()) && absl::IsNotFound(b.status())) return a.status();
  return absl::IsNotFound(a.status()) ? b.status() : a.status();
}

}  // namespace

MirrorMediaImpl::Helper::Helper() : thread_([this] { Loop(); }) {}

MirrorMediaImpl::Helper::~Helper() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void MirrorMediaImpl::Helper::Run(std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(fn));
}

void MirrorMediaImpl::Helper::Loop() {
  std::vector<std::function<void()>> batch;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(this, &Helper::Ready));
      if (queue_.empty()) return;
      batch.swap(queue_);
    }
    for (auto& fn : batch) fn();
    batch.clear();
  }
}

MirrorMediaImpl::MirrorMediaImpl(const MirrorOptions& opts, Guid set_uuid, uint64_t data_bytes)
    : opts_(opts), set_uuid_(set_uuid), data_bytes_(data_bytes) {
  for (auto& h : helpers_) h = std::make_unique<Helper>();
}

MirrorMediaImpl::~MirrorMediaImpl() { Shutdown(); }

// ---- stripes

MirrorMediaImpl::StripeLock::StripeLock(MirrorMediaImpl* m, uint64_t offset, uint64_t length,
                                        bool exclusive)
    : m_(m), exclusive_(exclusive) {
  if (length == 0) return;
  uint64_t first = offset / kStripeBytes, last = (offset + length - 1) / kStripeBytes;
  if (last - first + 1 >= uint64_t(kStripes)) {
    mask_ = ~uint64_t(0);
  } else {
    for (uint64_t s = first; s <= last; ++s) mask_ |= uint64_t(1) << (s % kStripes);
  }
  for (int i = 0; i < kStripes; ++i) {
    if (!(mask_ >> i & 1)) continue;
    if (exclusive_) {
      m_->stripes_[i].Lock();
    } else {
      m_->stripes_[i].ReaderLock();
    }
  }
}

MirrorMediaImpl::StripeLock::~StripeLock() {
  for (int i = kStripes - 1; i >= 0; --i) {
    if (!(mask_ >> i & 1)) continue;
    if (exclusive_) {
      m_->stripes_[i].Unlock();
    } else {
      m_->stripes_[i].ReaderUnlock();
    }
  }
}

// ---- open / create

absl::StatusOr<std::shared_ptr<MirrorMediaImpl>> MirrorMediaImpl::Create(
    std::vector<MirrorDevice> devices, const MirrorOptions& opts) {
  if (devices.size() < 2 || devices.size() > kMaxMirrorDevices)
    return absl::InvalidArgumentError(absl::StrCat("a mirror needs 2 to ", kMaxMirrorDevices,
                                                   " devices, not ", devices.size()));
  uint64_t smallest = UINT64_MAX;
  for (const MirrorDevice& d : devices) {
    if (!d.media) return absl::InvalidArgumentError(d.name + ": not open");
    smallest = std::min(smallest, d.media->size());
  }
  if (smallest < kLabelAreaBytes + (16ull << 20))
    return absl::InvalidArgumentError(absl::StrCat(
        "mirror devices must be at least ", (kLabelAreaBytes + (16ull << 20)) >> 20, " MiB"));
  uint64_t data = (smallest - kLabelAreaBytes) / 4096 * 4096;
  auto m = std::shared_ptr<MirrorMediaImpl>(new MirrorMediaImpl(opts, NewGuid(), data));
  absl::MutexLock l(&m->mu_);
  for (MirrorDevice& d : devices) {
    auto mem = std::make_unique<Member>();
    mem->guid = NewGuid();
    mem->name = d.name;
    mem->media = std::move(d.media);
    m->gathers_ = m->gathers_ && mem->media->gathers_writes();
    m->members_.push_back(std::move(mem));
  }
  if (absl::Status s = m->WriteLabels(); !s.ok()) return s;
  util::Logger("media")->info("created mirror {} of {} devices ({} MiB each)", GuidToString(m->set_uuid_),
                              m->members_.size(), data >> 20);
  return m;
}

absl::StatusOr<std::shared_ptr<MirrorMediaImpl>> MirrorMediaImpl::Open(
    std::vector<MirrorDevice> devices, const MirrorOptions& opts) {
  auto log = util::Logger("media");
  if (devices.empty() || devices.size() > kMaxMirrorDevices)
    return absl::InvalidArgumentError("a mirror is opened from 1 to 8 devices");
  std::vector<Label> labels;
  for (const MirrorDevice& d : devices) {
    if (!d.media) return absl::InvalidArgumentError(d.name + ": not open");
    absl::StatusOr<Label> l = ReadLabel(*d.media);
    if (!l.ok()) {
      if (absl::IsNotFound(l.status()))
        return absl::NotFoundError(d.name + ": not a mirror device (no mirror label)");
      return absl::Status(l.status().code(), absl::StrCat(d.name, ": ", l.status().message()));
    }
    labels.push_back(std::move(*l));
  }
  size_t auth = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].set_uuid != labels[0].set_uuid)
      return absl::FailedPreconditionError(absl::StrCat(
          devices[i].name, " belongs to another mirror (", GuidToString(labels[i].set_uuid), ", not ",
          GuidToString(labels[0].set_uuid), " of ", devices[0].name, ")"));
    if (labels[i].generation > labels[auth].generation) auth = i;
  }
  const Label& a = labels[auth];
  std::vector<int> slot(devices.size(), -1);
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t k = 0; k < a.members.size(); ++k)
      if (a.members[k].guid == labels[i].device_guid) slot[i] = int(k);
    if (slot[i] < 0)
      return absl::FailedPreconditionError(absl::StrCat(
          devices[i].name, " is no longer a member of mirror ", GuidToString(a.set_uuid),
          " (it was replaced; ", devices[auth].name, " has the newer label)"));
    for (size_t j = 0; j < i; ++j)
      if (slot[j] == slot[i])
        return absl::InvalidArgumentError(
            absl::StrCat(devices[i].name, " and ", devices[j].name, " are the same device"));
    if (devices[i].media->size() < kLabelAreaBytes + a.data_bytes)
      return absl::FailedPreconditionError(devices[i].name + " is smaller than the mirror");
  }
  // Split brain: two devices each saying the other missed writes were
  // each used without the other.
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = 0; j < labels.size(); ++j) {
      if (i == j) continue;
      int si = labels[i].self(), sj_in_i = -1, si_in_j = -1;
      for (size_t k = 0; k < labels[i].members.size(); ++k)
        if (labels[i].members[k].guid == labels[j].device_guid) sj_in_i = int(k);
      for (size_t k = 0; k < labels[j].members.size(); ++k)
        if (labels[j].members[k].guid == labels[i].device_guid) si_in_j = int(k);
      if (si < 0 || sj_in_i < 0 || si_in_j < 0) continue;
      if (labels[i].members[si].state == MemberState::kOnline &&
          labels[i].members[sj_in_i].state != MemberState::kOnline &&
          labels[j].members[si_in_j].state != MemberState::kOnline &&
          labels[j].members[labels[j].self()].state == MemberState::kOnline)
        return absl::FailedPreconditionError(absl::StrCat(
            devices[i].name, " and ", devices[j].name,
            " were each written without the other (split brain): open the mirror with only the "
            "one whose data you want, then `device replace` the other"));
    }
  }
  auto m = std::shared_ptr<MirrorMediaImpl>(new MirrorMediaImpl(opts, a.set_uuid, a.data_bytes));
  bool resilver = false;
  {
    absl::MutexLock l(&m->mu_);
    m->generation_ = a.generation;
    for (const LabelMember& lm : a.members) {
      auto mem = std::make_unique<Member>();
      mem->guid = lm.guid;
      mem->name = lm.name;
      mem->state = lm.state;
      m->members_.push_back(std::move(mem));
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      Member& mem = *m->members_[slot[i]];
      mem.media = devices[i].media;
      mem.name = devices[i].name;
      m->gathers_ = m->gathers_ && mem.media->gathers_writes();
    }
    for (auto& mp : m->members_) {
      Member& mem = *mp;
      if (!mem.media) {
        if (mem.state != MemberState::kOffline) mem.state = MemberState::kFaulted;
        mem.reason = "missing (not given at open)";
      } else if (mem.state == MemberState::kOffline) {
        mem.reason = "taken offline (stale: `device online` resilvers it)";
      } else if (mem.state != MemberState::kOnline) {
        if (opts.read_only || opts.defer_resilver) {
          mem.reason = "stale (missed writes): needs a resilver";
        } else {
          mem.state = MemberState::kResilvering;
          mem.reason = "stale at open: resilvering";
          ++mem.incarnation;
          resilver = true;
        }
      }
    }
    if (m->OnlineCount() == 0) {
      std::vector<std::string> want;
      for (const LabelMember& lm : a.members)
        if (lm.state == MemberState::kOnline) want.push_back(lm.name);
      return absl::FailedPreconditionError(absl::StrCat(
          "no device given holds the mirror's newest data; it is on: ", absl::StrJoin(want, ", ")));
    }
    if (!opts.read_only) {
      if (absl::Status s = m->WriteLabels(); !s.ok()) return s;
    }
    for (auto& mp : m->members_)
      if (mp->state != MemberState::kOnline)
        log->warn("mirror {}: device {} is {}: {}", GuidToString(a.set_uuid), mp->name,
                  DeviceStateName(ToDeviceState(mp->state)), mp->reason);
  }
  if (resilver) m->KickResilver();
  return m;
}

// ---- members

int MirrorMediaImpl::OnlineCount() const {
  int n = 0;
  for (const auto& m : members_) n += Readable(*m) ? 1 : 0;
  return n;
}

std::vector<int> MirrorMediaImpl::ReadOrder(uint64_t offset) const {
  std::vector<int> r;
  for (size_t i = 0; i < members_.size(); ++i)
    if (Readable(*members_[i])) r.push_back(int(i));
  if (r.size() > 1) std::rotate(r.begin(), r.begin() + (offset / kStripeBytes) % r.size(), r.end());
  return r;
}

absl::StatusOr<int> MirrorMediaImpl::Find(const std::string& device) const {
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i]->name == device || GuidToString(members_[i]->guid) == device) return int(i);
  if (!device.empty() && device.size() < 3 &&
      std::all_of(device.begin(), device.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    size_t i = std::stoul(device);
    if (i < members_.size()) return int(i);
  }
  std::vector<std::string> names;
  for (const auto& m : members_) names.push_back(m->name);
  return absl::NotFoundError(absl::StrCat("no device ", device, " in this mirror (it has: ",
                                          absl::StrJoin(names, ", "), ")"));
}

Label MirrorMediaImpl::LabelFor(int i) const {
  Label l;
  l.set_uuid = set_uuid_;
  l.generation = generation_;
  l.device_bytes = members_[i]->media ? members_[i]->media->size() : 0;
  l.device_guid = members_[i]->guid;
  l.data_bytes = data_bytes_;
  for (const auto& m : members_) l.members.push_back({m->guid, m->state, m->name.substr(0, 200)});
  return l;
}

absl::Status MirrorMediaImpl::WriteLabels() {
  for (size_t attempt = 0; attempt <= members_.size(); ++attempt) {
    ++generation_;
    bool demoted = false;
    absl::Status last;
    for (size_t i = 0; i < members_.size(); ++i) {
      Member& m = *members_[i];
      if (!Writable(m)) continue;
      std::vector<std::byte> enc = EncodeLabel(LabelFor(int(i)));
      AlignedBuffer block(4096);
      std::memcpy(block.data(), enc.data(), 4096);
      absl::Status s = m.media->Write(0, block.span());
      if (s.ok()) s = m.media->Sync();
      if (s.ok()) s = m.media->Write(4096, block.span());
      if (s.ok()) s = m.media->Sync();
      if (s.ok()) continue;
      m.write_errors.fetch_add(1, std::memory_order_relaxed);
      util::Logger("media")->error("mirror: writing the label of {} failed: {}", m.name, s.ToString());
      last = s;
      if (m.state == MemberState::kOnline && OnlineCount() == 1) return s;
      m.state = MemberState::kFaulted;
      m.reason = absl::StrCat("label write failed: ", s.message());
      demoted = true;
    }
    if (!demoted) return absl::OkStatus();
  }
  return absl::InternalError("mirror: labels could not be written");
}

absl::Status MirrorMediaImpl::Demote(int i, MemberState to, const std::string& reason) {
  absl::MutexLock l(&mu_);
  Member& m = *members_[i];
  if (!Writable(m)) return absl::OkStatus();
  if (m.state == MemberState::kOnline && OnlineCount() == 1) {
    util::Logger("media")->error("mirror: {} failed ({}) but is the last ONLINE device; keeping it", m.name,
                                 reason);
    return absl::UnavailableError(absl::StrCat(m.name, ": ", reason));
  }
  m.state = to;
  m.reason = reason;
  util::Logger("media")->error("mirror {} is DEGRADED: device {} is {}: {}", GuidToString(set_uuid_), m.name,
                               DeviceStateName(ToDeviceState(to)), reason);
  if (absl::Status s = WriteLabels(); !s.ok()) {
    util::Logger("media")->error("mirror: could not record that {} is {}: {}", m.name,
                                 DeviceStateName(ToDeviceState(to)), s.ToString());
    return s;
  }
  return absl::OkStatus();
}

// ---- writes

MirrorMediaImpl::Fanout MirrorMediaImpl::ToAll(const std::function<absl::Status(Media&)>& io,
                                               bool parallel) {
  Fanout f;
  std::vector<int> targets;
  for (size_t i = 0; i < members_.size(); ++i)
    if (Writable(*members_[i])) targets.push_back(int(i));
  f.targets = int(targets.size());
  std::vector<absl::Status> st(targets.size());
  // All but the first on the members' helper threads, the first here.
  const size_t helped = parallel && targets.size() > 1 ? targets.size() - 1 : 0;
  absl::BlockingCounter left{int(helped)};
  for (size_t k = 1; k <= helped; ++k) {
    Media* media = members_[targets[k]]->media.get();
    helpers_[targets[k]]->Run([&st, &left, &io, k, media] {
      st[k] = io(*media);
      left.DecrementCount();
    });
  }
  for (size_t k = 0; k < targets.size(); ++k) {
    if (k >= 1 && k <= helped) continue;
    st[k] = io(*members_[targets[k]]->media);
  }
  left.Wait();
  for (size_t k = 0; k < targets.size(); ++k) {
    Member& m = *members_[targets[k]];
    m.writes.fetch_add(1, std::memory_order_relaxed);
    if (!st[k].ok()) {
      f.failed.emplace_back(targets[k], st[k]);
    } else if (m.state == MemberState::kOnline) {
      ++f.online_ok;
    }
  }
  return f;
}

absl::Status MirrorMediaImpl::Settle(const char* what, uint64_t offset, Fanout f) {
  if (f.targets == 0) return absl::UnavailableError("mirror: no device left to write");
  if (f.failed.empty()) return absl::OkStatus();
  absl::Status recorded;
  for (const auto& [i, s] : f.failed) {
    {
      absl::ReaderMutexLock l(&mu_);
      members_[i]->write_errors.fetch_add(1, std::memory_order_relaxed);
    }
    if (f.online_ok > 0) {
      absl::Status d = Demote(i, MemberState::kFaulted, absl::StrCat(what, " error at ", offset, ": ", s.message()));
      if (!d.ok() && recorded.ok()) recorded = d;
    }
  }
  if (f.online_ok == 0) return f.failed.front().second;
  // The survivors' labels must say who missed this before it counts.
  if (!recorded.ok()) return recorded;
  // Done if a member that did it is still ONLINE (two writers that failed
  // on different members cannot both demote: the last stays).
  absl::ReaderMutexLock l(&mu_);
  int ok = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    bool failed = false;
    for (const auto& fl : f.failed) failed = failed || fl.first == int(i);
    if (!failed && Readable(*members_[i])) ++ok;
  }
  if (ok == 0) return f.failed.front().second;
  return absl::OkStatus();
}

absl::Status MirrorMediaImpl::Write(uint64_t offset, std::span<const std::byte> data) {
  if (offset > data_bytes_ || data.size() > data_bytes_ - offset)
    return absl::OutOfRangeError(absl::StrCat("mirror: write [", offset, ", +", data.size(), ") past the end"));
  Fanout f;
  {
    StripeLock sl(this, offset, data.size(), false);
    absl::ReaderMutexLock l(&mu_);
    f = ToAll([&](Media& m) { return m.Write(kLabelAreaBytes + offset, data); }, data.size() >= kParallelBytes);
  }
  return Settle("write", offset, std::move(f));
}

absl::Status MirrorMediaImpl::WriteGather(uint64_t offset,
                                          std::span<const std::span<const std::byte>> pieces) {
  uint64_t len = 0;
  for (auto p : pieces) len += p.size();
  if (offset > data_bytes_ || len > data_bytes_ - offset)
    return absl::OutOfRangeError(absl::StrCat("mirror: write [", offset, ", +", len, ") past the end"));
  Fanout f;
  {
    StripeLock sl(this, offset, len, false);
    absl::ReaderMutexLock l(&mu_);
    f = ToAll([&](Media& m) { return m.WriteGather(kLabelAreaBytes + offset, pieces); }, len >= kParallelBytes);
  }
  return Settle("write", offset, std::move(f));
}

absl::Status MirrorMediaImpl::Sync() {
  Fanout f;
  {
    absl::ReaderMutexLock l(&mu_);
    f = ToAll([](Media& m) { return m.Sync(); }, true);
  }
  return Settle("sync", 0, std::move(f));
}

absl::Status MirrorMediaImpl::Discard(uint64_t offset, uint64_t length) {
  if (offset > data_bytes_ || length > data_bytes_ - offset)
    return absl::OutOfRangeError("mirror: discard past the end");
  Fanout f;
  {
    StripeLock sl(this, offset, length, false);
    absl::ReaderMutexLock l(&mu_);
    f = ToAll([&](Media& m) { return m.Discard(kLabelAreaBytes + offset, length); }, false);
  }
  return Settle("discard", offset, std::move(f));
}

void MirrorMediaImpl::Prepare(uint64_t offset, uint64_t length) {
  absl::ReaderMutexLock l(&mu_);
  for (const auto& m : members_)
    if (Writable(*m)) m->media->Prepare(kLabelAreaBytes + offset, length);
}

void MirrorMediaImpl::StartWriteback(uint64_t offset, uint64_t length) {
  absl::ReaderMutexLock l(&mu_);
  for (const auto& m : members_)
    if (Writable(*m)) m->media->StartWriteback(kLabelAreaBytes + offset, length);
}

// ---- reads

absl::Status MirrorMediaImpl::Read(uint64_t offset, std::span<std::byte> out) {
  if (offset > data_bytes_ || out.size() > data_bytes_ - offset)
    return absl::OutOfRangeError(absl::StrCat("mirror: read [", offset, ", +", out.size(), ") past the end"));
  std::vector<int> failed;
  int good = -1;
  absl::Status first_error;
  {
    absl::ReaderMutexLock l(&mu_);
    for (int i : ReadOrder(offset)) {
      Member& m = *members_[i];
      m.reads.fetch_add(1, std::memory_order_relaxed);
      absl::Status s = m.media->Read(kLabelAreaBytes + offset, out);
      if (s.ok()) {
        good = i;
        break;
      }
      m.read_errors.fetch_add(1, std::memory_order_relaxed);
      if (first_error.ok()) first_error = s;
      failed.push_back(i);
    }
  }
  if (good < 0) return first_error.ok() ? absl::UnavailableError("mirror: no ONLINE device") : first_error;
  if (!failed.empty()) Repair(offset, out.size(), good, failed, out.size(), 0, nullptr);
  return absl::OkStatus();
}

absl::Status MirrorMediaImpl::ReadVerified(uint64_t offset, std::span<std::byte> out, size_t unit_bytes,
                                           ReadCheck check, ReadOutcome* outcome) {
  if (offset > data_bytes_ || out.size() > data_bytes_ - offset)
    return absl::OutOfRangeError(absl::StrCat("mirror: read [", offset, ", +", out.size(), ") past the end"));
  if (out.empty()) return absl::OkStatus();
  if (unit_bytes == 0 || unit_bytes > out.size()) unit_bytes = out.size();
  const size_t units = (out.size() + unit_bytes - 1) / unit_bytes;
  std::vector<Fix> fixes;
  ReadOutcome local;
  {
    absl::ReaderMutexLock l(&mu_);
    std::vector<int> order = ReadOrder(offset);
    if (order.empty()) return absl::UnavailableError("mirror: no ONLINE device");
    int first = -1;
    absl::Status first_error;
    std::vector<int> unreadable;
    for (int i : order) {
      Member& m = *members_[i];
      m.reads.fetch_add(1, std::memory_order_relaxed);
      absl::Status s = m.media->Read(kLabelAreaBytes + offset, out);
      if (s.ok()) {
        first = i;
        break;
      }
      m.read_errors.fetch_add(1, std::memory_order_relaxed);
      if (first_error.ok()) first_error = s;
      unreadable.push_back(i);
    }
    if (first < 0) return first_error;
    AlignedBuffer alt, unsure_copy;
    for (size_t u = 0; u < units; ++u) {
      const size_t at = u * unit_bytes, len = std::min(unit_bytes, out.size() - at);
      std::span<std::byte> unit = out.subspan(at, len);
      ReadVerdict v = check(u, unit);
      if (v == ReadVerdict::kGood) ++local.good;
      if (v == ReadVerdict::kGood && unreadable.empty()) continue;
      Fix fix{u, v == ReadVerdict::kGood ? first : -1, unreadable, uint64_t(unreadable.size())};
      bool any_bad = v == ReadVerdict::kBad;
      int unsure = v == ReadVerdict::kUnsure ? first : -1;
      std::vector<int> bad_members;
      if (v != ReadVerdict::kGood) {
        fix.to.push_back(first);
        if (v == ReadVerdict::kBad) {
          ++fix.bad;
          bad_members.push_back(first);
        }
      }
      for (size_t k = 0; fix.from < 0 && k < order.size(); ++k) {
        int i = order[k];
        if (i == first || std::find(unreadable.begin(), unreadable.end(), i) != unreadable.end()) continue;
        Member& m = *members_[i];
        if (alt.size() < len) alt = AlignedBuffer(len);
        std::span<std::byte> a = alt.span().subspan(0, len);
        m.reads.fetch_add(1, std::memory_order_relaxed);
        if (absl::Status s = m.media->Read(kLabelAreaBytes + offset + at, a); !s.ok()) {
          m.read_errors.fetch_add(1, std::memory_order_relaxed);
          fix.to.push_back(i);
          ++fix.bad;
          continue;
        }
        ReadVerdict v2 = check(u, a);
        if (v2 == ReadVerdict::kGood) {
          std::memcpy(unit.data(), a.data(), len);
          fix.from = i;
          ++local.good;
          break;
        }
        fix.to.push_back(i);
        if (v2 == ReadVerdict::kBad) {
          any_bad = true;
          ++fix.bad;
          bad_members.push_back(i);
        }
        if (v2 == ReadVerdict::kUnsure && unsure < 0) {
          unsure = i;
          unsure_copy = AlignedBuffer(len);
          std::memcpy(unsure_copy.data(), a.data(), len);
        }
      }
      if (fix.from < 0) {
        // No good copy: the first usable one stays in `out`.
        if (unsure >= 0 && unsure != first) std::memcpy(unit.data(), unsure_copy.data(), len);
        if (any_bad && unsure < 0) {
          ++local.unrecovered;
          unrecovered_units_.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      for (int i : bad_members) members_[i]->checksum_errors.fetch_add(1, std::memory_order_relaxed);
      local.bad_copies += fix.bad;
      if (!fix.to.empty()) fixes.push_back(std::move(fix));
    }
  }
  RepairAndCount(offset, out.size(), unit_bytes, fixes, check, local, outcome);
  return absl::OkStatus();
}

absl::Status MirrorMediaImpl::VerifyCopies(uint64_t offset, std::span<std::byte> out, size_t unit_bytes,
                                           ReadCheck check, ReadOutcome* outcome) {
  if (offset > data_bytes_ || out.size() > data_bytes_ - offset)
    return absl::OutOfRangeError(absl::StrCat("mirror: read [", offset, ", +", out.size(), ") past the end"));
  if (out.empty()) return absl::OkStatus();
  if (unit_bytes == 0 || unit_bytes > out.size()) unit_bytes = out.size();
  const size_t units = (out.size() + unit_bytes - 1) / unit_bytes;
  struct Copy {
    int member;
    std::span<std::byte> data;
    bool readable;
  };
  std::vector<Copy> copies;
  // Per-thread scratch, reused: a fresh 256 KiB buffer per call is an
  // mmap and munmap (a TLB shootdown on every CPU) and 64 page faults.
  thread_local std::vector<AlignedBuffer> scratch;
  std::vector<Fix> fixes;
  ReadOutcome local;
  bool any_read = false;
  absl::Status first_error;
  {
    absl::ReaderMutexLock l(&mu_);
    for (int i : ReadOrder(offset)) {
      Member& m = *members_[i];
      const size_t k = copies.size();
      if (scratch.size() <= k) scratch.resize(k + 1);
      if (scratch[k].size() < out.size()) scratch[k] = AlignedBuffer(out.size());
      Copy c{i, scratch[k].span().subspan(0, out.size()), true};
      m.reads.fetch_add(1, std::memory_order_relaxed);
      if (absl::Status s = m.media->Read(kLabelAreaBytes + offset, c.data); !s.ok()) {
        m.read_errors.fetch_add(1, std::memory_order_relaxed);
        if (first_error.ok()) first_error = s;
        c.readable = false;
      } else if (!any_read) {
        std::memcpy(out.data(), c.data.data(), out.size());
        any_read = true;
      }
      copies.push_back(std::move(c));
    }
    if (copies.empty()) return absl::UnavailableError("mirror: no ONLINE device");
    if (!any_read) return first_error;
    for (size_t u = 0; u < units; ++u) {
      const size_t at = u * unit_bytes, len = std::min(unit_bytes, out.size() - at);
      Fix fix{u, -1, {}, 0};
      std::vector<int> bad_members;
      bool any_bad = false;
      for (Copy& c : copies) {
        ReadVerdict v = c.readable ? check(u, c.data.subspan(at, len)) : ReadVerdict::kBad;
        if (v == ReadVerdict::kGood) {
          if (fix.from < 0) {
            fix.from = c.member;
            ++local.good;
            std::memcpy(out.data() + at, c.data.data() + at, len);
          }
          continue;
        }
        fix.to.push_back(c.member);
        if (v == ReadVerdict::kBad) {
          any_bad = true;
          ++fix.bad;
          if (c.readable) bad_members.push_back(c.member);
        }
      }
      if (fix.from < 0) {
        if (any_bad) {
          ++local.unrecovered;
          unrecovered_units_.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      for (int i : bad_members) members_[i]->checksum_errors.fetch_add(1, std::memory_order_relaxed);
      local.bad_copies += fix.bad;
      if (!fix.to.empty()) fixes.push_back(std::move(fix));
    }
  }
  RepairAndCount(offset, out.size(), unit_bytes, fixes, check, local, outcome);
  return absl::OkStatus();
}

void MirrorMediaImpl::RepairAndCount(uint64_t offset, size_t size, size_t unit_bytes,
                                     const std::vector<Fix>& fixes, const ReadCheck& check,
                                     ReadOutcome local, ReadOutcome* outcome) {
  for (const Fix& fix : fixes) {
    const size_t at = fix.unit * unit_bytes, len = std::min(unit_bytes, size - at);
    if (Repair(offset + at, len, fix.from, fix.to, unit_bytes, fix.unit, &check) > 0) local.repaired += fix.bad;
  }
  if (outcome) {
    outcome->bad_copies += local.bad_copies;
    outcome->repaired += local.repaired;
    outcome->unrecovered += local.unrecovered;
    outcome->good += local.good;
  }
}

uint64_t MirrorMediaImpl::Repair(uint64_t offset, uint64_t len, int from, const std::vector<int>& to,
                                 size_t unit_bytes, size_t first_unit, const ReadCheck* check) {
  if (opts_.read_only || to.empty()) return 0;
  std::vector<std::pair<int, absl::Status>> failed;
  uint64_t written = 0;
  std::string from_name;
  {
    StripeLock sl(this, offset, len, true);
    absl::ReaderMutexLock l(&mu_);
    if (!Readable(*members_[from])) return 0;
    from_name = members_[from]->name;
    AlignedBuffer buf(len);
    if (!members_[from]->media->Read(kLabelAreaBytes + offset, buf.span()).ok()) return 0;
    if (check) {
      for (size_t at = 0, u = first_unit; at < len; at += unit_bytes, ++u) {
        if ((*check)(u, buf.span().subspan(at, std::min<size_t>(unit_bytes, len - at))) != ReadVerdict::kGood)
          return 0;  // changed since (a write in between): nothing to heal
      }
    }
    for (int i : to) {
      Member& m = *members_[i];
      if (!Writable(m)) continue;
      absl::Status s = m.media->Write(kLabelAreaBytes + offset, buf.span());
      if (!s.ok()) {
        m.write_errors.fetch_add(1, std::memory_order_relaxed);
        failed.emplace_back(i, s);
        continue;
      }
      m.repaired_bytes.fetch_add(len, std::memory_order_relaxed);
      written += len;
    }
  }
  if (written > 0) {
    healed_units_.fetch_add(1, std::memory_order_relaxed);
    healed_bytes_.fetch_add(written, std::memory_order_relaxed);
    util::Logger("media")->warn("mirror: healed [{}, +{}) from {} ({} bytes rewritten)", offset, len, from_name,
                                written);
  }
  for (const auto& [i, s] : failed)
    (void)Demote(i, MemberState::kFaulted, absl::StrCat("self-heal write error at ", offset, ": ", s.message()));
  return written;
}

// ---- status

std::string MirrorMediaImpl::Describe() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<std::string> parts;
  for (const auto& m : members_) parts.push_back(m->media ? m->media->Describe() : m->name + " (missing)");
  return absl::StrCat("mirror of ", absl::StrJoin(parts, ", "));
}

std::string MirrorMediaImpl::State() const {
  absl::ReaderMutexLock l(&mu_);
  for (const auto& m : members_)
    if (!Readable(*m)) return "DEGRADED";
  return "ONLINE";
}

std::vector<DeviceInfo> MirrorMediaImpl::Devices() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<DeviceInfo> out;
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& m = *members_[i];
    DeviceInfo d;
    d.index = uint32_t(i);
    d.name = m.name;
    d.guid = GuidToString(m.guid);
    d.state = ToDeviceState(m.state);
    d.present = m.media != nullptr;
    d.reason = m.state == MemberState::kOnline ? "" : m.reason;
    d.reads = m.reads.load();
    d.writes = m.writes.load();
    d.read_errors = m.read_errors.load();
    d.write_errors = m.write_errors.load();
    d.checksum_errors = m.checksum_errors.load();
    d.repaired_bytes = m.repaired_bytes.load();
    out.push_back(std::move(d));
  }
  return out;
}

MirrorCounters MirrorMediaImpl::Counters() const {
  return {healed_units_.load(), healed_bytes_.load(), unrecovered_units_.load()};
}

ResilverStatus MirrorMediaImpl::Resilver() const {
  absl::MutexLock l(&resilver_mu_);
  ResilverStatus r;
  r.active = resilver_running_;
  r.devices = resilver_names_;
  r.done_bytes = resilver_done_;
  r.total_bytes = data_bytes_;
  r.elapsed_s = resilver_running_ ? Now() - resilver_started_ : 0;
  r.completed = resilvers_completed_;
  r.last_result = resilver_result_;
  return r;
}

// ---- device management

absl::Status MirrorMediaImpl::Offline(const std::string& device) {
  if (opts_.read_only) return absl::FailedPreconditionError("the mirror is open read-only");
  absl::MutexLock l(&mu_);
  absl::StatusOr<int> i = Find(device);
  if (!i.ok()) return i.status();
  Member& m = *members_[*i];
  if (m.state == MemberState::kOffline) return absl::FailedPreconditionError(m.name + " is already OFFLINE");
  if (Readable(m) && OnlineCount() == 1)
    return absl::FailedPreconditionError(m.name + " is the last ONLINE device of the mirror");
  m.state = MemberState::kOffline;
  m.reason = "taken offline";
  util::Logger("media")->warn("mirror {} is DEGRADED: {} taken offline", GuidToString(set_uuid_), m.name);
  return WriteLabels();
}

absl::Status MirrorMediaImpl::Online(const std::string& device, std::shared_ptr<Media> media) {
  if (opts_.read_only) return absl::FailedPreconditionError("the mirror is open read-only");
  std::optional<Label> given;
  if (media) {
    absl::StatusOr<Label> l = ReadLabel(*media);
    if (!l.ok()) return absl::FailedPreconditionError(absl::StrCat(device, ": ", l.status().message()));
    given = *l;
  }
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<int> i = Find(device);
    if (!i.ok()) return i.status();
    Member& m = *members_[*i];
    if (m.state == MemberState::kOnline || m.state == MemberState::kResilvering)
      return absl::FailedPreconditionError(absl::StrCat(m.name, " is already ",
                                                        DeviceStateName(ToDeviceState(m.state))));
    if (given) {
      if (given->set_uuid != set_uuid_ || given->device_guid != m.guid)
        return absl::FailedPreconditionError(absl::StrCat(
            device, " is not this mirror's device ", m.name, " (its label names device ",
            GuidToString(given->device_guid), " of mirror ", GuidToString(given->set_uuid),
            "); use `device replace` for a new device"));
      if (media->size() < kLabelAreaBytes + data_bytes_)
        return absl::FailedPreconditionError(device + " is smaller than the mirror");
      m.media = media;
      gathers_ = gathers_ && media->gathers_writes();
    }
    if (!m.media)
      return absl::FailedPreconditionError(m.name + " is missing: give the path of the device to bring back");
    m.state = MemberState::kResilvering;
    m.reason = "resilvering (brought online)";
    ++m.incarnation;
    util::Logger("media")->info("mirror: {} online again; resilvering it", m.name);
    if (absl::Status s = WriteLabels(); !s.ok()) return s;
  }
  KickResilver();
  return absl::OkStatus();
}

absl::Status MirrorMediaImpl::Replace(const std::string& old_device, MirrorDevice replacement) {
  if (opts_.read_only) return absl::FailedPreconditionError("the mirror is open read-only");
  if (!replacement.media) return absl::InvalidArgumentError("replacement device not open");
  if (replacement.media->size() < kLabelAreaBytes + data_bytes_)
    return absl::FailedPreconditionError(absl::StrCat(replacement.name, " is smaller than the mirror needs (",
                                                      (kLabelAreaBytes + data_bytes_) >> 20, " MiB)"));
  absl::StatusOr<Label> theirs = ReadLabel(*replacement.media);
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<int> i = Find(old_device);
    if (!i.ok()) return i.status();
    if (theirs.ok() && theirs->set_uuid == set_uuid_) {
      for (const auto& m : members_)
        if (m->guid == theirs->device_guid)
          return absl::FailedPreconditionError(replacement.name + " is already a device of this mirror (" +
                                               m->name + ")");
    }
    for (const auto& m : members_)
      if (m->media && m->name == replacement.name)
        return absl::FailedPreconditionError(replacement.name + " is already a device of this mirror");
    Member& m = *members_[*i];
    if (Readable(m) && OnlineCount() == 1)
      return absl::FailedPreconditionError(m.name + " is the only ONLINE device: nothing to resilver from");
    std::string old_name = m.name;
    m.guid = NewGuid();
    m.name = replacement.name;
    m.media = std::move(replacement.media);
    gathers_ = gathers_ && m.media->gathers_writes();
    m.state = MemberState::kResilvering;
    m.reason = "replacing " + old_name;
    ++m.incarnation;
    for (auto* c : {&m.reads, &m.writes, &m.read_errors, &m.write_errors, &m.checksum_errors, &m.repaired_bytes})
      c->store(0);
    util::Logger("media")->warn("mirror: replacing {} with {}; resilvering", old_name, m.name);
    if (absl::Status s = WriteLabels(); !s.ok()) return s;
  }
  KickResilver();
  return absl::OkStatus();
}

// ---- resilver

bool MirrorMediaImpl::ShuttingDown() const {
  absl::MutexLock l(&resilver_mu_);
  return shutdown_;
}

void MirrorMediaImpl::KickResilver() {
  absl::MutexLock l(&resilver_mu_);
  if (shutdown_) return;
  resilver_wanted_ = true;
  if (resilver_running_) return;
  if (resilver_thread_.joinable()) resilver_thread_.join();  // it has left the loop
  resilver_running_ = true;
  resilver_thread_ = std::thread([this] { ResilverLoop(); });
}

void MirrorMediaImpl::ResilverLoop() {
  auto log = util::Logger("media");
  while (true) {
    {
      absl::MutexLock l(&resilver_mu_);
      if (shutdown_ || !resilver_wanted_) {
        resilver_running_ = false;
        return;
      }
      resilver_wanted_ = false;
    }
    std::vector<std::pair<int, uint64_t>> targets;
    std::vector<std::string> names;
    {
      absl::ReaderMutexLock l(&mu_);
      for (size_t i = 0; i < members_.size(); ++i) {
        if (members_[i]->media && members_[i]->state == MemberState::kResilvering) {
          targets.emplace_back(int(i), members_[i]->incarnation);
          names.push_back(members_[i]->name);
        }
      }
    }
    if (targets.empty()) continue;
    {
      absl::MutexLock l(&resilver_mu_);
      resilver_names_ = names;
      resilver_done_ = 0;
      resilver_started_ = Now();
    }
    log->info("mirror: resilvering {} ({} MiB)", absl::StrJoin(names, ", "), data_bytes_ >> 20);
    double t0 = Now();
    absl::Status s = ResilverPass(targets);
    absl::MutexLock l(&resilver_mu_);
    resilver_status_ = s;
    if (s.ok()) {
      ++resilvers_completed_;
      resilver_result_ = absl::StrFormat("resilvered %s: %d MiB in %.1f s", absl::StrJoin(names, ", "),
                                         data_bytes_ >> 20, Now() - t0);
      log->info("mirror: {}", resilver_result_);
    } else {
      resilver_result_ = absl::StrCat("resilver of ", absl::StrJoin(names, ", "), " failed: ", s.message());
      log->error("mirror: {}", resilver_result_);
    }
    resilver_names_.clear();
  }
}

absl::Status MirrorMediaImpl::ResilverPass(const std::vector<std::pair<int, uint64_t>>& targets) {
  const uint64_t chunk = kStripeBytes;
  AlignedBuffer buf(chunk);
  const double t0 = Now();
  auto still = [&](int i, uint64_t inc) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const Member& m = *members_[i];
    return m.media && m.state == MemberState::kResilvering && m.incarnation == inc;
  };
  for (uint64_t off = 0; off < data_bytes_; off += chunk) {
    if (ShuttingDown()) return absl::CancelledError("shut down; the resilver starts over at the next open");
    const uint64_t n = std::min(chunk, data_bytes_ - off);
    std::span<std::byte> b = buf.span().subspan(0, n);
    std::vector<std::pair<int, absl::Status>> failed;
    int active = 0;
    {
      StripeLock sl(this, off, n, true);
      absl::ReaderMutexLock l(&mu_);
      for (auto [i, inc] : targets) active += still(i, inc) ? 1 : 0;
      if (active == 0) return absl::AbortedError("no device left to resilver");
      bool read = false;
      for (int i : ReadOrder(off)) {
        Member& m = *members_[i];
        m.reads.fetch_add(1, std::memory_order_relaxed);
        if (m.media->Read(kLabelAreaBytes + off, b).ok()) {
          read = true;
          break;
        }
        m.read_errors.fetch_add(1, std::memory_order_relaxed);
      }
      if (!read) return absl::DataLossError(absl::StrCat("no ONLINE device could read offset ", off));
      bool zero = std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
      for (auto [i, inc] : targets) {
        if (!still(i, inc)) continue;
        Member& m = *members_[i];
        absl::Status s = zero && m.media->discard_zeroes() ? m.media->Discard(kLabelAreaBytes + off, n)
                                                           : m.media->Write(kLabelAreaBytes + off, b);
        m.writes.fetch_add(1, std::memory_order_relaxed);
        if (!s.ok()) failed.emplace_back(i, s);
      }
    }
    for (const auto& [i, s] : failed) {
      {
        absl::ReaderMutexLock l(&mu_);
        members_[i]->write_errors.fetch_add(1, std::memory_order_relaxed);
      }
      (void)Demote(i, MemberState::kFaulted, absl::StrCat("resilver write error: ", s.message()));
    }
    {
      absl::MutexLock l(&resilver_mu_);
      resilver_done_ = off + n;
    }
    if (opts_.resilver_bytes_per_sec > 0) {
      double due = t0 + double(off + n) / double(opts_.resilver_bytes_per_sec);
      double wait = due - Now();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, 1.0)));
    }
  }
  absl::MutexLock l(&mu_);
  std::vector<std::string> done;
  for (auto [i, inc] : targets) {
    if (!still(i, inc)) continue;
    Member& m = *members_[i];
    if (absl::Status s = m.media->Sync(); !s.ok()) {
      m.state = MemberState::kFaulted;
      m.reason = absl::StrCat("sync after resilver failed: ", s.message());
      continue;
    }
    m.state = MemberState::kOnline;
    m.reason.clear();
    done.push_back(m.name);
  }
  if (absl::Status s = WriteLabels(); !s.ok()) return s;
  if (done.empty()) return absl::AbortedError("no device left to resilver");
  util::Logger("media")->info("mirror {}: {} ONLINE", GuidToString(set_uuid_), absl::StrJoin(done, ", "));
  return absl::OkStatus();
}

absl::Status MirrorMediaImpl::WaitForResilver() {
  absl::MutexLock l(&resilver_mu_);
  resilver_mu_.Await(absl::Condition(+[](bool* running) { return !*running; }, &resilver_running_));
  return resilver_status_;
}

void MirrorMediaImpl::Shutdown() {
  std::thread t;
  {
    absl::MutexLock l(&resilver_mu_);
    shutdown_ = true;
    t = std::move(resilver_thread_);
  }
  if (t.joinable()) t.join();
}

}  // namespace media

absl::StatusOr<std::shared_ptr<MirrorMedia>> CreateMirror(std::vector<MirrorDevice> devices,
                                                          const MirrorOptions& opts) {
  auto m = media::MirrorMediaImpl::Create(std::move(devices), opts);
  if (!m.ok()) return m.status();
  return std::shared_ptr<MirrorMedia>(*m);
}

absl::StatusOr<std::shared_ptr<MirrorMedia>> OpenMirror(std::vector<MirrorDevice> devices,
                                                        const MirrorOptions& opts) {
  auto m = media::MirrorMediaImpl::Open(std::move(devices), opts);
  if (!m.ok()) return m.status();
  return std::shared_ptr<MirrorMedia>(*m);
}

absl::StatusOr<MirrorLabelInfo> ReadMirrorLabel(Media& media) {
  absl::StatusOr<media::Label> l = media::ReadLabel(media);
  if (!l.ok()) return l.status();
  MirrorLabelInfo info;
  info.uuid = media::GuidToString(l->set_uuid);
  info.device_guid = media::GuidToString(l->device_guid);
  info.index = l->self();
  info.generation = l->generation;
  info.data_bytes = l->data_bytes;
  for (const media::LabelMember& m : l->members)
    info.members.push_back({media::GuidToString(m.guid), m.name, media::ToDeviceState(m.state)});
  return info;
}

}  // namespace ftl
