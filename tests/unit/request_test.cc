// commit::Request and ReqOp on their own: the op factories, block and
// payload counts (equal to the log format's), splitting at a segment's
// end, record sizes, markers and failing a batch.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "commit/request.h"
#include "log/log_format.h"
#include "part_test_util.h"

namespace ftl::commit {
namespace {

using log::Bno;

std::vector<uint32_t> Csums(Bno n, uint32_t base = 1) {
  std::vector<uint32_t> c;
  for (Bno i = 0; i < n; ++i) c.push_back(base + i);
  return c;
}

std::vector<log::RelocBlock> RelocBlocks(Bno n, uint32_t vol = 3) {
  std::vector<log::RelocBlock> b;
  for (Bno i = 0; i < n; ++i) b.push_back({100 + i, 200 + i, 300 + i, 40 + i, vol, 500 + i});
  return b;
}

log::Op Note(log::OpType t) {
  log::Op op;
  op.type = t;
  if (t == log::OpType::kTree) op.tree.name = "snap";
  return op;
}

// Calls and the status of each call a callback got.
struct Calls {
  std::vector<absl::Status> got;
  std::function<void(absl::Status)> cb() {
    return [this](absl::Status s) { got.push_back(s); };
  }
};

TEST(ReqOpTest, Factories) {
  std::vector<std::byte> data(3 * kBlockSize);
  ReqOp w = ReqOp::Write(7, 100, Csums(3), data.data());
  EXPECT_EQ(w.type(), log::OpType::kWrite);
  EXPECT_EQ(w.count(), 3u);
  EXPECT_EQ(w.vol(), 7u);
  EXPECT_EQ(w.lba(), 100u);
  EXPECT_EQ(w.data, data.data());
  EXPECT_EQ(w.op.write.csum, Csums(3));
  EXPECT_TRUE(w.op.write.vba.empty());  // planned by the committer
  EXPECT_EQ(w.op.data_blocks(), 3u);

  ReqOp t = ReqOp::Trim(2, 50, 9);
  EXPECT_EQ(t.type(), log::OpType::kTrim);
  EXPECT_EQ(t.count(), 9u);
  EXPECT_EQ(t.vol(), 2u);
  EXPECT_EQ(t.lba(), 50u);
  EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(t.op.data_blocks(), 0u);

  ReqOp r = ReqOp::Reloc(RelocBlocks(4), data.data());
  EXPECT_EQ(r.type(), log::OpType::kReloc);
  EXPECT_EQ(r.count(), 4u);
  EXPECT_EQ(r.op.data_blocks(), 4u);
  EXPECT_EQ(r.op.reloc.blocks[2].vba, 102u);

  for (log::OpType nt : {log::OpType::kTree, log::OpType::kDrop, log::OpType::kRollback,
                         log::OpType::kClone, log::OpType::kAttr}) {
    ReqOp n = ReqOp::Note(Note(nt));
    EXPECT_EQ(n.type(), nt);
    EXPECT_EQ(n.count(), 0u);
    EXPECT_EQ(n.op.data_blocks(), 0u);
    EXPECT_EQ(n.data, nullptr);
  }
}

TEST(RequestTest, BlocksAndPayloadAreTheLogFormats) {
  std::vector<std::byte> data(20 * kBlockSize);
  Request r;
  r.ops.push_back(ReqOp::Write(0, 0, Csums(5), data.data()));
  r.ops.push_back(ReqOp::Trim(0, 10, 4));
  r.ops.push_back(ReqOp::Reloc(RelocBlocks(3), data.data()));
  r.ops.push_back(ReqOp::Write(1, 9, Csums(2), data.data()));
  EXPECT_EQ(r.data_blocks(), 5u + 3u + 2u);
  size_t payload = 0;
  for (const ReqOp& op : r.ops) payload += log::OpPayloadBytes(op.op);
  EXPECT_EQ(r.payload_bytes(), payload);
  EXPECT_EQ(log::OpPayloadBytes(r.ops[0].op), log::WritePayloadBytes(5));
  EXPECT_EQ(log::OpPayloadBytes(r.ops[2].op),
            log::RelocPayloadBytes(std::span(r.ops[2].op.reloc.blocks)));
  // The payload is what an encoded header carries.
  log::RecordHeader h;
  for (const ReqOp& op : r.ops) {
    h.ops.push_back(op.op);
    if (op.type() == log::OpType::kWrite) h.ops.back().write.vba.assign(op.count(), 1);
  }
  std::vector<std::byte> buf(size_t(log::kMaxHeaderBlocks) * kBlockSize);
  log::EncodeRecordHeader(h, buf);
  EXPECT_EQ(h.header_blocks, log::HeaderBlocksFor(r.payload_bytes()));
  EXPECT_EQ(h.data_blocks, r.data_blocks());
  uint32_t payload_len = 0;
  std::memcpy(&payload_len, buf.data() + 12, 4);  // the header's payload_len
  EXPECT_EQ(payload_len, r.payload_bytes());
}

TEST(RequestTest, BatchClasses) {
  Request data;
  EXPECT_EQ(data.batch_class(), 0);
  Request* range = MakeNoteRequest({ReqOp::Note(Note(log::OpType::kClone))}, /*barrier=*/false);
  EXPECT_EQ(range->batch_class(), 1);
  Request* cat = MakeNoteRequest({ReqOp::Note(Note(log::OpType::kTree))}, /*barrier=*/true);
  EXPECT_EQ(cat->batch_class(), 2);
  delete range;
  delete cat;
}

TEST(RequestTest, NoteRequestsAreDurableWhenAcknowledged) {
  std::unique_ptr<Request> r(MakeNoteRequest(
      {ReqOp::Note(Note(log::OpType::kDrop)), ReqOp::Note(Note(log::OpType::kDrop))},
      /*barrier=*/true, /*frees=*/true));
  EXPECT_TRUE(r->note);
  EXPECT_TRUE(r->barrier);
  EXPECT_TRUE(r->frees);
  EXPECT_TRUE(r->fua);
  EXPECT_FALSE(r->marker);
  EXPECT_FALSE(r->splittable);
  EXPECT_EQ(r->ops.size(), 2u);
  EXPECT_EQ(r->data_blocks(), 0u);
  std::unique_ptr<Request> plain(MakeNoteRequest({ReqOp::Note(Note(log::OpType::kClone))}, false));
  EXPECT_FALSE(plain->frees);
  EXPECT_FALSE(plain->barrier);
}

TEST(RequestTest, MarkerTurnsNoRoomIntoSuccess) {
  Calls calls;
  std::unique_ptr<Request> m(MakeMarker(calls.cb()));
  EXPECT_TRUE(m->marker);
  EXPECT_TRUE(m->frees);  // may take the freeing reserve
  EXPECT_TRUE(m->fua);
  EXPECT_TRUE(m->note);
  EXPECT_TRUE(m->ops.empty());
  EXPECT_EQ(m->payload_bytes(), 0u);
  m->done(absl::ResourceExhaustedError("full"));
  m->done(absl::DataLossError("media"));
  m->done(absl::OkStatus());
  ASSERT_EQ(calls.got.size(), 3u);
  EXPECT_TRUE(calls.got[0].ok()) << calls.got[0];  // the data is durable; only the proof is missing
  EXPECT_TRUE(absl::IsDataLoss(calls.got[1]));
  EXPECT_TRUE(calls.got[2].ok());
}

TEST(RequestTest, FailRequestsCompletesAndDeletesEach) {
  auto token = std::make_shared<int>(0);
  std::vector<absl::Status> got;
  std::vector<Request*> batch;
  for (int i = 0; i < 3; ++i) {
    auto* r = new Request;
    r->done = [&got, token](absl::Status s) { got.push_back(s); };
    batch.push_back(r);
  }
  EXPECT_EQ(token.use_count(), 4);
  FailRequests(batch, absl::UnavailableError("closing"));
  EXPECT_TRUE(batch.empty());
  ASSERT_EQ(got.size(), 3u);
  for (const absl::Status& s : got) EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(token.use_count(), 1);  // the requests (and their callbacks) are gone
}

// ---- SplitToFit

class SplitTest : public ::testing::Test {
 protected:
  Request* Splittable(ReqOp op) {
    auto* r = new Request;
    r->splittable = true;
    r->fua = true;
    r->slot = gc::Slot::kHot;
    r->ops.push_back(std::move(op));
    r->done = calls_.cb();
    return r;
  }
  std::vector<std::byte> data_ = std::vector<std::byte>(40 * kBlockSize);
  Calls calls_;
};

TEST_F(SplitTest, AWriteIsCutAtTheLargestAlignedHeadThatFits) {
  // Cuts fall only where the LBA is a multiple of 16 blocks (64 KiB): at
  // LBA 10 a head of 6, 22 or 38 blocks.
  std::unique_ptr<Request> r(Splittable(ReqOp::Write(4, 10, Csums(40), data_.data())));
  std::vector<Bno> asked;
  std::unique_ptr<Request> tail(SplitToFit(r.get(), [&](Bno n) {
    asked.push_back(n);
    return n <= 30;
  }, 16));
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(asked, (std::vector<Bno>{38, 22}));  // largest first, aligned only
  EXPECT_EQ(r->ops[0].count(), 22u);
  EXPECT_EQ(r->ops[0].lba(), 10u);
  EXPECT_EQ(r->ops[0].op.write.csum, Csums(22));
  EXPECT_EQ(r->ops[0].data, data_.data());
  ASSERT_EQ(tail->ops.size(), 1u);
  EXPECT_EQ(tail->ops[0].type(), log::OpType::kWrite);
  EXPECT_EQ(tail->ops[0].vol(), 4u);
  EXPECT_EQ(tail->ops[0].lba(), 32u);
  EXPECT_EQ(tail->ops[0].op.write.csum, Csums(18, 23));
  EXPECT_EQ(tail->ops[0].data, data_.data() + 22 * kBlockSize);
  EXPECT_TRUE(tail->splittable);
  EXPECT_TRUE(tail->fua);
  EXPECT_EQ(tail->slot, gc::Slot::kHot);
  EXPECT_EQ(tail->stream, r->stream);
  EXPECT_EQ(r->data_blocks() + tail->data_blocks(), 40u);
}

TEST_F(SplitTest, AWriteWithoutAnAlignedCutThatFitsIsNotCut) {
  // LBA 100, 10 blocks: the only aligned cut is at 112, past its end.
  std::unique_ptr<Request> r(Splittable(ReqOp::Write(4, 100, Csums(10), data_.data())));
  EXPECT_EQ(SplitToFit(r.get(), [](Bno n) { return n <= 7; }, 16), nullptr);
  EXPECT_EQ(r->ops[0].count(), 10u);
  // LBA 10, 40 blocks, room for 20: the aligned heads 22 and 38 do not fit,
  // and 6 does.
  std::unique_ptr<Request> w(Splittable(ReqOp::Write(4, 10, Csums(40), data_.data())));
  std::unique_ptr<Request> tail(SplitToFit(w.get(), [](Bno n) { return n <= 20; }, 16));
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(w->ops[0].count(), 6u);
  EXPECT_EQ(tail->ops[0].lba(), 16u);
  w->done(absl::OkStatus());
  tail->done(absl::OkStatus());
}

TEST_F(SplitTest, BothPartsReportOnceWithTheFirstError) {
  std::unique_ptr<Request> r(Splittable(ReqOp::Write(0, 14, Csums(4), data_.data())));
  std::unique_ptr<Request> tail(SplitToFit(r.get(), [](Bno n) { return n <= 2; }, 16));
  ASSERT_NE(tail, nullptr);
  tail->done(absl::DataLossError("first"));
  EXPECT_TRUE(calls_.got.empty());  // waits for the other part
  r->done(absl::UnavailableError("second"));
  ASSERT_EQ(calls_.got.size(), 1u);
  EXPECT_TRUE(absl::IsDataLoss(calls_.got[0])) << calls_.got[0];
}

TEST_F(SplitTest, BothPartsOkReportOk) {
  std::unique_ptr<Request> r(Splittable(ReqOp::Write(0, 14, Csums(4), data_.data())));
  std::unique_ptr<Request> tail(SplitToFit(r.get(), [](Bno n) { return n <= 3; }, 16));
  ASSERT_NE(tail, nullptr);
  r->done(absl::OkStatus());
  EXPECT_TRUE(calls_.got.empty());
  tail->done(absl::OkStatus());
  ASSERT_EQ(calls_.got.size(), 1u);
  EXPECT_TRUE(calls_.got[0].ok());
}

TEST_F(SplitTest, ARelocationIsCutBlockByBlock) {
  std::unique_ptr<Request> r(Splittable(ReqOp::Reloc(RelocBlocks(6), data_.data())));
  r->stream = log::Stream::kRelocation;
  r->slot = gc::Slot::kGc;
  std::unique_ptr<Request> tail(SplitToFit(r.get(), [](Bno n) { return n <= 4; }, 16));
  ASSERT_NE(tail, nullptr);
  ASSERT_EQ(r->ops[0].op.reloc.blocks.size(), 4u);
  ASSERT_EQ(tail->ops[0].op.reloc.blocks.size(), 2u);
  EXPECT_EQ(tail->ops[0].op.reloc.blocks[0].vba, 104u);
  EXPECT_EQ(tail->ops[0].data, data_.data() + 4 * kBlockSize);
  EXPECT_EQ(tail->stream, log::Stream::kRelocation);
  EXPECT_EQ(tail->slot, gc::Slot::kGc);
  r->done(absl::OkStatus());
  tail->done(absl::OkStatus());
  EXPECT_EQ(calls_.got.size(), 1u);
}

TEST_F(SplitTest, RefusedWhenItCannotOrMustNotBeCut) {
  auto unchanged = [](Request* r, Bno n) {
    EXPECT_EQ(r->ops[0].count(), n);
  };
  // Nothing fits.
  std::unique_ptr<Request> w(Splittable(ReqOp::Write(0, 0, Csums(5), data_.data())));
  EXPECT_EQ(SplitToFit(w.get(), [](Bno) { return false; }, 16), nullptr);
  unchanged(w.get(), 5);
  // One block cannot be cut.
  std::unique_ptr<Request> one(Splittable(ReqOp::Write(0, 0, Csums(1), data_.data())));
  EXPECT_EQ(SplitToFit(one.get(), [](Bno) { return true; }, 16), nullptr);
  // Not splittable (an atomic write).
  std::unique_ptr<Request> atomic(Splittable(ReqOp::Write(0, 0, Csums(5), data_.data())));
  atomic->splittable = false;
  EXPECT_EQ(SplitToFit(atomic.get(), [](Bno) { return true; }, 16), nullptr);
  unchanged(atomic.get(), 5);
  // Trims are never cut.
  std::unique_ptr<Request> trim(Splittable(ReqOp::Trim(0, 0, 50)));
  EXPECT_EQ(SplitToFit(trim.get(), [](Bno) { return true; }, 16), nullptr);
  unchanged(trim.get(), 50);
  // Nor requests of several ops.
  std::unique_ptr<Request> two(Splittable(ReqOp::Write(0, 0, Csums(5), data_.data())));
  two->ops.push_back(ReqOp::Write(0, 10, Csums(5), data_.data()));
  EXPECT_EQ(SplitToFit(two.get(), [](Bno) { return true; }, 16), nullptr);
  unchanged(two.get(), 5);
  // The original callback is still the caller's own.
  w->done(absl::OkStatus());
  EXPECT_EQ(calls_.got.size(), 1u);
}

TEST(RecordBlocksTest, DataPlusHeaderBlocksOfTheFirstN) {
  std::vector<std::byte> data(1000 * kBlockSize);
  std::vector<std::unique_ptr<Request>> own;
  std::vector<Request*> b;
  auto add = [&](ReqOp op) {
    own.push_back(std::make_unique<Request>());
    own.back()->ops.push_back(std::move(op));
    b.push_back(own.back().get());
  };
  add(ReqOp::Write(0, 0, Csums(1), data.data()));
  add(ReqOp::Write(0, 5, Csums(2), data.data()));
  add(ReqOp::Trim(0, 9, 100));
  EXPECT_EQ(RecordBlocks(b, 0), 1u);  // a header alone (a marker)
  EXPECT_EQ(RecordBlocks(b, 1), 1u + 1u);
  EXPECT_EQ(RecordBlocks(b, 2), 3u + 1u);
  EXPECT_EQ(RecordBlocks(b, 3), 3u + 1u);  // a trim adds no data
  // A write whose payload needs a second header block.
  add(ReqOp::Write(0, 1000, Csums(600), data.data()));
  const size_t payload = log::WritePayloadBytes(1) + log::WritePayloadBytes(2) +
                         log::OpPayloadBytes(b[2]->ops[0].op) + log::WritePayloadBytes(600);
  ASSERT_EQ(log::HeaderBlocksFor(payload), 2u);
  EXPECT_EQ(RecordBlocks(b, 4), 603u + 2u);
}

}  // namespace
}  // namespace ftl::commit
