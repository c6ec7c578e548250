// kvgate-store as separate processes, killed for real: a data node (its keys stop being
// reported, gets of them fail cleanly, the others are unaffected) and the master leader under
// etcd (the standby takes over and every object on the data nodes is still readable). Also the
// binary's contract: /health and /metrics, and kvgate-store-bench verifying every byte.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "store/client.h"
#include "store/master_client.h"
#include "tests/fakes/test_client.h"
#include "tests/store/test_credentials.h"
#include "tests/support/child_process.h"
#include "tests/support/etcd_server.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"

namespace kvgate::store {
namespace {

using kvgate::testing::ChildProcess;
using kvgate::testing::FreePort;
using kvgate::testing::WaitFor;

std::string Bin(const std::string& name) { return kvgate::testing::BinDir() + "/" + name; }

// GET http://127.0.0.1:port/path: {status, body}; {0, ""} when nothing answered.
std::pair<int, std::string> HttpGet(uint16_t port, const std::string& path) {
  auto r = kvgate::testing::Fetch(port, "GET", path, "", {}, std::chrono::seconds(2));
  return {r.status, r.body};
}

ObjectKey K(uint64_t h) { return {"proc|||0", h}; }

uint8_t Byte(uint64_t key, uint64_t i) { return static_cast<uint8_t>(key * 29 + i * 3); }

class StoreProcessTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kSize = 32 << 10;
  // Children and clients find the credentials through $KVGATE_STORE_CREDENTIALS.
  void SetUp() override { kvgate::testing::TestCredentialsFile(); }

  std::unique_ptr<ChildProcess> DataNode(const std::string& name, const std::string& master,
                                         uint16_t http) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        Bin("kvgate-store"), "--role", "data", "--master", master, "--node-name", name, "--memory",
        "16MiB", "--transports", "shm,tcp", "--data-listen", "127.0.0.1", "--heartbeat-ms", "100",
        "--http-listen", "127.0.0.1:" + std::to_string(http)});
  }
  std::unique_ptr<StoreClient> Client(const std::string& master) {
    StoreClientOptions o;
    o.master = master;
    o.transports = {"shm", "tcp"};
    o.timeout = std::chrono::seconds(10);
    auto c = StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  static void Put(StoreClient& c, uint8_t* buf, uint64_t first, size_t n) {
    std::vector<PutEntry> entries(n);
    for (size_t i = 0; i < n; ++i) {
      for (uint64_t b = 0; b < kSize; ++b) buf[i * kSize + b] = Byte(first + i, b);
      entries[i] = {K(first + i), {{buf + i * kSize, kSize}}, std::nullopt, {}};
    }
    for (const auto& r : c.BatchPutFrom(entries)) ASSERT_EQ(r.code, PutCode::kStored) << r.error;
  }
  // Number of keys of [first, first + n) read back byte-exact; the others' errors in `errors`.
  static size_t ReadBack(StoreClient& c, uint8_t* buf, uint64_t first, size_t n,
                         std::vector<absl::Status>* errors = nullptr) {
    std::vector<GetEntry> entries(n);
    for (size_t i = 0; i < n; ++i) entries[i] = {K(first + i), {{buf + i * kSize, kSize}}};
    std::memset(buf, 0, n * kSize);
    auto got = c.BatchGetInto(entries);
    size_t good = 0;
    for (size_t i = 0; i < n; ++i) {
      bool same = got[i].ok();
      for (uint64_t b = 0; same && b < kSize; ++b) same = buf[i * kSize + b] == Byte(first + i, b);
      good += same ? 1 : 0;
      if (!got[i].ok() && errors) errors->push_back(got[i].status());
    }
    return good;
  }
  static bool NodeSynced(uint16_t http, size_t objects) {
    auto [status, body] = HttpGet(http, "/admin/store");
    return status == 200 &&
           body.find("\"objects\":" + std::to_string(objects) + "}") != std::string::npos;
  }
};

