// kvgate-store end to end in one process: a master, data nodes and clients on loopback, bytes
// moving through the real transfer engine (shm and tcp). Several clients at once, duplicate
// in-flight puts written once, chains written past their stored prefix, checksums catching a
// corrupted copy, extra slices, async calls, KV events, and bad input on the master's socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>
#include <zmq.hpp>

#include "kvevents/event_decoder.h"
#include "store/client.h"
#include "store/data_node.h"
#include "store/master_service.h"
#include "store/store_metrics.h"
#include "tests/store/store_harness.h"
#include "tests/store/test_credentials.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::store {
namespace {

uint8_t PatternByte(uint64_t key, uint64_t i) {
  return static_cast<uint8_t>((key * 131 + i * 7 + (i >> 9)) & 0xff);
}
void Fill(uint8_t* p, uint64_t n, uint64_t key) {
  for (uint64_t i = 0; i < n; ++i) p[i] = PatternByte(key, i);
}
bool Matches(const uint8_t* p, uint64_t n, uint64_t key) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] != PatternByte(key, i)) return false;
  return true;
}

ObjectKey K(uint64_t h) { return {MakeNamespace("llama", "", "", 0), h}; }

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto svc =
        kvgate::testing::StartTestMaster(kvgate::testing::TestMasterOptions(/*kv_events=*/true));
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    AddNode("node-a", 32 << 20);
  }

  DataNode* AddNode(const std::string& name, uint64_t bytes) {
    auto n = kvgate::testing::StartTestNode(
        kvgate::testing::TestNodeOptions(name, svc_->address(), {"shm", "tcp"}, bytes));
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok()) return nullptr;
    nodes_.push_back(std::move(*n));
    return nodes_.back().get();
  }

  std::unique_ptr<StoreClient> Client() {
    StoreClientOptions o;
    o.master = svc_->address();
    o.transports = {GetParam()};
    o.tcp.listen_address = "127.0.0.1";
    auto c = StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  template <typename F>
  static void WaitUntil(F done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(done());
  }

  // Puts keys [first, first + n) of `size` bytes each from one registered buffer.
  static std::vector<PutResult> PutRange(StoreClient& c, uint8_t* buf, uint64_t first, size_t n,
                                         uint64_t size) {
    std::vector<PutEntry> entries(n);
    for (size_t i = 0; i < n; ++i) {
      Fill(buf + i * size, size, first + i);
      entries[i].key = K(first + i);
      entries[i].slices = {{buf + i * size, size}};
    }
    return c.BatchPutFrom(entries);
  }

  static std::vector<absl::StatusOr<uint64_t>> GetRange(StoreClient& c, uint8_t* buf,
                                                        uint64_t first, size_t n, uint64_t size) {
    std::vector<GetEntry> entries(n);
    for (size_t i = 0; i < n; ++i) {
      std::memset(buf + i * size, 0, size);
      entries[i].key = K(first + i);
      entries[i].slices = {{buf + i * size, size}};
    }
    return c.BatchGetInto(entries);
  }

  std::unique_ptr<MasterService> svc_;
  std::vector<std::unique_ptr<DataNode>> nodes_;
};

