#pragma once
// Request: the unit of group commit. Every change to a pool — a volume's
// write, trim or write-zeroes, a relocation of the cleaner, a note of the
// snapshot catalogue or a range operation, a durability marker — is a
// Request of log ops (log/log_format.h: log::Op, the one op vocabulary
// from request to record). All of a request's ops land in one record
// (atomic). The committer (commit/committer.h) batches requests into
// records; a request's `done` runs once, when its record is applied (and
// durable if it asked for FUA), or with the error that refused it.
//
// Thread safety: a Request belongs to its submitter until submitted, then
// to the committer, which deletes it after running `done`.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "gc/placement.h"
#include "log/log_format.h"

namespace ftl::commit {

using log::Bno;

// One op of a request: the log op it becomes, and where its data blocks
// are (writes and relocations: op.data_blocks() blocks, valid until the
// request is done). A write's VBAs are planned by the committer.
struct ReqOp {
  log::Op op;
  const std::byte* data = nullptr;

  static ReqOp Write(uint32_t vol, Bno lba, std::vector<uint32_t> csum, const std::byte* data);
  static ReqOp Trim(uint32_t vol, Bno lba, Bno count);
  static ReqOp Reloc(std::vector<log::RelocBlock> blocks, const std::byte* data);
  // A note op (TREE, DROP, ROLLBACK, CLONE, ATTR, DATASET).
  static ReqOp Note(log::Op op);

  log::OpType type() const { return op.type; }
  // Blocks a write, trim or relocation covers.
  Bno count() const;
  // The (vol, lba) range of a write or trim.
  uint32_t vol() const { return op.type == log::OpType::kTrim ? op.trim.vol : op.write.vol; }
  Bno lba() const { return op.type == log::OpType::kTrim ? op.trim.lba : op.write.lba; }
};

struct Request {
  log::Stream stream = log::Stream::kUser;
  // The open segment it goes to (gc/placement.h). Relocations: chosen by
  // the cleaner; user requests: by the committer (SlotClassifier).
  gc::Slot slot = gc::Slot::kCold;
  std::vector<ReqOp> ops;
  bool fua = false;
  // A part of a write larger than the atomic size: the writer may cut it at
  // a segment boundary (it was never atomic as a whole).
  bool splittable = false;
  // A metadata request: its ops are notes (plus the TRIMs of a move). The
  // committer validates them against the current state right before writing
  // (MapState::ValidateNote) and never mixes them with data writes in one
  // record (a write's VBA choice must see the notes before it).
  bool note = false;
  // A catalogue change (TREE, DROP, ROLLBACK, ATTR, DATASET): committed alone.
  bool barrier = false;
  // It frees space or proves durability (a trim, punching write-zeroes,
  // snapshot delete, deactivate, rollback, a durability marker): it may
  // take the segment that other user requests leave free for it, so it
  // succeeds on a full pool (README "Full device"). Never batched with
  // requests that do not free.
  bool frees = false;
  // A durability marker (log/durability.h): no ops; its record, once
  // synced, proves durable every record before it that a sync covered.
  // Queued apart from user requests (never blocked behind them).
  bool marker = false;
  std::function<void(absl::Status)> done;

  uint32_t data_blocks() const;
  // Header payload of its ops (log::OpPayloadBytes).
  size_t payload_bytes() const;
  // Batch class: 0 data, 1 range notes, 2 catalogue (alone).
  int batch_class() const { return note ? (barrier ? 2 : 1) : 0; }
};

// A metadata request of note ops, durable when acknowledged. `frees`: it
// frees space (Request::frees).
Request* MakeNoteRequest(std::vector<ReqOp> ops, bool barrier, bool frees = false);
// A durability marker; `done` gets OK also when there was no room for it
// (the proof is missing, with a warning; the data is durable).
Request* MakeMarker(std::function<void(absl::Status)> done);
// Runs `done(s)` of each and deletes them; clears `batch`.
void FailRequests(std::vector<Request*>& batch, const absl::Status& s);
// A splittable write (a part of a write above the atomic size) is cut at a
// segment's end only at LBAs that are multiples of this: 64 KiB, the
// largest database page, on segments of 1 MiB and more (the default is
// 4 MiB); a sixteenth of a segment on smaller ones, so that cuts still
// fill segment tails (docs/decisions.md, "Splits at aligned boundaries").
inline Bno WriteCutBlocks(uint32_t segment_blocks) {
  return std::clamp<Bno>(segment_blocks / 16, 1, 16);
}
// Cuts a splittable single-op request to the largest head of n blocks for
// which fits(n) holds (a write: only at a multiple of `write_cut` blocks);
// returns the tail (nullptr if it cannot be cut). Both parts report to the
// original callback, once.
Request* SplitToFit(Request* r, const std::function<bool(Bno)>& fits, Bno write_cut);
// Blocks of a record holding the first n requests of b.
uint32_t RecordBlocks(const std::vector<Request*>& b, size_t n);

}  // namespace ftl::commit
