// Routing decisions end to end inside the planner: prompt hashing, index matching, policy,
// reservations and learning, on constructed fleets (no network).
#include "router/route_planner.h"

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace kvgate::router {
namespace {

std::string Text(std::string_view seed, size_t bytes) {
  std::string s;
  uint64_t x = std::hash<std::string_view>()(seed);
  while (s.size() < bytes) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    s += common::StrCat("w", (x >> 33) % 100000, " ");
  }
  s.resize(bytes);
  return s;
}

std::string Chat(const std::vector<std::pair<std::string, std::string>>& messages) {
  std::string body = R"({"model":"m","messages":[)";
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) body += ",";
    body += common::StrCat(R"({"role":")", messages[i].first, R"(","content":")",
                           messages[i].second, R"("})");
  }
  return body + "]}";
}

class PlannerTest : public ::testing::Test {
 protected:
  void Init(size_t n, const std::string& policy = "kvaware") {
    config_.policy = policy;
    planner_ = std::make_unique<RoutePlanner>(config_, metrics_);
    policies_ = *MakePolicySet(config_);
    for (size_t i = 0; i < n; ++i) {
      config::WorkerConfig c;
      c.url = *common::ParseHttpUrl(common::StrCat("http://w", i, ":8000"));
      workers_.push_back(std::make_shared<Worker>(c, metrics_.ForWorker(c.url.ToString()),
                                                  static_cast<uint32_t>(i)));
      raw_.push_back(workers_.back().get());
    }
  }

  // One committed decision for a chat body; the caller completes it.
  Decision Route(const std::string& body, PreparedPrompt* prompt, RouteRequest* r) {
    *prompt = planner_->Prepare(body, body.size(), true, "m", *policies_, config_);
    EXPECT_EQ(prompt->hashed, policies_->For("m")->UsesPrefixCache());
    r->model = "m";
    r->chain = prompt->chain;
    r->prompt_tokens = prompt->prompt_tokens;
    r->block_tokens = config_.block_tokens;
    r->now = now_;
    return planner_->Decide(*r, raw_, *policies_, config_, true);
  }

  void Finish(const RouteRequest& r, Decision& d, int64_t cached_tokens = -1) {
    d.worker->Release(d.reservation);
    RouteOutcome o;
    o.success = true;
    o.cached_tokens = cached_tokens;
    planner_->Complete(r, d, o, *policies_, config_);
  }

  size_t IndexOf(const Worker* w) const {
    return static_cast<size_t>(std::find(raw_.begin(), raw_.end(), w) - raw_.begin());
  }

  prometheus::Registry registry_;
  RouterMetrics metrics_{registry_};
  config::RoutingConfig config_;
  std::unique_ptr<RoutePlanner> planner_;
  PolicySetConstSharedPtr policies_;
  std::vector<WorkerSharedPtr> workers_;
  std::vector<Worker*> raw_;
  SteadyClock::time_point now_ = SteadyClock::now();
};

TEST_F(PlannerTest, BurstOnOnePrefixStaysWithinFairShareAndSecondWaveHits) {
  Init(8);
  const std::string prefix = Text("shared-prefix", 64 * 1024);  // ~16K tokens
  std::vector<std::pair<RouteRequest, Decision>> wave;
  std::vector<PreparedPrompt> prompts(64);
  std::map<size_t, int> count;
  for (int i = 0; i < 64; ++i) {
    const std::string body =
        Chat({{"system", prefix}, {"user", Text(common::StrCat("q", i), 300)}});
    RouteRequest r;
    Decision d = Route(body, &prompts[i], &r);
    ++count[IndexOf(d.worker)];
    wave.emplace_back(r, std::move(d));
  }
  int max_count = 0;
  for (const auto& [w, n] : count) max_count = std::max(max_count, n);
  EXPECT_LE(max_count, 64 / 8 + static_cast<int>(config_.kvaware.spill_bound));
  for (auto& [r, d] : wave) Finish(r, d);

  // Second wave: the prefix is cached wherever each request goes.
  for (int i = 0; i < 64; ++i) {
    const std::string body =
        Chat({{"system", prefix}, {"user", Text(common::StrCat("z", i), 300)}});
    PreparedPrompt p;
    RouteRequest r;
    Decision d = Route(body, &p, &r);
    EXPECT_GE(d.predicted_cached_tokens, 16000) << "request " << i;
    Finish(r, d);
  }
}

TEST_F(PlannerTest, SharedSystemPromptSpreadsSessionsAndLaterTurnsStay) {
  Init(8);
  const std::string system = Text("system-prompt", 8 * 1024);  // 2K tokens
  constexpr int kSessions = 1000;
  std::vector<Worker*> first(kSessions);
  std::map<size_t, int> sessions;
  for (int s = 0; s < kSessions; ++s) {
    const std::string body =
        Chat({{"system", system}, {"user", Text(common::StrCat("u", s), 600)}});
    PreparedPrompt p;
    RouteRequest r;
    Decision d = Route(body, &p, &r);
    first[s] = d.worker;
    ++sessions[IndexOf(d.worker)];
    Finish(r, d);
  }
  ASSERT_EQ(sessions.size(), 8u);
  int max_sessions = 0;
  for (const auto& [w, n] : sessions) max_sessions = std::max(max_sessions, n);
  EXPECT_LE(max_sessions / (kSessions / 8.0), 1.3);

  int moved = 0;
  for (int s = 0; s < kSessions; ++s) {
    const std::string body = Chat({{"system", system},
                                   {"user", Text(common::StrCat("u", s), 600)},
                                   {"assistant", Text(common::StrCat("a", s), 400)},
                                   {"user", Text(common::StrCat("v", s), 400)}});
    PreparedPrompt p;
    RouteRequest r;
    Decision d = Route(body, &p, &r);
    moved += d.worker != first[s];
    Finish(r, d);
  }
  EXPECT_EQ(moved, 0);
}

