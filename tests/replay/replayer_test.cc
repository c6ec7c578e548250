// End-to-end tests of the replayer against FakeUpstream workers (in process), the kvgate
// binary in front of them, and the kvgate-replay binary itself.
#include "bench/replay/replayer.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "bench/replay/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/replay/test_paths.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::replay {
namespace {

using ::kvgate::testing::FakeUpstream;
using ::testing::HasSubstr;

std::unique_ptr<FakeUpstream> StartFake(uint32_t chunks = 4, uint32_t delay_ms = 0) {
  FakeUpstream::Options o;
  o.chunks = chunks;
  o.delay_ms = delay_ms;
  auto fake = std::make_unique<FakeUpstream>(o);
  fake->Start();
  return fake;
}

ReplayOptions Options(const std::string& target, const std::string& trace = "") {
  ReplayOptions o;
  o.target = target;
  o.trace = trace;
  o.progress = 0;
  o.request_timeout_s = 20;
  return o;
}

const RequestRecord* Find(const std::vector<RequestRecord>& records, const std::string& conv,
                          uint64_t index) {
  for (const auto& r : records) {
    if (r.conversation == conv && r.index == index) return &r;
  }
  return nullptr;
}

TEST(ReplayMooncakeTest, ReplaysAWholeFileOpenLoop) {
  auto fake = StartFake();
  ReplayOptions o = Options(fake->url(), Fixture("tiny.jsonl"));
  o.speedup = 10;  // 400 ms of trace in 40 ms.
  o.fleet_capacity_tokens = 1024;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  const Report& r = result->report;
  EXPECT_EQ(r.mode, "open-loop");
  EXPECT_EQ(r.requests, 5u);
  EXPECT_EQ(r.ok, 5u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.prompt_tokens, 500u);  // The fake reports 100 prompt / 64 cached tokens.
  EXPECT_EQ(r.cached_tokens, 320u);
  EXPECT_EQ(r.completion_tokens, 20u);
  EXPECT_EQ(r.ttft.count, 5u);
  EXPECT_EQ(r.tpot.count, 5u);
  EXPECT_EQ(fake->requests(), 5u);
  EXPECT_THAT(fake->last_body(), HasSubstr("\"prompt\":\""));
  EXPECT_THAT(fake->last_body(), HasSubstr("\"max_tokens\":4"));
  EXPECT_EQ(fake->last_header("user-agent"), "kvgate-replay");
  // Requests go out in timestamp order, spaced by (gap / speedup).
  for (const auto& rec : result->records) {
    EXPECT_GE(rec.send_s, rec.index * 0.01 - 0.005) << rec.index;
  }
  // Bounds: 1100+1500+600+1024+512 tokens; reuse 1024 (req 2) + 1024 (req 4).
  ASSERT_TRUE(r.bounds.computed);
  EXPECT_EQ(r.bounds.input_tokens, 4736u);
  EXPECT_DOUBLE_EQ(r.bounds.ideal_reuse_ratio, 2048.0 / 4736.0);
  EXPECT_LT(r.bounds.pooled_lru_reuse_ratio, r.bounds.ideal_reuse_ratio);
}

TEST(ReplayMooncakeTest, FloorCountsCompulsoryTokensInSendOrder) {
  auto fake = StartFake();
  ReplayOptions o = Options(fake->url(), Fixture("tiny.jsonl"));
  o.speedup = 10;
  o.floor_prefill_rate = 1000;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  // Timestamp order; blocks 0, 1 come back in requests 1 and 3 (the ideal bound's 2048 tokens).
  const std::map<uint64_t, uint64_t> want = {{0, 1100}, {1, 476}, {2, 600}, {3, 0}, {4, 512}};
  ASSERT_EQ(result->records.size(), want.size());
  for (const auto& rec : result->records) {
    EXPECT_EQ(rec.compulsory_tokens, want.at(rec.index)) << rec.index;
    EXPECT_DOUBLE_EQ(rec.floor_s, want.at(rec.index) / 1000.0) << rec.index;
    EXPECT_FALSE(rec.prediction.present());  // The fake sends no x-kvgate-prediction.
  }
  const Report& r = result->report;
  ASSERT_TRUE(r.floor.computed);
  EXPECT_EQ(r.floor.prefill_tokens_per_s, 1000);
  EXPECT_EQ(r.floor.compulsory_tokens, 4736u - 2048u);
  EXPECT_NEAR(r.floor.mean_s, 2.688 / 5, 1e-12);
  EXPECT_DOUBLE_EQ(r.floor.p99_s, 1.1);
  EXPECT_EQ(r.prediction.count, 0u);
  // Without a rate, no floor.
  o.floor_prefill_rate = 0;
  auto plain = RunReplay(o);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->report.floor.computed);
  EXPECT_LT(plain->records[0].floor_s, 0);
}

