// Each policy's choice on constructed candidate values (fixed tie seeds). Links only
// kvgate_policies: no Beast, ZeroMQ or Prometheus.
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "router/policies/cache_aware_policy.h"
#include "router/policies/consistent_hash_policy.h"
#include "router/policies/cost_policy.h"
#include "router/policies/kvaware_policy.h"
#include "router/policies/load_balancing_policies.h"
#include "router/policies/policy_registry.h"
#include "router/policies/weighted_policy.h"

namespace kvgate::router {
namespace {

class PolicyTest : public ::testing::Test {
 protected:
  void MakeWorkers(std::vector<double> weights) {
    for (size_t i = 0; i < weights.size(); ++i) {
      identities_.push_back(WorkerIdentity{static_cast<uint32_t>(i),
                                           "http://w" + std::to_string(i) + ":8000", weights[i]});
    }
    for (const WorkerIdentity& w : identities_) {
      Candidate cand;
      cand.worker_id = w.id;
      cand.name = w.name;
      cand.weight = w.weight;
      candidates_.push_back(cand);
    }
  }
  void MakeWorkers(size_t n) { MakeWorkers(std::vector<double>(n, 1.0)); }

  size_t Choose(RoutingPolicy& p, uint64_t seed = 1) {
    request_.tie_seed = seed;
    return p.Choose(request_, candidates_, nullptr);
  }

  std::vector<WorkerIdentity> identities_;
  std::vector<Candidate> candidates_;
  std::vector<kvindex::BlockHash> chain_;
  RouteRequest request_;
};

TEST_F(PolicyTest, RoundRobinCyclesInOrder) {
  MakeWorkers(3);
  RoundRobinPolicy p;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Choose(p), i);
  }
}

TEST_F(PolicyTest, RoundRobinWeightsInterleave) {
  MakeWorkers(std::vector<double>{1, 3});
  RoundRobinPolicy p;
  std::map<size_t, int> count;
  int longest_run = 0, run = 0;
  size_t prev = 99;
  for (int i = 0; i < 4000; ++i) {
    const size_t w = Choose(p);
    ++count[w];
    run = w == prev ? run + 1 : 1;
    longest_run = std::max(longest_run, run);
    prev = w;
  }
  EXPECT_NEAR(count[0], 1000, 20);
  EXPECT_NEAR(count[1], 3000, 20);
  EXPECT_LE(longest_run, 4);
}

TEST_F(PolicyTest, RoundRobinExplainDoesNotAdvance) {
  MakeWorkers(3);
  RoundRobinPolicy p;
  std::vector<CandidateScore> scores;
  EXPECT_EQ(p.Choose(request_, candidates_, &scores), 0u);
  EXPECT_EQ(p.Choose(request_, candidates_, &scores), 0u);
  EXPECT_EQ(Choose(p), 0u);
  EXPECT_EQ(Choose(p), 1u);
}

TEST_F(PolicyTest, RandomFollowsWeights) {
  MakeWorkers(std::vector<double>{1, 1, 2});
  RandomPolicy p;
  std::map<size_t, int> count;
  for (uint64_t s = 0; s < 8000; ++s) ++count[Choose(p, s)];
  EXPECT_NEAR(count[2], 4000, 300);
  EXPECT_NEAR(count[0], 2000, 300);
}

TEST_F(PolicyTest, LeastRequestPicksFewestPerWeight) {
  MakeWorkers(std::vector<double>{1, 1, 4});
  candidates_[0].load.in_flight = 3;
  candidates_[1].load.in_flight = 1;
  candidates_[2].load.in_flight = 3;  // 0.75 per unit of weight
  LeastRequestPolicy p;
  EXPECT_EQ(Choose(p), 2u);
}

TEST_F(PolicyTest, LeastRequestTiesDependOnSeed) {
  MakeWorkers(4);
  LeastRequestPolicy p;
  std::set<size_t> chosen;
  for (uint64_t s = 0; s < 64; ++s) chosen.insert(Choose(p, s));
  EXPECT_EQ(chosen.size(), 4u);
}

