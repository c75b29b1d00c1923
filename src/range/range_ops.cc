#include "range/range_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "range/merge_plan.h"
#include "state/resolve.h"

namespace ftl::range {
namespace {

using commit::ReqOp;
using log::Bno;
using log::kNoBlock;

// Payload a header may carry (one record of at most kMaxHeaderBlocks).
constexpr size_t kMaxNotePayload = size_t(log::kMaxHeaderBlocks) * kBlockSize - 64;

absl::Status CheckAligned(const char* what, uint64_t v) {
  if (v % kBlockSize != 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %d is not a multiple of 4096", what, v));
  if (v / kBlockSize > kNoBlock - 1)
    return absl::InvalidArgumentError(absl::StrFormat("%s %d is too large", what, v));
  return absl::OkStatus();
}

ReqOp CloneReq(uint32_t src, Bno src_lba, uint32_t dst, Bno dst_lba, Bno count) {
  log::Op op;
  op.type = log::OpType::kClone;
  op.clone = {src, src_lba, dst, dst_lba, count};
  return ReqOp::Note(std::move(op));
}

ReqOp TrimReq(uint32_t vol, Bno lba, Bno count) { return ReqOp::Trim(vol, lba, count); }

absl::Status CheckPayload(const std::vector<ReqOp>& ops) {
  size_t bytes = 0;
  for (const ReqOp& op : ops) bytes += log::OpPayloadBytes(op.op);
  if (bytes > kMaxNotePayload)
    return absl::InvalidArgumentError(absl::StrFormat(
        "too many operations for one atomic note (%d bytes of at most %d; about %d moves)",
        bytes, kMaxNotePayload, kMaxNotePayload / (21 + 2 * 13)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ReqOp>> RangeOps::Build(const std::vector<RangeOp>& ops) {
  if (ops.empty()) return absl::InvalidArgumentError("no range operations given");
  std::vector<ReqOp> out;
  // Only the catalogue is read (names, sizes, flags, attributes), so the
  // committer applying a batch under map_mu_ does not hold this up.
  absl::ReaderMutexLock l(&state_->tree_meta_mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    const RangeOp& op = ops[i];
    auto fail = [&](const absl::Status& s) {
      return absl::Status(s.code(), ops.size() > 1 ? absl::StrCat("operation ", i + 1, ": ",
                                                                  s.message())
                                                   : std::string(s.message()));
    };
    for (auto [what, v] : {std::pair{"source offset", op.src}, std::pair{"destination offset", op.dst},
                           std::pair{"length", op.len}}) {
      if (absl::Status s = CheckAligned(what, v); !s.ok()) return fail(s);
    }
    if (op.len == 0) return fail(absl::InvalidArgumentError("length is zero"));
    const bool move = op.kind == RangeOp::Kind::kMove;
    absl::StatusOr<uint32_t> src = state::ResolveTree(*state_->map, op.from, !move);
    if (!src.ok()) return fail(src.status());
    absl::StatusOr<uint32_t> dst = state::ResolveTree(*state_->map, op.to, false);
    if (!dst.ok()) return fail(dst.status());
    Bno s0 = Bno(op.src / kBlockSize), d0 = Bno(op.dst / kBlockSize);
    uint64_t n64 = op.len / kBlockSize;
    if (n64 > kNoBlock - 1) return fail(absl::InvalidArgumentError("length is too large"));
    Bno n = Bno(n64);
    std::vector<ReqOp> piece;
    piece.push_back(CloneReq(*src, s0, *dst, d0, n));
    if (move) {
      // The source reads as zeros afterwards, except where the destination
      // overlaps it (that part holds the moved data).
      uint64_t a = s0, b = uint64_t(s0) + n;
      uint64_t c = d0, d = uint64_t(d0) + n;
      if (*src != *dst || d <= a || c >= b) {
        piece.push_back(TrimReq(*src, s0, n));
      } else {
        if (c > a) piece.push_back(TrimReq(*src, s0, Bno(c - a)));
        if (b > d) piece.push_back(TrimReq(*src, Bno(d), Bno(b - d)));
      }
    }
    for (ReqOp& r : piece) {
      if (absl::Status s = state_->map->ValidateNote(r.op); !s.ok()) return fail(s);
      out.push_back(std::move(r));
    }
  }
  if (absl::Status s = CheckPayload(out); !s.ok()) return s;
  return out;
}

absl::Status RangeOps::Apply(const std::vector<RangeOp>& ops) {
  absl::StatusOr<std::vector<ReqOp>> req = Build(ops);
  if (!req.ok()) return req.status();
  if (absl::Status s = metadata_room_(16); !s.ok()) return s;
  return committer_->SubmitNotes(std::move(*req), false);
}

void RangeOps::ApplyAsync(const std::vector<RangeOp>& ops,
                                  std::function<void(absl::Status)> done) {
  absl::StatusOr<std::vector<ReqOp>> req = Build(ops);
  if (!req.ok()) return done(req.status());
  if (absl::Status s = metadata_room_(16);
      !s.ok())
    return done(s);
  commit::Request* r = commit::MakeNoteRequest(std::move(*req), false);
  r->done = std::move(done);
  committer_->Submit(r);
}

absl::StatusOr<MergeResult> RangeOps::Merge(const MergeRequest& req) {
  if (req.sources.empty()) return absl::InvalidArgumentError("merge needs at least one source");
  for (auto [what, v] : {std::pair{"base offset", req.base}, std::pair{"destination offset", req.dst},
                         std::pair{"length", req.len}}) {
    if (absl::Status s = CheckAligned(what, v); !s.ok()) return s;
  }
  for (uint64_t s : req.sources)
    if (absl::Status st = CheckAligned("source offset", s); !st.ok()) return st;
  if (req.len == 0) return absl::InvalidArgumentError("length is zero");
  const Bno n = Bno(std::min<uint64_t>(req.len / kBlockSize, kNoBlock - 1));
  MergeResult result;
  result.blocks = n;
  std::vector<ReqOp> ops;
  {
    absl::ReaderMutexLock l(&state_->map_mu);
    absl::StatusOr<uint32_t> from = state::ResolveTree(*state_->map, req.from, true);
    if (!from.ok()) return from.status();
    absl::StatusOr<uint32_t> to = state::ResolveTree(*state_->map, req.to, false);
    if (!to.ok()) return to.status();
    const state::VolumeMeta* src = state_->map->volume(*from);
    const Bno base = Bno(req.base / kBlockSize), dst = Bno(req.dst / kBlockSize);
    auto in_range = [&](uint64_t b) { return b + n <= src->size_blocks; };
    if (!in_range(base)) return absl::OutOfRangeError("base range is past the end of the source");
    for (uint64_t s : req.sources)
      if (!in_range(s / kBlockSize))
        return absl::OutOfRangeError(absl::StrFormat("source range at %d is past the end", s));
    auto overlaps = [&](uint64_t a, uint64_t b) { return a < b + n && b < a + n; };
    if (*from == *to) {
      // The merge is applied as clones in order: the destination may be the
      // base itself, but must not overlap a source or a part of the base.
      for (uint64_t s : req.sources)
        if (overlaps(s / kBlockSize, dst))
          return absl::InvalidArgumentError("the destination overlaps a source range");
      if (overlaps(base, dst) && base != dst)
        return absl::InvalidArgumentError("the destination overlaps the base range (use the base itself or a disjoint range)");
    }
    auto blocks_of = [&](Bno at) {
      std::vector<Bno> v(n, kNoBlock);
      std::vector<map::Extent> ext;
      src->tree.Lookup(at, n, &ext);
      for (const map::Extent& e : ext)
        for (Bno k = 0; k < e.len; ++k) v[e.lba - at + k] = e.vba + k;
      return v;
    };
    std::vector<Bno> base_v = blocks_of(base);
    std::vector<std::vector<Bno>> srcs;
    for (uint64_t s : req.sources) srcs.push_back(blocks_of(Bno(s / kBlockSize)));
    range::Policy policy = req.policy == MergePolicy::kFail    ? range::Policy::kFail
                           : req.policy == MergePolicy::kFirst ? range::Policy::kFirst
                                                               : range::Policy::kLast;
    range::MergePlan plan = range::PlanMerge(base_v, srcs, policy);
    for (Bno c : plan.conflicts) result.conflicts.push_back(uint64_t(c) * kBlockSize);
    if (policy == range::Policy::kFail && !plan.conflicts.empty()) return result;
    result.taken = plan.taken;
    result.unchanged = plan.unchanged;
    for (const range::MergeRun& run : plan.runs) {
      Bno from_lba = run.source < 0 ? base : Bno(req.sources[size_t(run.source)] / kBlockSize);
      if (run.source < 0 && *from == *to && base == dst) continue;  // already there
      ops.push_back(CloneReq(*from, from_lba + run.offset, *to, dst + run.offset, run.count));
    }
    for (const ReqOp& op : ops)
      if (absl::Status s = state_->map->ValidateNote(op.op); !s.ok()) return s;
    if (absl::Status s = CheckPayload(ops); !s.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("merge result too fragmented for one atomic note: ", s.message()));
  }
  if (!ops.empty()) {
    if (absl::Status s = metadata_room_(16);
        !s.ok())
      return s;
    if (absl::Status s = committer_->SubmitNotes(std::move(ops), false); !s.ok()) return s;
  }
  result.applied = true;
  return result;
}

}  // namespace ftl::range
