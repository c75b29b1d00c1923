// Key-value store (src/kv): formats, the tree against a std::map model,
// in-page logging counters, bombs, merges, buffer eviction, batches.
// These run the store on MemVolume, a plain in-memory Volume (every write
// lands at once, WriteAtomic included), so that counts are exact and
// the store's own logic is tested alone; tests/crash/kv_crash_test.cc runs
// it on a real pool over FaultMedia.

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ftl/kv.h"
#include "ftl/pool.h"
#include "kv/diff_log.h"
#include "kv/kv_format.h"
#include "kv/page.h"
#include "status_asserts.h"
#include "util/checksum.h"
#include "util/encoding.h"

namespace ftl {
namespace {

class MemVolume : public Volume {
 public:
  explicit MemVolume(uint64_t blocks) : blocks_(blocks) {}
  const std::string& name() const override { return name_; }
  uint64_t size_bytes() const override { return blocks_ * 4096; }
  bool read_only() const override { return false; }
  DatasetKind kind() const override { return DatasetKind::kKv; }
  absl::Status Read(uint64_t offset, std::span<std::byte> out) override {
    for (size_t i = 0; i < out.size(); i += 4096) {
      auto it = data_.find((offset + i) / 4096);
      if (it == data_.end()) std::memset(out.data() + i, 0, 4096);
      else std::memcpy(out.data() + i, it->second.data(), 4096);
    }
    return absl::OkStatus();
  }
  absl::Status Write(uint64_t offset, std::span<const std::byte> d, bool) override {
    for (size_t i = 0; i < d.size(); i += 4096)
      data_[(offset + i) / 4096].assign(d.begin() + long(i), d.begin() + long(i) + 4096);
    written_ += d.size();
    return absl::OkStatus();
  }
  void WriteAsync(uint64_t o, std::span<const std::byte> d, bool f, Callback done) override {
    done(Write(o, d, f));
  }
  absl::Status WriteAtomic(std::span<const Piece> pieces, bool fua) override {
    uint64_t total = 0;
    for (const Piece& p : pieces) total += p.data.size();
    if (total > max_atomic) return absl::InvalidArgumentError("too large");
    for (const Piece& p : pieces) (void)Write(p.offset, p.data, fua);
    ++atomic_writes;
    return absl::OkStatus();
  }
  absl::Status Trim(uint64_t offset, uint64_t length, bool) override {
    for (uint64_t b = offset / 4096; b < (offset + length) / 4096; ++b) data_.erase(b);
    return absl::OkStatus();
  }
  absl::Status WriteZeroes(uint64_t o, uint64_t l, bool f, bool, bool) override { return Trim(o, l, f); }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<BlockExtent>> BlockStatus(uint64_t, uint64_t) override {
    return absl::UnimplementedError("");
  }
  VolumeStats Stats() const override { return {}; }
  size_t mapped() const { return data_.size(); }
  size_t mapped_in(uint64_t lo, uint64_t hi) const {
    return size_t(std::distance(data_.lower_bound(lo), data_.lower_bound(hi)));
  }
  uint64_t written_ = 0;
  uint64_t atomic_writes = 0;
  uint64_t max_atomic = 1 << 20;

 private:
  std::string name_ = "kvtest";
  uint64_t blocks_;
  std::map<uint64_t, std::vector<std::byte>> data_;
};

std::string Key(int i) {
  char b[32];
  std::snprintf(b, sizeof b, "key%08d", i);
  return b;
}

TEST(KvFormat, HeaderRoundTripAndChecks) {
  ASSERT_OK_AND_ASSIGN(kv::Layout l, kv::Layout::Plan(KvGeometry{}, 1 << 20));
  std::vector<std::byte> h = kv::EncodeHeader(l);
  ASSERT_OK_AND_ASSIGN(kv::Layout d, kv::DecodeHeader(h));
  EXPECT_EQ(d.unit_base, l.unit_base);
  EXPECT_EQ(d.unit_count, l.unit_count);
  EXPECT_EQ(d.geo.pages_per_unit, 28u);
  EXPECT_EQ(d.geo.unit_blocks(), 32u);  // 28 pages + 32 sectors = 4 blocks
  h[20] ^= std::byte{1};
  EXPECT_TRUE(absl::IsDataLoss(kv::DecodeHeader(h).status()));
  std::vector<std::byte> zero(4096);
  EXPECT_TRUE(absl::IsNotFound(kv::DecodeHeader(zero).status()));
}

TEST(KvFormat, GeometryParseAndValidate) {
  ASSERT_OK_AND_ASSIGN(KvGeometry g, KvGeometry::Parse("pages=24,sectors=48,per-page=2"));
  EXPECT_EQ(g.sectors_per_page, 2u);
  EXPECT_EQ(KvGeometry::Parse(g.ToString())->ToString(), g.ToString());
  EXPECT_FALSE(KvGeometry::Parse("pages=28,sectors=16").ok());  // fewer sectors than pages
  EXPECT_FALSE(KvGeometry::Parse("page=5000").ok());
  EXPECT_FALSE(KvGeometry::Parse("bogus=1").ok());
  EXPECT_FALSE(KvGeometry::Parse("pages").ok());
}

TEST(KvFormat, PageAndLogRoundTrip) {
  kv::PageImage p;
  p.type = kv::PageType::kLeaf;
  p.epoch = 7;
  p.meta.next_page = 9;
  p.entries.push_back({"a", "1", std::nullopt, kv::kNoPage});
  p.entries.push_back({"b", "", kv::BlobRef{100, 5000, 42}, kv::kNoPage});
  std::vector<std::byte> buf(4096);
  kv::EncodePage(p, buf);
  ASSERT_OK_AND_ASSIGN(kv::PageImage d, kv::DecodePage(buf));
  EXPECT_EQ(d.epoch, 7u);
  EXPECT_EQ(d.meta.next_page, 9u);
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.entries[1].blob->len, 5000u);
  EXPECT_EQ(kv::Page(d).bytes(), kv::Page(p).bytes());

