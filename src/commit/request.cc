#include "commit/request.h"

#include "absl/synchronization/mutex.h"
#include "util/logging.h"

namespace ftl::commit {

ReqOp ReqOp::Write(uint32_t vol, Bno lba, std::vector<uint32_t> csum, const std::byte* data) {
  ReqOp r;
  r.op.type = log::OpType::kWrite;
  r.op.write.vol = vol;
  r.op.write.lba = lba;
  r.op.write.csum = std::move(csum);
  r.data = data;
  return r;
}

ReqOp ReqOp::Trim(uint32_t vol, Bno lba, Bno count) {
  ReqOp r;
  r.op.type = log::OpType::kTrim;
  r.op.trim = {vol, lba, count};
  return r;
}

ReqOp ReqOp::Reloc(std::vector<log::RelocBlock> blocks, const std::byte* data) {
  ReqOp r;
  r.op.type = log::OpType::kReloc;
  r.op.reloc.blocks = std::move(blocks);
  r.data = data;
  return r;
}

ReqOp ReqOp::Note(log::Op op) {
  ReqOp r;
  r.op = std::move(op);
  return r;
}

Bno ReqOp::count() const {
  switch (op.type) {
    case log::OpType::kWrite: return op.write.count();
    case log::OpType::kTrim: return op.trim.count;
    case log::OpType::kReloc: return Bno(op.reloc.blocks.size());
    default: return 0;
  }
}

uint32_t Request::data_blocks() const {
  uint32_t n = 0;
  for (const ReqOp& op : ops) n += op.op.data_blocks();
  return n;
}

size_t Request::payload_bytes() const {
  size_t n = 0;
  for (const ReqOp& op : ops) n += log::OpPayloadBytes(op.op);
  return n;
}

Request* MakeNoteRequest(std::vector<ReqOp> ops, bool barrier, bool frees) {
  auto* r = new Request;
  r->ops = std::move(ops);
  r->note = true;
  r->barrier = barrier;
  r->frees = frees;
  r->fua = true;  // durable when acknowledged
  return r;
}

Request* MakeMarker(std::function<void(absl::Status)> done) {
  auto* m = new Request;
  m->note = true;
  m->frees = true;
  m->fua = true;
  m->marker = true;
  m->done = [done = std::move(done)](absl::Status s) {
    // What it proves is durable already; without room for the marker only
    // the proof is missing (recovery would take damage for a torn tail).
    if (absl::IsResourceExhausted(s)) {
      util::Logger("core")->warn("no room for a durability marker: {}", s.ToString());
      s = absl::OkStatus();
    }
    done(s);
  };
  return m;
}

void FailRequests(std::vector<Request*>& batch, const absl::Status& s) {
  for (Request* r : batch) {
    r->done(s);
    delete r;
  }
  batch.clear();
}

Request* SplitToFit(Request* r, const std::function<bool(Bno)>& fits, Bno write_cut) {
  if (!r->splittable || r->ops.size() != 1) return nullptr;
  ReqOp& op = r->ops[0];
  if (op.type() == log::OpType::kTrim) return nullptr;
  const Bno count = op.count();
  if (count < 2) return nullptr;
  // A write is cut only where its LBA is a multiple of write_cut, so that
  // no cut falls inside a database page; relocations anywhere.
  const bool write = op.type() == log::OpType::kWrite;
  const Bno lba = write ? op.op.write.lba : 0;
  Bno head = 0;
  for (Bno n = count - 1; n > 0; --n) {
    if (write && (lba + n) % write_cut != 0) continue;
    if (fits(n)) {
      head = n;
      break;
    }
  }
  if (head == 0) return nullptr;
  auto* tail = new Request;
  tail->stream = r->stream;
  tail->slot = r->slot;
  tail->fua = r->fua;
  tail->splittable = true;
  const std::byte* tail_data = op.data + size_t(head) * log::kBlock;
  if (op.type() == log::OpType::kWrite) {
    log::WriteOp& w = op.op.write;
    tail->ops.push_back(ReqOp::Write(w.vol, w.lba + head,
                                     std::vector<uint32_t>(w.csum.begin() + head, w.csum.end()),
                                     tail_data));
    w.csum.resize(head);
  } else {
    auto& blocks = op.op.reloc.blocks;
    tail->ops.push_back(
        ReqOp::Reloc(std::vector<log::RelocBlock>(blocks.begin() + head, blocks.end()), tail_data));
    blocks.resize(head);
  }
  // Both parts report to the original callback once.
  struct Both {
    std::function<void(absl::Status)> done;
    absl::Mutex mu;
    int left = 2;
    absl::Status first;
  };
  auto both = std::make_shared<Both>();
  both->done = std::move(r->done);
  auto finish = [both](absl::Status s) {
    {
      absl::MutexLock l(&both->mu);
      if (!s.ok() && both->first.ok()) both->first = s;
      if (--both->left > 0) return;
    }
    both->done(both->first);
  };
  r->done = finish;
  tail->done = finish;
  return tail;
}

uint32_t RecordBlocks(const std::vector<Request*>& b, size_t n) {
  uint32_t blocks = 0;
  size_t payload = 0;
  for (size_t i = 0; i < n; ++i) {
    blocks += b[i]->data_blocks();
    payload += b[i]->payload_bytes();
  }
  return blocks + log::HeaderBlocksFor(payload);
}

}  // namespace ftl::commit
