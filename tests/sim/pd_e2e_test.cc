// Prefill/decode disaggregation end to end (issue 15), every piece real: simulated prefill and
// decode workers (in this process) speaking each engine protocol, and a kvgate process with a
// `pd` section in front of them. For every protocol the client's streamed answer comes from
// the decode worker, which pulled the prompt's KV from the prefill worker (real bytes through
// transfer/) instead of recomputing it, and the prefill worker freed what it held. Then the
// conditional skip, and the faults: prefill down (clean error, or a mixed worker), a decode
// that fails (another decode worker pulls the held KV), a client that leaves mid-way.
#include <regex>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "tests/fakes/test_client.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using testing::Fetch;
using ::testing::HasSubstr;
using testing::WaitFor;

// One sample of an unlabelled or exactly labelled series; -1 when absent.
int64_t Metric(uint16_t port, const std::string& series) {
  const std::string m = Fetch(port, "GET", "/metrics").body;
  const size_t at = m.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(m.substr(at + series.size() + 2));
}

int Field(const std::string& body, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(body, m, std::regex("\"" + name + "\":([0-9]+)"))) return -1;
  return std::stoi(m[1]);
}

// ~300 prompt tokens (4 bytes a token): over the default skip threshold of 256.
std::string Chat(bool stream, const std::string& content, int max_tokens = 6) {
  return common::StrCat(R"({"model":"sim-model","messages":[{"role":"user","content":")", content,
                        R"("}],"max_tokens":)", max_tokens, R"(,"stream":)",
                        stream ? R"(true,"stream_options":{"include_usage":true})" : "false", "}");
}

struct SimSpec {
  PdRole role = PdRole::kMixed;
  FaultOptions faults;
  bool dead = false;  // no simulator: the worker's port refuses connections
};

class PdE2eTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Starts one simulated worker per spec and kvgate with `pd_yaml` in front of them.
  void Start(PdProtocol protocol, const std::vector<SimSpec>& specs, const std::string& pd_yaml,
             const std::string& policy = "round_robin") {
    const std::string gateway = testing::TestBinary("kvgate");
    if (gateway.empty()) GTEST_SKIP() << "kvgate not built";
    std::string workers;
    for (const SimSpec& spec : specs) {
      if (spec.dead) {
        common::StrAppend(&workers, "  - {url: \"http://127.0.0.1:", testing::FreePort(),
                          "\", role: prefill, models: [sim-model]}\n");
        sims_.push_back(nullptr);
        continue;
      }
      SimOptions o;
      o.base_port = 0;
      o.time_scale = 0.01;
      o.profile.num_gpu_blocks = 2048;
      o.role = spec.role;
      o.pd_protocol = protocol;
      o.pd_abort_timeout_s = 300;  // 3 real seconds
      o.faults = spec.faults;
      o.log_level = "warn";
      auto sim = std::make_unique<SimProcess>(o);
      ASSERT_TRUE(sim->Start().ok());
      sim->StartThread();
      const uint16_t port = sim->ports()[0];
      const char* role = spec.role == PdRole::kPrefill  ? "prefill"
                         : spec.role == PdRole::kDecode ? "decode"
                                                        : "mixed";
      common::StrAppend(&workers, "  - {url: \"http://127.0.0.1:", port, "\", role: ", role,
                        ", models: [sim-model]");
      if (!sim->bootstrap_ports().empty()) {
        const uint16_t boot = sim->bootstrap_ports()[0];
        // The simulator's NIXL side channel is its bootstrap port (kvgate checks that the
        // prefill's kv_transfer_params name it).
        common::StrAppend(&workers, ", bootstrap_port: ", boot, ", zmq_address: \"127.0.0.1:", boot,
                          "\", kv_transfer_ports: [", boot, "]");
      }
      workers += "}\n";
      sims_.push_back(std::move(sim));
    }
    const std::string yaml = common::StrCat(
        "listen: 127.0.0.1:0\nthreads: 1\nhealth_check: {enabled: false}\n",
        "retry: {backoff_base_ms: 1, backoff_max_ms: 2}\n", "routing: {policy: ", policy, "}\n",
        "pd: ", pd_yaml, "\nworkers:\n", workers);
    gateway_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{gateway, "--config", testing::WriteTempFile("kvgate.yaml", yaml)});
    port_ = gateway_->Port();
    ASSERT_NE(port_, 0) << gateway_->Log();
  }
  void TearDown() override {
    for (auto& s : sims_) {
      if (s) s->Stop();
    }
  }
  uint16_t SimPort(size_t i) const { return sims_[i]->ports()[0]; }

  // The prefill sim `p` held the prompt's KV until a decode pulled it, `pulls` times.
  void ExpectPrefillReleased(size_t p, int pulls) {
    EXPECT_TRUE(WaitFor([&] { return Metric(SimPort(p), "kvgate_sim_pd_held_blocks") == 0; }));
    EXPECT_EQ(Metric(SimPort(p), "kvgate_sim_pd_released_total{reason=\"pulled\"}"), pulls);
    EXPECT_EQ(Metric(SimPort(p), "kvgate_sim_pd_released_total{reason=\"timeout\"}"), 0);
  }

  std::vector<std::unique_ptr<SimProcess>> sims_;
  std::unique_ptr<testing::ChildProcess> gateway_;
  uint16_t port_ = 0;
};