TEST_F(PolicyTest, PowerOfTwoPicksLessLoadedOfSample) {
  MakeWorkers(5);
  for (size_t i = 0; i < 5; ++i) candidates_[i].load.in_flight = static_cast<int64_t>(10 * i);
  PowerOfTwoPolicy p;
  std::map<size_t, int> count;
  for (uint64_t s = 0; s < 2000; ++s) ++count[Choose(p, s)];
  EXPECT_EQ(count[4], 0);         // the busiest one always loses its comparison
  EXPECT_GT(count[0], count[3]);  // the idlest wins every sample it is in
}

TEST_F(PolicyTest, ConsistentHashIsStickyAndMovesFewKeys) {
  MakeWorkers(8);
  config::ConsistentHashPolicyConfig cfg;
  cfg.bounded_load_factor = 0;
  ConsistentHashPolicy p(cfg, identities_);
  std::map<std::string, uint32_t> owner;
  std::vector<std::string> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back("session-" + std::to_string(i));
  for (const auto& k : keys) {
    request_.session_key = k;
    owner[k] = candidates_[Choose(p)].worker_id;
    EXPECT_EQ(candidates_[Choose(p)].worker_id, owner[k]);  // same key, same worker
  }
  std::map<uint32_t, int> per_worker;
  for (const auto& [k, w] : owner) ++per_worker[w];
  EXPECT_EQ(per_worker.size(), 8u);
  for (const auto& [w, n] : per_worker) EXPECT_GT(n, 120) << w;  // 250 on average
  // Remove one worker: only its keys move.
  const uint32_t removed = candidates_[3].worker_id;
  candidates_.erase(candidates_.begin() + 3);
  int moved = 0;
  for (const auto& k : keys) {
    request_.session_key = k;
    const uint32_t now = candidates_[Choose(p)].worker_id;
    if (owner[k] != removed) moved += now != owner[k];
  }
  EXPECT_EQ(moved, 0);
}

TEST_F(PolicyTest, ConsistentHashBoundedLoadSkipsOverloadedOwner) {
  MakeWorkers(4);
  ConsistentHashPolicy p(config::ConsistentHashPolicyConfig{}, identities_);
  request_.session_key = "hot-session";
  const size_t owner = Choose(p);
  candidates_[owner].load.in_flight = 20;  // fair share of 21 over 4 is 6; 1.25x -> 7
  const size_t next = Choose(p);
  EXPECT_NE(next, owner);
  candidates_[owner].load.in_flight = 0;
  EXPECT_EQ(Choose(p), owner);
}

TEST_F(PolicyTest, CacheAwareFollowsSglangRule) {
  MakeWorkers(3);
  CacheAwarePolicy p(config::CacheAwarePolicyConfig{});  // 0.3 / 64 / 1.5
  request_.prompt_tokens = 1000;
  request_.block_tokens = 16;
  candidates_[0].load.in_flight = 5;
  candidates_[1].load.in_flight = 2;
  candidates_[2].load.in_flight = 9;
  candidates_[2].cached_blocks[0] = 25;  // 400 tokens = 40% > 30%
  EXPECT_EQ(Choose(p), 2u);              // balanced (9-2 <= 64): cache wins
  candidates_[2].cached_blocks[0] = 15;  // 240 tokens = 24%: below threshold
  EXPECT_EQ(Choose(p), 1u);              // least loaded
  candidates_[2].cached_blocks[0] = 60;
  candidates_[2].load.in_flight = 100;  // 100-2 > 64 and 100 > 2*1.5: imbalanced
  EXPECT_EQ(Choose(p), 1u);
  candidates_[1].load.in_flight = 70;  // 100-5 > 64 but 100 < 5*1.5? no: 100 > 7.5 -> still
  candidates_[0].load.in_flight = 80;  // max-min = 30: balanced again
  EXPECT_EQ(Choose(p), 2u);
}