  std::vector<std::byte> area(512);
  kv::LogEntry e1{kv::LogOp::kPut, "k", "v", {}, kv::kNoPage, {}};
  kv::LogEntry e2{kv::LogOp::kTrunc, "m", "", {}, kv::kNoPage, {}};
  auto b1 = kv::EncodeLogEntry(e1), b2 = kv::EncodeLogEntry(e2);
  std::memcpy(area.data() + kv::kLogHeaderBytes, b1.data(), b1.size());
  std::memcpy(area.data() + kv::kLogHeaderBytes + b1.size(), b2.data(), b2.size());
  kv::PutLogHeader(area, 7, b1.size() + b2.size());
  ASSERT_OK_AND_ASSIGN(kv::LogArea a, kv::DecodeLogArea(area));
  EXPECT_EQ(a.epoch, 7u);
  ASSERT_EQ(a.entries.size(), 2u);
  EXPECT_EQ(a.entries[1].op, kv::LogOp::kTrunc);
  area[kv::kLogHeaderBytes] = std::byte{99};
  EXPECT_TRUE(absl::IsDataLoss(kv::DecodeLogArea(area).status()));
}

TEST(KvPage, ApplyAndSplit) {
  kv::PageImage img;
  img.type = kv::PageType::kLeaf;
  kv::Page p(img);
  for (int i = 0; i < 50; ++i)
    ASSERT_OK(p.Apply({kv::LogOp::kPut, Key(i), std::string(60, 'x'), {}, kv::kNoPage, {}}));
  EXPECT_GT(p.bytes(), 3000u);
  ASSERT_OK(p.Apply({kv::LogOp::kDel, Key(3), "", {}, kv::kNoPage, {}}));
  EXPECT_FALSE(p.Find(Key(3)).has_value());
  kv::Page q = p;
  std::vector<kv::Entry> upper = q.SplitUpper();
  EXPECT_FALSE(upper.empty());
  EXPECT_EQ(q.count() + upper.size(), p.count());
  ASSERT_OK(p.Apply({kv::LogOp::kTrunc, upper.front().key, "", {}, kv::kNoPage, {}}));
  EXPECT_EQ(p.count(), q.count());
  EXPECT_EQ(p.bytes(), q.bytes());
}

// ChildFor's index (the keys' shared prefix and the next 8 bytes as an
// integer) answers as a plain search over the keys would: keys that are
// prefixes of others, zero bytes, long shared prefixes, equal heads, and
// search keys shorter than the prefix, before and after changes.
TEST(KvPage, ChildForMatchesAPlainSearch) {
  std::mt19937_64 rng(7);
  const std::string alphabet("\0\x01az\xff", 5);
  auto random_key = [&](const std::string& prefix) {
    std::string k = prefix.substr(0, rng() % (prefix.size() + 1));
    size_t n = rng() % 12;
    for (size_t i = 0; i < n; ++i) k += alphabet[rng() % alphabet.size()];
    return k;
  };
  for (int round = 0; round < 200; ++round) {
    std::string prefix = round % 2 ? std::string(size_t(rng() % 20), 'p') : "";
    kv::PageImage img;
    img.type = kv::PageType::kInner;
    img.first_child = 1000000;
    kv::Page p(img);
    std::map<std::string, uint32_t> model;
    int count = 1 + int(rng() % 60);
    for (int i = 0; i < count; ++i) {
      std::string k = prefix + random_key("0123456789");
      if (model.count(k)) continue;
      uint32_t child = uint32_t(i);
      model[k] = child;
      ASSERT_OK(p.Apply({kv::LogOp::kChild, k, "", {}, child, {}}));
    }
    auto check = [&](int probes) {
      for (int probe = 0; probe < probes; ++probe) {
        std::string k = rng() % 3 ? prefix + random_key("0123456789") : random_key(prefix);
        if (probe % 10 == 0) {  // an existing key and its neighbours
          auto it = model.begin();
          std::advance(it, long(rng() % model.size()));
          k = it->first;
          if (probe % 20 == 0) k.push_back('\0');
        }
        auto up = model.upper_bound(k);
        uint32_t want = up == model.begin() ? img.first_child : std::prev(up)->second;
        int want_pos = int(std::distance(model.begin(), up)) - 1;
        int pos = -2;
        ASSERT_EQ(p.ChildFor(k, &pos), want) << "round " << round << " key " << k;
        ASSERT_EQ(pos, want_pos);
      }
    };
    check(100);
    // A change drops the index: a key outside the shared prefix, then one
    // removed.
    std::string k = random_key("") + "q";
    model[k] = 77;
    ASSERT_OK(p.Apply({kv::LogOp::kChild, k, "", {}, 77, {}}));
    check(50);
    std::string gone = model.begin()->first;
    model.erase(model.begin());
    ASSERT_OK(p.Apply({kv::LogOp::kDel, gone, "", {}, kv::kNoPage, {}}));
    if (!model.empty()) check(50);
  }
}

// The same index on a leaf, kept current by each change (puts with and
// without the shared prefix, deletes, truncations) and rebuilt after a
// split: LowerBound and Find always answer as the model does.
TEST(KvPage, LowerBoundFollowsChangesAsAPlainSearch) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 50; ++round) {
    kv::PageImage img;
    img.type = kv::PageType::kLeaf;
    kv::Page p(img);
    std::map<std::string, std::string> model;
    const std::string prefix(size_t(rng() % 12), 'k');
    auto key = [&] {
      std::string k = prefix;
      if (rng() % 40 == 0) k = std::string(1, char('a' + rng() % 26));  // outside the prefix
      size_t n = 1 + rng() % 10;
      for (size_t i = 0; i < n; ++i) k += char(rng() % 3 ? '0' + rng() % 10 : rng() % 256);
      return k;
    };
    for (int step = 0; step < 400; ++step) {
      int op = int(rng() % 20);
      if (op < 12) {
        std::string k = key();
        model[k] = "v";
        ASSERT_OK(p.Apply({kv::LogOp::kPut, k, "v", {}, kv::kNoPage, {}}));
      } else if (op < 17 && !model.empty()) {
        auto it = model.begin();
        std::advance(it, long(rng() % model.size()));
        std::string k = it->first;
        model.erase(it);
        ASSERT_OK(p.Apply({kv::LogOp::kDel, k, "", {}, kv::kNoPage, {}}));
      } else if (op == 17 && model.size() > 40) {
        std::string k = key();
        model.erase(model.lower_bound(k), model.end());
        ASSERT_OK(p.Apply({kv::LogOp::kTrunc, k, "", {}, kv::kNoPage, {}}));
      } else if (op == 18 && model.size() > 20) {
        std::vector<kv::Entry> upper = p.SplitUpper();
        for (const kv::Entry& e : upper) model.erase(e.key);
      }
      ASSERT_EQ(p.count(), model.size());
      for (int probe = 0; probe < 4; ++probe) {
        std::string k = key();
        if (probe == 0 && !model.empty()) {
          auto it = model.begin();
          std::advance(it, long(rng() % model.size()));
          k = it->first;
        }
        size_t want = size_t(std::distance(model.begin(), model.lower_bound(k)));
        ASSERT_EQ(p.LowerBound(k), want) << "round " << round << " step " << step;
        ASSERT_EQ(p.Find(k).has_value(), model.count(k) == 1);
      }
    }
  }
}

// A page decoded over an image that held another page equals one decoded
// fresh.
TEST(KvFormat, DecodeIntoAUsedImageEqualsAFreshDecode) {
  auto encode = [](kv::PageType type, int n, size_t vlen) {
    kv::PageImage img;
    img.type = type;
    img.epoch = 9;
    for (int i = 0; i < n; ++i) {
      kv::Entry e;
      e.key = Key(i * 7);
      if (type == kv::PageType::kInner) {
        e.child = uint32_t(i + 3);
      } else if (i % 5 == 0) {
        e.blob = kv::BlobRef{uint32_t(i), 5000, 42};
      } else {
        e.value = std::string(vlen, char('a' + i % 26));
      }
      img.entries.push_back(e);
    }
    std::vector<std::byte> out(4096);
    kv::EncodePage(img, out);
    return out;
  };
  std::vector<std::vector<std::byte>> pages = {
      encode(kv::PageType::kLeaf, 30, 80), encode(kv::PageType::kInner, 100, 0),
      encode(kv::PageType::kLeaf, 5, 200), std::vector<std::byte>(4096),
      encode(kv::PageType::kLeaf, 40, 10)};
  kv::PageImage used;
  for (const auto& page : pages) {
    ASSERT_OK(kv::DecodePageInto(page, &used));
    ASSERT_OK_AND_ASSIGN(kv::PageImage fresh, kv::DecodePage(page));
    EXPECT_EQ(used.type, fresh.type);
    EXPECT_EQ(used.epoch, fresh.epoch);
    EXPECT_EQ(used.first_child, fresh.first_child);
    ASSERT_EQ(used.entries.size(), fresh.entries.size());
    for (size_t i = 0; i < used.entries.size(); ++i) {
      EXPECT_EQ(used.entries[i].key, fresh.entries[i].key);
      EXPECT_EQ(used.entries[i].value, fresh.entries[i].value);
      EXPECT_EQ(used.entries[i].blob, fresh.entries[i].blob);
      EXPECT_EQ(used.entries[i].child, fresh.entries[i].child);
    }
  }
}

