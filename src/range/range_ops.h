#pragma once
// RangeOps: the front end of range operations — clone, move and merge
// (include/ftl/range.h) turned into note ops (CLONE, plus the TRIMs of a
// move's source), checked against the current catalogue and committed as
// one record (all or nothing). Range notes of concurrent callers are
// group-committed into shared records.
//
// Thread safety: safe from any thread, never in the commit role. Checks
// clone and move input under PoolState::tree_meta_mu alone (shared), so a
// committer applying a batch under map_mu does not hold it up; merge reads
// the trees' mappings under map_mu shared.

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "commit/committer.h"
#include "ftl/range.h"
#include "state/pool_state.h"

namespace ftl::range {

class RangeOps {
 public:
  // `metadata_room(divisor)`: as in snap::Catalogue.
  RangeOps(state::PoolState* state, commit::Committer* committer,
           std::function<absl::Status(uint32_t)> metadata_room)
      : state_(state), committer_(committer), metadata_room_(std::move(metadata_room)) {}

  absl::Status Apply(const std::vector<RangeOp>& ops);
  void ApplyAsync(const std::vector<RangeOp>& ops, std::function<void(absl::Status)> done);
  absl::StatusOr<MergeResult> Merge(const MergeRequest& req);

 private:
  // Turns range ops into note ops (a move = clone + trims of the source
  // outside the destination), checking each against the current state.
  absl::StatusOr<std::vector<commit::ReqOp>> Build(const std::vector<RangeOp>& ops);

  state::PoolState* state_;
  commit::Committer* committer_;
  std::function<absl::Status(uint32_t)> metadata_room_;
};

}  // namespace ftl::range