TEST_F(PolicyTest, CacheAwareThresholdIsStrict) {
  MakeWorkers(2);
  CacheAwarePolicy p(config::CacheAwarePolicyConfig{.cache_threshold = 0.5});
  request_.prompt_tokens = 320;
  request_.block_tokens = 16;
  candidates_[0].load.in_flight = 1;
  candidates_[1].cached_blocks[0] = 10;  // exactly 50%
  candidates_[1].load.in_flight = 2;
  EXPECT_EQ(Choose(p), 0u);
}

TEST_F(PolicyTest, CostReproducesDynamoWorkedExample) {
  // Dynamo's docs: W1 8 + 10 = 18, W2 5 + 5 = 10, W3 2 + 9 = 11 -> W2. A 5-block prompt:
  // prefill = queued + 5 - overlap, decode = active KV blocks + 5.
  MakeWorkers(3);
  CostPolicy p(config::CostPolicyConfig{});
  request_.block_tokens = 16;
  request_.prompt_tokens = 80;
  candidates_[0].load.pending_prefill_tokens = 48;  // 3 blocks queued: prefill 8
  candidates_[0].load.active_kv_blocks = 5;         // decode 10
  candidates_[2].cached_blocks[0] = 3;              // prefill 2
  candidates_[2].load.active_kv_blocks = 4;         // decode 9
  EXPECT_DOUBLE_EQ(p.Cost(request_, candidates_[0]), 18);
  EXPECT_DOUBLE_EQ(p.Cost(request_, candidates_[1]), 10);
  EXPECT_DOUBLE_EQ(p.Cost(request_, candidates_[2]), 11);
  EXPECT_EQ(Choose(p), 1u);
}

TEST_F(PolicyTest, CostCountsQueueAndTiers) {
  MakeWorkers(2);
  CostPolicy p(config::CostPolicyConfig{});
  request_.block_tokens = 16;
  request_.prompt_tokens = 1600;                         // 100 blocks
  candidates_[0].load.pending_prefill_tokens = 16 * 40;  // 40 blocks queued
  candidates_[1].cached_blocks[1] = 100;                 // all on host: 0.75 credit
  EXPECT_DOUBLE_EQ(p.Cost(request_, candidates_[0]), 140 + 100);
  EXPECT_DOUBLE_EQ(p.Cost(request_, candidates_[1]), 25 + 100);
  EXPECT_EQ(Choose(p), 1u);
}

TEST_F(PolicyTest, WeightedUsesLlmdDefaultScorers) {
  MakeWorkers(3);
  WeightedPolicy p(config::WeightedPolicyConfig{});
  chain_.assign(10, 0);
  request_.chain = chain_;
  candidates_[0].cached_blocks[0] = 10;  // prefix 1.0 -> 3
  candidates_[0].engine.waiting = 10;    // queue 0.0
  candidates_[0].engine.kv_usage = 0.9;  // kv 0.1 -> 0.2        total 3.2
  candidates_[1].engine.waiting = 0;     // queue 1.0 -> 2
  candidates_[1].engine.kv_usage = 0.2;  // kv 0.8 -> 1.6        total 3.6
  candidates_[2].cached_blocks[0] = 5;   // prefix 0.5 -> 1.5
  candidates_[2].engine.waiting = 5;     // queue 0.5 -> 1
  candidates_[2].engine.kv_usage = 0.5;  // kv 0.5 -> 1          total 3.5
  std::vector<CandidateScore> s;
  EXPECT_EQ(p.Choose(request_, candidates_, &s), 1u);
  EXPECT_NEAR(s[0].score, 3.2, 1e-9);
  EXPECT_NEAR(s[1].score, 3.6, 1e-9);
  EXPECT_NEAR(s[2].score, 3.5, 1e-9);
}