// The slotted page against the decoded image it stands for: random puts
// (values that grow, shrink and keep their size), blobs, deletes and
// truncations; after each step its entries, its encoding and a decode of
// that encoding (into a page that held another) agree with a model.
TEST(KvPage, SlottedPageMatchesItsImage) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 40; ++round) {
    const bool inner = round % 4 == 3;
    kv::Page p(inner ? kv::PageType::kInner : kv::PageType::kLeaf);
    p.set_epoch(uint32_t(round));
    p.set_first_child(inner ? 7u : kv::kNoPage);
    std::map<std::string, kv::Entry> model;
    kv::Page other(kv::PageType::kLeaf);
    for (int i = 0; i < 20; ++i)
      ASSERT_OK(other.Apply({kv::LogOp::kPut, Key(i), std::string(50, 'o'), {}, kv::kNoPage, {}}));
    for (int step = 0; step < 300; ++step) {
      std::string k = Key(int(rng() % 60));
      int op = int(rng() % 10);
      kv::LogEntry e{kv::LogOp::kPut, k, "", {}, kv::kNoPage, {}};
      if (op < 6) {
        kv::Entry m;
        m.key = k;
        if (inner) {
          e.op = kv::LogOp::kChild;
          e.child = m.child = uint32_t(rng() % 1000);
        } else if (op == 5) {
          e.op = kv::LogOp::kPutBlob;
          e.blob = kv::BlobRef{uint32_t(rng()), 5000, 42};
          m.blob = e.blob;
        } else {
          e.value = m.value = std::string(size_t(rng() % 3 == 0 ? 20 : rng() % 40), char('a' + step % 26));
        }
        if (p.bytes() + 80 > 4096 && !model.count(k)) continue;  // keep it encodable
        model[k] = m;
      } else if (op < 9) {
        e.op = kv::LogOp::kDel;
        model.erase(k);
      } else {
        e.op = kv::LogOp::kTrunc;
        model.erase(model.lower_bound(k), model.end());
      }
      ASSERT_OK(p.Apply(e));
      ASSERT_EQ(p.count(), model.size());
      size_t i = 0, bytes = kv::kPageHeaderBytes;
      kv::PageImage want;
      want.type = p.type();
      want.epoch = p.epoch();
      want.first_child = p.first_child();
      for (const auto& [key, m] : model) {
        kv::Page::Ref r = p.entry(i++);
        ASSERT_EQ(r.key, key);
        ASSERT_EQ(r.value, m.value);
        ASSERT_EQ(r.blob, m.blob);
        ASSERT_EQ(r.child, m.child);
        bytes += kv::EntryBytes(p.type(), m);
        want.entries.push_back(m);
      }
      ASSERT_EQ(p.bytes(), bytes);
      std::vector<std::byte> mine(4096), theirs(4096);
      p.Encode(mine);
      kv::EncodePage(want, theirs);
      ASSERT_EQ(mine, theirs) << "round " << round << " step " << step;
      ASSERT_OK(other.Decode(mine));
      ASSERT_EQ(other.count(), p.count());
      ASSERT_EQ(other.bytes(), p.bytes());
      std::vector<std::byte> again(4096);
      other.Encode(again);
      ASSERT_EQ(again, mine);
    }
  }
  // An all-zero page decodes as never written; a bad magic is refused.
  kv::Page z;
  ASSERT_OK(z.Decode(std::vector<std::byte>(4096)));
  EXPECT_EQ(z.type(), kv::PageType::kNone);
  std::vector<std::byte> bad(4096);
  bad[0] = std::byte{1};
  EXPECT_FALSE(z.Decode(bad).ok());
}

// The three readers of an encoded page (DecodePage, ProbePage and a
// buffered Page) share one walker: each refuses a page whose entries run
// past its end, a bad magic and an unknown type with DataLoss, and reads
// an all-zero page as never written.
TEST(KvFormat, MalformedPagesAreDataLossForEveryReader) {
  kv::PageImage img;
  img.type = kv::PageType::kLeaf;
  for (int i = 0; i < 30; ++i) img.entries.push_back({Key(i), std::string(90, 'v'), std::nullopt, kv::kNoPage});
  std::vector<std::byte> good(4096);
  kv::EncodePage(img, good);
  auto refused = [](std::span<const std::byte> page) {
    kv::Page p;
    bool all = !kv::DecodePage(page).ok() && !kv::ProbePage(page, Key(3)).ok() && !p.Decode(page).ok();
    return all && p.count() == 0;
  };
  std::vector<std::byte> past = good;
  ftl::util::PutU16(&past[4], 2000);  // count: more entries than the page can hold
  EXPECT_TRUE(refused(past));
  std::vector<std::byte> longkey = good;
  ftl::util::PutU16(&longkey[kv::kPageHeaderBytes], 5000);  // the first key runs past the end
  EXPECT_TRUE(refused(longkey));
  std::vector<std::byte> magic = good;
  magic[0] = std::byte{0x11};
  EXPECT_TRUE(refused(magic));
  std::vector<std::byte> type = good;
  type[2] = std::byte{9};
  EXPECT_TRUE(refused(type));
  std::vector<std::byte> zero(4096);
  ASSERT_OK_AND_ASSIGN(kv::PageImage z, kv::DecodePage(zero));
  EXPECT_EQ(z.type, kv::PageType::kNone);
  ASSERT_OK_AND_ASSIGN(kv::PageProbe pz, kv::ProbePage(zero, Key(1)));
  EXPECT_EQ(pz.type, kv::PageType::kNone);
  EXPECT_FALSE(pz.hit.has_value());
  ASSERT_OK_AND_ASSIGN(kv::PageProbe hit, kv::ProbePage(good, Key(7)));
  ASSERT_TRUE(hit.hit.has_value());
  EXPECT_EQ(hit.hit->value, std::string(90, 'v'));
  kv::Page p;
  ASSERT_OK(p.Decode(good));
  EXPECT_EQ(hit.bytes, p.bytes());
  EXPECT_EQ(p.count(), 30u);
}

// Formats `vol` as a dataset and returns the layout its header records.
absl::StatusOr<kv::Layout> FormatAndReadLayout(MemVolume* vol) {
  if (absl::Status st = KvStore::Format(vol); !st.ok()) return st;
  std::vector<std::byte> header(4096);
  if (absl::Status st = vol->Read(0, header); !st.ok()) return st;
  return kv::DecodeHeader(header);
}

class KvStoreTest : public ::testing::TestWithParam<KvMode> {
 protected:
  // The mode under test, a buffer of `pages`, and flushes of up to 1 MiB
  // in one atomic write (a store on a bare volume has no scratch area).
  KvOptions Options(uint32_t pages) const {
    KvOptions o;
    o.mode = GetParam();
    o.buffer_pages = pages;
    o.max_atomic_bytes = 1 << 20;
    return o;
  }
  void ConcurrentWritersAndFlushes(bool background);
};

