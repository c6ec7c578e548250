// kvgate-replay through the kvgate binary in front of in-process kvgate-sim workers: the report's
// prompt and cached token counts (read from each response's `usage`) must equal what the
// simulators themselves counted (their vllm:prompt_tokens / vllm:prefix_cache_hits counters).
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "bench/replay/replayer.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "tests/fakes/test_client.h"
#include "tests/replay/test_paths.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::replay {
namespace {

// Sum of every sample of `family` in a Prometheus text page (all label sets).
double SumSamples(const std::string& page, const std::string& family) {
  double sum = 0;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(family, 0) != 0) continue;
    const char next = line.size() > family.size() ? line[family.size()] : '\0';
    if (next != '{' && next != ' ') continue;  // A longer name sharing the prefix.
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

struct SimCounters {
  double prompt_tokens = 0;
  double cached_tokens = 0;
  double preemptions = 0;
  double requests = 0;
};

SimCounters ReadCounters(const sim::SimProcess& fleet) {
  SimCounters c;
  for (uint16_t port : fleet.ports()) {
    const auto page = testing::Fetch(port, "GET", "/metrics", "");
    EXPECT_EQ(page.status, 200);
    c.prompt_tokens += SumSamples(page.body, "vllm:prompt_tokens_total");
    c.cached_tokens += SumSamples(page.body, "vllm:prefix_cache_hits_total");
    c.preemptions += SumSamples(page.body, "vllm:num_preemptions_total");
    c.requests += SumSamples(page.body, "vllm:request_success_total");
  }
  return c;
}

class ReplaySimEndToEnd : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplaySimEndToEnd, ReportCountsWhatTheSimulatorsCounted) {
  const std::string kvgate = BinDir() + "/kvgate";
  if (!std::filesystem::exists(kvgate)) GTEST_SKIP() << "no " << kvgate;
  sim::SimOptions so;
  so.base_port = 0;
  so.workers = 2;
  so.time_scale = 0.02;              // Fast, but still streamed step by step.
  so.profile.num_gpu_blocks = 4096;  // Room for every prompt: no preemption muddles the counters.
  sim::SimProcess fleet(so);
  ASSERT_TRUE(fleet.Start().ok());
  fleet.StartThread();

  std::string workers;
  for (uint16_t port : fleet.ports())
    common::StrAppend(&workers, "  - url: http://127.0.0.1:", port, "\n");
  const std::string config = testing::WriteTempFile(
      "kvgate.yaml",
      "listen: \"127.0.0.1:0\"\nthreads: 1\nrouting: {policy: kvaware}\nworkers:\n" + workers);
  testing::ChildProcess gateway({kvgate, "--config", config});
  const uint16_t port = gateway.Port();
  ASSERT_NE(port, 0) << gateway.Log();

  ReplayOptions o;
  o.target = common::StrCat("http://127.0.0.1:", port);
  o.trace = Fixture(GetParam());
  o.progress = 0;
  o.speedup = 50;
  o.request_timeout_s = 30;
  o.body.model = so.model;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  const Report& r = result->report;
  ASSERT_GT(r.requests, 0u);
  ASSERT_EQ(r.errors, 0u) << gateway.Log();

  const SimCounters c = ReadCounters(fleet);
  fleet.Stop();
  ASSERT_EQ(c.preemptions, 0);  // Else the simulators count re-scheduled prompts twice.
  EXPECT_EQ(c.requests, static_cast<double>(r.requests));
  EXPECT_EQ(c.prompt_tokens, static_cast<double>(r.prompt_tokens));
  EXPECT_EQ(c.cached_tokens, static_cast<double>(r.cached_tokens));
  EXPECT_GT(r.cached_tokens, 0u);  // The traces repeat prefixes: something must have hit.
  EXPECT_DOUBLE_EQ(r.cached_ratio(), c.cached_tokens / c.prompt_tokens);
}

INSTANTIATE_TEST_SUITE_P(Traces, ReplaySimEndToEnd, ::testing::Values("agentic", "tiny.jsonl"),
                         [](const auto& info) {
                           return info.param == "agentic" ? "Agentic" : "Mooncake";
                         });

// One replay of the multi-turn sessions through `api` with `policy` on two simulated workers.
struct ApiRun {
  Report report;
  size_t moves = 0;  // follow-ups answered by another worker than the turn before
};