TEST_F(PolicyTest, WeightedWeighsBlocksByTheirTier) {
  MakeWorkers(2);
  WeightedPolicy p(config::WeightedPolicyConfig{});  // host 0.8, store 0.5
  chain_.assign(10, 0);
  request_.chain = chain_;
  candidates_[0].cached_blocks[0] = 4;  // 4 in GPU, the next 6 in the shared store
  candidates_[0].cached_blocks[2] = 10;
  candidates_[1].cached_blocks[1] = 10;  // all 10 in its host tier
  candidates_[1].cached_blocks[2] = 10;
  std::vector<CandidateScore> s;
  p.Choose(request_, candidates_, &s);
  // prefix (4 + 0.5 x 6) / 10 = 0.7 against 0.8 x 10 / 10 = 0.8; queue and KV tie (2 + 2).
  EXPECT_NEAR(s[0].score, 3 * 0.7 + 4, 1e-9);
  EXPECT_NEAR(s[1].score, 3 * 0.8 + 4, 1e-9);
}

class KvAwareTest : public PolicyTest {
 protected:
  void SetUp() override {
    MakeWorkers(3);
    request_.block_tokens = 16;
    request_.prompt_tokens = 16000;
    request_.now = SteadyClock::now();
    cfg_.prefill_context_factor = 0;  // every token alike, unless a test says otherwise
  }
  config::KvAwarePolicyConfig cfg_;
};

// Attention: a token costs more the longer its context. 8000 uncached tokens after 8000 cached
// ones average 12000 tokens of context; with 1e-5 a context token that is 12% more than alone.
TEST_F(KvAwareTest, PrefillOfALongContextCostsMorePerToken) {
  EXPECT_DOUBLE_EQ(PrefillWork(8000, 8000, 1e-5), 8000 * (1 + 1e-5 * 12000));
  EXPECT_DOUBLE_EQ(PrefillWork(8000, 8000, 0), 8000);
  EXPECT_DOUBLE_EQ(PrefillWork(0, 100000, 1e-5), 0);
  cfg_.prefill_context_factor = 1e-5;
  KvAwarePolicy p(cfg_);                  // 10k tokens/s
  candidates_[1].cached_blocks[0] = 500;  // 8000 tokens cached
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[1]), 8000 * 1.12 / 10000, 1e-9);
  // Nothing cached: 16000 tokens averaging 8000 of context.
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 16000 * 1.08 / 10000, 1e-9);
  // The learned overhead is its own term.
  candidates_[0].prefill_overhead_s = 0.05;
  EXPECT_NEAR(p.PredictParts(request_, candidates_[0], 10000).overhead, 0.05, 1e-12);
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 16000 * 1.08 / 10000 + 0.05, 1e-9);
  // A worker whose line is not fitted yet is assumed to cost the fitted ones' mean.
  candidates_[1].prefill_overhead_s = 0.03;
  EXPECT_NEAR(p.Predict(request_, candidates_, 2)->overhead, 0.04, 1e-12);
  EXPECT_NEAR(p.Predict(request_, candidates_, 1)->overhead, 0.03, 1e-12);
  std::vector<CandidateScore> s;
  p.Choose(request_, candidates_, &s);
  EXPECT_NEAR(s[2].ttft_parts.overhead, 0.04, 1e-12);
  EXPECT_NEAR(s[2].predicted_ttft_s, s[2].ttft_parts.total(), 1e-12);
}

TEST_F(KvAwareTest, PredictsTtftFromQueueAndUncachedTokens) {
  KvAwarePolicy p(cfg_);  // 10k tokens/s
  candidates_[0].load.pending_prefill_tokens = 20000;
  candidates_[1].cached_blocks[0] = 500;  // 8000 tokens cached
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 3.6, 1e-9);
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[1]), 0.8, 1e-9);
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[2]), 1.6, 1e-9);
  EXPECT_EQ(Choose(p), 1u);
}

