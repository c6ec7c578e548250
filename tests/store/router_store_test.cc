// kvgate following a kvgate-store's KV events (the `stores` config section): blocks a client
// stores appear in the store tier of /admin/workers and in /admin/explain's prefix for a prompt
// with those tokens; removed blocks leave both.
#include <gtest/gtest.h>

#include <thread>

#include "router/config/loader.h"
#include "router/server/gateway.h"
#include "store/client.h"
#include "store/data_node.h"
#include "store/master_service.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/store/store_harness.h"
#include "tests/store/test_credentials.h"
#include "tests/support/test_util.h"

namespace kvgate::store {
namespace {

using kvgate::testing::AdminFetch;
using kvgate::testing::Fetch;
using kvgate::testing::WaitFor;

constexpr uint32_t kBlock = 16;

class RouterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto svc =
        kvgate::testing::StartTestMaster(kvgate::testing::TestMasterOptions(/*kv_events=*/true));
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    auto n = kvgate::testing::StartTestNode(
        kvgate::testing::TestNodeOptions("node-a", svc_->address(), {"shm"}));
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(*n);
    auto c = StoreClient::Create(kvgate::testing::TestClientOptions(svc_->address(), "", {"shm"}));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);

    fake_ = std::make_unique<testing::FakeUpstream>(testing::FakeUpstream::Options{});
    fake_->Start();
    fake2_ = std::make_unique<testing::FakeUpstream>(testing::FakeUpstream::Options{});
    fake2_->Start();
    const std::string yaml = common::StrCat(
        "listen: 127.0.0.1:0\nthreads: 1\nhealth_check: {enabled: false}\n"
        "admin: {token: kvgate-test-admin}\n"
        "routing: {policy: kvaware}\nworkers:\n  - url: ",
        fake_->url(), "\n    models: [fake-model]\n", ExtraYaml(),
        "stores:\n  - name: pool\n    model: fake-model\n", "    kv_events: {endpoint: \"",
        svc_->events()->endpoint(), "\", replay_endpoint: \"", svc_->events()->replay_endpoint(),
        "\", block_size: ", kBlock, "}\n", StoresYaml());
    auto cfg = config::LoadConfigFromString(yaml, "test.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    gateway_ = kvgate::testing::StartTestGateway(std::move(*cfg));
    ASSERT_NE(gateway_, nullptr);
  }
  void TearDown() override {
    if (gateway_) gateway_->Stop();
  }
  // More workers (and their stores) for the fleet, after the first worker.
  virtual std::string ExtraYaml() { return ""; }
  // More stores, after `pool`.
  virtual std::string StoresYaml() { return ""; }

  // Stores blocks [0, n) of the chain of `tokens` the way a connector would: key = the
  // engine's block hash (any id), parent = the previous block, token ids of the block.
  void PutChain(const std::vector<uint32_t>& tokens, size_t n) {
    auto buf = client_->AllocateBuffer(n * 1024);
    ASSERT_TRUE(buf.ok());
    std::vector<PutEntry> entries;
    for (size_t b = 0; b < n; ++b) {
      PutEntry e;
      e.key = {MakeNamespace("fake-model", "", "", 0), 1000 + b};
      e.slices = {{static_cast<uint8_t*>(*buf) + b * 1024, 1024}};
      if (b > 0) e.parent = 1000 + b - 1;
      e.token_ids.assign(tokens.begin() + b * kBlock, tokens.begin() + (b + 1) * kBlock);
      entries.push_back(std::move(e));
    }
    for (const auto& r : client_->BatchPutFrom(entries)) ASSERT_EQ(r.code, PutCode::kStored);
  }

  std::string Workers() { return AdminFetch(gateway_->port(), "GET", "/admin/workers").body; }
  std::string Explain(const std::vector<uint32_t>& tokens) {
    std::string body = "{\"model\":\"fake-model\",\"max_tokens\":1,\"prompt\":[";
    for (size_t i = 0; i < tokens.size(); ++i) common::StrAppend(&body, i ? "," : "", tokens[i]);
    body += "]}";
    return AdminFetch(gateway_->port(), "POST", "/admin/explain", body,
                      {{"X-Kvgate-Endpoint", "/v1/completions"}})
        .body;
  }

  std::unique_ptr<MasterService> svc_;
  std::unique_ptr<DataNode> node_;
  std::unique_ptr<StoreClient> client_;
  std::unique_ptr<testing::FakeUpstream> fake_;
  std::unique_ptr<testing::FakeUpstream> fake2_;  // In the fleet only where ExtraYaml puts it.
  std::unique_ptr<router::Gateway> gateway_;
};

// A second worker that reaches only another pool: the first pool's blocks are not in its store
// tier, while the first worker (no `stores`: every pool) still counts them.
class RouterStoreReachTest : public RouterStoreTest {
 protected:
  std::string ExtraYaml() override {
    return common::StrCat("  - url: ", fake2_->url(),
                          "\n    models: [fake-model]\n    stores: [other]\n");
  }
  std::string StoresYaml() override {
    // A pool that never publishes (nothing listens on port 1).
    return common::StrCat("  - {name: other, model: fake-model, kv_events: {endpoint: ",
                          "\"tcp://127.0.0.1:1\", block_size: ", kBlock, "}}\n");
  }
};