TEST_P(StoreTest, ManyClientsPutAndGetByteExact) {
  constexpr int kClients = 4;
  constexpr size_t kKeys = 48;
  constexpr uint64_t kSize = 40 << 10;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Client());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      StoreClient& client = *clients[c];
      auto buf = client.AllocateBuffer(kKeys * kSize);
      ASSERT_TRUE(buf.ok());
      auto* p = static_cast<uint8_t*>(*buf);
      for (const auto& r : PutRange(client, p, c * 1000, kKeys, kSize))
        if (r.code != PutCode::kStored) errors++;
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  ASSERT_EQ(errors.load(), 0);
  // Every client reads every other client's keys.
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      StoreClient& client = *clients[c];
      auto buf = client.AllocateBuffer(kKeys * kSize);
      ASSERT_TRUE(buf.ok());
      auto* p = static_cast<uint8_t*>(*buf);
      for (int other = 0; other < kClients; ++other) {
        auto got = GetRange(client, p, other * 1000, kKeys, kSize);
        for (size_t i = 0; i < kKeys; ++i) {
          if (!got[i].ok() || *got[i] != kSize || !Matches(p + i * kSize, kSize, other * 1000 + i))
            errors++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  const MasterStats s = svc_->master()->Stats();
  EXPECT_EQ(s.objects, kClients * kKeys);
  EXPECT_EQ(s.get_hits, kClients * kClients * kKeys);
  EXPECT_EQ(
      clients[0]->engine().SegmentTransports(*clients[0]->engine().OpenSegment("node-a"))->front(),
      GetParam());
}

TEST_P(StoreTest, DuplicateInFlightPutIsWrittenOnce) {
  constexpr int kClients = 4;
  constexpr size_t kKeys = 64;
  constexpr uint64_t kSize = 64 << 10;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Client());
  std::vector<std::vector<PutResult>> results(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto buf = clients[c]->AllocateBuffer(kKeys * kSize);
      ASSERT_TRUE(buf.ok());
      results[c] = PutRange(*clients[c], static_cast<uint8_t*>(*buf), 0, kKeys, kSize);
    });
  }
  for (auto& t : threads) t.join();
  uint64_t written = 0;
  for (int c = 0; c < kClients; ++c) {
    written += clients[c]->stats().keys_written;
    for (const auto& r : results[c]) EXPECT_NE(r.code, PutCode::kError) << r.error;
  }
  EXPECT_EQ(written, kKeys);  // Each key went over the wire exactly once.
  const MasterStats s = svc_->master()->Stats();
  EXPECT_EQ(s.puts_committed, kKeys);
  EXPECT_EQ(s.put_dedups_in_flight + s.put_dedups_present, (kClients - 1) * kKeys);
  auto reader = Client();
  auto buf = reader->AllocateBuffer(kKeys * kSize);
  auto got = GetRange(*reader, static_cast<uint8_t*>(*buf), 0, kKeys, kSize);
  for (size_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    EXPECT_TRUE(Matches(static_cast<uint8_t*>(*buf) + i * kSize, kSize, i)) << i;
  }
}

TEST_P(StoreTest, APutWaitingForAnotherWriterHoldsUpNoOtherCallOfItsClient) {
  // Another writer holds key 7 in flight and does not finish.
  PutStartRequest start;
  start.items.push_back({K(7), {4096}, std::nullopt, {}});
  const PutStartItemResult first = svc_->master()->PutStart(start).items.at(0);
  ASSERT_EQ(first.code, KeyCode::kOk);
  StoreClientOptions o;
  o.master = svc_->address();
  o.transports = {GetParam()};
  o.tcp.listen_address = "127.0.0.1";
  o.in_flight_wait = std::chrono::seconds(5);
  o.timeout = std::chrono::seconds(10);
  auto c = StoreClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto buf = (*c)->AllocateBuffer(4096);
  ASSERT_TRUE(buf.ok());
  auto put = std::async(std::launch::async,
                        [&] { return PutRange(**c, static_cast<uint8_t*>(*buf), 7, 1, 4096); });
  WaitUntil([&] { return svc_->master()->Stats().put_dedups_in_flight == 1; });
  // The put now waits for the other writer; the client's lookups go on meanwhile (on one
  // connection they queued behind the wait until it ended).
  for (int i = 0; i < 20; ++i) {
    auto present = (*c)->BatchExists(std::vector<ObjectKey>{K(8)}, false);
    ASSERT_TRUE(present.ok()) << present.status();
    ASSERT_EQ(put.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << i;
  }
  // The other writer fails: the waiting put writes the key itself.
  ASSERT_EQ(svc_->master()->PutEnd({{{K(7), first.put_id, false, 0}}}).codes.at(0), KeyCode::kOk);
  const std::vector<PutResult> done = put.get();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code, PutCode::kStored) << done[0].error;
}