// What the gateway compares with the observed TTFT is the prediction Choose() ranked by: the
// chosen worker's, at the fleet's mean rate when its own was never observed.
TEST_F(KvAwareTest, PredictGivesTheChosenCandidatesPredictionTermByTerm) {
  KvAwarePolicy p(cfg_);
  candidates_[0].load.pending_prefill_tokens = 20000;
  candidates_[1].cached_blocks[0] = 500;
  candidates_[2].prefill_rate = 20000;  // observed; the other two assume it too
  std::vector<CandidateScore> s;
  const size_t chosen = p.Choose(request_, candidates_, &s);
  EXPECT_EQ(chosen, 1u);
  const std::optional<TtftParts> parts = p.Predict(request_, candidates_, chosen);
  ASSERT_TRUE(parts.has_value());
  EXPECT_NEAR(parts->prefill, 8000.0 / 20000, 1e-9);
  EXPECT_NEAR(parts->queue, 0, 1e-9);
  EXPECT_NEAR(parts->total(), s[chosen].predicted_ttft_s, 1e-12);
  EXPECT_NEAR(p.Predict(request_, candidates_, 0)->queue, 20000.0 / 20000, 1e-9);
  EXPECT_FALSE(p.Predict(request_, candidates_, 3).has_value());
  EXPECT_FALSE(RoundRobinPolicy().Predict(request_, candidates_, 0).has_value());
}

TEST_F(KvAwareTest, TheQueueCountsOnlyWhatTheEngineHasNotDone) {
  // 2 s of queue, of which the engine has been on the first prefill for 0.5 s: 1.5 s remain;
  // after 3 s the queue is (as far as the gateway can tell) about to answer: none left.
  KvAwarePolicy p(cfg_);  // 10k tokens/s
  candidates_[0].load.pending_prefill_tokens = 20000;
  candidates_[0].prefill_busy_s = 0.5;
  EXPECT_NEAR(p.PredictParts(request_, candidates_[0], 10000).queue, 1.5, 1e-9);
  candidates_[0].prefill_busy_s = 3;
  EXPECT_EQ(p.PredictParts(request_, candidates_[0], 10000).queue, 0);
}

TEST_F(KvAwareTest, SpillsWhenOwnerQueueCostsMoreThanRecompute) {
  KvAwarePolicy p(cfg_);
  candidates_[1].cached_blocks[0] = 1000;  // everything cached on worker 1
  candidates_[1].cached_any_blocks = 1000;
  EXPECT_EQ(Choose(p), 1u);
  candidates_[1].load.pending_prefill_tokens = 30000;  // 3 s of queue > 1.6 s recompute
  const size_t spilled = Choose(p);
  EXPECT_NE(spilled, 1u);
}

TEST_F(KvAwareTest, MinMatchIgnoresShortHits) {
  cfg_.min_match_tokens = 512;
  KvAwarePolicy p(cfg_);
  candidates_[0].cached_blocks[0] = 16;  // 256 tokens: below the minimum
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 1.6, 1e-9);
  candidates_[0].cached_blocks[0] = 32;  // 512 tokens
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 1.5488, 1e-9);
}

TEST_F(KvAwareTest, HostAndStoreHitsAreCheaperThanRecompute) {
  KvAwarePolicy p(cfg_);                   // host 200k tok/s, store 100k tok/s
  candidates_[0].cached_blocks[1] = 1000;  // all 16000 tokens on host: 0.08 s
  candidates_[1].cached_blocks[2] = 1000;  // all in the store: 0.16 s
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 0.08, 1e-9);
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[1]), 0.16, 1e-9);
  EXPECT_EQ(Choose(p), 0u);
}

