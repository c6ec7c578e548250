// The master's semantics without a network: allocation, two-phase put, dedup of in-flight puts,
// chains written only past their stored prefix, leases against eviction, soft pins, node loss,
// re-registration after a failover; and the wire codec and the range allocator.
#include "store/master.h"

#include <gtest/gtest.h>

#include <thread>

#include "store/range_allocator.h"
#include "store/wire.h"

namespace kvgate::store {
namespace {

ObjectKey K(uint64_t h) { return {"m|||0", h}; }

class RecordingSink : public StoreEventSink {
 public:
  void Stored(const ObjectKey& key, std::optional<uint64_t>,
              const std::vector<uint32_t>&) override {
    stored.push_back(key.hash);
  }
  void Removed(const ObjectKey& key) override { removed.push_back(key.hash); }
  std::vector<uint64_t> stored, removed;
};

class MasterTest : public ::testing::Test {
 protected:
  MasterTest() : master_(Options(), &events_) {}
  static MasterOptions Options() {
    MasterOptions o;
    o.node_timeout = std::chrono::milliseconds(100);
    o.put_timeout = std::chrono::milliseconds(200);
    return o;
  }
  uint64_t AddNode(const std::string& name, uint64_t capacity, std::string host = "h") {
    auto r = master_.RegisterNode({name, host, 1 << 20, capacity, {}});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->epoch : 0;
  }
  PutStartItemResult Start(uint64_t h, uint64_t size, std::string preferred = "") {
    PutStartRequest req;
    req.items.push_back({K(h), {size}, std::nullopt, {}});
    req.preferred_node = std::move(preferred);
    return master_.PutStart(req).items.at(0);
  }
  KeyCode End(uint64_t h, uint64_t put_id, bool ok = true) {
    return master_.PutEnd({{{K(h), put_id, ok, 1234}}}).codes.at(0);
  }
  void Put(uint64_t h, uint64_t size) {
    auto r = Start(h, size);
    ASSERT_EQ(r.code, KeyCode::kOk);
    ASSERT_EQ(End(h, r.put_id), KeyCode::kOk);
  }
  std::vector<KeyCode> Exists(std::vector<uint64_t> hs, bool stop = false, uint32_t lease = 0) {
    ExistsRequest req;
    for (uint64_t h : hs) req.keys.push_back(K(h));
    req.stop_at_first_miss = stop;
    req.lease_ms = lease;
    return master_.Exists(req).codes;
  }

  RecordingSink events_;
  Master master_;
};

TEST_F(MasterTest, TwoPhasePutCommitsAndPublishes) {
  AddNode("a", 1 << 20);
  auto r = Start(1, 4096);
  ASSERT_EQ(r.code, KeyCode::kOk);
  ASSERT_EQ(r.replicas.size(), 1u);
  EXPECT_EQ(r.replicas[0].segment, "a");
  EXPECT_EQ(r.replicas[0].addr, uint64_t{1} << 20);         // Node base + offset 0.
  EXPECT_EQ(Exists({1}), std::vector{KeyCode::kNotFound});  // Not visible before the commit.
  EXPECT_EQ(End(1, r.put_id), KeyCode::kOk);
  EXPECT_EQ(Exists({1}), std::vector{KeyCode::kOk});
  EXPECT_EQ(events_.stored, std::vector<uint64_t>{1});
  auto got = master_.Get({{K(1)}, 0, ""}).items.at(0);
  EXPECT_EQ(got.code, KeyCode::kOk);
  EXPECT_EQ(got.checksum, 1234u);
  EXPECT_EQ(got.slices, std::vector<uint64_t>{4096});
}

TEST_F(MasterTest, RevokedPutFreesItsSpace) {
  AddNode("a", 8192);
  auto r = Start(1, 8192);
  ASSERT_EQ(r.code, KeyCode::kOk);
  EXPECT_EQ(Start(2, 8192).code, KeyCode::kNoSpace);  // The in-flight put is never evicted.
  EXPECT_EQ(End(1, r.put_id, /*ok=*/false), KeyCode::kOk);
  EXPECT_EQ(Exists({1}), std::vector{KeyCode::kNotFound});
  EXPECT_EQ(Start(2, 8192).code, KeyCode::kOk);
  EXPECT_TRUE(events_.stored.empty());
}

TEST_F(MasterTest, SecondPutOfAKeyInFlightIsNotWrittenAgain) {
  AddNode("a", 1 << 20);
  auto first = Start(7, 4096);
  ASSERT_EQ(first.code, KeyCode::kOk);
  EXPECT_EQ(Start(7, 4096).code, KeyCode::kInFlight);
  // The second writer waits for the first one's commit.
  std::thread committer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    End(7, first.put_id);
  });
  auto waited = master_.WaitKeys({{K(7)}, 5000});
  committer.join();
  EXPECT_EQ(waited.codes, std::vector{KeyCode::kOk});
  EXPECT_EQ(Start(7, 4096).code, KeyCode::kPresent);
  const MasterStats s = master_.Stats();
  EXPECT_EQ(s.put_dedups_in_flight, 1u);
  EXPECT_EQ(s.put_dedups_present, 1u);
  EXPECT_EQ(s.puts_committed, 1u);
}

