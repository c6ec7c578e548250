// kvgate-replay through the kvgate binary in front of in-process kvgate-sim workers: the report's
// prompt and cached token counts (read from each response's `usage`) must equal what the
// simulators themselves counted (their vllm:prompt_tokens / vllm:prefix_cache_hits counters).
#include <filesystem>
#include <sstream>

#include "bench/replay/replayer.h"
#include "bench/sim/server.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/child_process.h"
#include "tests/integration/test_util.h"
#include "tests/replay/test_paths.h"

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

}  // namespace
}  // namespace kvgate::replay