TEST_F(KvAwareTest, PredictionPartsAddUpAndUseTheLearnedStoreRate) {
  KvAwarePolicy p(cfg_);  // prefill 10k tok/s
  candidates_[0].load.pending_prefill_tokens = 5000;
  candidates_[0].cached_blocks[0] = 250;     // 4000 tokens in GPU
  candidates_[0].cached_blocks[2] = 750;     // the next 8000 in the store
  request_.store_tokens_per_second = 40000;  // learned: 0.2 s for the 8000
  const TtftParts t = p.PredictParts(request_, candidates_[0], 10000);
  EXPECT_NEAR(t.queue, 0.5, 1e-9);
  EXPECT_NEAR(t.prefill, 0.4, 1e-9);  // 4000 uncached
  EXPECT_NEAR(t.store_load, 0.2, 1e-9);
  EXPECT_EQ(t.host_load, 0);
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 1.1, 1e-9);
  std::vector<CandidateScore> s;
  p.Choose(request_, candidates_, &s);
  EXPECT_NEAR(s[0].ttft_parts.store_load, 0.2, 1e-9);
  EXPECT_NEAR(s[0].predicted_ttft_s, 1.1, 1e-9);
}

// With the session's prefix in the store, leaving a queued owner costs a load, not a
// recompute: kvaware moves the session sooner than it would without the store.
TEST_F(KvAwareTest, StoreMakesMovingASessionCheap) {
  KvAwarePolicy p(cfg_);
  candidates_[1].cached_blocks[0] = 1000;  // the owner holds all 16000 tokens
  candidates_[1].cached_any_blocks = 1000;
  candidates_[1].load.pending_prefill_tokens = 8000;  // 0.8 s queue, less than 1.6 s recompute
  EXPECT_EQ(Choose(p), 1u);
  for (auto& c : candidates_) c.cached_blocks[2] = 1000;  // the store holds the session too
  EXPECT_NE(Choose(p), 1u);  // 0.16 s to load elsewhere beats 0.8 s of queue
}

// A load holds its worker's step: the requests running there wait for it too. The session is
// in the store (0.16 s to load anywhere); its owner has 0.5 s of queue.
TEST_F(KvAwareTest, ALoadIsChargedForTheRequestsItHoldsUp) {
  for (auto& c : candidates_) c.cached_blocks[2] = 1000;
  candidates_[1].cached_blocks[0] = 1000;
  candidates_[1].cached_any_blocks = 1000;
  candidates_[1].load.pending_prefill_tokens = 5000;
  candidates_[0].load.in_flight = candidates_[2].load.in_flight = 3;
  KvAwarePolicy p(cfg_);  // load_delay_weight 1
  // Elsewhere: 0.16 s for the request, 3 x 0.16 s for the three it holds up, against 0.5 s.
  EXPECT_EQ(Choose(p), 1u);
  std::vector<CandidateScore> s;
  EXPECT_EQ(p.Choose(request_, candidates_, &s), 1u);
  EXPECT_NEAR(s[0].predicted_ttft_s, 0.16, 1e-9);  // the prediction leaves it out
  EXPECT_NEAR(s[0].score, 0.16 + 3 * 0.16, 1e-9);
  cfg_.load_delay_weight = 0;
  KvAwarePolicy blind(cfg_);
  EXPECT_NE(Choose(blind), 1u);       // without it the session moves
  candidates_[2].load.in_flight = 0;  // an idle worker: the load holds up nobody
  EXPECT_EQ(Choose(p), 2u);
}

TEST_F(KvAwareTest, LearnedPrefillRateChangesPrediction) {
  KvAwarePolicy p(cfg_);
  candidates_[2].prefill_rate = 40000;  // this worker was seen to prefill 40k tokens/s
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[2]), 0.4, 1e-9);
  EXPECT_EQ(Choose(p), 2u);
}