ApiRun ReplayThrough(Api api, const std::string& policy, bool responses_store = false) {
  ApiRun run;
  const std::string kvgate = BinDir() + "/kvgate";
  sim::SimOptions so;
  so.base_port = 0;
  so.workers = 2;
  so.time_scale = 0.005;              // one session at a time: 200x faster than real time keeps up
  so.profile.num_gpu_blocks = 16384;  // every session fits: routing alone decides the hits
  sim::SimProcess fleet(so);
  EXPECT_TRUE(fleet.Start().ok());
  fleet.StartThread();
  std::string workers;
  for (uint16_t port : fleet.ports())
    common::StrAppend(&workers, "  - url: http://127.0.0.1:", port, "\n");
  const std::string config = testing::WriteTempFile(
      "kvgate.yaml", common::StrCat("listen: \"127.0.0.1:0\"\nthreads: 1\nrouting: {policy: ",
                                    policy, "}\nworkers:\n", workers));
  testing::ChildProcess gateway({kvgate, "--config", config});
  const uint16_t port = gateway.Port();
  EXPECT_NE(port, 0) << gateway.Log();
  ReplayOptions o;
  o.target = common::StrCat("http://127.0.0.1:", port);
  o.trace = Fixture("agentic_turns");
  o.conversations = 1;  // one session at a time: round_robin's alternation is then exact
  o.progress = 0;
  o.speedup = 200;
  o.request_timeout_s = 30;
  o.api = api;
  o.body.model = so.model;
  o.body.responses_store = responses_store;
  auto result = RunReplay(o);
  EXPECT_TRUE(result.ok()) << result.status();
  fleet.Stop();
  if (!result.ok()) return run;
  run.report = result->report;
  std::map<std::string, std::map<uint64_t, std::string>> by_session;
  for (const RequestRecord& r : result->records) by_session[r.conversation][r.index] = r.worker;
  for (const auto& [session, turns] : by_session) {
    std::string last;
    for (const auto& [turn, worker] : turns) {
      if (!last.empty() && worker != last) ++run.moves;
      last = worker;
    }
  }
  return run;
}

// The same sessions through chat, Anthropic Messages and OpenAI Responses: a prefix-aware
// policy keeps each session on its worker whatever the API, the cached share matches chat's
// within a point, and round_robin loses by the same margin through every API. (cache_aware:
// SGLang's rule follows the prefix unless the load is far apart, so on a busy 2-core machine
// the comparison stays about the APIs; kvaware also weighs the simulators' momentary queues.)
TEST(ReplaySimEndToEnd, AgentApisRouteAsChatDoes) {
  if (!std::filesystem::exists(BinDir() + "/kvgate")) GTEST_SKIP() << "no kvgate";
  const ApiRun chat = ReplayThrough(Api::kChat, "cache_aware");
  const ApiRun chat_rr = ReplayThrough(Api::kChat, "round_robin");
  ASSERT_EQ(chat.report.errors, 0u);
  ASSERT_GT(chat.report.requests, 40u);
  const double margin = chat.report.cached_ratio() - chat_rr.report.cached_ratio();
  EXPECT_GT(margin, 0.05) << chat.report.cached_ratio() << " vs " << chat_rr.report.cached_ratio();
  EXPECT_EQ(chat.moves, 0u);
  for (const Api api : {Api::kMessages, Api::kResponses}) {
    const ApiRun kv = ReplayThrough(api, "cache_aware");
    const ApiRun rr = ReplayThrough(api, "round_robin");
    SCOPED_TRACE(std::string(ApiName(api)));
    ASSERT_EQ(kv.report.errors, 0u);
    ASSERT_EQ(rr.report.errors, 0u);
    EXPECT_EQ(kv.report.requests, chat.report.requests);
    EXPECT_EQ(kv.moves, 0u);
    std::printf(
        "%s: cache_aware %.1f%% cached (%zu moves), round_robin %.1f%%; chat: %.1f%% (%zu), "
        "%.1f%%\n",
        std::string(ApiName(api)).c_str(), 100 * kv.report.cached_ratio(), kv.moves,
        100 * rr.report.cached_ratio(), 100 * chat.report.cached_ratio(), chat.moves,
        100 * chat_rr.report.cached_ratio());
    EXPECT_NEAR(kv.report.cached_ratio(), chat.report.cached_ratio(), 0.01);
    EXPECT_NEAR(kv.report.cached_ratio() - rr.report.cached_ratio(), margin, 0.03);
  }
  // Stored responses: every continuation on the worker holding its previous response.
  const ApiRun stored = ReplayThrough(Api::kResponses, "round_robin", /*responses_store=*/true);
  ASSERT_EQ(stored.report.errors, 0u);
  EXPECT_EQ(stored.moves, 0u);  // pinned even under round_robin
  std::printf("responses, stored: round_robin %.1f%% cached (%zu moves)\n",
              100 * stored.report.cached_ratio(), stored.moves);
  EXPECT_GT(stored.report.cached_ratio(), chat_rr.report.cached_ratio());
}

}  // namespace
}  // namespace kvgate::replay