PdProtocol ProtocolOf(const std::string& name) {
  if (name == "vllm-mooncake") return PdProtocol::kVllmMooncake;
  if (name == "vllm-p2p-nccl") return PdProtocol::kVllmP2pNccl;
  if (name == "sglang-bootstrap") return PdProtocol::kSglangBootstrap;
  return PdProtocol::kVllmNixl;
}

TEST_P(PdE2eTest, StreamedAnswerComesFromADecodeThatPulledThePrefillKv) {
  const std::string protocol = GetParam();
  Start(ProtocolOf(protocol), {{PdRole::kPrefill, {}}, {PdRole::kDecode, {}}},
        common::StrCat("{protocol: ", protocol, ", skip_prefill_below_tokens: 0}"));
  testing::StreamingRequest req(port_, "/v1/chat/completions", Chat(true, std::string(1200, 'p')));
  ASSERT_TRUE(req.ReadHeader()) << gateway_->Log();
  EXPECT_EQ(req.status(), 200);
  EXPECT_EQ(req.Header("x-kvgate-worker"), common::StrCat("http://127.0.0.1:", SimPort(1)));
  const std::string sse = req.ReadAll();
  EXPECT_THAT(sse, HasSubstr("data: [DONE]"));
  EXPECT_EQ(std::count(sse.begin(), sse.end(), '\n') >= 12, true) << sse;
  const int prompt = Field(sse, "prompt_tokens");
  ASSERT_GT(prompt, 256) << sse;
  EXPECT_EQ(Field(sse, "cached_tokens"), prompt - 1) << sse;  // pulled, not recomputed
  EXPECT_EQ(Field(sse, "completion_tokens"), 6);
  EXPECT_EQ(Metric(SimPort(1), "kvgate_sim_pd_transfer_bytes_total"), prompt * 16);
  EXPECT_EQ(Metric(SimPort(1), "kvgate_sim_pd_requests_total{stage=\"decode\"}"), 1);
  EXPECT_EQ(Metric(SimPort(0), "kvgate_sim_pd_requests_total{stage=\"prefill\"}"), 1);
  ExpectPrefillReleased(0, 1);
  EXPECT_EQ(Metric(port_, common::StrCat("kvgate_pd_decisions_total{decision=\"disaggregated\","
                                         "protocol=\"",
                                         protocol, "\"}")),
            1);
  EXPECT_TRUE(WaitFor([&] {
    return Metric(port_, common::StrCat("kvgate_worker_in_flight_requests{worker=\"http://"
                                        "127.0.0.1:",
                                        SimPort(0), "\"}")) == 0;
  }));
}

