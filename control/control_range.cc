#include "control/control_range.h"

#include "absl/strings/str_cat.h"
#include "ftl/tree_ref.h"

namespace ftl::control {
namespace {

Json AttrsJson(const std::vector<AttrExtent>& attrs) {
  Json out = Json::array();
  for (const AttrExtent& a : attrs) {
    out.push_back({{"offset", a.offset},
                   {"length", a.length},
                   {"immutable", a.immutable},
                   {"non_persistent", a.non_persistent}});
  }
  return out;
}

using SizeFields = std::initializer_list<std::pair<const char*, uint64_t*>>;
using TreeFields = std::initializer_list<std::pair<const char*, std::string*>>;

// Reads three size fields and the optional "from"/"to" tree references
// (resolved to engine names) of a range request.
absl::Status ReadRangeFields(const DaemonContext& ctx, const Json& j, const SizeFields& sizes,
                             std::string* from, std::string* to) {
  for (auto [key, field] : sizes) {
    auto v = SizeArg(j, key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  for (auto [key, field] : TreeFields{{kArgFrom, from}, {kArgTo, to}}) {
    auto s = OptStringArg(j, key);
    if (!s.ok()) return s.status();
    auto t = ResolveTree(ctx, *s);
    if (!t.ok()) return Prefixed(t.status(), absl::StrCat("\"", key, "\": "));
    *field = *t;
    if (auto tree = TreeRef::Parse(*t); tree.ok()) {
      if (absl::Status b = RequireBlock(ctx, tree->volume, "range operations are"); !b.ok()) {
        return Prefixed(b, absl::StrCat("\"", key, "\": "));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RangeOp> ParseRangeOp(const DaemonContext& ctx, const Json& j,
                                     std::optional<RangeOp::Kind> kind) {
  if (!j.is_object()) return absl::InvalidArgumentError("an operation must be a JSON object");
  RangeOp op;
  if (kind) {
    op.kind = *kind;
  } else {
    auto name = StringArg(j, kArgOp);
    if (!name.ok()) return name.status();
    if (*name == kActionClone) {
      op.kind = RangeOp::Kind::kClone;
    } else if (*name == kActionMove) {
      op.kind = RangeOp::Kind::kMove;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown \"op\" '", *name, "' (clone or move)"));
    }
  }
  if (absl::Status st = ReadRangeFields(ctx, j, {{kArgSrc, &op.src}, {kArgDst, &op.dst}, {kArgLen, &op.len}},
                                         &op.from, &op.to);
      !st.ok())
    return st;
  return op;
}

absl::StatusOr<Json> RangeSingle(const DaemonContext& ctx, const Json& r, RangeOp::Kind kind) {
  auto op = ParseRangeOp(ctx, r, kind);
  if (!op.ok()) return op.status();
  if (absl::Status s = ctx.pool->ApplyRangeOps({*op}); !s.ok()) return s;
  return Json{{"ops", 1}};
}

absl::StatusOr<Json> RangeBatch(const DaemonContext& ctx, const Json& r) {
  auto it = r.find(kArgOps);
  if (it == r.end() || !it->is_array()) {
    return absl::InvalidArgumentError("\"ops\" must be an array of operations");
  }
  if (it->empty()) return absl::InvalidArgumentError("\"ops\" is empty");
  std::vector<RangeOp> ops;
  for (size_t i = 0; i < it->size(); ++i) {
    auto op = ParseRangeOp(ctx, (*it)[i], std::nullopt);
    if (!op.ok()) return Prefixed(op.status(), absl::StrCat("ops[", i, "]: "));
    ops.push_back(*op);
  }
  if (absl::Status s = ctx.pool->ApplyRangeOps(ops); !s.ok()) return s;
  return Json{{"ops", ops.size()}};
}

absl::StatusOr<Json> RangeMerge(const DaemonContext& ctx, const Json& r) {
  MergeRequest req;
  if (absl::Status st =
          ReadRangeFields(ctx, r, {{kArgBase, &req.base}, {kArgDst, &req.dst}, {kArgLen, &req.len}},
                          &req.from, &req.to);
      !st.ok())
    return st;
  auto sources = r.find(kArgSources);
  if (sources == r.end() || !sources->is_array() || sources->empty()) {
    return absl::InvalidArgumentError("\"sources\" must be a non-empty array of offsets");
  }
  for (size_t i = 0; i < sources->size(); ++i) {
    Json one = Json::object();
    one["source"] = (*sources)[i];
    auto v = SizeArg(one, "source");
    if (!v.ok()) return Prefixed(v.status(), absl::StrCat("sources[", i, "]: "));
    req.sources.push_back(*v);
  }
  auto policy = OptStringArg(r, kArgPolicy, kPolicyFail);
  if (!policy.ok()) return policy.status();
  if (*policy == kPolicyFail) {
    req.policy = MergePolicy::kFail;
  } else if (*policy == kPolicyFirst) {
    req.policy = MergePolicy::kFirst;
  } else if (*policy == kPolicyLast) {
    req.policy = MergePolicy::kLast;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown \"policy\" '", *policy, "' (fail, first or last)"));
  }
  auto res = ctx.pool->Merge(req);
  if (!res.ok()) return res.status();
  Json taken = Json::array();
  for (size_t i = 0; i < res->taken.size(); ++i) {
    taken.push_back({{"source", i < req.sources.size() ? req.sources[i] : 0},
                     {"blocks", res->taken[i]}});
  }
  return Json{{"applied", res->applied},
              {"policy", *policy},
              {"blocks", res->blocks},
              {"unchanged", res->unchanged},
              {"taken", taken},
              {"conflicts", res->conflicts}};
}

absl::StatusOr<Json> RangeAttrsReply(const DaemonContext& ctx, const std::string& volume) {
  auto attrs = ctx.pool->RangeAttrs(volume);
  if (!attrs.ok()) return attrs.status();
  return Json{{"volume", volume}, {"attrs", AttrsJson(*attrs)}};
}

absl::StatusOr<Json> RangeSetAttr(const DaemonContext& ctx, const Json& r) {
  auto vol_arg = OptStringArg(r, kArgVolume);
  if (!vol_arg.ok()) return vol_arg.status();
  auto volume = ResolveVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  if (absl::Status b = RequireBlock(ctx, *volume, "range attributes are"); !b.ok()) return b;
  auto offset = SizeArg(r, kArgOffset);
  if (!offset.ok()) return offset.status();
  auto length = SizeArg(r, kArgLength);
  if (!length.ok()) return length.status();
  auto name = StringArg(r, kArgAttr);
  if (!name.ok()) return name.status();
  ftl::RangeAttr attr;
  if (*name == kAttrImmutable) {
    attr = ftl::RangeAttr::kImmutable;
  } else if (*name == kAttrMutable) {
    attr = ftl::RangeAttr::kMutable;
  } else if (*name == kAttrPersistent) {
    attr = ftl::RangeAttr::kPersistent;
  } else if (*name == kAttrNonPersistent || *name == "non_persistent") {
    attr = ftl::RangeAttr::kNonPersistent;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown \"attr\" '", *name, "' (immutable, mutable, persistent or non-persistent)"));
  }
  if (absl::Status s = ctx.pool->SetRangeAttr(*volume, *offset, *length, attr); !s.ok()) {
    return s;
  }
  return RangeAttrsReply(ctx, *volume);
}

absl::StatusOr<Json> RangeAttrList(const DaemonContext& ctx, const Json& r) {
  auto vol_arg = OptStringArg(r, kArgVolume);
  if (!vol_arg.ok()) return vol_arg.status();
  auto volume = ResolveVolume(ctx, *vol_arg);
  if (!volume.ok()) return volume.status();
  if (absl::Status b = RequireBlock(ctx, *volume, "range attributes are"); !b.ok()) return b;
  return RangeAttrsReply(ctx, *volume);
}

}  // namespace

void RegisterRangeCommands(ControlDispatcher* d, const DaemonContext* ctx) {
  auto actions = std::make_shared<Actions>();
  (*actions)[kActionClone] = [ctx](const Json& r) {
    return RangeSingle(*ctx, r, RangeOp::Kind::kClone);
  };
  (*actions)[kActionMove] = [ctx](const Json& r) {
    return RangeSingle(*ctx, r, RangeOp::Kind::kMove);
  };
  (*actions)[kActionBatch] = [ctx](const Json& r) { return RangeBatch(*ctx, r); };
  (*actions)[kActionMerge] = [ctx](const Json& r) { return RangeMerge(*ctx, r); };
  (*actions)[kActionAttr] = [ctx](const Json& r) { return RangeSetAttr(*ctx, r); };
  (*actions)[kActionAttrs] = [ctx](const Json& r) { return RangeAttrList(*ctx, r); };
  d->Register(kCmdRange, "range operations: action = clone|move|batch|merge|attr|attrs",
              [actions](const Json& r) { return RunAction(kCmdRange, *actions, r); });
}

}  // namespace ftl::control