TEST_F(PlannerTest, ReservationsSpreadABurstBeforeAnyCompletes) {
  Init(4, "least_request");
  std::vector<std::pair<RouteRequest, Decision>> burst;
  std::vector<PreparedPrompt> prompts(40);
  for (int i = 0; i < 40; ++i) {
    RouteRequest r;
    Decision d = Route(Chat({{"user", "hello"}}), &prompts[i], &r);
    burst.emplace_back(r, std::move(d));
  }
  for (Worker* w : raw_) EXPECT_EQ(w->load().in_flight, 10);
  for (auto& [r, d] : burst) Finish(r, d);
  for (Worker* w : raw_) {
    EXPECT_EQ(w->load().in_flight, 0);
    EXPECT_EQ(w->load().pending_prefill_tokens, 0);
    EXPECT_EQ(w->load().active_kv_blocks, 0);
  }
}

TEST_F(PlannerTest, PrefillIsReleasedAtFirstByte) {
  Init(1);
  PreparedPrompt p;
  RouteRequest r;
  Decision d = Route(Chat({{"user", Text("long", 40000)}}), &p, &r);
  EXPECT_EQ(raw_[0]->load().pending_prefill_tokens, p.prompt_tokens);
  raw_[0]->ReleasePrefill(d.reservation);
  EXPECT_EQ(raw_[0]->load().pending_prefill_tokens, 0);
  EXPECT_EQ(raw_[0]->load().in_flight, 1);
  Finish(r, d);
  EXPECT_EQ(raw_[0]->load().in_flight, 0);
}

TEST_F(PlannerTest, ReconciliationDropsBlocksTheWorkerDidNotHave) {
  Init(2);
  const std::string turn1 = Chat({{"user", Text("session", 16000)}});  // ~4000 tokens
  PreparedPrompt p1;
  RouteRequest r1;
  Decision d1 = Route(turn1, &p1, &r1);
  Worker* w = d1.worker;
  Finish(r1, d1);

  const std::string turn2 =
      Chat({{"user", Text("session", 16000)}, {"assistant", "ok"}, {"user", Text("more", 2000)}});
  PreparedPrompt p2;
  RouteRequest r2;
  Decision d2 = Route(turn2, &p2, &r2);
  ASSERT_EQ(d2.worker, w);
  EXPECT_GE(d2.predicted_cached_tokens, 3900);
  // The engine says only 1024 tokens were cached: it evicted the rest.
  Finish(r2, d2, 1024);
  const auto m = planner_->index().Match(p2.chain, {RoutePlanner::HolderOf(*w)});
  EXPECT_EQ(m[0].blocks[0], 1024 / 16);  // the hole starts where the engine's cache ended
  EXPECT_LT(w->metrics().prediction_accuracy->Value(), 1.0);
  EXPECT_GT(w->metrics().overpredicted_tokens->Value(), 2800);
  EXPECT_DOUBLE_EQ(w->metrics().actual_tokens->Value(), 1024);
}

TEST_F(PlannerTest, ExplainDoesNotChangeStateAndMatchesTheNextDecision) {
  Init(4);
  for (int i = 0; i < 30; ++i) {
    const std::string body = Chat({{"user", Text(common::StrCat("e", i % 7), 3000)}});
    PreparedPrompt p = planner_->Prepare(body, body.size(), true, "m", *policies_, config_);
    RouteRequest r;
    r.model = "m";
    r.chain = p.chain;
    r.prompt_tokens = p.prompt_tokens;
    r.now = now_;
    std::vector<int64_t> before;
    for (Worker* w : raw_) before.push_back(w->load().pending_prefill_tokens);
    Decision explained = planner_->Decide(r, raw_, *policies_, config_, false);
    EXPECT_EQ(explained.scores.size(), 4u);
    for (size_t k = 0; k < raw_.size(); ++k) {
      EXPECT_EQ(raw_[k]->load().pending_prefill_tokens, before[k]);  // explain reserves nothing
    }
    Decision real = planner_->Decide(r, raw_, *policies_, config_, true);
    EXPECT_EQ(real.worker, explained.worker) << "request " << i;
    if (i % 3 == 0) Finish(r, real);  // leave some in flight so that load matters
  }
}

TEST_F(PlannerTest, CacheBlindPoliciesDoNotHash) {
  Init(2, "round_robin");
  const std::string body = Chat({{"user", Text("x", 5000)}});
  PreparedPrompt p = planner_->Prepare(body, body.size(), true, "m", *policies_, config_);
  EXPECT_FALSE(p.hashed);
  EXPECT_TRUE(p.chain.empty());
}

TEST_F(PlannerTest, PerModelPolicyOverride) {
  config_.model_policies = {{"special", "least_request"}};
  Init(2);
  EXPECT_EQ(policies_->For("special")->name(), "least_request");
  EXPECT_EQ(policies_->For("m")->name(), "kvaware");
  config_.model_policies = {{"x", "bogus"}};
  EXPECT_FALSE(MakePolicySet(config_).ok());
}

}  // namespace
}  // namespace kvgate::router