TEST_F(KvAwareTest, PromptThatDoesNotFitTheFreeKvWaits) {
  cfg_.kv_full_wait_seconds = 2;
  KvAwarePolicy p(cfg_);
  for (auto& c : candidates_) {
    c.engine.num_gpu_blocks = 2000;  // 32000 tokens of KV each
    c.engine.block_size = 16;
  }
  candidates_[0].load.active_kv_blocks = 1000;  // 16000 resident + 16000 new: just fits
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 1.6, 1e-9);
  // One block over waits as long as far over: the engine holds the prompt back (or preempts)
  // until a running request finishes, however little is missing.
  candidates_[0].load.active_kv_blocks = 1001;
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 1.6 + 2.0, 1e-9);
  candidates_[0].load.active_kv_blocks = 4000;
  EXPECT_NEAR(p.PredictTtft(request_, candidates_[0]), 3.6, 1e-9);
  // A session owner whose KV is full loses the request to an idle worker.
  candidates_[0].cached_blocks[0] = 500;  // 8000 tokens of its history
  candidates_[0].cached_any_blocks = 500;
  EXPECT_NE(Choose(p), 0u);
  candidates_[0].load.active_kv_blocks = 0;
  EXPECT_EQ(Choose(p), 0u);
}

TEST_F(KvAwareTest, LoadBoundExcludesHotWorker) {
  KvAwarePolicy p(cfg_);  // spill_bound 2
  candidates_[0].cached_blocks[0] = 1000;
  candidates_[0].cached_any_blocks = 1000;
  candidates_[0].load.in_flight = 3;  // fair share of 4 over 3 = 2, +2 = 4: still eligible
  EXPECT_EQ(Choose(p), 0u);
  candidates_[0].load.in_flight = 4;  // at the bound
  EXPECT_NE(Choose(p), 0u);
}

// The bound counts decoding requests like queued ones. A worker over it whose requests are all
// decoding still takes a prompt when every worker under it would make that prompt wait longer
// than recomputing it whole (a burst of long first turns queued there); a cache hit alone is
// never worth more than a recompute, so a hot prefix still spills.
TEST_F(KvAwareTest, OverTheLoadBoundStillTakenWhenTheOthersQueueLonger) {
  KvAwarePolicy p(cfg_);                  // spill_bound 2; 16000 tokens, 1.6 s to recompute
  candidates_[0].load.in_flight = 6;      // bound ceil(7 / 3) + 2 = 5: over it
  candidates_[0].load.active_decode = 6;  // all decoding: 0.012 s of interference
  candidates_[1].load.pending_prefill_tokens = 40000;  // 4 s of queue
  candidates_[2].load.pending_prefill_tokens = 40000;
  EXPECT_EQ(Choose(p), 0u);  // 1.612 s against 5.6 s: saves more than the 1.6 s recompute
  std::vector<CandidateScore> scores;
  p.Choose(request_, candidates_, &scores);
  EXPECT_TRUE(scores[0].eligible);
  EXPECT_NE(scores[0].note.find("over load bound"), std::string::npos);
  candidates_[1].load.pending_prefill_tokens = 10000;  // 1 s: 2.6 s against 1.612 s
  candidates_[2].load.pending_prefill_tokens = 10000;
  EXPECT_NE(Choose(p), 0u);
  // A hot prefix: everything cached on the worker over the bound, nothing queued elsewhere.
  candidates_[1].load.pending_prefill_tokens = 0;
  candidates_[2].load.pending_prefill_tokens = 0;
  candidates_[0].cached_blocks[0] = 1000;
  candidates_[0].cached_any_blocks = 1000;
  request_.match_is_shared_prefix = true;
  EXPECT_NE(Choose(p), 0u);
}