TEST_F(StoreProcessTest, KilledDataNodeTakesOnlyItsKeys) {
  const uint16_t port = FreePort(), http = FreePort();
  const std::string master = "127.0.0.1:" + std::to_string(port);
  ChildProcess m({Bin("kvgate-store"), "--role", "master", "--listen", master, "--http-listen",
                  "127.0.0.1:" + std::to_string(http), "--node-timeout-ms", "500", "--heartbeat-ms",
                  "100"});
  ASSERT_TRUE(WaitFor([&] { return HttpGet(http, "/health").first == 200; })) << m.Log();
  const uint16_t http_a = FreePort(), http_b = FreePort();
  auto a = DataNode("node-a", master, http_a);
  auto b = DataNode("node-b", master, http_b);
  ASSERT_TRUE(WaitFor([&] {
    return HttpGet(http, "/metrics").second.find("node=\"node-b\"") != std::string::npos &&
           HttpGet(http, "/metrics").second.find("node=\"node-a\"") != std::string::npos;
  })) << a->Log()
      << b->Log();
  auto c = Client(master);
  auto buf = c->AllocateBuffer(64 * kSize);
  auto* p = static_cast<uint8_t*>(*buf);
  for (uint64_t k = 0; k < 64; k += 8) Put(*c, p, k, 8);  // Spread by free ratio.
  // Which keys live where, from the master.
  auto mc = MasterClient::Create(master, "probe", std::chrono::seconds(10),
                                 kvgate::testing::TestAuth(transfer::PeerRole::kClient)->self);
  GetRequest where;
  for (uint64_t k = 0; k < 64; ++k) where.keys.push_back(K(k));
  auto loc = (*mc)->Call<GetResponse>(where);
  ASSERT_TRUE(loc.ok()) << loc.status();
  std::vector<uint64_t> on_a, on_b;
  for (uint64_t k = 0; k < 64; ++k)
    (loc->items[k].replicas.at(0).segment == "node-a" ? on_a : on_b).push_back(k);
  ASSERT_FALSE(on_a.empty());
  ASSERT_FALSE(on_b.empty());
  a->Signal(SIGKILL);
  a->Wait();
  // Within the node time-out the master stops reporting a's keys.
  ASSERT_TRUE(WaitFor([&] {
    auto e = c->BatchExists({K(on_a[0])}, false);
    return e.ok() && !(*e)[0];
  }));
  std::vector<ObjectKey> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(K(k));
  auto present = c->BatchExists(keys, false);
  ASSERT_TRUE(present.ok());
  for (uint64_t k : on_a) EXPECT_FALSE((*present)[k]) << k;
  for (uint64_t k : on_b) EXPECT_TRUE((*present)[k]) << k;
  for (uint64_t k : on_a) {
    std::vector<absl::Status> errors;
    EXPECT_EQ(ReadBack(*c, p, k, 1, &errors), 0u);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].code(), absl::StatusCode::kNotFound) << errors[0];
  }
  for (uint64_t k : on_b) EXPECT_EQ(ReadBack(*c, p, k, 1), 1u) << k;
  // The master lives on and takes new puts on the survivor.
  Put(*c, p, 1000, 4);
  EXPECT_EQ(ReadBack(*c, p, 1000, 4), 4u);
}