TEST_F(RouterStoreTest, StoredAndRemovedBlocksShowInTheStoreTier) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 8 * kBlock; ++i) tokens.push_back(100 + i * 7);
  // The subscriber connects in the background: publish once it sees the stream.
  ASSERT_TRUE(WaitFor([&] { return Workers().find("\"name\":\"pool\"") != std::string::npos; }))
      << Workers();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // ZMQ slow joiner.
  PutChain(tokens, 6);
  ASSERT_TRUE(WaitFor([&] { return Workers().find("\"blocks\":6,") != std::string::npos; }))
      << Workers();
  const std::string explain = Explain(tokens);
  EXPECT_NE(
      explain.find(
          "\"stores\":[{\"name\":\"pool\",\"up\":true,\"prefix_blocks\":6,\"prefix_tokens\":96}"),
      std::string::npos)
      << explain;
  // The store is shared: every candidate could load those 96 tokens (kvaware's store tier).
  EXPECT_NE(explain.find("\"store_tokens\":96,"), std::string::npos) << explain;
  // A prompt that shares only the first two blocks.
  std::vector<uint32_t> other = tokens;
  other[2 * kBlock + 1] = 9;
  EXPECT_NE(Explain(other).find("\"prefix_blocks\":2,"), std::string::npos) << Explain(other);
  ASSERT_TRUE(client_->BatchRemove({{MakeNamespace("fake-model", "", "", 0), 1005}})[0].ok());
  ASSERT_TRUE(WaitFor([&] { return Workers().find("\"blocks\":5,") != std::string::npos; }))
      << Workers();
  EXPECT_NE(Explain(tokens).find("\"prefix_blocks\":5,"), std::string::npos) << Explain(tokens);
}

TEST(StoreConfigTest, StoresSectionIsValidated) {
  auto ok = config::LoadConfigFromString(
      "stores:\n  - name: a\n    model: m\n    kv_events: {endpoint: tcp://h:5557}\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->stores.size(), 1u);
  EXPECT_EQ(ok->stores[0].kv_events.endpoint, "tcp://h:5557");
  EXPECT_FALSE(ok->stores[0].address);
  auto addressed = config::LoadConfigFromString(
      "stores:\n  - {name: a, model: m, address: \"10.0.0.5:7480\", kv_events: {endpoint: "
      "tcp://h:1}}\n  - {name: b, model: m, address: \"http://s:80\", kv_events: {endpoint: "
      "tcp://h:2}}\n",
      "t");
  ASSERT_TRUE(addressed.ok()) << addressed.status();
  EXPECT_EQ(addressed->stores[0].address->ToString(), "http://10.0.0.5:7480");
  EXPECT_EQ(addressed->stores[1].address->ToString(), "http://s:80");
  for (const char* bad :
       {"stores: {}\n", "stores:\n  - model: m\n    kv_events: {endpoint: tcp://h:1}\n",
        "stores:\n  - name: a\n    kv_events: {endpoint: tcp://h:1}\n",
        "stores:\n  - name: a\n    model: m\n",
        "stores:\n  - name: a\n    model: m\n    kv_events: {endpoint: bad}\n",
        "stores:\n  - {name: a, model: m, kv_events: {endpoint: tcp://h:1}}\n"
        "  - {name: a, model: m, kv_events: {endpoint: tcp://h:2}}\n",
        "stores:\n  - {name: a, model: m, port: 3, kv_events: {endpoint: tcp://h:1}}\n",
        "stores:\n  - {name: a, model: m, address: \"ftp://x\", kv_events: {endpoint: "
        "tcp://h:1}}\n"}) {
    auto r = config::LoadConfigFromString(bad, "t");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("stores"), std::string::npos) << r.status();
    }
  }
}

TEST_F(RouterStoreReachTest, APoolCountsOnlyForTheWorkersThatReachIt) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 4 * kBlock; ++i) tokens.push_back(300 + i * 3);
  ASSERT_TRUE(WaitFor([&] { return Workers().find("\"name\":\"pool\"") != std::string::npos; }))
      << Workers();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // ZMQ slow joiner.
  PutChain(tokens, 3);
  ASSERT_TRUE(WaitFor([&] { return Workers().find("\"blocks\":3,") != std::string::npos; }))
      << Workers();
  const std::string explain = Explain(tokens);
  // Candidates in fleet order: the first reaches every pool, the second only `other`.
  const size_t first = explain.find(common::StrCat("\"worker\":\"", fake_->url()));
  const size_t second = explain.find(common::StrCat("\"worker\":\"", fake2_->url()));
  ASSERT_NE(first, std::string::npos) << explain;
  ASSERT_NE(second, std::string::npos) << explain;
  const auto store_tokens = [&](size_t at) {
    const size_t k = explain.find("\"store_tokens\":", at);
    return explain.substr(k, explain.find(',', k) - k);
  };
  EXPECT_EQ(store_tokens(first), "\"store_tokens\":48") << explain;
  EXPECT_EQ(store_tokens(second), "\"store_tokens\":0") << explain;
}

}  // namespace
}  // namespace kvgate::store