TEST_P(KvStoreTest, ModelRandomOpsAndReopen) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.mode = GetParam();
  o.buffer_pages = 32;  // small: pages come and go
  o.diff_budget_bytes = 16 << 10;  // kPdl: pages merged and the log cleaned often
  // A store on a bare volume has no scratch area (KvStore::Open(Volume*)):
  // a flush must fit one atomic write, and one operation of kIplMerge can
  // add an erase unit's merge to the dirty limit's three quarters of the
  // default 256 KiB.
  o.max_atomic_bytes = 1 << 20;
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(1);
  uint64_t blind = 0, records = 0, merges = 0, relogs = 0, blocks = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    for (int i = 0; i < 6000; ++i) {
      std::string k = Key(int(rng() % 3000));
      int op = int(rng() % 10);
      if (op < 6) {
        size_t len = rng() % 20 == 0 ? 2000 + rng() % 9000 : rng() % 120;  // some blobs
        std::string v(len, char('a' + rng() % 26));
        ASSERT_OK(s->Put(k, v));
        model[k] = v;
      } else if (op < 8) {
        absl::Status st = s->Delete(k);
        EXPECT_EQ(st.ok(), model.erase(k) == 1) << st;
      } else if (op == 8 && rng() % 2 == 0) {
        // Modify: appends a letter, or (rarely) fails or leaves the key.
        int what = int(rng() % 8);
        std::optional<std::string> seen = std::nullopt;
        bool called = false;
        absl::Status st = s->Modify(
            k, [&](std::optional<std::string_view> old) -> absl::StatusOr<std::optional<std::string>> {
              called = true;
              if (old) seen = std::string(*old);
              if (what == 0) return absl::AbortedError("no");
              if (what == 1) return std::optional<std::string>();
              return std::optional<std::string>(std::string(old.value_or("")) + "m");
            });
        EXPECT_TRUE(called);
        auto m = model.find(k);
        EXPECT_EQ(seen, m == model.end() ? std::nullopt : std::optional<std::string>(m->second)) << k;
        if (what == 0) {
          EXPECT_TRUE(absl::IsAborted(st)) << st;
        } else {
          ASSERT_OK(st);
          if (what != 1) model[k] = (m == model.end() ? "" : m->second) + "m";
        }
      } else {
        auto g = s->Get(k);
        if (model.count(k)) {
          ASSERT_OK(g);
          EXPECT_EQ(*g, model[k]);
        } else {
          EXPECT_TRUE(absl::IsNotFound(g.status()));
        }
      }
    }
    KvStats st = s->Stats();
    blind = st.blind_writes;
    records = st.diff_records;
    merges = st.diff_merges;
    relogs = st.diff_relogs;
    blocks = st.diff_block_writes;
    ASSERT_OK(s->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  ASSERT_OK_AND_ASSIGN(auto all, s->Scan("", "", SIZE_MAX));
  ASSERT_EQ(all.size(), model.size());
  auto it = model.begin();
  for (auto& [k, v] : all) {
    EXPECT_EQ(k, it->first);
    EXPECT_EQ(v, it->second) << k;
    ++it;
  }
  // A bounded scan and the iterator agree with the model.
  ASSERT_OK_AND_ASSIGN(auto part, s->Scan(Key(100), Key(200), 10));
  auto lo = model.lower_bound(Key(100));
  for (auto& [k, v] : part) EXPECT_EQ(k, (lo++)->first);
  auto iter = s->NewIterator();
  size_t n = 0;
  for (iter->SeekToFirst(); iter->Valid(); iter->Next()) ++n;
  EXPECT_OK(iter->status());
  EXPECT_EQ(n, model.size());
  EXPECT_GT(s->Stats().tree_height, 1u);
  EXPECT_GT(s->Stats().evictions, 0u) << "the 32-page buffer never evicted";
  EXPECT_LE(s->Stats().buffer_pages, 32u + 1);
  if (GetParam() == KvMode::kPdl) {
    // Every part of differential logging ran: changes logged unread, pages
    // merged for their differentials, the log replayed at open.
    KvStats st = s->Stats();
    EXPECT_GT(st.diff_load_reads, 1u);
    std::printf("pdl: %llu blind of %llu records, %llu merges, %llu relogs, %llu log blocks\n",
                (unsigned long long)blind, (unsigned long long)records, (unsigned long long)merges,
                (unsigned long long)relogs, (unsigned long long)blocks);
    EXPECT_GT(blind, 100u);
    EXPECT_GT(merges, 10u);
  }
}

// GetMany answers every key as Get does, in order: present and absent
// keys, keys no key can be, repeats, values kept outside pages, leaves in
// the buffer and not (a small buffer, so its reads load and evict between
// the keys it answers from the buffer); it stops when told, reports what
// went wrong past what it answered, and counts the buffer's hits as Get.
TEST_P(KvStoreTest, GetManyAnswersAsGetDoes) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o = Options(24);
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    size_t len = i % 97 == 0 ? 5000 + rng() % 4000 : rng() % 120;
    ASSERT_OK(s->Put(Key(i * 2), std::string(len, char('a' + i % 26))));
  }
  for (int i = 0; i < 3000; i += 11) ASSERT_OK(s->Delete(Key(i * 2)));
  auto check = [&](const std::vector<std::string>& owned, size_t stop_after) {
    std::vector<std::string_view> keys(owned.begin(), owned.end());
    std::vector<std::optional<std::string>> got;
    ASSERT_OK(s->GetMany(keys, [&](size_t i, std::optional<std::string_view> v) {
      EXPECT_EQ(i, got.size());
      got.push_back(v ? std::optional<std::string>(std::string(*v)) : std::nullopt);
      return got.size() < stop_after;
    }));
    ASSERT_EQ(got.size(), std::min(keys.size(), stop_after));
    for (size_t i = 0; i < got.size(); ++i) {
      absl::StatusOr<std::string> want = s->Get(keys[i]);
      if (want.ok()) {
        EXPECT_EQ(got[i], *want) << i;
      } else {
        EXPECT_FALSE(got[i].has_value()) << i << " " << want.status();
      }
    }
  };
  for (int round = 0; round < 40; ++round) {
    std::vector<std::string> owned;
    size_t n = 1 + rng() % 150;
    for (size_t j = 0; j < n; ++j) {
      int r = int(rng() % 40);
      if (r == 0) owned.push_back("");
      else if (r == 1) owned.push_back(std::string(kMaxKeyBytes + 1, 'k'));
      else if (r == 2 && !owned.empty()) owned.push_back(owned.back());
      else owned.push_back(Key(int(rng() % 6100) - 50));
    }
    check(owned, round % 5 == 0 ? 1 + rng() % n : SIZE_MAX);
  }
  ASSERT_OK(s->Close());
  // With every page in the buffer: the same hits as the Gets, no miss.
  o.buffer_pages = 4096;
  ASSERT_OK_AND_ASSIGN(s, KvStore::Open(&vol, o));
  std::vector<std::string> owned;
  for (int i = 0; i < 200; ++i) owned.push_back(Key(int(rng() % 6000)));
  std::vector<std::string_view> keys(owned.begin(), owned.end());
  for (int i = 0; i < 6000; i += 2) (void)s->Get(Key(i));
  KvStats a = s->Stats();
  for (auto k : keys) (void)s->Get(k);
  KvStats b = s->Stats();
  size_t answered = 0;
  ASSERT_OK(s->GetMany(keys, [&](size_t, std::optional<std::string_view>) { return ++answered, true; }));
  KvStats c = s->Stats();
  EXPECT_EQ(answered, keys.size());
  EXPECT_EQ(b.buffer_misses, a.buffer_misses);
  EXPECT_EQ(c.buffer_misses, b.buffer_misses);
  EXPECT_GT(b.buffer_hits, a.buffer_hits);
  EXPECT_EQ(c.buffer_hits - b.buffer_hits, b.buffer_hits - a.buffer_hits);
  EXPECT_EQ(c.page_reads, b.page_reads);
  ASSERT_OK(s->Close());
  // A closed store says so.
  std::vector<std::string_view> one = {"a", "b"};
  EXPECT_TRUE(absl::IsFailedPrecondition(
      s->GetMany(one, [](size_t, std::optional<std::string_view>) { return true; })));
}

INSTANTIATE_TEST_SUITE_P(Modes, KvStoreTest,
                         ::testing::Values(KvMode::kIpl, KvMode::kIplMerge, KvMode::kInPlace,
                                           KvMode::kPdl));

