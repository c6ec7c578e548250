// The simulated engine's store connector (issue 14): after its local prefix hit an engine loads
// the following blocks from the store instead of recomputing them, charged at the profile's
// transfer bandwidth; it saves what it computes; a short or failed load falls back to recompute.
// First against a fake store, then against a real kvgate-store in this process.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "common/strings.h"
#include "sim/engine.h"
#include "sim/engine_runner.h"
#include "sim/server.h"
#include "sim/store_cache.h"
#include "store/data_node.h"
#include "store/master_service.h"
#include "tests/fakes/test_client.h"
#include "tests/sim/sim_test_util.h"
#include "tests/store/test_credentials.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

Profile SmallProfile() {
  Profile p;
  p.num_gpu_blocks = 64;
  p.max_num_seqs = 4;
  p.max_num_batched_tokens = 256;
  p.step_fixed_s = 0.01;
  p.prefill_per_token_s = 0.001;
  p.prefill_per_token_ctx_s = 0;
  p.decode_per_seq_s = 0.002;
  p.decode_per_kv_token_s = 0;
  p.kv_bytes_per_token = 1000;
  p.store_bandwidth_bytes_per_s = 4e6;  // 0.25 ms a token, against 1 ms to prefill one
  return p;
}

class FakeStore : public ExternalKvCache {
 public:
  size_t Lookup(absl::Span<const uint64_t> hashes) override {
    ++lookups;
    size_t n = 0;
    while (n < hashes.size() && blocks.contains(hashes[n])) ++n;
    return n;
  }
  size_t Load(absl::Span<const uint64_t> hashes) override {
    return std::min(hashes.size(), load_limit);
  }
  void Save(absl::Span<const uint64_t> hashes, std::optional<uint64_t> parent,
            absl::Span<const uint32_t> tokens) override {
    EXPECT_EQ(tokens.size(), hashes.size() * 16);
    if (one_chain && !saved_order.empty()) {
      EXPECT_TRUE(parent.has_value());
    }
    for (uint64_t h : hashes) {
      blocks.insert(h);
      saved_order.push_back(h);
    }
  }
  absl::flat_hash_set<uint64_t> blocks;
  std::vector<uint64_t> saved_order;
  size_t load_limit = ~size_t{0};
  int lookups = 0;
  bool one_chain = true;  // Every save continues the chain saved before (a single prompt's).
};

RequestOutput RunToEnd(Engine& e, uint64_t id, std::vector<uint32_t> prompt, double now = 0) {
  e.AddRequest({id, std::move(prompt), 1, now});
  RequestOutput last;
  while (e.HasWork()) {
    StepResult r = e.Step(now);
    now += r.duration;
    for (auto& o : r.outputs) last = o;
  }
  return last;
}

TEST(StoreConnector, SecondEngineLoadsWhatTheFirstComputed) {
  FakeStore store;
  Engine a(SmallProfile(), "m", 0);
  a.SetExternalCache(&store);
  const auto prompt = Prompt(128, 7);
  const RequestOutput first = RunToEnd(a, 1, prompt);
  EXPECT_EQ(first.cached_tokens, 0u);
  EXPECT_EQ(store.saved_order.size(), 8u);  // Every full block it computed.

  Engine b(SmallProfile(), "m", 0);
  b.SetExternalCache(&store);
  const RequestOutput loaded = RunToEnd(b, 1, prompt);
  // All but the last block (vLLM always computes the last token) come from the store.
  EXPECT_EQ(loaded.cached_tokens, 112u);
  EXPECT_EQ(loaded.external_tokens, 112u);
  EXPECT_EQ(b.counters().external_prefix_cache_hits, 112u);
  EXPECT_EQ(b.counters().external_prefix_cache_queries, 128u);
  EXPECT_EQ(b.counters().prefix_cache_hits, 0u);
  // 16 tokens prefilled + 112 tokens of KV at 0.25 ms each, against 128 prefilled tokens.
  EXPECT_NEAR(loaded.first_token_time, 0.01 + 16 * 0.001 + 112 * 0.00025, 1e-9);
  EXPECT_NEAR(first.first_token_time, 0.01 + 128 * 0.001, 1e-9);

  Engine plain(SmallProfile(), "m", 0);  // No store: recomputes everything.
  EXPECT_EQ(RunToEnd(plain, 1, prompt).cached_tokens, 0u);
}