TEST(ReplayMooncakeTest, MaxRequestsAndChatApi) {
  auto fake = StartFake();
  ReplayOptions o = Options(fake->url(), Fixture("tiny.jsonl"));
  o.speedup = 100;
  o.max_requests = 3;
  o.api = Api::kChat;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.requests, 3u);
  EXPECT_THAT(fake->last_body(), HasSubstr("\"messages\":[{\"role\":\"user\""));
}

TEST(ReplayMooncakeTest, CountsHttpAndTransportErrors) {
  auto fake = StartFake();
  fake->set_force_status(503);
  ReplayOptions o = Options(fake->url(), Fixture("tiny.jsonl"));
  o.speedup = 100;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.errors, 5u);
  EXPECT_EQ(result->report.error_kinds.at("http_503"), 5u);
  EXPECT_THAT(result->records[0].error, HasSubstr("fake failure"));

  const kvgate::testing::DeadPort dead_port;
  ReplayOptions dead =
      Options("http://127.0.0.1:" + std::to_string(dead_port.port()), Fixture("tiny.jsonl"));
  dead.speedup = 100;
  auto down = RunReplay(dead);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->report.errors, 5u);
  EXPECT_EQ(down->report.error_kinds.at("transport"), 5u);
}

TEST(ReplayMooncakeTest, RejectsBadTraces) {
  auto result = RunReplay(Options("http://127.0.0.1:1", Fixture("bad.jsonl")));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("bad.jsonl:2:"));
  EXPECT_FALSE(RunReplay(Options("not a url", Fixture("tiny.jsonl"))).ok());
}

AgentSession Conversation(std::string id, int turns, double think_s, uint64_t prefix_tokens) {
  AgentSession s;
  s.id = std::move(id);
  s.tool_tokens = prefix_tokens;
  std::vector<uint64_t> ids;
  for (int k = 0; k < turns; ++k) {
    ids.push_back(ids.size() + 1);
    ids.push_back(ids.size() + 1);
    AgentRequest r;
    r.t = k;
    r.in = ids.size() * kAgenticBlockTokens;
    r.out = 2;
    r.think_time = k == 0 ? 0 : think_s;
    r.api_time = 0.1;
    r.hash_ids = ids;
    s.requests.push_back(std::move(r));
  }
  return s;
}

TEST(ReplayAgenticTest, ClosedLoopWaitsForTheAnswerPlusThinkTime) {
  auto fake = StartFake(/*chunks=*/2, /*delay_ms=*/20);
  ReplayOptions o = Options(fake->url());
  o.speedup = 2;  // 0.2 s think time -> 0.1 s.
  auto result = RunAgentic({Conversation("c", 3, 0.2, 64)}, o);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->records.size(), 3u);
  for (uint64_t k = 1; k < 3; ++k) {
    const RequestRecord* prev = Find(result->records, "c", k - 1);
    const RequestRecord* cur = Find(result->records, "c", k);
    ASSERT_TRUE(prev && cur);
    EXPECT_TRUE(cur->ok()) << cur->error;
    EXPECT_GE(cur->send_s, prev->send_s + prev->e2e_s + 0.1 - 1e-3) << k;
  }
  // Turn 2 carries both earlier answers verbatim, as assistant messages.
  const std::string body = fake->last_body();
  const std::string answer = R"({"role":"assistant","content":"tok0 tok1 "})";
  const size_t first = body.find(answer);
  ASSERT_NE(first, std::string::npos) << body.substr(0, 300);
  EXPECT_NE(body.find(answer, first + 1), std::string::npos);
  EXPECT_EQ(result->report.mode, "closed-loop");
  EXPECT_EQ(result->report.conversations, 1u);
  EXPECT_EQ(result->report.workers.at("").max_concurrent, 1u);
}

TEST(ReplayAgenticTest, SubagentsRunConcurrentlyWithTheParent) {
  auto fake = StartFake(/*chunks=*/2, /*delay_ms=*/50);  // ~100 ms a request.
  AgentSession parent = Conversation("p", 3, 0.05, 64);
  AgentSession sub = Conversation("p/agent_1", 2, 0.0, 0);
  sub.t = 0.05;
  parent.subagents.push_back(sub);
  auto result = RunAgentic({parent}, Options(fake->url()));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->records.size(), 5u);
  const RequestRecord* p0 = Find(result->records, "p", 0);
  const RequestRecord* p2 = Find(result->records, "p", 2);
  const RequestRecord* s0 = Find(result->records, "p/agent_1", 0);
  const RequestRecord* s1 = Find(result->records, "p/agent_1", 1);
  ASSERT_TRUE(p0 && p2 && s0 && s1);
  // The sub-agent starts at its t, while the parent's first turn is still streaming.
  EXPECT_GE(s0->send_s, 0.05 - 1e-3);
  EXPECT_LT(s0->send_s, p0->send_s + p0->e2e_s);
  EXPECT_LT(s0->send_s, p2->send_s);
  EXPECT_GE(s1->send_s, s0->send_s + s0->e2e_s - 1e-3);
  EXPECT_EQ(result->report.workers.at("").max_concurrent, 2u);
}