// Modify reads and writes in one operation: the function sees the value,
// its error or nullopt changes nothing, the new value is checked as Put's,
// and in kPdl a leaf not in the buffer is probed and logged unread.
TEST(KvStore, ModifyReadsAndWritesInOneOperation) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.buffer_pages = 16;
  auto count = [](std::optional<std::string_view> old) -> absl::StatusOr<std::optional<std::string>> {
    return std::optional<std::string>(std::to_string(old ? std::stoi(std::string(*old)) + 1 : 1));
  };
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    ASSERT_OK(s->Modify("c", count));
    ASSERT_OK(s->Modify("c", count));
    EXPECT_EQ(*s->Get("c"), "2");
    EXPECT_TRUE(absl::IsAborted(s->Modify("c", [](std::optional<std::string_view>)
                                              -> absl::StatusOr<std::optional<std::string>> {
      return absl::AbortedError("refused");
    })));
    ASSERT_OK(s->Modify("c", [](std::optional<std::string_view>) {
      return absl::StatusOr<std::optional<std::string>>(std::nullopt);
    }));
    EXPECT_EQ(*s->Get("c"), "2");
    absl::Status big = s->Modify("c", [](std::optional<std::string_view>) {
      return absl::StatusOr<std::optional<std::string>>(std::string(kMaxValueBytes + 1, 'x'));
    });
    EXPECT_TRUE(absl::IsInvalidArgument(big)) << big;
    EXPECT_EQ(*s->Get("c"), "2");
    EXPECT_TRUE(absl::IsInvalidArgument(s->Modify("", count)));
    // A value kept outside pages, replaced by a small one and back.
    std::string large(20000, 'L');
    ASSERT_OK(s->Modify("big", [&](std::optional<std::string_view> old) {
      EXPECT_FALSE(old.has_value());
      return absl::StatusOr<std::optional<std::string>>(large);
    }));
    ASSERT_OK(s->Modify("big", [&](std::optional<std::string_view> old) {
      EXPECT_EQ(old, std::optional<std::string_view>(large));
      return absl::StatusOr<std::optional<std::string>>("small");
    }));
    EXPECT_EQ(*s->Get("big"), "small");
    for (int i = 0; i < 3000; ++i) ASSERT_OK(s->Put(Key(i), "0"));
    ASSERT_OK(s->Close());
  }
  // Reopened with a 16-page buffer: most leaves are not in it, and a
  // counter's increment costs at most the probe's read.
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  KvStats a = s->Stats();
  std::mt19937 rng(5);
  std::map<int, int> counts;
  for (int n = 0; n < 2000; ++n) {
    int i = int(rng() % 3000);
    ASSERT_OK(s->Modify(Key(i), count));
    ++counts[i];
  }
  KvStats b = s->Stats();
  EXPECT_GT(b.blind_writes - a.blind_writes, 0u) << "no increment was logged unread";
  EXPECT_LE(b.page_reads - a.page_reads, 2000u);
  ASSERT_OK(s->Close());
  ASSERT_OK_AND_ASSIGN(auto r, KvStore::Open(&vol, o));
  for (auto [i, n] : counts) EXPECT_EQ(*r->Get(Key(i)), std::to_string(n)) << i;
  EXPECT_EQ(*r->Get("c"), "2");
}

TEST(KvStore, InsertUpdateAndBatches) {
  MemVolume vol(1 << 16);
  ASSERT_OK(KvStore::Format(&vol));
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol));
  ASSERT_OK(s->Insert("a", "1"));
  EXPECT_TRUE(absl::IsAlreadyExists(s->Insert("a", "2")));
  EXPECT_TRUE(absl::IsNotFound(s->Update("b", "2")));
  ASSERT_OK(s->Update("a", "3"));
  EXPECT_EQ(*s->Get("a"), "3");
  KvWriteBatch b;
  b.Put("x", "1");
  b.Insert("a", "dup");  // fails: the whole batch is refused
  EXPECT_TRUE(absl::IsAlreadyExists(s->Write(b)));
  EXPECT_TRUE(absl::IsNotFound(s->Get("x").status()));
  KvWriteBatch c;
  c.Insert("y", "1");
  c.Update("y", "2");  // sees the insert before it
  c.Delete("a");
  c.Delete("never");
  ASSERT_OK(s->Write(c, {.sync = true}));
  EXPECT_EQ(*s->Get("y"), "2");
  EXPECT_TRUE(absl::IsNotFound(s->Get("a").status()));
  // Limits.
  EXPECT_TRUE(absl::IsInvalidArgument(s->Put(std::string(kMaxKeyBytes + 1, 'k'), "v")));
  EXPECT_TRUE(absl::IsInvalidArgument(s->Put("k", std::string(kMaxValueBytes + 1, 'v'))));
  EXPECT_TRUE(absl::IsInvalidArgument(s->Put("", "v")));
  ASSERT_OK(s->Put(std::string(kMaxKeyBytes, 'k'), std::string(kMaxValueBytes, 'v')));
  EXPECT_EQ(s->Get(std::string(kMaxKeyBytes, 'k'))->size(), kMaxValueBytes);
}

// In-page logging writes log sectors where the in-place baseline writes
// whole pages: random updates of a loaded store, same code, same buffer.
TEST(KvStore, IplWritesLessThanInPlace) {
  auto run = [](KvMode mode) {
    MemVolume vol(1 << 18);
    EXPECT_OK(KvStore::Format(&vol));
    KvOptions o;
    o.mode = mode;
    o.buffer_pages = 16;
    auto s = *KvStore::Open(&vol, o);
    for (int i = 0; i < 4000; ++i) EXPECT_OK(s->Put(Key(i), std::string(100, 'a')));
    EXPECT_OK(s->Flush());
    KvStats before = s->Stats();
    std::mt19937 rng(3);
    for (int i = 0; i < 3000; ++i) EXPECT_OK(s->Put(Key(int(rng() % 4000)), std::string(100, 'b')));
    EXPECT_OK(s->Flush());
    KvStats after = s->Stats();
    return std::make_pair(after.page_writes - before.page_writes,
                          after.media_write_bytes - before.media_write_bytes);
  };
  auto [ipl_pages, ipl_bytes] = run(KvMode::kIpl);
  auto [inplace_pages, inplace_bytes] = run(KvMode::kInPlace);
  EXPECT_LT(ipl_pages * 2, inplace_pages);
  EXPECT_LT(ipl_bytes, inplace_bytes);
}

TEST(KvStore, BombsAndMerges) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.mode = KvMode::kIplMerge;
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  for (int i = 0; i < 300; ++i) ASSERT_OK(s->Put(Key(i), std::string(100, 'a')));
  ASSERT_OK(s->Flush());
  KvStats a = s->Stats();
  // An entry larger than a log sector: the page becomes a bomb, and in
  // the thesis's mode its erase unit is merged.
  ASSERT_OK(s->Put(Key(5), std::string(700, 'z')));
  ASSERT_OK(s->Flush());
  KvStats b = s->Stats();
  EXPECT_EQ(b.bombs, a.bombs + 1);
  EXPECT_EQ(b.unit_merges, a.unit_merges + 1);
  // Small updates of one page fill its 512-byte log, then it is a bomb too.
  for (int i = 0; i < 10; ++i) ASSERT_OK(s->Put(Key(7), std::string(90, char('a' + i))));
  ASSERT_OK(s->Flush());
  EXPECT_GT(s->Stats().bombs, b.bombs);
  EXPECT_EQ(*s->Get(Key(7)), std::string(90, 'j'));
  ASSERT_OK(s->Close());
  ASSERT_OK_AND_ASSIGN(auto r, KvStore::Open(&vol, o));
  EXPECT_EQ(*r->Get(Key(5)), std::string(700, 'z'));
  EXPECT_EQ(*r->Get(Key(7)), std::string(90, 'j'));
}

TEST(KvStore, SeveralSectorsPerPageMeanFewerBombs) {
  auto bombs = [](uint32_t per_page) {
    MemVolume vol(1 << 18);
    KvGeometry g;
    g.sectors_per_page = per_page;
    g.log_sectors_per_unit = 28 * per_page + (8 - 28 * per_page % 8) % 8;
    EXPECT_OK(KvStore::Format(&vol, g));
    auto s = *KvStore::Open(&vol, {.mode = KvMode::kIpl});
    for (int i = 0; i < 2000; ++i) EXPECT_OK(s->Put(Key(i), std::string(100, 'a')));
    std::mt19937 rng(5);
    for (int i = 0; i < 4000; ++i) EXPECT_OK(s->Put(Key(int(rng() % 2000)), std::string(100, 'c')));
    EXPECT_OK(s->Flush());
    return s->Stats().bombs;
  };
  EXPECT_GT(bombs(1), bombs(4));
}