// Anthropic /v1/messages (as Claude Code streams it, thinking on): vLLM's protocols carry it like
// chat, the decode pulling the prefill's KV; SGLang's Anthropic layer drops the bootstrap
// fields, so there it needs a mixed worker (none here: a clear 503).
TEST_P(PdE2eTest, MessagesThroughTheSameProtocol) {
  const std::string protocol = GetParam();
  Start(ProtocolOf(protocol), {{PdRole::kPrefill, {}}, {PdRole::kDecode, {}}},
        common::StrCat("{protocol: ", protocol, ", skip_prefill_below_tokens: 0}"));
  const std::string body = common::StrCat(
      R"({"model":"sim-model","max_tokens":2048,"stream":true,)",
      R"("thinking":{"type":"enabled","budget_tokens":1024},"system":[{"type":"text","text":)",
      R"("x-anthropic-billing-header: cc_version=2.1.1;"},{"type":"text","text":"Be brief."}],)",
      R"("messages":[{"role":"user","content":[{"type":"text","text":")", std::string(1200, 'm'),
      R"(","cache_control":{"type":"ephemeral"}}]}]})");
  testing::StreamingRequest req(port_, "/v1/messages", body);
  ASSERT_TRUE(req.ReadHeader()) << gateway_->Log();
  if (protocol == "sglang-bootstrap") {
    EXPECT_EQ(req.status(), 503);
    EXPECT_THAT(req.ReadAll(), HasSubstr("do not carry the messages API"));
    return;
  }
  ASSERT_EQ(req.status(), 200) << gateway_->Log();
  EXPECT_EQ(req.Header("x-kvgate-worker"), common::StrCat("http://127.0.0.1:", SimPort(1)));
  const std::string sse = req.ReadAll();
  EXPECT_THAT(sse, HasSubstr("event: message_stop"));
  const int read = Field(sse, "cache_read_input_tokens");
  EXPECT_GT(read, 256) << sse;  // pulled from the prefill worker, not recomputed
  EXPECT_EQ(Metric(SimPort(0), "kvgate_sim_pd_requests_total{stage=\"prefill\"}"), 1);
  EXPECT_EQ(Metric(SimPort(1), "kvgate_sim_pd_requests_total{stage=\"decode\"}"), 1);
  ExpectPrefillReleased(0, 1);
  EXPECT_EQ(Metric(port_, common::StrCat("kvgate_pd_decisions_total{decision=\"disaggregated\",",
                                         "protocol=\"", protocol, "\"}")),
            1);
}

// The next turn extends the prompt the decode worker now holds: vLLM protocols skip prefill.
TEST_P(PdE2eTest, NextTurnOnTheDecodeWorkerSkipsPrefill) {
  const std::string protocol = GetParam();
  if (protocol == "sglang-bootstrap") GTEST_SKIP() << "an SGLang decode server needs a prefill";
  Start(ProtocolOf(protocol), {{PdRole::kPrefill, {}}, {PdRole::kDecode, {}}},
        common::StrCat("{protocol: ", protocol, ", skip_prefill_below_tokens: 256}"), "kvaware");
  const std::string turn1 = std::string(2000, 't');
  auto r1 = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, turn1));
  ASSERT_EQ(r1.status, 200) << r1.body << gateway_->Log();
  auto r2 =
      Fetch(port_, "POST", "/v1/chat/completions", Chat(false, turn1 + std::string(200, 'u')));
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(Metric(SimPort(0), "kvgate_sim_pd_requests_total{stage=\"prefill\"}"), 1);
  EXPECT_EQ(Metric(port_, common::StrCat("kvgate_pd_decisions_total{decision=\"skipped_cached\","
                                         "protocol=\"",
                                         protocol, "\"}")),
            1);
  // The decode worker recomputed only the new tokens of turn 2.
  EXPECT_GE(Field(r2.body, "cached_tokens"), Field(r1.body, "prompt_tokens") - 16) << r2.body;
}