TEST_F(MasterTest, WaitOnAFailedWriterReportsNotFound) {
  AddNode("a", 1 << 20);
  auto first = Start(7, 4096);
  std::thread revoker([&] { End(7, first.put_id, /*ok=*/false); });
  auto waited = master_.WaitKeys({{K(7)}, 5000});
  revoker.join();
  EXPECT_EQ(waited.codes, std::vector{KeyCode::kNotFound});
}

TEST_F(MasterTest, ChainWithAStoredPrefixAllocatesOnlyItsTail) {
  AddNode("a", 1 << 20);
  for (uint64_t h = 1; h <= 4; ++h) Put(h, 1024);
  PutStartRequest req;
  for (uint64_t h = 1; h <= 8; ++h) req.items.push_back({K(h), {1024}, std::nullopt, {}});
  auto r = master_.PutStart(req);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(r.items[i].code, i < 4 ? KeyCode::kPresent : KeyCode::kOk) << i;
}

TEST_F(MasterTest, ExistsStopsAtTheFirstMiss) {
  AddNode("a", 1 << 20);
  Put(1, 64);
  Put(2, 64);
  Put(4, 64);
  EXPECT_EQ(Exists({1, 2, 3, 4}, true),
            (std::vector{KeyCode::kOk, KeyCode::kOk, KeyCode::kNotFound}));
  EXPECT_EQ(Exists({1, 2, 3, 4}, false),
            (std::vector{KeyCode::kOk, KeyCode::kOk, KeyCode::kNotFound, KeyCode::kOk}));
}

TEST_F(MasterTest, EvictsLeastRecentlyUsedFirst) {
  AddNode("a", 10 * 1024);
  for (uint64_t h = 1; h <= 8; ++h) Put(h, 1024);
  master_.Get({{K(1)}, 1, ""});  // 1 is now the most recently used (a 1 ms lease).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (uint64_t h = 9; h <= 12; ++h) Put(h, 1024);
  auto e = Exists({1, 2, 3});
  EXPECT_EQ(e[0], KeyCode::kOk);
  EXPECT_EQ(e[1], KeyCode::kNotFound);
  EXPECT_GT(master_.Stats().evictions, 0u);
  EXPECT_FALSE(events_.removed.empty());
  EXPECT_EQ(events_.removed.front(), 2u);
}

TEST_F(MasterTest, LeasedObjectsSurviveMemoryPressure) {
  AddNode("a", 4 * 1024);
  for (uint64_t h = 1; h <= 4; ++h) Put(h, 1024);
  EXPECT_EQ(Exists({1, 2, 3, 4}, false, /*lease=*/60000).size(), 4u);
  // Nothing may be evicted: the put finds no space instead.
  EXPECT_EQ(Start(5, 1024).code, KeyCode::kNoSpace);
  EXPECT_EQ(Exists({1, 2, 3, 4}), std::vector<KeyCode>(4, KeyCode::kOk));
  EXPECT_EQ(master_.Remove({{K(1)}}).codes, std::vector{KeyCode::kBusy});
}

TEST_F(MasterTest, LeaseEndsThenEvictionProceeds) {
  AddNode("a", 2 * 1024);
  Put(1, 1024);
  Put(2, 1024);
  Exists({1, 2}, false, /*lease=*/30);
  EXPECT_EQ(Start(3, 1024).code, KeyCode::kNoSpace);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_EQ(Start(3, 1024).code, KeyCode::kOk);
}