TEST(KvStore, UnsyncedWritesWaitInTheBufferSyncedOnesReachTheVolume) {
  MemVolume vol(1 << 16);
  ASSERT_OK(KvStore::Format(&vol));
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol));
  uint64_t w0 = vol.atomic_writes;
  ASSERT_OK(s->Put("a", "1"));
  EXPECT_EQ(vol.atomic_writes, w0);
  ASSERT_OK(s->Put("b", "2", {.sync = true}));
  EXPECT_EQ(vol.atomic_writes, w0 + 1);
  // A reader of the volume alone (a crash now) sees both.
  ASSERT_OK_AND_ASSIGN(auto r, KvStore::Open(&vol, {.read_only = true}));
  EXPECT_EQ(*r->Get("a"), "1");
  EXPECT_TRUE(absl::IsFailedPrecondition(r->Put("c", "3")));
}

}  // namespace
}  // namespace ftl

namespace ftl {
namespace {

// Batches of puts and deletes (blind in kPdl), values inline and outside
// pages, synced and not, small differential budgets; reopened in the
// modes in turn, the store must equal the model each time.
TEST(KvPdl, BatchesAcrossModesAgainstModel) {
  MemVolume vol(1 << 17);
  vol.max_atomic = 4 << 20;
  ASSERT_OK(KvStore::Format(&vol));
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(7);
  const KvMode modes[] = {KvMode::kPdl, KvMode::kPdl, KvMode::kIpl, KvMode::kPdl, KvMode::kIplMerge,
                          KvMode::kPdl, KvMode::kInPlace, KvMode::kPdl};
  for (int round = 0; round < 8; ++round) {
    KvOptions o;
    o.mode = modes[round];
    o.buffer_pages = 24;
    o.diff_budget_bytes = (4u << 10) << (round % 5);
    o.max_atomic_bytes = vol.max_atomic;  // big batches: no scratch area on a bare volume
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    for (int i = 0; i < 400; ++i) {
      KvWriteBatch b;
      std::map<std::string, std::optional<std::string>> op;
      int n = rng() % 8 == 0 ? 2 + int(rng() % 40) : 1;
      bool big = rng() % 25 == 0;
      for (int j = 0; j < n; ++j) {
        std::string k = "k" + std::to_string(rng() % 400);
        if (op.count(k)) continue;
        if (rng() % 5 == 0) {
          op[k] = std::nullopt;
          b.Delete(k);
        } else {
          size_t len = big ? 20000 + rng() % 40000 : rng() % 300;
          std::string v = std::to_string(i) + ":" + std::string(len, char('a' + rng() % 26));
          op[k] = v;
          b.Put(k, v);
        }
      }
      ASSERT_OK(s->Write(b, {.sync = rng() % 3 == 0})) << "round " << round << " op " << i;
      for (auto& [k, v] : op) {
        if (v) model[k] = *v;
        else model.erase(k);
      }
      if (rng() % 50 == 0) {
        ASSERT_OK(s->Flush());
      }
    }
    // Half the rounds end without a clean close: only what was flushed
    // counts, which here is everything (the last op is flushed first).
    ASSERT_OK(s->Flush());
    s.reset();
    ASSERT_OK_AND_ASSIGN(auto r, KvStore::Open(&vol, {.read_only = true}));
    ASSERT_OK_AND_ASSIGN(auto all, r->Scan("", "", SIZE_MAX));
    std::map<std::string, std::string> got(all.begin(), all.end());
    ASSERT_EQ(got.size(), model.size()) << "round " << round;
    for (auto& [k, v] : model) ASSERT_EQ(got[k], v) << "round " << round << " key " << k;
  }
}

}  // namespace
}  // namespace ftl