INSTANTIATE_TEST_SUITE_P(Protocols, PdE2eTest,
                         ::testing::Values("vllm-nixl", "vllm-mooncake", "vllm-p2p-nccl",
                                           "sglang-bootstrap"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

using PdFaultTest = PdE2eTest;

TEST_F(PdFaultTest, PrefillDownIsACleanErrorOrServedByAMixedWorker) {
  // (A simulator stopped here would not do: kvgate inherited its listening socket.)
  Start(PdProtocol::kVllmNixl, {{PdRole::kPrefill, {}, /*dead=*/true}, {PdRole::kDecode, {}}},
        "{protocol: vllm-nixl, skip_prefill_below_tokens: 0}");
  const uint16_t decode_port = SimPort(1);
  auto r = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, std::string(1200, 'x')));
  EXPECT_EQ(r.status, 502) << r.body << gateway_->Log();
  EXPECT_THAT(r.body, HasSubstr(R"("code":"prefill_failed")"));
  EXPECT_THAT(r.body, HasSubstr(R"("type":"upstream_error")"));
  EXPECT_EQ(Metric(decode_port, "kvgate_sim_pd_requests_total{stage=\"decode\"}"), 0);
  EXPECT_EQ(Metric(port_, "kvgate_pd_failures_total{stage=\"prefill\"}"), 1);
}

TEST_F(PdFaultTest, PrefillFailureFallsBackToAMixedWorker) {
  FaultOptions broken;
  broken.error_rate = 1;
  Start(PdProtocol::kVllmNixl,
        {{PdRole::kPrefill, broken}, {PdRole::kDecode, {}}, {PdRole::kMixed, {}}},
        "{protocol: vllm-nixl, skip_prefill_below_tokens: 0, fallback_to_mixed: true}");
  auto r = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, std::string(1200, 'y')));
  EXPECT_EQ(r.status, 200) << r.body << gateway_->Log();
  EXPECT_EQ(r.Header("x-kvgate-worker"), common::StrCat("http://127.0.0.1:", SimPort(2)));
  EXPECT_EQ(Field(r.body, "cached_tokens"), 0);  // recomputed on the mixed worker
  EXPECT_EQ(Metric(port_,
                   "kvgate_pd_decisions_total{decision=\"fallback_mixed\","
                   "protocol=\"vllm-nixl\"}"),
            1);
}

// A decode worker that answers 500: the request moves to the other decode worker, which pulls
// the KV the prefill worker holds, so nothing waits for the abort timeout.
TEST_F(PdFaultTest, FailedDecodeMovesAndTheHeldKvIsPulled) {
  FaultOptions broken;
  broken.error_rate = 1;
  Start(PdProtocol::kVllmNixl,
        {{PdRole::kPrefill, {}}, {PdRole::kDecode, broken}, {PdRole::kDecode, {}}},
        "{protocol: vllm-nixl, skip_prefill_below_tokens: 0}");
  for (char c : {'a', 'b'}) {  // round robin: one of them meets the broken decode first
    auto r = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, std::string(1200, c)));
    ASSERT_EQ(r.status, 200) << r.body << gateway_->Log();
    EXPECT_EQ(r.Header("x-kvgate-worker"), common::StrCat("http://127.0.0.1:", SimPort(2)));
    EXPECT_EQ(Field(r.body, "cached_tokens"), Field(r.body, "prompt_tokens") - 1) << r.body;
  }
  ExpectPrefillReleased(0, 2);
  EXPECT_GE(Metric(port_, "kvgate_upstream_retries_total{reason=\"status_5xx\"}"), 1);
}

// The client leaves while both SGLang stages wait on each other: kvgate ends both, and no
// worker keeps a request of kvgate's in flight.
TEST_F(PdFaultTest, ClientDisconnectEndsBothStages) {
  FaultOptions hang;
  hang.hang_rate = 1;
  Start(PdProtocol::kSglangBootstrap, {{PdRole::kPrefill, {}}, {PdRole::kDecode, hang}},
        "{protocol: sglang-bootstrap}");
  {
    testing::StreamingRequest req(port_, "/v1/chat/completions",
                                  Chat(true, std::string(1200, 'z')));
    ASSERT_TRUE(WaitFor([&] {
      return Metric(SimPort(0), "kvgate_sim_pd_requests_total{stage=\"prefill\"}") == 1;
    }));
    req.Close();
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(WaitFor([&] {
      return Metric(port_, common::StrCat("kvgate_worker_in_flight_requests{worker=\"http://"
                                          "127.0.0.1:",
                                          SimPort(i), "\"}")) == 0;
    })) << gateway_->Log();
  }
  // kvgate still serves: the next request is answered (here a 503 from the hanging decode's
  // peer is not expected; the prefill side is free).
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
}

}  // namespace
}  // namespace kvgate::sim