TEST_F(MasterTest, PinnedObjectsAreEvictedLast) {
  AddNode("a", 4 * 1024);
  for (uint64_t h = 1; h <= 4; ++h) Put(h, 1024);
  EXPECT_EQ(master_.Pin({{K(1)}, true}).codes, std::vector{KeyCode::kOk});
  EXPECT_EQ(master_.Stats().pinned, 1u);
  Put(5, 1024);
  Put(6, 1024);
  EXPECT_EQ(Exists({1})[0], KeyCode::kOk);  // 1 was the oldest but is pinned.
  // With only pinned objects left to evict, pins give way.
  EXPECT_EQ(master_.Pin({{K(5), K(6)}, true}).codes, std::vector<KeyCode>(2, KeyCode::kOk));
  EXPECT_EQ(master_.Pin({{K(3), K(4)}, true}).codes.size(), 2u);
  Put(7, 4096);
  EXPECT_EQ(Exists({7})[0], KeyCode::kOk);
}

TEST_F(MasterTest, ExtraSlicesAreOneObject) {
  AddNode("a", 1 << 20);
  PutStartRequest req;
  req.items.push_back({K(1), {4096, 512, 64}, std::nullopt, {}});
  auto r = master_.PutStart(req).items.at(0);
  ASSERT_EQ(r.code, KeyCode::kOk);
  End(1, r.put_id);
  auto got = master_.Get({{K(1)}, 0, ""}).items.at(0);
  EXPECT_EQ(got.slices, (std::vector<uint64_t>{4096, 512, 64}));
  EXPECT_EQ(master_.Stats().bytes, 4096u + 512 + 64);
}

TEST_F(MasterTest, InvalidSlicesAreRefused) {
  AddNode("a", 1 << 20);
  PutStartRequest req;
  req.items.push_back({K(1), {}, std::nullopt, {}});
  req.items.push_back({K(2), {0}, std::nullopt, {}});
  req.items.push_back({K(3), {~uint64_t{0}, 2}, std::nullopt, {}});
  req.items.push_back({K(4), {2 << 20}, std::nullopt, {}});  // Larger than any node.
  auto r = master_.PutStart(req);
  EXPECT_EQ(r.items[0].code, KeyCode::kInvalid);
  EXPECT_EQ(r.items[1].code, KeyCode::kInvalid);
  EXPECT_EQ(r.items[2].code, KeyCode::kInvalid);
  EXPECT_EQ(r.items[3].code, KeyCode::kNoSpace);
  EXPECT_EQ(End(9, 12345), KeyCode::kInvalid);  // No such put.
}

TEST_F(MasterTest, PlacementPrefersTheLocalNodeThenTheFreest) {
  AddNode("a", 1 << 20, "host-a");
  AddNode("b", 1 << 20, "host-b");
  EXPECT_EQ(Start(1, 4096, "host-b").replicas.at(0).segment, "b");
  EXPECT_EQ(Start(2, 4096, "a").replicas.at(0).segment, "a");
  // Without a preference the node with the larger free ratio wins: make b the fuller one.
  Start(3, 64 << 10, "host-b");
  EXPECT_EQ(Start(4, 4096).replicas.at(0).segment, "a");
}

TEST_F(MasterTest, LostNodeTakesItsObjectsAndOnlyThem) {
  const uint64_t epoch_a = AddNode("a", 1 << 20);
  AddNode("b", 1 << 20);
  auto on_a = Start(1, 4096, "a");
  auto on_b = Start(2, 4096, "b");
  End(1, on_a.put_id);
  End(2, on_b.put_id);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ASSERT_TRUE(master_.Heartbeat({"a", epoch_a}).ok());  // a stays, b goes silent.
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  master_.Tick();
  EXPECT_EQ(Exists({1, 2}, false), (std::vector{KeyCode::kOk, KeyCode::kNotFound}));
  EXPECT_EQ(master_.Get({{K(2)}, 0, ""}).items.at(0).code, KeyCode::kNotFound);
  EXPECT_EQ(master_.Stats().objects_lost, 1u);
  EXPECT_FALSE(master_.Heartbeat({"b", 2}).ok());  // It must register again.
}

TEST_F(MasterTest, UnfinishedPutExpires) {
  AddNode("a", 8192);
  auto r = Start(1, 8192);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ASSERT_TRUE(master_.Heartbeat({"a", 1}).ok());
  master_.Tick();
  EXPECT_EQ(End(1, r.put_id), KeyCode::kInvalid);
  EXPECT_EQ(Start(2, 8192).code, KeyCode::kOk);
  EXPECT_EQ(master_.Stats().puts_expired, 1u);
}