namespace ftl {
namespace {

// Random updates of a loaded table: differential logging packs them into
// shared log blocks, where in-page logging writes a 4 KiB log block (and
// pages whose logs fill) per page.
TEST(KvPdl, WritesFarLessThanIpl) {
  auto run = [](KvMode mode) {
    MemVolume vol(1 << 18);
    EXPECT_OK(KvStore::Format(&vol));
    KvOptions o;
    o.mode = mode;
    o.buffer_pages = 16;
    o.diff_budget_bytes = 256 << 10;
    auto s = *KvStore::Open(&vol, o);
    for (int i = 0; i < 4000; ++i) EXPECT_OK(s->Put(Key(i), std::string(100, 'a')));
    EXPECT_OK(s->Flush());
    KvStats before = s->Stats();
    std::mt19937 rng(3);
    for (int i = 0; i < 3000; ++i) EXPECT_OK(s->Put(Key(int(rng() % 4000)), std::string(100, 'b')));
    EXPECT_OK(s->Flush());
    KvStats after = s->Stats();
    return std::make_pair(after.media_write_bytes - before.media_write_bytes,
                          after.blind_writes - before.blind_writes);
  };
  auto [pdl_bytes, pdl_blind] = run(KvMode::kPdl);
  auto [ipl_bytes, ipl_blind] = run(KvMode::kIpl);
  std::printf("3000 random updates: pdl %llu bytes (%llu unread), ipl %llu bytes\n",
              (unsigned long long)pdl_bytes, (unsigned long long)pdl_blind, (unsigned long long)ipl_bytes);
  EXPECT_LT(pdl_bytes * 4, ipl_bytes);
  EXPECT_GT(pdl_blind, 2000u) << "updates of pages not in the buffer should not read them";
  EXPECT_EQ(ipl_blind, 0u);
}

// A read of a page not in the buffer is one page read (no log read); a key
// the page's filter or differential rules out needs no read at all.
TEST(KvPdl, ReadsCostOnePageReadOrNone) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.buffer_pages = 16;
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    for (int i = 0; i < 4000; i += 2) ASSERT_OK(s->Put(Key(i), std::to_string(i)));
    ASSERT_OK(s->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  std::mt19937 rng(9);
  KvStats a = s->Stats();
  for (int n = 0; n < 500; ++n) {
    int i = int(rng() % 2000) * 2;
    ASSERT_EQ(*s->Get(Key(i)), std::to_string(i));
  }
  KvStats b = s->Stats();
  EXPECT_EQ(b.log_reads, a.log_reads);
  EXPECT_LE(b.page_reads - a.page_reads, 500u);
  // Every page was seen by now: absent keys are told by the buffered
  // leaves (the first 16 pages read came in) or by the filters of the
  // others, rarely by a read.
  for (int n = 0; n < 500; ++n) EXPECT_TRUE(absl::IsNotFound(s->Get(Key(int(rng() % 2000) * 2 + 1)).status()));
  KvStats c = s->Stats();
  EXPECT_GT(c.filter_answers - b.filter_answers, 0u);
  EXPECT_LT(c.page_reads - b.page_reads, 100u);
  // A key changed since its page was written costs no read: from the page
  // in the buffer, or from its differential when the page is not there
  // (the buffer is full by now, so some are not).
  uint64_t diff_answers = 0;
  for (int i = 0; i < 4000; i += 40) {
    ASSERT_OK(s->Put(Key(i), "new"));
    KvStats d = s->Stats();
    EXPECT_EQ(*s->Get(Key(i)), "new");
    EXPECT_EQ(s->Stats().page_reads, d.page_reads) << i;
    diff_answers += s->Stats().diff_answers - d.diff_answers;
  }
  EXPECT_GT(diff_answers, 0u);
}

// While the buffer has free frames a read loads the leaf it needs, so the
// next read of that leaf costs no I/O.
TEST(KvPdl, ReadsLoadLeavesWhileTheBufferHasRoom) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.buffer_pages = 1024;
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    for (int i = 0; i < 4000; ++i) ASSERT_OK(s->Put(Key(i), std::string(100, 'v')));
    ASSERT_OK(s->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  for (int i = 0; i < 4000; ++i) ASSERT_OK(s->Get(Key(i)).status());
  KvStats a = s->Stats();
  EXPECT_GT(a.page_reads, 0u);
  EXPECT_GT(s->Stats().buffer_pages, 16u);
  for (int i = 3999; i >= 0; --i) ASSERT_OK(s->Get(Key(i)).status());
  EXPECT_EQ(s->Stats().page_reads, a.page_reads);
  EXPECT_EQ(s->Stats().filter_answers, a.filter_answers);
}

// Prefetch is a hint: with some leaves buffered and some not, it reads
// nothing, counts no hit or miss, loads no page, and every value and
// counter afterwards is what it would have been without it.
TEST(KvPdl, PrefetchChangesNothing) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.buffer_pages = 24;  // most leaves are not buffered
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  for (int i = 0; i < 3000; ++i) ASSERT_OK(s->Put(Key(i * 3), std::string(60, char('a' + i % 26))));
  std::vector<std::string> owned;
  for (int i = -5; i < 9100; i += 37) owned.push_back(Key(i));  // present and absent, out of range too
  owned.push_back("");
  std::vector<std::string_view> keys(owned.begin(), owned.end());
  for (int round = 0; round < 3; ++round) {
    KvStats before = s->Stats();
    s->Prefetch(keys);
    s->Prefetch(std::span<const std::string_view>(keys).subspan(0, 1));
    s->Prefetch({});
    KvStats after = s->Stats();
    EXPECT_EQ(after.page_reads, before.page_reads);
    EXPECT_EQ(after.buffer_hits, before.buffer_hits);
    EXPECT_EQ(after.buffer_misses, before.buffer_misses);
    EXPECT_EQ(after.buffer_pages, before.buffer_pages);
    for (int i = 0; i < 3000; i += 7) {
      ASSERT_OK_AND_ASSIGN(std::string v, s->Get(Key(i * 3)));
      EXPECT_EQ(v, std::string(60, char('a' + i % 26)));
    }
    EXPECT_TRUE(absl::IsNotFound(s->Get(Key(1)).status()));
    ASSERT_OK(s->Put(Key(100000 + round), "r"));  // (the next round starts from a change)
  }
  ASSERT_OK(s->Close());
}

// A value kept outside pages that a put replaced without reading its page
// is freed when the page is merged.
TEST(KvPdl, ValuesReplacedUnreadAreFreedAtTheMerge) {
  MemVolume vol(1 << 18);
  ASSERT_OK_AND_ASSIGN(kv::Layout l, FormatAndReadLayout(&vol));
  auto blob_blocks = [&] { return vol.mapped_in(l.blob_base, l.blob_base + l.blob_blocks); };
  KvOptions o;
  o.buffer_pages = 16;
  o.diff_budget_bytes = 16 << 10;
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  for (int i = 0; i < 4000; ++i) ASSERT_OK(s->Put(Key(i), std::string(i % 100 == 0 ? 9000 : 50, 'v')));
  ASSERT_OK(s->Flush());
  const size_t before = blob_blocks();
  ASSERT_EQ(before, 40u * 3);
  // Every page seen (so changes need not read it), then the values
  // replaced by small ones, unread.
  for (int i = 0; i < 4000; i += 7) (void)s->Get(Key(i));
  KvStats a = s->Stats();
  for (int i = 0; i < 4000; i += 100) ASSERT_OK(s->Put(Key(i), "small"));
  EXPECT_GT(s->Stats().blind_writes - a.blind_writes, 30u);
  ASSERT_OK(s->Close());
  // Opening in another mode merges every page with a differential.
  ASSERT_OK_AND_ASSIGN(auto r, KvStore::Open(&vol, {.mode = KvMode::kIpl}));
  ASSERT_OK(r->Close());
  EXPECT_EQ(blob_blocks(), 0u) << "the replaced values' blocks are still mapped";
  ASSERT_OK_AND_ASSIGN(r, KvStore::Open(&vol, o));
  for (int i = 0; i < 4000; i += 100) EXPECT_EQ(*r->Get(Key(i)), "small");
  EXPECT_EQ(*r->Get(Key(1)), std::string(50, 'v'));
}

// The live log stays bounded: pages whose old differentials hold its tail
// are merged or have them copied to the head, the anchor follows, and a
// reopen replays only the live part.
TEST(KvPdl, LogCleaningKeepsTheReplayShort) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o;
  o.buffer_pages = 16;
  o.diff_budget_bytes = 64 << 10;  // log limit: 64 blocks
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    for (int i = 0; i < 3000; ++i) ASSERT_OK(s->Put(Key(i), std::string(80, 'a')));
    ASSERT_OK(s->Flush());
    // One small change in many pages (cold differentials), then a few
    // hot pages changed until the log passed its limit many times over
    // (a synced put now and then, so their pages are not just rewritten).
    for (int i = 0; i < 3000; i += 40) ASSERT_OK(s->Put(Key(i), "cold"));
    for (int n = 0; n < 30000; ++n)
      ASSERT_OK(s->Put(Key(1001 + n % 300), std::to_string(n), {.sync = n % 20 == 0}));
    ASSERT_OK(s->Flush());
    KvStats st = s->Stats();
    std::printf("relogs %llu, merges %llu, log blocks %llu\n", (unsigned long long)st.diff_relogs,
                (unsigned long long)st.diff_merges, (unsigned long long)st.diff_block_writes);
    EXPECT_GT(st.diff_block_writes, 300u);
    EXPECT_GT(st.diff_relogs + st.diff_merges, 0u);
  }  // no Close: the destructor's flush only
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  EXPECT_LT(s->Stats().diff_load_reads, 64u + 64 + 64 + 2) << "replay read more than the live log";
  for (int i = 0; i < 3000; i += 40)
    if (i <= 1000 || i > 1300) {
      EXPECT_EQ(*s->Get(Key(i)), "cold") << i;
    }
  EXPECT_EQ(*s->Get(Key(1001 + 29999 % 300)), "29999");
  EXPECT_EQ(*s->Get(Key(2)), std::string(80, 'a'));
}

// Writers on three threads, one flushing now and then (a synced flush is
// written without the store lock while the others apply changes, and in
// kIplMerge may merge erase units whose pages they then load), lose
// nothing across Close and reopen, in every mode, with unsynced flushes
// written inline and by the store's thread (KvOptions::background_flush).
TEST_P(KvStoreTest, ConcurrentWritersAndFlushesKeepEveryWrite) {
  for (bool background : {false, true}) {
    SCOPED_TRACE(background ? "background flushes" : "inline flushes");
    ConcurrentWritersAndFlushes(background);
  }
}

void KvStoreTest::ConcurrentWritersAndFlushes(bool background) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  KvOptions o = Options(32);
  o.diff_budget_bytes = 64 << 10;
  o.background_flush = background;
  constexpr int kThreads = 3, kPuts = 4000;
  std::vector<std::map<std::string, std::string>> models(kThreads);
  uint64_t flushes = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < kPuts; ++i) {
          std::string k = absl::StrCat("t", t, "-", Key(int(rng() % 1500)));
          std::string v(size_t(rng() % 200), char('a' + rng() % 26));
          ASSERT_OK(s->Put(k, v));
          models[size_t(t)][k] = v;
          if (t == 0 && i % 500 == 0) {
            ASSERT_OK(s->Flush());
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    flushes = s->Stats().flushes;
    ASSERT_OK(s->Close());
  }
  EXPECT_GT(flushes, background ? 8u : 12u);  // Flush() alone makes 8; background flights gather more
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, o));
  for (const auto& m : models) {
    for (const auto& [k, v] : m) {
      ASSERT_OK_AND_ASSIGN(std::string got, s->Get(k));
      ASSERT_EQ(got, v) << k;
    }
  }
}