TEST(StoreConnector, LocalHitComesFirstAndOnlyTheRestIsAsked) {
  FakeStore store;
  Engine a(SmallProfile(), "m", 0);
  a.SetExternalCache(&store);
  RunToEnd(a, 1, Prompt(64, 7));                           // 4 blocks, in GPU and in the store
  const RequestOutput r = RunToEnd(a, 2, Prompt(128, 7));  // shares those 4
  EXPECT_EQ(r.cached_tokens, 64u);
  EXPECT_EQ(r.external_tokens, 0u);  // The store holds nothing beyond the local hit.
  EXPECT_EQ(a.counters().prefix_cache_hits, 64u);
}

TEST(StoreConnector, ShortLoadRecomputesTheRest) {
  FakeStore store;
  Engine a(SmallProfile(), "m", 0);
  a.SetExternalCache(&store);
  const auto prompt = Prompt(128, 7);
  RunToEnd(a, 1, prompt);
  Engine b(SmallProfile(), "m", 0);
  b.SetExternalCache(&store);
  store.load_limit = 3;  // The transfer broke after three blocks.
  const RequestOutput r = RunToEnd(b, 1, prompt);
  EXPECT_EQ(r.cached_tokens, 48u);
  EXPECT_EQ(r.external_tokens, 48u);
  EXPECT_NEAR(r.first_token_time, 0.01 + 80 * 0.001 + 48 * 0.00025, 1e-9);
}

// Step() in parts, as the runner drives it: the step stops at the admission that needs the
// store, asks for exactly the blocks after the local hit, and resumes with what arrived: a short
// load recomputes the rest, and admission goes on to the requests queued behind it.
TEST(StoreConnector, StepInPartsAsksForTheStoreHitAndResumesWithWhatArrived) {
  for (const size_t arrived : {size_t{7}, size_t{3}}) {
    SCOPED_TRACE(arrived);
    FakeStore store;
    Engine a(SmallProfile(), "m", 0);
    a.SetExternalCache(&store);
    RunToEnd(a, 1, Prompt(128, 7));
    store.one_chain = false;
    const std::vector<uint64_t> saved = store.saved_order;  // The prompt's 8 blocks.

    Engine e(SmallProfile(), "m", 0);
    e.SetExternalCache(&store);
    // A store hit between requests without one, all waiting at once.
    const std::vector<std::vector<uint32_t>> prompts = {Prompt(40, 900), Prompt(128, 7),
                                                        Prompt(30, 500), Prompt(20, 300)};
    for (uint64_t i = 0; i < prompts.size(); ++i) e.AddRequest({i, prompts[i], 3, 0});
    std::map<uint64_t, RequestOutput> first;  // Each request's first output.
    size_t loads = 0;
    double now = 0;
    while (e.HasWork()) {
      Engine::StepProgress p = e.BeginStep(now);
      while (!p.load.empty()) {
        EXPECT_TRUE(e.InStep());
        ++loads;
        // All but the last block (vLLM computes the last token), in chain order.
        EXPECT_EQ(std::vector<uint64_t>(p.load.begin(), p.load.end()),
                  std::vector<uint64_t>(saved.begin(), saved.begin() + 7));
        p = e.ResumeStep(arrived);
      }
      EXPECT_FALSE(e.InStep());
      now += p.result.duration;
      for (auto& o : p.result.outputs) first.emplace(o.id, o);
    }
    EXPECT_EQ(loads, 1u);
    ASSERT_EQ(first.size(), prompts.size());
    EXPECT_EQ(first[1].cached_tokens, arrived * 16);
    EXPECT_EQ(first[1].external_tokens, arrived * 16);
    for (uint64_t id : {0, 2, 3}) EXPECT_EQ(first[id].cached_tokens, 0u) << id;
    // The requests behind the loading one were admitted in the same step (256-token budget).
    EXPECT_EQ(first[3].first_token_time, first[1].first_token_time);
  }
}