TEST_F(MasterTest, HeartbeatsCarryTheNodesObjectsForAFailover) {
  const uint64_t epoch = AddNode("a", 1 << 20);
  Put(1, 4096);
  Put(2, 4096);
  ASSERT_EQ(master_.Remove({{K(2)}}).codes, std::vector{KeyCode::kOk});
  Put(3, 4096);  // Reuses 2's offset.
  auto hb = master_.Heartbeat({"a", epoch});
  ASSERT_TRUE(hb.ok());
  // 2 was committed and removed before the node heard of it: it is withdrawn, not reported.
  ASSERT_EQ(hb->added.size(), 2u);
  EXPECT_TRUE(hb->removed.empty());
  // A new master learns them from the node.
  Master fresh(Options());
  RegisterNodeRequest again{"a", "h", 1 << 20, 1 << 20, hb->added};
  ASSERT_TRUE(fresh.RegisterNode(again).ok());
  ExistsRequest ex;
  ex.keys = {K(1), K(2), K(3)};
  EXPECT_EQ(fresh.Exists(ex).codes, (std::vector{KeyCode::kOk, KeyCode::kNotFound, KeyCode::kOk}));
  auto got = fresh.Get({{K(3)}, 0, ""}).items.at(0);
  EXPECT_EQ(got.checksum, 1234u);
  // Its allocator knows those ranges are taken: the next object goes after them.
  PutStartRequest next;
  next.items.push_back({K(9), {64}, std::nullopt, {}});
  auto placed = fresh.PutStart(next).items.at(0);
  ASSERT_EQ(placed.code, KeyCode::kOk);
  EXPECT_EQ(placed.replicas.at(0).addr, (1u << 20) + 8192);
}

TEST(RangeAllocatorTest, FirstFitMergesNeighbours) {
  RangeAllocator a(4096);
  auto x = a.Allocate(1000);
  auto y = a.Allocate(1000);
  auto z = a.Allocate(1000);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*y, 1024u);  // 64-byte alignment.
  a.Release(*x, 1000);
  a.Release(*z, 1000);
  EXPECT_FALSE(a.Allocate(3000));
  a.Release(*y, 1000);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.Allocate(4096), std::optional<uint64_t>(0));
  RangeAllocator b(4096);
  EXPECT_TRUE(b.AllocateAt(1024, 1024));
  EXPECT_FALSE(b.AllocateAt(1536, 64));
  EXPECT_FALSE(b.AllocateAt(100, 64));  // Misaligned.
  EXPECT_EQ(b.Allocate(1024), std::optional<uint64_t>(0));
}

TEST(WireTest, RequestsRoundTrip) {
  PutStartRequest put;
  put.items.push_back({{"m|l|s|1", 99}, {4096, 128}, 98, {1, 2, 3}});
  put.items.push_back({{"m|||0", 1}, {64}, std::nullopt, {}});
  put.preferred_node = "host";
  put.replicas = 2;
  const std::string body = EncodeRequest(put);
  auto back = DecodeRequest(Op::kPutStart, body);
  ASSERT_TRUE(back.ok()) << back.status();
  const auto& p = std::get<PutStartRequest>(*back);
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].key, (ObjectKey{"m|l|s|1", 99}));
  EXPECT_EQ(p.items[0].parent, std::optional<uint64_t>(98));
  EXPECT_EQ(p.items[0].token_ids, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_FALSE(p.items[1].parent.has_value());
  EXPECT_EQ(p.replicas, 2u);
  EXPECT_EQ(EncodeRequest(*back), body);
}