// A flush whose log blocks pass the end of the differential log's ring
// writes them as two runs, each at its place: on a volume with a small
// ring, flushes of 1 to ~10 blocks lap it several times, and after a
// reopen (whose replay reads the live ring) every key reads back.
TEST(KvPdl, FlushesAcrossTheRingsEndReadBack) {
  MemVolume vol(1 << 13);
  ASSERT_OK_AND_ASSIGN(kv::Layout l, FormatAndReadLayout(&vol));
  ASSERT_TRUE(l.has_diff_log());
  ASSERT_LT(l.dlog_blocks, 2000u);
  KvOptions o;
  o.buffer_pages = 8;  // leaves come and go: most changes are logged unread
  o.diff_budget_bytes = 32 << 10;
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(3);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<KvStore> store, KvStore::Open(&vol, o));
  for (int i = 0; i < 1500; ++i) {
    model[Key(i)] = std::string(40, 'a');
    ASSERT_OK(store->Put(Key(i), model[Key(i)]));
  }
  ASSERT_OK(store->Flush());
  uint64_t written = 0;
  for (int round = 0; written < 4 * l.dlog_blocks; ++round) {
    ASSERT_LT(round, 20000);
    const uint64_t before = store->Stats().diff_block_writes;
    const int burst = 1 + int(rng() % 300);  // ~0 to 10 log blocks per flush
    std::vector<std::string> keys;
    for (int j = 0; j < burst; ++j) {
      keys.push_back(Key(int(rng() % 1500)));
      model[keys.back()] = std::to_string(rng());
      ASSERT_OK(store->Put(keys.back(), model[keys.back()]));
    }
    ASSERT_OK(store->Flush());
    written += store->Stats().diff_block_writes - before;
    // Reopened (no Close: the replay reads what the flushes wrote), the
    // burst's keys and some others read back.
    store.reset();
    ASSERT_OK_AND_ASSIGN(store, KvStore::Open(&vol, o));
    for (int j = 0; j < 20; ++j) keys.push_back(Key(int(rng() % 1500)));
    for (const std::string& k : keys) {
      ASSERT_OK_AND_ASSIGN(std::string got, store->Get(k));
      ASSERT_EQ(got, model[k]) << k << " round " << round;
    }
  }
  for (const auto& [k, v] : model) {
    ASSERT_OK_AND_ASSIGN(std::string got, store->Get(k));
    ASSERT_EQ(got, v) << k;
  }
}

// Format version 1 (no differential log) opens: read-only as it is,
// writable after its header is rewritten as version 2.
TEST(KvPdl, Version1DatasetsAreUpgraded) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol, {}));
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, {.mode = KvMode::kIpl}));
    for (int i = 0; i < 500; ++i) ASSERT_OK(s->Put(Key(i), std::to_string(i)));
    ASSERT_OK(s->Close());
  }
  // Rewrite the header as version 1 would have: no anchor, no log, the
  // blob area to the end.
  std::vector<std::byte> block(4096);
  ASSERT_OK(vol.Read(0, block));
  ASSERT_OK_AND_ASSIGN(kv::Layout l, kv::DecodeHeader(block));
  std::vector<std::byte> v1;
  util::Encoder e(&v1);
  e.U64(kv::kHeaderMagic);
  e.U32(1);
  for (uint32_t x : {l.geo.page_bytes, l.geo.pages_per_unit, l.geo.log_sectors_per_unit,
                     l.geo.sectors_per_page, l.scratch_base, l.scratch_blocks, l.unit_base,
                     l.unit_count, l.blob_base, uint32_t(vol.size_bytes() / 4096 - l.blob_base)})
    e.U32(x);
  e.U64(l.created_ns);
  e.U64(util::Xxh3(v1));
  v1.resize(4096);
  ASSERT_OK(vol.Write(0, v1, true));
  ASSERT_OK(vol.Read(0, block));
  ASSERT_EQ(kv::DecodeHeader(block)->version, 1u);
  {
    ASSERT_OK_AND_ASSIGN(auto r, KvStore::Open(&vol, {.read_only = true}));
    EXPECT_EQ(*r->Get(Key(7)), "7");
  }
  ASSERT_OK(vol.Read(0, block));
  EXPECT_EQ(kv::DecodeHeader(block)->version, 1u) << "a read-only open wrote the header";
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, {}));
    for (int i = 0; i < 500; ++i) ASSERT_OK(s->Put(Key(i), "x" + std::to_string(i)));
    ASSERT_OK(s->Close());
  }
  ASSERT_OK(vol.Read(0, block));
  ASSERT_OK_AND_ASSIGN(kv::Layout up, kv::DecodeHeader(block));
  EXPECT_EQ(up.version, 2u);
  EXPECT_TRUE(up.has_diff_log());
  EXPECT_EQ(up.dlog_base + up.dlog_blocks, vol.size_bytes() / 4096);
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, {}));
  EXPECT_EQ(*s->Get(Key(499)), "x499");
  // A header of a newer version is refused clearly.
  std::vector<std::byte> v9 = v1;
  util::PutU32(&v9[8], 9);
  util::PutU64(&v9[60], util::Xxh3(std::span(v9).first(60)));
  EXPECT_TRUE(absl::IsFailedPrecondition(kv::DecodeHeader(v9).status()));
}

// A damaged differential log is reported, not replayed into pages.
TEST(KvPdl, MalformedLogBlockIsDataLoss) {
  MemVolume vol(1 << 18);
  ASSERT_OK(KvStore::Format(&vol));
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(&vol, {}));
    for (int i = 0; i < 50; ++i) ASSERT_OK(s->Put(Key(i), "v"));
    ASSERT_OK(s->Close());
  }
  std::vector<std::byte> block(4096);
  ASSERT_OK(vol.Read(0, block));
  ASSERT_OK_AND_ASSIGN(kv::Layout l, kv::DecodeHeader(block));
  ASSERT_OK(vol.Read(uint64_t(l.dlog_base) * 4096, block));
  ASSERT_TRUE(kv::DecodeDiffBlock(block, 0)->has_value()) << "the log does not start at block 0";
  block[kv::kDiffBlockHeaderBytes + 8] = std::byte{0x7f};  // the first record's op
  ASSERT_OK(vol.Write(uint64_t(l.dlog_base) * 4096, block, true));
  EXPECT_TRUE(absl::IsDataLoss(KvStore::Open(&vol, {}).status()));
}

// The differential log's age queue (diff_log.h, age_) keeps stale entries
// and drops them lazily; the tail and the oldest page must still be those
// of the live differentials, through resets, relogs, drops, restarts
// within one block and the queue's compaction.
TEST(KvDiffLog, OldestAndTailFollowTheLiveDifferentials) {
  ASSERT_OK_AND_ASSIGN(kv::Layout layout, kv::Layout::Plan(KvGeometry{}, 1 << 16));
  ASSERT_TRUE(layout.has_diff_log());
  kv::DiffLog dl(layout);
  constexpr uint32_t kPages = 300;
  std::vector<uint32_t> epoch(kPages, 1);
  std::mt19937 rng(7);
  for (int step = 0; step < 60000; ++step) {
    const uint32_t page = rng() % (step < 30000 ? kPages : 40);  // later: a few hot pages
    const int what = int(rng() % 100);
    if (what < 80) {
      kv::LogEntry e;
      e.key = "k" + std::to_string(rng() % 1000);
      e.value = std::string(rng() % 120, 'v');
      dl.Append(page, epoch[page], kv::EncodeLogEntry(e));
    } else if (what < 92) {
      dl.Reset(page, ++epoch[page]);
    } else if (what < 97) {
      dl.Relog(page);
    } else {
      dl.Drop(page);
    }
    // Brute force over the table.
    std::optional<uint64_t> min;
    size_t live = 0;
    for (uint32_t p = 0; p < kPages; ++p) {
      const kv::DiffLog::PageDiff* d = dl.Find(p);
      if (d == nullptr || d->bytes.empty()) continue;
      ++live;
      if (!min || d->oldest < *min) min = d->oldest;
    }
    ASSERT_EQ(dl.pages(), live) << step;
    ASSERT_EQ(dl.tail(), min.value_or(dl.head())) << step;
    std::optional<uint32_t> oldest = dl.Oldest();
    ASSERT_EQ(oldest.has_value(), min.has_value()) << step;
    if (oldest) {
      const kv::DiffLog::PageDiff* d = dl.Find(*oldest);
      ASSERT_NE(d, nullptr) << step;
      ASSERT_EQ(d->oldest, *min) << step;
    }
  }
}

}  // namespace
}  // namespace ftl