// A store that holds every block; its first load waits until the test answers it.
class HeldLoadStore : public ExternalKvCache {
 public:
  size_t Lookup(absl::Span<const uint64_t> hashes) override { return hashes.size(); }
  size_t Load(absl::Span<const uint64_t> hashes) override { return hashes.size(); }
  void LoadAsync(absl::Span<const uint64_t> hashes,
                 absl::AnyInvocable<void(size_t) &&> done) override {
    if (asked > 0) return std::move(done)(hashes.size());
    asked = hashes.size();
    held = std::move(done);
  }
  void Save(absl::Span<const uint64_t>, std::optional<uint64_t>,
            absl::Span<const uint32_t>) override {}
  size_t asked = 0;
  absl::AnyInvocable<void(size_t) &&> held;
};

// The runner moves a store's bytes off the io thread that every engine of the process shares:
// while one engine's load is out, another engine serves, and what reaches the loading engine
// meanwhile (a request, an abort) is applied once its step is known.
TEST(StoreConnector, ALoadInFlightHoldsUpOnlyItsOwnEngine) {
  net::io_context io;
  SimOptions o;
  o.profile = SmallProfile();
  const SimClock clock(std::chrono::steady_clock::now(), 0.001);
  EngineRunner loading(io, io.get_executor(), o, 0, clock, nullptr),
      other(io, io.get_executor(), o, 1, clock, nullptr);
  HeldLoadStore store;
  loading.SetExternalCache(&store);
  auto pending = [&] { return std::make_shared<Pending>(io.get_executor()); };
  auto first = pending(), second = pending(), aborted = pending(), elsewhere = pending();
  loading.Submit(first, {1, Prompt(128, 7), 2});
  ASSERT_TRUE(store.held) << "the load did not go to LoadAsync";
  EXPECT_EQ(store.asked, 7u);
  loading.Submit(second, {2, Prompt(20, 300), 2});
  loading.Submit(aborted, {3, Prompt(20, 400), 2});
  loading.Abort(3);
  other.Submit(elsewhere, {1, Prompt(64, 900), 2});
  auto run_until = [&](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io.run_for(std::chrono::milliseconds(5));
      io.restart();
    }
    return done();
  };
  EXPECT_TRUE(run_until([&] { return elsewhere->finished; }));
  EXPECT_FALSE(first->finished);
  EXPECT_EQ(loading.Load(), 3u);  // The one loading and the two that came during its step.
  std::move(store.held)(7);
  EXPECT_TRUE(run_until([&] { return first->finished && second->finished; }));
  EXPECT_EQ(first->cached_tokens, 112u);
  EXPECT_EQ(first->store_tokens, 112u);
  EXPECT_EQ(second->tokens.size(), 2u);
  EXPECT_FALSE(aborted->finished);
  EXPECT_EQ(loading.Load(), 0u);
  EXPECT_EQ(loading.engine().counters().finished, 2u);
}