TEST_P(StoreTest, ChainWithAStoredFirstHalfWritesOnlyTheSecond) {
  auto c = Client();
  constexpr uint64_t kSize = 16 << 10;
  auto buf = c->AllocateBuffer(64 * kSize);
  auto* p = static_cast<uint8_t*>(*buf);
  PutRange(*c, p, 0, 32, kSize);
  ASSERT_EQ(c->stats().keys_written, 32u);
  auto r = PutRange(*c, p, 0, 64, kSize);
  for (size_t i = 0; i < 64; ++i)
    EXPECT_EQ(r[i].code, i < 32 ? PutCode::kAlreadyPresent : PutCode::kStored) << i;
  EXPECT_EQ(c->stats().keys_written, 64u);
  EXPECT_EQ(c->stats().bytes_written, 64 * kSize);
  std::vector<ObjectKey> chain;
  for (uint64_t h = 0; h < 70; ++h) chain.push_back(K(h));
  auto present = c->BatchExists(chain, /*stop_at_first_miss=*/true);
  ASSERT_TRUE(present.ok());
  ASSERT_EQ(present->size(), 65u);  // 64 hits, then the first miss.
  EXPECT_FALSE(present->back());
}

TEST_P(StoreTest, CorruptedObjectFailsItsGetWithAChecksumError) {
  auto c = Client();
  constexpr uint64_t kSize = 8192;
  auto buf = c->AllocateBuffer(2 * kSize);
  auto* p = static_cast<uint8_t*>(*buf);
  PutRange(*c, p, 5, 2, kSize);
  auto where = svc_->master()->Get({{K(5)}, 1, ""}).items.at(0);
  ASSERT_EQ(where.replicas.size(), 1u);
  ASSERT_TRUE(nodes_[0]->CorruptForTest(where.replicas[0].addr + 100).ok());
  auto got = GetRange(*c, p, 5, 2, kSize);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kDataLoss) << got[0].status();
  EXPECT_NE(got[0].status().message().find("checksum"), std::string::npos);
  ASSERT_TRUE(got[1].ok()) << got[1].status();  // Its neighbour is intact.
  EXPECT_EQ(c->stats().checksum_failures, 1u);
}