TEST(ReplayAgenticTest, RunsNConversationsAtOnceFromADirectory) {
  auto fake = StartFake(/*chunks=*/2, /*delay_ms=*/10);
  ReplayOptions o = Options(fake->url(), Fixture("agentic"));
  o.conversations = 2;
  o.speedup = 10;
  o.max_conversations = 3;  // conv_a, conv_b, then conv_a again under a new namespace.
  o.fleet_capacity_tokens = 64 * 1000;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  const Report& r = result->report;
  EXPECT_EQ(r.conversations, 3u);
  EXPECT_EQ(r.requests, 5u + 2u + 5u);
  EXPECT_EQ(r.ok, r.requests);
  EXPECT_NE(Find(result->records, "conv_a#1/agent_001", 1), nullptr);
  EXPECT_LE(r.workers.at("").max_concurrent, 4u);  // Two conversations, each with a sub-agent.
  ASSERT_TRUE(r.bounds.computed);
  EXPECT_GT(r.bounds.ideal_reuse_ratio, 0.5);
  EXPECT_DOUBLE_EQ(r.bounds.pooled_lru_reuse_ratio, r.bounds.ideal_reuse_ratio);
}

TEST(ReplayAgenticTest, DurationStopsAnEndlessLoop) {
  auto fake = StartFake(/*chunks=*/1);
  ReplayOptions o = Options(fake->url(), Fixture("agentic"));
  o.loop = true;
  o.duration_s = 0.3;
  o.speedup = 1000;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->report.requests, 7u);
  EXPECT_LT(result->report.duration_s, 2.0);
  o.duration_s = 0;
  EXPECT_FALSE(RunReplay(o).ok());  // --loop without a bound.
}

TEST(ReplayAgenticTest, CapsThinkTimes) {
  auto fake = StartFake(/*chunks=*/1);
  ReplayOptions o = Options(fake->url());
  o.max_think_time_s = 0.05;
  auto result = RunAgentic({Conversation("c", 3, /*think_s=*/10000, 0)}, o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.ok, 3u);
  EXPECT_LT(result->report.duration_s, 2.0);
}

TEST(ReplayAgenticTest, SurvivesTheServerClosingPooledConnections) {
  auto fake = StartFake(/*chunks=*/1);
  const uint16_t port = fake->port();
  ReplayOptions o = Options(fake->url());
  std::vector<AgentSession> sessions = {Conversation("c", 2, /*think_s=*/0.5, 0)};
  absl::StatusOr<ReplayResult> result;
  std::thread replay([&] { result = RunAgentic(sessions, o); });
  // Between the turns, replace the worker: the pooled connection dies with the old one.
  ASSERT_TRUE(kvgate::testing::WaitFor([&] { return fake->completed_streams() == 1; }));
  fake->Stop();
  FakeUpstream::Options same;
  same.port = port;
  same.chunks = 1;
  auto replacement = std::make_unique<FakeUpstream>(same);
  replacement->Start();
  replay.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.ok, 2u);
  EXPECT_EQ(replacement->requests(), 1u);
}

TEST(ReplayAgenticTest, ConnectionPerRequestOpensOneConnectionPerTurn) {
  // Kept alive, one conversation's turns share one connection: a TCP balancer would send them
  // all to one replica.
  auto pooled = StartFake(/*chunks=*/1);
  auto kept = RunAgentic({Conversation("c", 3, /*think_s=*/0.01, 0)}, Options(pooled->url()));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->report.ok, 3u);
  EXPECT_EQ(pooled->connections(), 1u);

  auto fresh = StartFake(/*chunks=*/1);
  ReplayOptions o = Options(fresh->url());
  o.connection_per_request = true;
  auto result = RunAgentic({Conversation("c", 3, /*think_s=*/0.01, 0)}, o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.ok, 3u);
  EXPECT_EQ(fresh->connections(), 3u);
  EXPECT_EQ(fresh->last_header("connection"), "close");
}

