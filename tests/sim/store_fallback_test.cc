// The store fallback end to end (issue 14), every piece real: a kvgate-store process, two
// simulated vLLM workers connected to it (in this process), and a kvgate process that follows
// the store's KV events and health. A session's worker is drained: its next turn goes to the
// other worker, which loads the prefix from the store instead of recomputing it. Then the
// store is killed: requests still succeed (recomputed) and kvgate stops counting the store.
#include <csignal>
#include <regex>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "tests/fakes/test_client.h"
#include "tests/store/test_credentials.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using testing::AdminFetch;
using testing::Fetch;
using ::testing::HasSubstr;
using testing::WaitFor;

constexpr uint32_t kTurn1Tokens = 2000;  // 125 blocks of 16
constexpr uint32_t kTurn2Tokens = 2600;

// The first `"key":<number>` in `json` after `from`; -1 when absent.
double NumberAfter(const std::string& json, const std::string& key, size_t from = 0) {
  const std::string k = common::StrCat("\"", key, "\":");
  const size_t at = json.find(k, from);
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + k.size(), nullptr);
}

// Sum of every series of `name` on a Prometheus page.
double MetricSum(const std::string& page, const std::string& name) {
  double sum = 0;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) {
      sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
    }
  }
  return sum;
}

std::string TokenPrompt(uint32_t n) {
  std::string out;
  for (uint32_t i = 0; i < n; ++i) common::StrAppend(&out, i ? "," : "", 1000 + (i * 7) % 30000);
  return common::StrCat(R"({"model":"sim-model","max_tokens":4,"prompt":[)", out, "]}");
}

class StoreFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kvgate::testing::TestCredentialsFile();  // The children find it through the environment.
    const std::string gateway = testing::TestBinary("kvgate");
    const std::string store = testing::TestBinary("kvgate-store");
    if (gateway.empty() || store.empty()) GTEST_SKIP() << "kvgate or kvgate-store not built";
    store_ = std::make_unique<testing::ChildProcess>(std::vector<std::string>{
        store, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--memory", "64MiB",
        "--kv-events", "tcp://127.0.0.1:*", "--kv-events-replay", "tcp://127.0.0.1:*",
        "--heartbeat-ms", "50"});
    std::smatch master, events, http;
    ASSERT_TRUE(WaitFor([&] {
      log_ = store_->Log();
      return log_.find("registered with") != std::string::npos &&
             std::regex_search(log_, master, std::regex("master listening on [^ ]+:(\\d+)")) &&
             std::regex_search(log_, events,
                               std::regex("KV events on (\\S+) \\(replay (\\S+)\\)")) &&
             std::regex_search(log_, http, std::regex("http on [^ ]+:(\\d+)"));
    })) << store_->Log();
    store_http_ = static_cast<uint16_t>(std::stoi(http[1]));

    SimOptions o;
    o.base_port = 0;
    o.workers = 2;
    o.time_scale = 0.01;
    o.profile.num_gpu_blocks = 2048;
    o.store = common::StrCat("127.0.0.1:", master[1].str());
    sim_ = std::make_unique<SimProcess>(o);
    ASSERT_TRUE(sim_->Start().ok());
    sim_->StartThread();
    // Store checks fail fast in this test: two misses in a row at 100 ms.
    const std::string yaml = common::StrCat(
        "listen: 127.0.0.1:0\nthreads: 1\nadmin: {token: kvgate-test-admin}\n",
        "health_check: {interval_ms: 100, timeout_ms: 300, unhealthy_threshold: 2, "
        "healthy_threshold: 1}\n",
        "routing: {policy: kvaware}\nworkers:\n", "  - url: http://127.0.0.1:", sim_->ports()[0],
        "\n  - url: http://127.0.0.1:", sim_->ports()[1],
        "\nstores:\n  - name: pool\n    model: sim-model\n    address: 127.0.0.1:", store_http_,
        "\n    kv_events: {endpoint: \"", events[1].str(), "\", replay_endpoint: \"",
        events[2].str(), "\", block_size: 16}\n");
    gateway_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{gateway, "--config", testing::WriteTempFile("kvgate.yaml", yaml)});
    port_ = gateway_->Port();
    ASSERT_NE(port_, 0) << gateway_->Log();
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }

  // Turn 1 on whichever worker kvaware picks; waits until kvgate sees its blocks in the store.
  std::string FirstTurn() {
    auto r = Fetch(port_, "POST", "/v1/completions", TokenPrompt(kTurn1Tokens));
    EXPECT_EQ(r.status, 200) << r.body << gateway_->Log();
    EXPECT_THAT(r.body, HasSubstr(R"("cached_tokens":0,"kv_store_tokens":0)"));
    EXPECT_TRUE(WaitFor([&] {
      const std::string w = AdminFetch(port_, "GET", "/admin/workers").body;
      return NumberAfter(w, "blocks", w.find("\"stores\":[")) >= kTurn1Tokens / 16;
    })) << AdminFetch(port_, "GET", "/admin/workers").body;
    return r.Header("x-kvgate-worker");
  }

  void Drain(const std::string& worker) {
    auto r = AdminFetch(port_, "POST", "/admin/drain",
                        common::StrCat(R"({"worker":")", worker, R"(","draining":true})"));
    ASSERT_EQ(r.status, 200) << r.body;
  }

  std::string Explain(const std::string& body) {
    auto r = AdminFetch(port_, "POST", "/admin/explain", body,
                        {{"x-kvgate-endpoint", "/v1/completions"}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  }

  double StoreGetHits() {
    const std::string m = Fetch(store_http_, "GET", "/metrics").body;
    const std::string key = R"(kvgate_store_lookups_total{call="get",result="hit"} )";
    const size_t at = m.find(key);
    return at == std::string::npos ? -1 : std::strtod(m.c_str() + at + key.size(), nullptr);
  }

  uint16_t OtherPort(const std::string& worker) const {
    const auto ports = sim_->ports();
    return worker == common::StrCat("http://127.0.0.1:", ports[0]) ? ports[1] : ports[0];
  }

  std::unique_ptr<testing::ChildProcess> store_;
  std::unique_ptr<SimProcess> sim_;
  std::unique_ptr<testing::ChildProcess> gateway_;
  std::string log_;
  uint16_t store_http_ = 0;
  uint16_t port_ = 0;
};

// The simulated TTFT (sum over a worker's requests) from its /metrics.
double TtftSum(uint16_t sim_port) {
  return MetricSum(Fetch(sim_port, "GET", "/metrics").body, "vllm:time_to_first_token_seconds_sum");
}

TEST_F(StoreFallbackTest, DrainedOwnersNextTurnLoadsFromTheStoreElsewhere) {
  const std::string owner = FirstTurn();
  ASSERT_FALSE(owner.empty());
  const double hits_before = StoreGetHits();
  Drain(owner);
  const std::string turn2 = TokenPrompt(kTurn2Tokens);

  // kvgate predicts the load: the remaining worker can take 124 blocks from the store.
  const std::string explain = Explain(turn2);
  EXPECT_THAT(explain, HasSubstr(R"("up":true)"));
  EXPECT_GE(NumberAfter(explain, "store_tokens"), 1984) << explain;
  EXPECT_GT(NumberAfter(explain, "store_load"), 0) << explain;
  EXPECT_EQ(explain.find(owner), std::string::npos) << "a draining worker is no candidate";

  auto r = Fetch(port_, "POST", "/v1/completions", turn2);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string worker = r.Header("x-kvgate-worker");
  EXPECT_NE(worker, owner);
  // Turn 1's 125 full blocks came from the store (cached_tokens counts them, as vLLM's does).
  EXPECT_GE(NumberAfter(r.body, "cached_tokens"), 2000) << r.body;
  EXPECT_GE(NumberAfter(r.body, "kv_store_tokens"), 2000) << r.body;
  EXPECT_GE(StoreGetHits(), hits_before + 125);

  // Its TTFT against the same turn recomputed by a worker without a store.
  const double loaded = TtftSum(OtherPort(owner));
  SimOptions plain;
  plain.base_port = 0;
  plain.time_scale = 0.01;
  plain.profile.num_gpu_blocks = 2048;
  SimProcess recompute(plain);
  ASSERT_TRUE(recompute.Start().ok());
  recompute.StartThread();
  auto again = Fetch(recompute.ports()[0], "POST", "/v1/completions", turn2);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_THAT(again.body, HasSubstr(R"("cached_tokens":0)"));
  const double computed = TtftSum(recompute.ports()[0]);
  recompute.Stop();
  EXPECT_GT(loaded, 0);
  EXPECT_LT(loaded, computed * 0.6) << "loaded " << loaded << " s, recomputed " << computed << " s";

  // What the responses reported equals the simulators' own counters.
  double cached = 0, store = 0;
  for (uint16_t p : sim_->ports()) {
    const std::string m = Fetch(p, "GET", "/metrics").body;
    cached += MetricSum(m, "kvgate_sim_usage_cached_tokens_total");
    store += MetricSum(m, "kvgate_sim_usage_store_tokens_total");
  }
  EXPECT_EQ(cached, NumberAfter(r.body, "cached_tokens"));  // turn 1 reported 0
  EXPECT_EQ(store, NumberAfter(r.body, "kv_store_tokens"));
}

TEST_F(StoreFallbackTest, DeadStoreLeavesTheTierAndRequestsStillSucceed) {
  const std::string owner = FirstTurn();
  ASSERT_FALSE(owner.empty());
  store_->Signal(SIGKILL);
  store_->Wait();
  // kvgate marks the store down after two failed checks, and stops counting its tier.
  ASSERT_TRUE(WaitFor([&] {
    return AdminFetch(port_, "GET", "/admin/workers").body.find(R"("up":false)") !=
           std::string::npos;
  })) << gateway_->Log();
  EXPECT_THAT(Fetch(port_, "GET", "/metrics").body,
              HasSubstr(R"(kvgate_store_up{store="pool"} 0)"));
  EXPECT_THAT(gateway_->Log(), HasSubstr("routing stops counting its tier"));
  Drain(owner);
  const std::string turn2 = TokenPrompt(kTurn2Tokens);
  const std::string explain = Explain(turn2);
  EXPECT_EQ(NumberAfter(explain, "store_tokens"), 0) << explain;
  // The other worker's connector times out on the dead store and recomputes: still a 200.
  for (int i = 0; i < 3; ++i) {
    auto r = Fetch(port_, "POST", "/v1/completions", turn2);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.Header("x-kvgate-worker"), owner);
    EXPECT_EQ(NumberAfter(r.body, "kv_store_tokens"), 0) << r.body;
  }
}

}  // namespace
}  // namespace kvgate::sim