// The real connector against a kvgate-store in this process.
class StoreKvCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::MasterServiceOptions mo;
    mo.master.heartbeat_interval = std::chrono::milliseconds(50);
    mo.verifier = kvgate::testing::TestAuth(transfer::PeerRole::kNode)->verifier;
    auto svc = store::MasterService::Start(mo);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    store::DataNodeOptions d;
    d.name = "node";
    d.master = svc_->address();
    d.memory = 4 << 20;
    d.transports = {"shm"};
    d.auth = kvgate::testing::TestAuth(transfer::PeerRole::kNode);
    auto n = store::DataNode::Start(d);
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(*n);
    for (int i = 0; i < 1000 && !node_->registered(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(node_->registered());
  }
  std::shared_ptr<store::StoreClient> Client() {
    store::StoreClientOptions o;
    o.master = svc_->address();
    o.transports = {"shm"};
    o.timeout = std::chrono::milliseconds(300);
    auto c = store::StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::shared_ptr<store::StoreClient>(std::move(*c)) : nullptr;
  }
  std::unique_ptr<StoreKvCache> Cache(std::shared_ptr<store::StoreClient> c) {
    StoreCacheOptions o;
    o.model = "m";
    o.max_blocks = 64;
    o.retry_after = std::chrono::milliseconds(200);
    auto cache = StoreKvCache::Create(std::move(c), o);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  std::unique_ptr<store::MasterService> svc_;
  std::unique_ptr<store::DataNode> node_;
};

TEST_F(StoreKvCacheTest, EnginesShareBlocksThroughTheStore) {
  auto writer = Cache(Client());
  auto reader = Cache(Client());
  Engine a(SmallProfile(), "m", 0);
  a.SetExternalCache(writer.get());
  const auto prompt = Prompt(128, 7);
  RunToEnd(a, 1, prompt);
  writer->Flush();
  EXPECT_EQ(writer->stats().saved_blocks, 8u);
  Engine b(SmallProfile(), "m", 0);
  b.SetExternalCache(reader.get());
  const RequestOutput r = RunToEnd(b, 1, prompt);
  EXPECT_EQ(r.external_tokens, 112u);
  EXPECT_EQ(reader->stats().loaded_blocks, 7u);
  EXPECT_EQ(svc_->master()->Stats().get_hits, 7u);
  // b saves its last block only: the seven it loaded are the store's already.
  reader->Flush();
  EXPECT_EQ(reader->stats().saved_blocks + reader->stats().present_blocks, 1u);
  // The bytes are the blocks' own (the store verified their checksums on the way).
  EXPECT_EQ(reader->stats().load_failures, 0u);
}

// Over HTTP, as kvgate sees it: a session's first turn on worker 0, its next turn on worker 1,
// which loads the prefix from the store instead of recomputing it.
TEST_F(StoreKvCacheTest, AnotherWorkerLoadsTheSessionFromTheStore) {
  SimOptions o;
  o.base_port = 0;
  o.workers = 2;
  o.time_scale = 0.01;
  o.profile.num_gpu_blocks = 512;
  o.store = svc_->address();
  SimProcess sim(o);
  ASSERT_TRUE(sim.Start().ok());
  sim.StartThread();
  const auto ports = sim.ports();
  std::string prompt;
  for (int i = 0; i < 1000; ++i) prompt += common::StrCat(i ? "," : "", 100 + i * 3);
  const std::string body =
      common::StrCat(R"({"model":"sim-model","max_tokens":1,"prompt":[)", prompt, "]}");
  auto first = testing::Fetch(ports[0], "POST", "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_NE(first.body.find(R"("cached_tokens":0)"), std::string::npos) << first.body;
  // Worker 0 saves its 62 full blocks after the step.
  ASSERT_TRUE(testing::WaitFor([&] { return svc_->master()->Stats().objects >= 62; }));
  auto second = testing::Fetch(ports[1], "POST", "/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  // All but the last block (vLLM computes the last token), from the store.
  EXPECT_NE(second.body.find(R"("cached_tokens":992)"), std::string::npos) << second.body;
  EXPECT_GE(svc_->master()->Stats().get_hits, 62u);
  const std::string m = testing::Fetch(ports[1], "GET", "/metrics").body;
  EXPECT_NE(m.find("vllm:external_prefix_cache_hits_total{"), std::string::npos) << m;
  EXPECT_NE(m.find("} 992"), std::string::npos) << m;
  // Its simulated TTFT: 8 tokens prefilled plus 992 tokens of KV at 10 GB/s, against 1000 tokens
  // prefilled on worker 0.
  auto ttft_sum = [](const std::string& metrics) {
    const std::string key = "vllm:time_to_first_token_seconds_sum{";
    const size_t at = metrics.find(key);
    if (at == std::string::npos) return -1.0;
    return std::stod(metrics.substr(metrics.find("} ", at) + 2));
  };
  const double loaded = ttft_sum(m);
  const double computed = ttft_sum(testing::Fetch(ports[0], "GET", "/metrics").body);
  EXPECT_GT(loaded, 0);
  EXPECT_LT(loaded, computed * 0.5) << loaded << " vs " << computed;
  sim.Stop();
}

TEST_F(StoreKvCacheTest, DeadStoreMeansRecomputeNotFailure) {
  auto cache = Cache(Client());
  node_.reset();
  svc_.reset();  // The store goes away.
  Engine e(SmallProfile(), "m", 0);
  e.SetExternalCache(cache.get());
  const auto start = std::chrono::steady_clock::now();
  const RequestOutput r = RunToEnd(e, 1, Prompt(128, 7));
  EXPECT_EQ(r.cached_tokens, 0u);
  EXPECT_TRUE(r.finished);
  EXPECT_FALSE(cache->stats().available);
  EXPECT_GE(cache->stats().errors, 1u);
  // Later lookups skip the store until retry_after: one time-out, not one per step.
  EXPECT_EQ(cache->Lookup(std::vector<uint64_t>{1, 2}), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace kvgate::sim