TEST(ReplayAgenticTest, SamplesTheRequestsAsSent) {
  auto fake = StartFake(/*chunks=*/1);
  ReplayOptions o = Options(fake->url());
  o.headers = {{"x-extra", "1"}};
  o.request_sample_size = 10;  // More than the 4 turns: every request is kept.
  auto all = RunAgentic({Conversation("c", 4, /*think_s=*/0, 0)}, o);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->sampled_requests.size(), 4u);
  bool last_found = false;
  for (const ApiRequest& r : all->sampled_requests) {
    EXPECT_EQ(r.path, "/v1/chat/completions");
    last_found |= r.body == fake->last_body();
    std::map<std::string, std::string> headers(r.headers.begin(), r.headers.end());
    EXPECT_EQ(headers["x-extra"], "1");
    EXPECT_EQ(headers["User-Agent"], "kvgate-replay");
    EXPECT_FALSE(headers.contains("Host"));  // The transport's headers are left out.
    EXPECT_FALSE(headers.contains("Content-Length"));
  }
  EXPECT_TRUE(last_found);

  o.request_sample_size = 2;
  auto some = RunAgentic({Conversation("c", 4, /*think_s=*/0, 0)}, o);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->sampled_requests.size(), 2u);
  o.request_sample_size = 0;
  auto none = RunAgentic({Conversation("c", 4, /*think_s=*/0, 0)}, o);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->sampled_requests.empty());
}

// --- processes ---

std::string ReadAll(const std::string& path) {
  auto content = ReadFileToString(path);
  return content.ok() ? *content : "";
}

using kvgate::testing::ChildProcess;
using Process = ChildProcess;

uint64_t JsonUint(const std::string& json, std::string_view pointer) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc)) return UINT64_MAX;
  uint64_t v = UINT64_MAX;
  if (doc.at_pointer(pointer).get_uint64().get(v)) return UINT64_MAX;
  return v;
}

TEST(ReplayBinaryTest, WritesTheReportAndTable) {
  auto fake = StartFake();
  const std::string report = kvgate::testing::WriteTempFile("report.json", "");
  Process p({BinDir() + "/kvgate-replay", "--target", fake->url(), "--trace", Fixture("tiny.jsonl"),
             "--speedup", "100", "--report", report, "--fleet-capacity-tokens", "4096",
             "--progress", "on"});
  ASSERT_EQ(p.Wait(), 0) << p.Log();
  const std::string json = ReadAll(report);
  EXPECT_EQ(JsonUint(json, "/totals/requests"), 5u) << json;
  EXPECT_EQ(JsonUint(json, "/totals/errors"), 0u);
  EXPECT_EQ(JsonUint(json, "/totals/cached_tokens"), 320u);
  EXPECT_EQ(JsonUint(json, "/bounds/capacity_tokens"), 4096u);
  EXPECT_THAT(p.Log(), HasSubstr("TTFT"));
  EXPECT_THAT(p.Log(), HasSubstr("trace bounds: ideal reuse 43.2%"));

  Process bad({BinDir() + "/kvgate-replay", "--target", fake->url()});
  EXPECT_EQ(bad.Wait(), 2);
  EXPECT_THAT(bad.Log(), HasSubstr("--trace: required"));
}

TEST(ReplayBinaryTest, ThroughTheGatewayCountsPerWorker) {
  const std::string kvgate = BinDir() + "/kvgate";
  if (!std::filesystem::exists(kvgate)) GTEST_SKIP() << "no " << kvgate;
  auto w1 = StartFake();
  auto w2 = StartFake();
  const std::string config = kvgate::testing::WriteTempFile(
      "kvgate.yaml",
      "listen: \"127.0.0.1:0\"\nthreads: 1\nhealth_check: {enabled: false}\n"
      "routing: {policy: round_robin}\nworkers:\n  - url: " +
          w1->url() + "\n  - url: " + w2->url() + "\n");
  Process gateway({kvgate, "--config", config});
  const uint16_t port = gateway.Port();
  ASSERT_NE(port, 0) << gateway.Log();
  ReplayOptions o = Options("http://127.0.0.1:" + std::to_string(port), Fixture("agentic"));
  o.speedup = 20;
  o.body.model = "fake-model";  // The gateway checks the model against its workers'.
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  const Report& r = result->report;
  EXPECT_EQ(r.requests, 7u);
  EXPECT_EQ(r.ok, 7u) << gateway.Log();
  ASSERT_EQ(r.workers.size(), 2u);
  uint64_t sum = 0;
  for (const auto& [name, w] : r.workers) {
    EXPECT_FALSE(name.empty());
    EXPECT_GE(w.max_concurrent, 1u);
    sum += w.requests;
  }
  EXPECT_EQ(sum, 7u);
  EXPECT_EQ(w1->requests() + w2->requests(), 7u);
}

}  // namespace
}  // namespace kvgate::replay