TEST_P(StoreTest, ExtraSlicesAreStoredAndReadWithTheirKv) {
  auto c = Client();
  auto buf = c->AllocateBuffer(4 << 20);
  auto* p = static_cast<uint8_t*>(*buf);
  Fill(p, 1 << 20, 1);
  Fill(p + (1 << 20), 4096, 2);  // e.g. EAGLE hidden states
  PutEntry e{K(77), {{p, 1 << 20}, {p + (1 << 20), 4096}}, std::nullopt, {}};
  ASSERT_EQ(c->BatchPutFrom({&e, 1}).at(0).code, PutCode::kStored);
  uint8_t* out = p + (2 << 20);
  std::memset(out, 0, 1 << 20);
  uint8_t* out_extra = p + (3 << 20);
  GetEntry g{K(77), {{out, 1 << 20}, {out_extra, 8192}}};  // Larger than the slice: fine.
  auto got = c->BatchGetInto({&g, 1}).at(0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (1u << 20) + 4096);
  EXPECT_TRUE(Matches(out, 1 << 20, 1));
  EXPECT_TRUE(Matches(out_extra, 4096, 2));
  // Buffers that cannot hold the object are refused, not overrun.
  GetEntry small{K(77), {{out, 1 << 20}}};
  EXPECT_EQ(c->BatchGetInto({&small, 1}).at(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, AsyncCallsCallBack) {
  auto c = Client();
  auto buf = c->AllocateBuffer(4 * 4096);
  auto* p = static_cast<uint8_t*>(*buf);
  std::vector<PutEntry> entries;
  for (uint64_t i = 0; i < 4; ++i) {
    Fill(p + i * 4096, 4096, 100 + i);
    entries.push_back({K(100 + i), {{p + i * 4096, 4096}}, std::nullopt, {}});
  }
  std::promise<std::vector<PutResult>> put;
  c->BatchPutFromAsync(entries, [&](std::vector<PutResult> r) { put.set_value(std::move(r)); });
  for (const auto& r : put.get_future().get()) EXPECT_EQ(r.code, PutCode::kStored);
  std::promise<absl::StatusOr<std::vector<bool>>> exists;
  c->BatchExistsAsync({K(100), K(101), K(999)}, false,
                      [&](absl::StatusOr<std::vector<bool>> r) { exists.set_value(std::move(r)); });
  auto e = exists.get_future().get();
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (std::vector<bool>{true, true, false}));
  std::memset(p, 0, 4096);
  std::promise<std::vector<absl::StatusOr<uint64_t>>> get;
  c->BatchGetIntoAsync(
      {{K(100), {{p, 4096}}}, {K(999), {{p + 4096, 4096}}}},
      [&](std::vector<absl::StatusOr<uint64_t>> r) { get.set_value(std::move(r)); });
  auto g = get.get_future().get();
  EXPECT_TRUE(g[0].ok());
  EXPECT_TRUE(Matches(p, 4096, 100));
  EXPECT_EQ(g[1].status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, RemoveAndPin) {
  auto c = Client();
  auto buf = c->AllocateBuffer(2 * 4096);
  PutRange(*c, static_cast<uint8_t*>(*buf), 1, 2, 4096);
  EXPECT_TRUE(c->BatchPin({K(1)}, true)[0].ok());
  EXPECT_EQ(svc_->master()->Stats().pinned, 1u);
  auto removed = c->BatchRemove({K(2), K(3)});
  EXPECT_TRUE(removed[0].ok());
  EXPECT_EQ(removed[1].code(), absl::StatusCode::kNotFound);
  auto e = c->BatchExists({K(1), K(2)}, false);
  EXPECT_EQ(*e, (std::vector<bool>{true, false}));
  // Just read: leased, so it cannot be removed for now.
  uint8_t* p = static_cast<uint8_t*>(*buf);
  GetRange(*c, p, 1, 1, 4096);
  EXPECT_EQ(c->BatchRemove({K(1)})[0].code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, KvEventsCarryStoredAndRemovedBlocks) {
  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(svc_->events()->endpoint());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // ZMQ slow joiner.
  auto c = Client();
  auto buf = c->AllocateBuffer(4096);
  PutEntry e{K(42), {{*buf, 4096}}, 41, {1, 2, 3, 4}};
  ASSERT_EQ(c->BatchPutFrom({&e, 1})[0].code, PutCode::kStored);
  ASSERT_TRUE(c->BatchRemove({K(42)})[0].ok());
  std::vector<kvevents::KvEvent> seen;
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  while (seen.size() < 2) {
    zmq::message_t topic, seq, payload;
    ASSERT_TRUE(sub.recv(topic));
    ASSERT_TRUE(sub.recv(seq));
    ASSERT_TRUE(sub.recv(payload));
    auto batch =
        kvevents::DecodeEventBatch({static_cast<const char*>(payload.data()), payload.size()});
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (auto& ev : batch->events) seen.push_back(ev);
  }
  const auto& stored = std::get<kvevents::BlockStored>(seen[0]);
  EXPECT_EQ(stored.block_hashes, std::vector<uint64_t>{42});
  EXPECT_EQ(stored.parent_block_hash, std::optional<uint64_t>(41));
  EXPECT_EQ(stored.token_ids, (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(stored.medium, std::optional<std::string>("STORE"));
  const auto& removed = std::get<kvevents::BlockRemoved>(seen[1]);
  EXPECT_EQ(removed.block_hashes, std::vector<uint64_t>{42});
}

TEST_P(StoreTest, MetricsAndAdminPagesDescribeTheStore) {
  auto c = Client();
  auto buf = c->AllocateBuffer(4096);
  PutRange(*c, static_cast<uint8_t*>(*buf), 1, 1, 4096);
  const std::string m = RenderMetrics(svc_.get(), nodes_[0].get());
  for (const char* name :
       {"kvgate_store_objects 1", "kvgate_store_master_leader 1",
        "kvgate_store_node_used_bytes{node=\"node-a\"} 4096",
        "kvgate_store_requests_total{op=\"put_start\"} 1",
        "kvgate_store_data_node_registered{node=\"node-a\"} 1", "process_resident_memory_bytes ",
        "process_open_fds ", "kvgate_build_info{program=\"kvgate-store\""})
    EXPECT_NE(m.find(name), std::string::npos) << name << "\n" << m;
  // The text format as Prometheus reads it (promtool lints names, types and help too).
  const std::string path = kvgate::testing::WriteTempFile("store-metrics.txt", m);
  ASSERT_EQ(std::system("command -v promtool >/dev/null"), 0)
      << "promtool (Debian package prometheus) is required; run scripts/setup";
  const int rc = std::system(("promtool check metrics < " + path + " 2>" + path + ".err").c_str());
  std::ifstream err(path + ".err");
  std::string err_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << err_text << m;
  const std::string j = RenderAdminJson(svc_.get(), nodes_[0].get());
  EXPECT_NE(j.find("\"objects\":1"), std::string::npos) << j;
}

INSTANTIATE_TEST_SUITE_P(Transports, StoreTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

// Raw bytes at the master's socket: a bad frame closes that connection only; a good frame with
// a bad body gets an error reply on a connection that stays usable.
TEST(StoreMasterSocketTest, BadInputIsRefusedAndTheMasterServesOn) {
  auto svc = kvgate::testing::StartTestMaster();
  ASSERT_TRUE(svc.ok());
  auto connect = [&] {
    const int fd = kvgate::testing::ConnectLoopback((*svc)->port());
    EXPECT_GE(fd, 0) << "cannot connect to the master";
    return fd;
  };
  int bad = connect();
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(bad, junk, sizeof(junk) - 1, 0), 0);
  char buf[256];
  ssize_t n = 0, total = 0;
  while ((n = ::recv(bad, buf, sizeof(buf), 0)) > 0) total += n;  // Not a hello: hung up.
  EXPECT_EQ(total, 0);
  ::close(bad);
  EXPECT_TRUE(kvgate::testing::WaitFor([&] { return (*svc)->auth_failures() == 1; }));
  const auto self = kvgate::testing::TestAuth(transfer::PeerRole::kClient)->self;
  RpcConnection conn("127.0.0.1", (*svc)->port(), self);
  auto r = conn.Call(Op::kExists, "\x05\x00\x00\x00garbage", std::chrono::seconds(2));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  auto ok = conn.Call(Op::kExists, EncodeRequest(ExistsRequest{{{"ns", 1}}, false, 0}),
                      std::chrono::seconds(2));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*svc)->bad_requests(), 1u);
  // Short-lived connections come and go (their threads are reaped as new ones arrive).
  for (int i = 0; i < 50; ++i) {
    RpcConnection once("127.0.0.1", (*svc)->port(), self);
    ASSERT_TRUE(
        once.Call(Op::kHello, EncodeRequest(HelloRequest{"c"}), std::chrono::seconds(2)).ok());
  }
}

TEST(StoreClientTest, BadAddressesAreClearErrors) {
  kvgate::testing::TestCredentialsFile();
  for (const char* bad : {"no-port", "etcd://", "host:99999"}) {
    StoreClientOptions o;
    o.master = bad;
    EXPECT_EQ(StoreClient::Create(o).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // A master that is not there: calls fail with kUnavailable after the time-out.
  StoreClientOptions o;
  o.master = "127.0.0.1:1";
  o.transports = {"tcp"};
  o.timeout = std::chrono::milliseconds(300);
  auto c = StoreClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->BatchExists({K(1)}, true).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvgate::store