// Open lanes: in a burst, a long prompt taking one of the shortest queues would make every later
// arrival wait behind it; it goes behind a queue already there when that costs it less than
// lane_weight × the wait it would add to the lane. A short prompt still takes the lane, and with
// the fleet idle nothing changes.
TEST_F(KvAwareTest, ALongPromptLeavesTheShortestQueuesOpenInABurst) {
  candidates_.push_back(candidates_[0]);  // four workers: two lanes
  candidates_.back().worker_id = 3;
  cfg_.lane_weight = 2.0;
  cfg_.open_lanes = 0.5;
  KvAwarePolicy p(cfg_);                               // 16000 tokens: 1.6 s
  candidates_[2].load.pending_prefill_tokens = 8000;   // 0.8 s queued
  candidates_[3].load.pending_prefill_tokens = 80000;  // 8 s
  // Lanes 0 and 1: 1.6 + 2 × 0.8 (up to worker 2's queue) = 3.2 s against worker 2's 2.4 s.
  EXPECT_EQ(Choose(p), 2u);
  std::vector<CandidateScore> scores;
  p.Choose(request_, candidates_, &scores);
  EXPECT_NEAR(scores[0].score, 3.2, 1e-9);
  EXPECT_NEAR(scores[0].predicted_ttft_s, 1.6, 1e-9);  // the prediction is the TTFT alone
  EXPECT_NEAR(scores[2].score, 2.4, 1e-9);
  EXPECT_NEAR(scores[3].score, 9.6, 1e-9);
  // A short prompt adds less than the gap: 0.2 + 2 × 0.2 = 0.6 s against 1.0 s.
  request_.prompt_tokens = 2000;
  EXPECT_LT(Choose(p), 2u);
  // Off, the long prompt takes a lane.
  request_.prompt_tokens = 16000;
  cfg_.lane_weight = 0;
  KvAwarePolicy off(cfg_);
  EXPECT_LT(Choose(off), 2u);
  // An idle fleet: no lane is charged.
  cfg_.lane_weight = 2.0;
  candidates_[2].load.pending_prefill_tokens = 0;
  candidates_[3].load.pending_prefill_tokens = 0;
  KvAwarePolicy idle(cfg_);
  idle.Choose(request_, candidates_, &scores);
  for (const CandidateScore& s : scores) EXPECT_NEAR(s.score, 1.6, 1e-9);
}

TEST_F(KvAwareTest, TiesBetweenIdleWorkersSpread) {
  KvAwarePolicy p(cfg_);
  std::set<size_t> chosen;
  for (uint64_t s = 0; s < 64; ++s) chosen.insert(Choose(p, s));
  EXPECT_EQ(chosen.size(), 3u);
}

TEST(PolicyRegistry, EveryConfiguredNameBuilds) {
  for (const char* n : {"round_robin", "random", "least_request", "power_of_two", "consistent_hash",
                        "cache_aware", "cost", "weighted", "kvaware"}) {
    const PolicyInfo* info = FindPolicy(n);
    ASSERT_NE(info, nullptr) << n;
    auto p = info->make(config::RoutingConfig{}, {});
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(p->name(), n);
  }
  EXPECT_EQ(FindPolicy("nope"), nullptr);
  EXPECT_EQ(Policies().size(), 9u);
}

TEST(PolicyRegistry, PolicySetNamesTheUnknownPolicy) {
  config::RoutingConfig c;
  c.model_policies = {{"special", "least_request"}};
  auto set = MakePolicySet(c, {});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ((*set)->For("special")->name(), "least_request");
  EXPECT_EQ((*set)->For("other")->name(), "kvaware");
  c.model_policies = {{"x", "bogus"}};
  auto bad = MakePolicySet(c, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("routing.model_policies.x: unknown policy 'bogus'"),
            absl::string_view::npos);
}

TEST(ConsistentHashRing, BuiltOnceForThePublishedSet) {
  // Candidates that are not on the ring (none here) or missing from it are walked past; an
  // empty ring still answers.
  ConsistentHashPolicy empty(config::ConsistentHashPolicyConfig{}, {});
  Candidate c;
  RouteRequest r;
  std::vector<Candidate> one{c};
  EXPECT_EQ(empty.Choose(r, one, nullptr), 0u);
}

}  // namespace
}  // namespace kvgate::router