TEST(WireTest, RepliesRoundTripAtTheirSmallest) {
  // Every element at its minimum size: the decoders' count bounds must admit them.
  GetResponse get;
  get.items.resize(3);
  get.items[0].code = KeyCode::kNotFound;
  get.items[1].slices = {1, 2};
  get.items[1].replicas = {{"", 9}};
  GetResponse get_back;
  ASSERT_TRUE(Decode(Encode(get), &get_back).ok());
  EXPECT_EQ(get_back.items.size(), 3u);
  EXPECT_EQ(get_back.items[1].replicas, get.items[1].replicas);
  PutStartResponse put;
  put.items.resize(2);
  PutStartResponse put_back;
  ASSERT_TRUE(Decode(Encode(put), &put_back).ok());
  EXPECT_EQ(put_back.items.size(), 2u);
  HeartbeatResponse hb;
  hb.added.resize(2);
  hb.removed = {1, 2};
  HeartbeatResponse hb_back;
  ASSERT_TRUE(Decode(Encode(hb), &hb_back).ok());
  EXPECT_EQ(hb_back.added.size(), 2u);
  RegisterNodeRequest reg;
  reg.objects.resize(3);
  auto reg_back = DecodeRequest(Op::kRegisterNode, EncodeRequest(reg));
  ASSERT_TRUE(reg_back.ok()) << reg_back.status();
  EXPECT_EQ(std::get<RegisterNodeRequest>(*reg_back).objects.size(), 3u);
  PutStartRequest ps;
  ps.items.resize(2);
  ASSERT_TRUE(DecodeRequest(Op::kPutStart, EncodeRequest(ps)).ok());
  PutEndRequest pe;
  pe.items.resize(2);
  ASSERT_TRUE(DecodeRequest(Op::kPutEnd, EncodeRequest(pe)).ok());
  ExistsRequest ex;
  ex.keys.resize(4);
  ASSERT_TRUE(DecodeRequest(Op::kExists, EncodeRequest(ex)).ok());
}

TEST(WireTest, MalformedBodiesAreErrorsNamingTheField) {
  ExistsRequest ex{{{"ns", 1}, {"ns", 2}}, true, 10};
  const std::string body = EncodeRequest(ex);
  for (size_t cut = 0; cut < body.size(); ++cut) {
    auto r = DecodeRequest(Op::kExists, body.substr(0, cut));
    EXPECT_FALSE(r.ok()) << cut;
  }
  auto trailing = DecodeRequest(Op::kExists, body + "x");
  EXPECT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("trailing"), std::string::npos);
  // A count far beyond the frame is refused before anything is allocated.
  std::string hostile = "\xff\xff\xff\x7f";
  auto r = DecodeRequest(Op::kExists, hostile);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("keys"), std::string::npos) << r.status();
}

TEST(WireTest, EveryValueHasOneEncoding) {
  // A parent value without its flag would re-encode differently: refused (found by the fuzzer).
  PutStartRequest put;
  put.items.push_back({{"m", 1}, {64}, std::nullopt, {}});
  std::string body = EncodeRequest(put);
  const size_t parent_at = 4 + (4 + 1 + 8) + (4 + 8) + 1;  // count, key, slices, has_parent
  body[parent_at] = 0x29;
  auto r = DecodeRequest(Op::kPutStart, body);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("items.parent"), std::string::npos) << r.status();
}

TEST(WireTest, HeaderChecksMagicVersionAndSize) {
  uint8_t h[kFrameHeaderSize];
  EncodeFrameHeader({10, kProtocolVersion, Op::kGet, 5}, h);
  auto ok = DecodeFrameHeader(h);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->op, Op::kGet);
  EXPECT_EQ(ok->request_id, 5u);
  h[6] = 2;
  EXPECT_EQ(DecodeFrameHeader(h).status().code(), absl::StatusCode::kFailedPrecondition);
  EncodeFrameHeader({kMaxFrameBody + 1, kProtocolVersion, Op::kGet, 5}, h);
  EXPECT_FALSE(DecodeFrameHeader(h).ok());
  EncodeFrameHeader({1, kProtocolVersion, Op::kGet, 5}, h);
  h[7] = 200;
  EXPECT_FALSE(DecodeFrameHeader(h).ok());
  h[7] = static_cast<uint8_t>(Op::kGet);
  h[4] = 'X';
  EXPECT_FALSE(DecodeFrameHeader(h).ok());
}

TEST(WireTest, StatusTravels) {
  const std::string body = EncodeStatus(absl::NotFoundError("nope"));
  auto r = DecodeStatus(body);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "nope");
  const std::string reply = EncodeStatus(absl::OkStatus()) + "payload";
  auto ok = DecodeStatus(reply);  // A view into `reply`.
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "payload");
}

TEST(WireTest, NamespacesOfDistinctPartsDiffer) {
  EXPECT_NE(MakeNamespace("a|b", "", "", 0), MakeNamespace("a", "b", "", 0));
  EXPECT_NE(MakeNamespace("m", "", "", 0), MakeNamespace("m", "", "", 1));
  EXPECT_EQ(MakeNamespace("m", "lora", "salt", 2), "m|lora|salt|2");
}

}  // namespace
}  // namespace kvgate::store