TEST_F(StoreProcessTest, StandbyMasterTakesOverAndNothingOnTheNodesIsLost) {
  const std::string etcd_bin = kvgate::testing::FindEtcd();
  if (etcd_bin.empty()) GTEST_SKIP() << "skipped: etcd not installed (scripts/setup installs it)";
  kvgate::testing::EtcdServer etcd;
  ASSERT_TRUE(etcd.Start(etcd_bin));
  const std::string uri = "etcd://127.0.0.1:" + std::to_string(etcd.port()) + "/failover";
  auto master = [&](uint16_t port, uint16_t http) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        Bin("kvgate-store"), "--role", "master", "--listen", "127.0.0.1:" + std::to_string(port),
        "--http-listen", "127.0.0.1:" + std::to_string(http), "--etcd", uri, "--etcd-ttl-s", "2",
        "--heartbeat-ms", "100", "--node-timeout-ms", "1000"});
  };
  const uint16_t http1 = FreePort(), http2 = FreePort();
  auto m1 = master(FreePort(), http1);
  ASSERT_TRUE(WaitFor([&] {
    return HttpGet(http1, "/health").second.find("leader") != std::string::npos;
  })) << m1->Log();
  auto m2 = master(FreePort(), http2);
  ASSERT_TRUE(WaitFor([&] {
    return HttpGet(http2, "/health").second.find("standby") != std::string::npos;
  })) << m2->Log();
  const uint16_t http_a = FreePort(), http_b = FreePort();
  auto a = DataNode("node-a", uri, http_a);
  auto b = DataNode("node-b", uri, http_b);
  ASSERT_TRUE(WaitFor([&] { return NodeSynced(http_a, 0) && NodeSynced(http_b, 0); }));
  ASSERT_TRUE(WaitFor([&] {
    return HttpGet(http_a, "/health").first == 200 && HttpGet(http_b, "/health").first == 200;
  }));
  auto c = Client(uri);
  auto buf = c->AllocateBuffer(32 * kSize);
  auto* p = static_cast<uint8_t*>(*buf);
  for (uint64_t k = 0; k < 32; k += 8) Put(*c, p, k, 8);
  // Both nodes have heard of every object they hold before the leader dies.
  ASSERT_TRUE(WaitFor([&] {
    auto [sa, ja] = HttpGet(http_a, "/metrics");
    auto [sb, jb] = HttpGet(http_b, "/metrics");
    auto count = [](const std::string& m, const char* node) {
      const std::string key = std::string("kvgate_store_data_node_objects{node=\"") + node + "\"} ";
      size_t at = m.find(key);
      return at == std::string::npos ? -1 : std::atoi(m.c_str() + at + key.size());
    };
    return count(ja, "node-a") + count(jb, "node-b") == 32;
  }));
  m1->Signal(SIGKILL);
  m1->Wait();
  ASSERT_TRUE(
      WaitFor([&] { return HttpGet(http2, "/health").second.find("leader") != std::string::npos; },
              std::chrono::seconds(20)))
      << m2->Log();
  // The client finds the new leader through etcd; the data nodes re-registered their objects.
  ASSERT_TRUE(WaitFor([&] { return ReadBack(*c, p, 0, 32) == 32; }, std::chrono::seconds(20)))
      << m2->Log() << a->Log();
  std::vector<ObjectKey> keys;
  for (uint64_t k = 0; k < 32; ++k) keys.push_back(K(k));
  auto present = c->BatchExists(keys, true);
  ASSERT_TRUE(present.ok());
  EXPECT_EQ(present->size(), 32u);
}

TEST_F(StoreProcessTest, BinaryServesHealthMetricsAndTheBenchVerifiesBytes) {
  const uint16_t port = FreePort(), http = FreePort();
  const std::string master = "127.0.0.1:" + std::to_string(port);
  ChildProcess s({Bin("kvgate-store"), "--listen", master, "--http-listen",
                  "127.0.0.1:" + std::to_string(http), "--memory", "64MiB"});
  ASSERT_TRUE(WaitFor([&] { return HttpGet(http, "/health").first == 200; })) << s.Log();
  auto [status, metrics] = HttpGet(http, "/metrics");
  EXPECT_EQ(status, 200);
  EXPECT_NE(metrics.find("# TYPE kvgate_store_objects gauge"), std::string::npos);
  EXPECT_EQ(HttpGet(http, "/nope").first, 404);
  ChildProcess bad({Bin("kvgate-store"), "--memory", "lots"});
  EXPECT_EQ(bad.Wait(), 2);
  EXPECT_NE(bad.Log().find("--memory"), std::string::npos) << bad.Log();
  if (access(Bin("kvgate-store-bench").c_str(), X_OK) != 0)
    GTEST_SKIP() << "skipped: kvgate-store-bench not built (KVGATE_BUILD_BENCH=OFF)";
  ChildProcess bench({Bin("kvgate-store-bench"), "--store", master, "--transport", "tcp",
                      "--value-size", "64K", "--batch", "16", "--seconds", "0.3", "--working-set",
                      "8M"});
  EXPECT_EQ(bench.Wait(), 0) << bench.Log();
  EXPECT_NE(bench.Log().find("put ops/s="), std::string::npos) << bench.Log();
  EXPECT_NE(bench.Log().find("get ops/s="), std::string::npos) << bench.Log();
  ChildProcess corrupt({Bin("kvgate-store-bench"), "--store", master, "--transport", "shm",
                        "--value-size", "64K", "--batch", "4", "--seconds", "0.1", "--working-set",
                        "4M", "--corrupt-for-test"});
  EXPECT_EQ(corrupt.Wait(), 1) << corrupt.Log();
  EXPECT_NE(corrupt.Log().find("MISMATCH at byte 32768"), std::string::npos) << corrupt.Log();
}

}  // namespace
}  // namespace kvgate::store
