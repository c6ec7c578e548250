// Prefill/decode disaggregation through a real gateway against scripted prefill and decode
// workers: the exact JSON and X-Request-Id each protocol sends to each stage, field by field
// (chat and completions, streamed and not, logprobs), the conditional skip, and the failure
// paths (prefill 5xx -> a clean error or a mixed worker; prefill 4xx relayed; decode failure
// -> another decode worker, and the prefill worker's held blocks released; client disconnect
// -> both stages end and the in-flight counts return to zero); prefill params that name another
// host, port or engine fail the request before any decode worker is contacted (issue 27).
#include <atomic>
#include <regex>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/pd/pd_bodies.h"
#include "router/server/gateway.h"
#include "tests/fakes/scripted_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr std::string_view kParams =
    R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[7,8,9],)"
    R"("remote_engine_id":"eng-1","remote_host":"10.1.2.3","remote_port":5600,"tp_size":1})";

std::string JsonResponse(const std::string& body, int status = 200) {
  return common::StrCat("HTTP/1.1 ", status, status == 200 ? " OK" : " Error",
                        "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                        "\r\n\r\n", body);
}

// What a vLLM prefill answers: one token, usage, and the KV it holds for a remote decode.
std::string PrefillAnswer(std::string_view params = kParams) {
  return JsonResponse(
      common::StrCat(R"({"id":"cmpl-p","object":"chat.completion","choices":[{"index":0,"message":)"
                     R"({"role":"assistant","content":"x"},"finish_reason":"length"}],)"
                     R"("usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41,)"
                     R"("prompt_tokens_details":{"cached_tokens":16}},"kv_transfer_params":)",
                     params, "}"));
}

const std::string kDecodeJson =
    R"({"id":"cmpl-d","object":"chat.completion","choices":[{"index":0,"message":)"
    R"({"role":"assistant","content":"hello world"},"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,)"
    R"("prompt_tokens_details":{"cached_tokens":40}}})";

std::string DecodeStream() {
  const std::string events =
      "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\" world\"}}]}\n\n"
      "data: [DONE]\n\n";
  return common::StrCat(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
      absl::StrFormat("%x", events.size()), "\r\n", events, "\r\n0\r\n\r\n");
}

std::string BodyOfRequest(const std::string& request) {
  const size_t end = request.find("\r\n\r\n");
  return end == std::string::npos ? "" : request.substr(end + 4);
}

std::string HeaderOfRequest(const std::string& request, const std::string& name) {
  std::smatch m;
  if (std::regex_search(request, m,
                        std::regex("\\r\\n" + name + ": ([^\\r]*)\\r\\n", std::regex::icase))) {
    return m[1];
  }
  return "";
}

// The test's own requests (not kvgate's model refreshes): every POST, or under /v1/ only.
std::vector<std::string> Posts(const ScriptedUpstream& u, std::string_view prefix = "POST ") {
  std::vector<std::string> out;
  for (auto& r : u.requests()) {
    if (r.starts_with(prefix)) out.push_back(r);
  }
  return out;
}
std::vector<std::string> Completions(const ScriptedUpstream& u) { return Posts(u, "POST /v1/"); }

struct Fleet {
  std::unique_ptr<ScriptedUpstream> prefill, decode, decode2, mixed, prefill2;
};

class PdDispatchTest : public ::testing::Test {
 protected:
  void Start(const std::string& protocol, const std::string& policy = "round_robin",
             bool with_mixed = false, bool two_decoders = false, uint32_t skip_below = 0,
             bool fallback = true) {
    config::Config c;
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.threads = 1;
    c.health_check.enabled = false;
    c.routing.engine_metrics_interval_ms = 0;
    c.routing.policy = policy;
    c.admin.token = kAdminToken;
    c.retry.backoff_base_ms = 1;
    c.retry.backoff_max_ms = 1;
    c.pd.protocol = protocol;
    c.pd.skip_prefill_below_tokens = skip_below;
    c.pd.fallback_to_mixed = fallback;
    c.pd.release_timeout_ms = 5000;
    auto add = [&](ScriptedUpstream& u, config::WorkerRole role) {
      config::WorkerConfig w;
      w.url = *common::ParseHttpUrl(u.url());
      w.models = {"fake-model"};
      w.role = role;
      w.bootstrap_port = 8998;
      if (role == config::WorkerRole::kPrefill) {
        w.zmq_address = "10.0.0.1:21001";
        w.kv_transfer_hosts = transfer_hosts_;  // kParams's NIXL side channel
      }
      if (role == config::WorkerRole::kDecode) w.zmq_address = "10.0.0.2:22001";
      c.workers.push_back(w);
    };
    add(*fleet_.prefill, config::WorkerRole::kPrefill);
    add(*fleet_.decode, config::WorkerRole::kDecode);
    if (two_decoders) add(*fleet_.decode2, config::WorkerRole::kDecode);
    if (with_mixed) add(*fleet_.mixed, config::WorkerRole::kMixed);
    if (fleet_.prefill2) add(*fleet_.prefill2, config::WorkerRole::kPrefill);
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    port_ = gateway_->port();
  }
  ~PdDispatchTest() override {
    if (gateway_) gateway_->Stop();
  }

  double Metric(const std::string& series) {
    const HttpResponse m = Fetch(port_, "GET", "/metrics");
    const std::string key = "\n" + series + " ";
    const size_t at = ("\n" + m.body).find(key);
    if (at == std::string::npos) return -1;
    return std::stod(m.body.substr(at + key.size() - 1));
  }

  std::vector<std::string> transfer_hosts_ = {"10.1.2.3"};
  // Read by the workers' threads: declared before fleet_, so destroyed after it.
  std::atomic<bool> release_{false};
  std::atomic<int> calls_{0};
  Fleet fleet_;
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

TEST_F(PdDispatchTest, NixlSendsPrefillThenDecodeWithItsParamsAndOneRequestId) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{DecodeStream()}}; });
  Start("vllm-nixl");
  const std::string body =
      R"({"model":"fake-model","messages":[{"role":"user","content":"hi there"}],)"
      R"("stream":true,"stream_options":{"include_usage":true},"max_tokens":64,)"
      R"("min_tokens":2,"logprobs":true,"top_logprobs":2})";
  const std::string traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  StreamingRequest req(port_, "/v1/chat/completions", body,
                       {{"X-Request-Id", "client-id-1"},
                        {"traceparent", traceparent},
                        {"tracestate", "vendor=abc"}});
  ASSERT_TRUE(req.ReadHeader());
  EXPECT_EQ(req.status(), 200);
  const std::string out = req.ReadAll();
  EXPECT_THAT(out, HasSubstr("hello"));
  EXPECT_THAT(out, HasSubstr("[DONE]"));

  const auto p = Completions(*fleet_.prefill);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(BodyOfRequest(p[0]),
            R"({"model":"fake-model","messages":[{"role":"user","content":"hi there"}],)"
            R"("stream":false,"max_tokens":1,"logprobs":true,"top_logprobs":2,)"
            R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
            R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,)"
            R"("remote_port":null}})");
  EXPECT_EQ(BodyOfRequest(d[0]), std::string(body.substr(0, body.size() - 1)) +
                                     ",\"kv_transfer_params\":" + std::string(kParams) + "}");
  const std::string id = HeaderOfRequest(p[0], "x-request-id");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(HeaderOfRequest(d[0], "x-request-id"), id);
  // The client's trace context reaches both stages as it is (OpenTelemetry propagation).
  for (const auto* stage : {&p[0], &d[0]}) {
    EXPECT_EQ(HeaderOfRequest(*stage, "traceparent"), traceparent);
    EXPECT_EQ(HeaderOfRequest(*stage, "tracestate"), "vendor=abc");
  }
  EXPECT_EQ(Metric(R"(kvgate_pd_decisions_total{decision="disaggregated",protocol="vllm-nixl"})"),
            1);
}

// vLLM's Anthropic layer carries kv_transfer_params: /v1/messages is disaggregated like chat,
// its prefill body in Messages' own shape (an enabled thinking budget must stay below
// max_tokens: dropped). Responses and count_tokens are served whole on the decode worker,
// counted and explained as such.
TEST_F(PdDispatchTest, MessagesAreDisaggregatedResponsesServedWhole) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl");
  const std::string messages = R"({"model":"fake-model","max_tokens":2048,"stream":true,)"
                               R"("thinking":{"type":"enabled","budget_tokens":1024},)"
                               R"("messages":[{"role":"user","content":"hi"}]})";
  const std::string responses = R"({"model":"fake-model","input":"hi","store":false})";
  auto explain = AdminFetch(port_, "POST", "/admin/explain", responses,
                            {{"x-kvgate-endpoint", "/v1/responses"}});
  EXPECT_THAT(explain.body, HasSubstr(R"("decision":"whole_api")"));
  EXPECT_THAT(explain.body, HasSubstr("do not carry the responses API"));
  explain = AdminFetch(port_, "POST", "/admin/explain", messages,
                       {{"x-kvgate-endpoint", "/v1/messages"}});
  EXPECT_THAT(explain.body, HasSubstr(R"("decision":"disaggregated")"));
  auto m = Fetch(port_, "POST", "/v1/messages", messages);
  EXPECT_EQ(m.status, 200) << m.body;
  auto r = Fetch(port_, "POST", "/v1/responses", responses);
  EXPECT_EQ(r.status, 200) << r.body;
  const auto p = Completions(*fleet_.prefill);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(BodyOfRequest(p[0]),
            R"({"model":"fake-model","max_tokens":1,"stream":false,)"
            R"("messages":[{"role":"user","content":"hi"}],"kv_transfer_params":)" +
                std::string(router::pd::kNixlPrefillParams) + "}");
  EXPECT_EQ(BodyOfRequest(d[0]), messages.substr(0, messages.size() - 1) +
                                     ",\"kv_transfer_params\":" + std::string(kParams) + "}");
  EXPECT_EQ(BodyOfRequest(d[1]), responses);  // the client's body, untouched
  EXPECT_EQ(Metric(R"(kvgate_pd_decisions_total{decision="disaggregated",protocol="vllm-nixl"})"),
            1);
  EXPECT_EQ(Metric(R"(kvgate_pd_decisions_total{decision="whole_api",protocol="vllm-nixl"})"), 1);
}

// SGLang's decode servers cannot serve alone: a mixed worker does, else a clear 503.
TEST_F(PdDispatchTest, AgentApisUnderSglangNeedAMixedWorker) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("sglang-bootstrap");
  auto m =
      Fetch(port_, "POST", "/v1/messages",
            R"({"model":"fake-model","max_tokens":8,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(m.status, 503) << m.body;
  EXPECT_THAT(m.body, HasSubstr(R"({"type":"error","error":{"type":"overloaded_error")"));
  EXPECT_THAT(m.body, HasSubstr("cannot serve alone"));
  EXPECT_TRUE(Completions(*fleet_.decode).empty());
}

TEST_F(PdDispatchTest, NixlCompletionsNotStreamedWithMaxCompletionTokens) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl");
  const std::string body =
      R"({"model":"fake-model","prompt":"once upon","max_completion_tokens":9,)"
      R"("prompt_logprobs":1,"min_completion_tokens":3})";
  const HttpResponse r = Fetch(port_, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, kDecodeJson);
  const auto p = Completions(*fleet_.prefill);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_THAT(p[0], ::testing::StartsWith("POST /v1/completions "));
  EXPECT_EQ(BodyOfRequest(p[0]),
            R"({"model":"fake-model","prompt":"once upon","max_completion_tokens":1,)"
            R"("prompt_logprobs":1,"stream":false,"max_tokens":1,"kv_transfer_params":)"
            R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
            R"("remote_block_ids":null,"remote_host":null,"remote_port":null}})");
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(BodyOfRequest(d[0]), body.substr(0, body.size() - 1) +
                                     ",\"kv_transfer_params\":" + std::string(kParams) + "}");
}

TEST_F(PdDispatchTest, MooncakeSendsBothAtOnceWithTheBootstrapAddress) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer("null")}}; });
  // As a real decode, it answers once the prefill is under way (its KV is coming).
  fleet_.decode = std::make_unique<ScriptedUpstream>([this](const std::string& request) {
    if (request.starts_with("POST")) {
      WaitFor([this] { return !Completions(*fleet_.prefill).empty(); }, 5s);
    }
    return Script{{JsonResponse(kDecodeJson)}};
  });
  Start("vllm-mooncake");
  const std::string body = R"({"model":"fake-model","prompt":"abc","max_tokens":5})";
  const HttpResponse r = Fetch(port_, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, kDecodeJson);
  const auto p = Completions(*fleet_.prefill);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(BodyOfRequest(p[0]),
            R"({"model":"fake-model","prompt":"abc","max_tokens":1,"stream":false,)"
            R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}})");
  EXPECT_EQ(BodyOfRequest(d[0]),
            R"({"model":"fake-model","prompt":"abc","max_tokens":5,"kv_transfer_params":)"
            R"({"do_remote_decode":false,"do_remote_prefill":true,)"
            R"("bootstrap_server_host":"127.0.0.1","bootstrap_server_port":8998}})");
  EXPECT_EQ(HeaderOfRequest(p[0], "x-request-id"), HeaderOfRequest(d[0], "x-request-id"));
}

TEST_F(PdDispatchTest, P2pNcclNamesBothPeersInTheRequestId) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer("null")}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-p2p-nccl");
  const std::string body = R"({"model":"fake-model","prompt":"abc","stream":false})";
  const HttpResponse r = Fetch(port_, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 200);
  const auto p = Completions(*fleet_.prefill);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(d.size(), 1u);
  const std::string id = HeaderOfRequest(p[0], "x-request-id");
  EXPECT_TRUE(std::regex_match(
      id, std::regex("___prefill_addr_10\\.0\\.0\\.1:21001___decode_addr_10\\.0\\.0\\.2:22001_"
                     "[0-9a-f]{32}")))
      << id;
  EXPECT_EQ(HeaderOfRequest(d[0], "x-request-id"), id);
  EXPECT_EQ(BodyOfRequest(p[0]),
            R"({"model":"fake-model","prompt":"abc","stream":false,"max_tokens":1})");
  EXPECT_EQ(BodyOfRequest(d[0]), body);  // the client's own body
}

// A client's own kv_transfer_params would send a decode worker to a host and port of the
// client's choosing (issue 27): they reach no worker, on a skipped prefill as on a
// disaggregated request, and the request is otherwise served as sent.
TEST_F(PdDispatchTest, ClientTransferParamsReachNoWorker) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer("null")}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-p2p-nccl", "round_robin", false, false, /*skip_below=*/1000);
  const std::string hostile =
      R"({"do_remote_prefill":true,"remote_engine_id":"x","remote_host":"203.0.113.9",)"
      R"("remote_port":5600,"remote_block_ids":[1,2]})";
  // Short: prefill skipped, the body goes straight to decode.
  const std::string short_body =
      common::StrCat(R"({"model":"fake-model","prompt":"abc","kv_transfer_params":)", hostile, "}");
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", short_body).status, 200);
  // Long: disaggregated (prefill's own answer carried no params).
  const std::string long_body =
      common::StrCat(R"({"model":"fake-model","prompt":")", std::string(20000, 'a'),
                     R"(","kv_transfer_params":)", hostile, R"(,"bootstrap_host":"203.0.113.9"})");
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", long_body).status, 200);
  const auto p = Completions(*fleet_.prefill);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(d.size(), 2u);
  for (const auto& r : {p[0], d[0], d[1]}) {
    EXPECT_THAT(BodyOfRequest(r), Not(HasSubstr("203.0.113.9")));
    EXPECT_THAT(BodyOfRequest(r), Not(HasSubstr("kv_transfer_params")));
  }
  EXPECT_EQ(BodyOfRequest(d[0]), R"({"model":"fake-model","prompt":"abc"})");
  EXPECT_THAT(BodyOfRequest(d[1]), HasSubstr(std::string(20000, 'a')));
  EXPECT_EQ(Metric("kvgate_pd_client_transfer_fields_dropped_total"), 2);
}

TEST_F(PdDispatchTest, SglangSendsTheSameBodyWithARoomToBoth) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(R"({"prefill":true})")}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>([this](const std::string& request) {
    if (request.starts_with("POST")) {
      WaitFor([this] { return !Completions(*fleet_.prefill).empty(); }, 5s);
    }
    return Script{{DecodeStream()}};
  });
  Start("sglang-bootstrap");
  const std::string body =
      R"({"model":"fake-model","messages":[{"role":"user","content":"q"}],"stream":true})";
  StreamingRequest req(port_, "/v1/chat/completions", body);
  ASSERT_TRUE(req.ReadHeader());
  EXPECT_EQ(req.status(), 200);
  EXPECT_THAT(req.ReadAll(), HasSubstr("world"));
  ASSERT_TRUE(WaitFor([&] { return Completions(*fleet_.prefill).size() == 1; }));
  const auto p = Completions(*fleet_.prefill);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(BodyOfRequest(p[0]), BodyOfRequest(d[0]));
  std::smatch m;
  const std::string sent = BodyOfRequest(d[0]);
  ASSERT_TRUE(std::regex_match(
      sent, m,
      std::regex(R"(\{"model":"fake-model","messages":\[\{"role":"user","content":"q"\}\],)"
                 R"("stream":true,"bootstrap_host":"127\.0\.0\.1","bootstrap_port":8998,)"
                 R"("bootstrap_room":([0-9]+)\})")))
      << sent;
  EXPECT_LT(std::stoull(m[1]), uint64_t{1} << 63);
}

TEST_F(PdDispatchTest, SglangMergesPrefillsPromptLogprobsIntoDecodesAnswer) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>([](const std::string&) {
    return Script{{JsonResponse(
        R"({"text":"","meta_info":{"input_token_logprobs":[[null,1,null],[-2.5,2,null]]}})")}};
  });
  fleet_.decode = std::make_unique<ScriptedUpstream>([this](const std::string& request) {
    if (request.starts_with("POST")) {
      WaitFor([this] { return !Posts(*fleet_.prefill).empty(); }, 5s);
    }
    return Script{{JsonResponse(
        R"({"text":"ok","meta_info":{"input_token_logprobs":[[-0.5,3,null]],"e2e_latency":1}})")}};
  });
  Start("sglang-bootstrap");
  const HttpResponse r =
      Fetch(port_, "POST", "/generate",
            R"({"model":"fake-model","text":"a b c","return_logprob":true,"logprob_start_len":0})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body,
            R"({"text":"ok","meta_info":{"input_token_logprobs":[[null,1,null],[-2.5,2,null],)"
            R"([-0.5,3,null]],"e2e_latency":1}})");
  const auto d = Posts(*fleet_.decode);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].find("POST /generate "), 0u);
  EXPECT_THAT(d[0], HasSubstr(R"("bootstrap_room":)"));
}

TEST_F(PdDispatchTest, PrefillFailureIsACleanErrorWithoutAMixedWorker) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>([](const std::string&) {
    return Script{{JsonResponse(R"({"error":{"message":"boom"}})", 500)}};
  });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl");
  const HttpResponse r =
      Fetch(port_, "POST", "/v1/completions", R"({"model":"fake-model","prompt":"abc"})");
  EXPECT_EQ(r.status, 502);
  EXPECT_THAT(r.body, HasSubstr(R"("code":"prefill_failed")"));
  EXPECT_THAT(r.body, HasSubstr("answered 500"));
  EXPECT_TRUE(Completions(*fleet_.decode).empty());
  EXPECT_EQ(Metric(R"(kvgate_pd_failures_total{stage="prefill"})"), 1);
}

// Issue 33: after a failed prefill, the identical retry was routed skipped_cached ("decode worker
// holds all but 1 of the prompt's tokens"): the decode decision had been learned although the
// decode worker never received the KV. A failed prefill teaches the index nothing.
TEST_F(PdDispatchTest, FailedPrefillLeavesTheDecodeWorkerWithoutThePrompt) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>([](const std::string&) {
    return Script{{JsonResponse(R"({"error":{"message":"boom"}})", 500)}};
  });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl", "kvaware", false, false, /*skip_below=*/256);
  const std::string body = ChatBody(false, 8000);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", body).status, 502);
  const HttpResponse explain = AdminFetch(port_, "POST", "/admin/explain", body);
  ASSERT_EQ(explain.status, 200) << explain.body;
  EXPECT_THAT(explain.body, Not(HasSubstr("skipped_cached"))) << explain.body;
  EXPECT_THAT(explain.body, HasSubstr(R"("prefill_skipped":false)")) << explain.body;
  EXPECT_TRUE(Completions(*fleet_.decode).empty());
}

TEST_F(PdDispatchTest, PrefillFailureFallsBackToAMixedWorker) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>([](const std::string&) {
    return Script{{"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"}};
  });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  fleet_.mixed = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(R"({"served":"mixed"})")}}; });
  Start("vllm-nixl", "round_robin", /*with_mixed=*/true);
  const std::string body = R"({"model":"fake-model","prompt":"abc"})";
  const HttpResponse r = Fetch(port_, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"served":"mixed"})");
  const auto m = Completions(*fleet_.mixed);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(BodyOfRequest(m[0]), body);
  EXPECT_EQ(Metric(R"(kvgate_pd_decisions_total{decision="fallback_mixed",protocol="vllm-nixl"})"),
            1);
}

TEST_F(PdDispatchTest, PrefillRefusalReachesTheClientAsIs) {
  const std::string refusal =
      R"({"object":"error","message":"prompt too long","type":"BadRequestError","code":400})";
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [refusal](const std::string&) { return Script{{JsonResponse(refusal, 400)}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl");
  const HttpResponse r =
      Fetch(port_, "POST", "/v1/completions", R"({"model":"fake-model","prompt":"abc"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, refusal);
  EXPECT_TRUE(Completions(*fleet_.decode).empty());
}

TEST_F(PdDispatchTest, FailedDecodeIsRetriedOnAnotherDecodeWorker) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>([](const std::string&) {
    return Script{{"HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n"}};
  });
  fleet_.decode2 = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl", "round_robin", false, /*two_decoders=*/true);
  const HttpResponse r = Fetch(port_, "POST", "/v1/completions",
                               R"({"model":"fake-model","prompt":"abc","max_tokens":3})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, kDecodeJson);
  // Whichever decode worker came first, the one that served got prefill's params.
  const auto d2 = Completions(*fleet_.decode2);
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_THAT(BodyOfRequest(d2[0]), HasSubstr(R"("remote_engine_id":"eng-1")"));
  EXPECT_EQ(Metric(R"(kvgate_pd_held_block_releases_total{result="ok"})"), -1);
}

// The finding: params returned by a prefill reached the decode unchecked, so a prefill (or
// whoever answers in its place) could send the decode worker to any host and port.
TEST_F(PdDispatchTest, PrefillParamsNamingAnotherPeerFailBeforeDecode) {
  static constexpr std::string_view kAnswers[] = {
      R"({"remote_engine_id":"eng-1","remote_host":"203.0.113.9","remote_port":5600})",
      R"({"remote_engine_id":"eng-1","remote_host":"10.1.2.3","remote_port":8001})",
      R"({"remote_host":"10.1.2.3","remote_port":5600,"remote_host":"203.0.113.9"})",
      R"({"remote_engine_id":"eng-1","remote_host":"10.1.2.3","remote_port":5600})", kParams};
  fleet_.prefill = std::make_unique<ScriptedUpstream>([this](const std::string& request) {
    if (!request.starts_with("POST")) return Script{{PrefillAnswer()}};
    return Script{{PrefillAnswer(kAnswers[std::min<int>(calls_++, 4)])}};
  });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl");
  const std::string body = R"({"model":"fake-model","prompt":"abc"})";
  for (int i = 0; i < 3; ++i) {
    const HttpResponse r = Fetch(port_, "POST", "/v1/completions", body);
    EXPECT_EQ(r.status, 502) << i << r.body;
    EXPECT_THAT(r.body, HasSubstr(R"("type":"upstream_error")"));
    EXPECT_THAT(r.body, HasSubstr(R"("code":"pd_transfer_params_mismatch")"));
    EXPECT_TRUE(Completions(*fleet_.decode).empty()) << i;
  }
  EXPECT_EQ(Metric(R"(kvgate_pd_transfer_params_rejected_total{field="remote_host"})"), 2);
  EXPECT_EQ(Metric(R"(kvgate_pd_transfer_params_rejected_total{field="remote_port"})"), 1);
  // The prefill worker's own params still go through, verbatim.
  for (int i = 0; i < 2; ++i) {
    const HttpResponse r = Fetch(port_, "POST", "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, kDecodeJson);
  }
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_THAT(BodyOfRequest(d[1]), HasSubstr(std::string(kParams)));
}

// Without kv_transfer_hosts the worker's URL host is the one it may name.
TEST_F(PdDispatchTest, PrefillParamsDefaultToTheUrlHost) {
  transfer_hosts_.clear();
  static constexpr std::string_view kAnswers[] = {
      R"({"remote_engine_id":"eng-1","remote_host":"127.0.0.1","remote_port":5600})", kParams};
  fleet_.prefill = std::make_unique<ScriptedUpstream>([this](const std::string& request) {
    if (!request.starts_with("POST")) return Script{{PrefillAnswer()}};
    return Script{{PrefillAnswer(kAnswers[std::min<int>(calls_++, 1)])}};
  });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl");
  const std::string body = R"({"model":"fake-model","prompt":"abc"})";
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", body).status, 200);
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", body).status, 502);  // names 10.1.2.3
  EXPECT_EQ(Completions(*fleet_.decode).size(), 1u);
}

TEST_F(PdDispatchTest, DecodeThatNeverAnswersReleasesThePrefillWorkersBlocks) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  // The first decode request dies with the connection; the release request is answered.
  fleet_.decode = std::make_unique<ScriptedUpstream>([this](const std::string& request) {
    if (request.starts_with("POST") && calls_++ == 0) {
      return Script{{"HTTP/1.1 5"}, 0ms, /*close_after=*/true};
    }
    return Script{{JsonResponse(kDecodeJson)}};
  });
  Start("vllm-nixl");
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions",
                               R"({"model":"fake-model","messages":[],"stream":true})");
  EXPECT_EQ(r.status, 503) << r.body;
  ASSERT_TRUE(WaitFor([&] { return Completions(*fleet_.decode).size() == 2; }));
  const std::string release = BodyOfRequest(Completions(*fleet_.decode)[1]);
  EXPECT_EQ(release, R"({"model":"fake-model","messages":[],"stream":false,"max_tokens":1,)"
                     R"("kv_transfer_params":)" +
                         std::string(kParams) + "}");
  EXPECT_TRUE(
      WaitFor([&] { return Metric(R"(kvgate_pd_held_block_releases_total{result="ok"})") == 1; }));
  EXPECT_EQ(Metric(R"(kvgate_pd_failures_total{stage="decode"})"), 1);
}

TEST_F(PdDispatchTest, ClientDisconnectEndsBothConcurrentStages) {
  auto hold = [this](const std::string&) {
    WaitFor([this] { return release_.load(); }, 20s);
    return Script{{JsonResponse(kDecodeJson)}};
  };
  fleet_.prefill = std::make_unique<ScriptedUpstream>(hold);
  fleet_.decode = std::make_unique<ScriptedUpstream>(hold);
  Start("sglang-bootstrap");
  {
    StreamingRequest req(port_, "/v1/chat/completions",
                         R"({"model":"fake-model","messages":[],"stream":true})");
    ASSERT_TRUE(WaitFor([&] {
      return Completions(*fleet_.prefill).size() == 1 && Completions(*fleet_.decode).size() == 1;
    }));
    EXPECT_EQ(Metric("kvgate_worker_in_flight_requests{worker=\"" + fleet_.prefill->url() + "\"}"),
              1);
    req.Close();
  }
  EXPECT_TRUE(WaitFor([&] {
    return Metric("kvgate_worker_in_flight_requests{worker=\"" + fleet_.prefill->url() + "\"}") ==
               0 &&
           Metric("kvgate_worker_in_flight_requests{worker=\"" + fleet_.decode->url() + "\"}") == 0;
  }));
  release_ = true;
}

TEST_F(PdDispatchTest, DecodeWorkerHoldingThePromptSkipsPrefill) {
  fleet_.prefill = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{PrefillAnswer()}}; });
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl", "kvaware", false, false, /*skip_below=*/256);
  const std::string body = ChatBody(false, 8000);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", body).status, 200);
  ASSERT_EQ(Completions(*fleet_.prefill).size(), 1u);
  // The same prompt again: the decode worker pulled it the first time.
  const HttpResponse explain = AdminFetch(port_, "POST", "/admin/explain", body);
  EXPECT_THAT(explain.body, HasSubstr(R"("decision":"skipped_cached","prefill_skipped":true)"));
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", body).status, 200);
  EXPECT_EQ(Completions(*fleet_.prefill).size(), 1u);
  const auto d = Completions(*fleet_.decode);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(BodyOfRequest(d[1]), body);
  EXPECT_THAT(BodyOfRequest(d[0]), HasSubstr("kv_transfer_params"));
  EXPECT_EQ(Metric(R"(kvgate_pd_decisions_total{decision="skipped_cached",protocol="vllm-nixl"})"),
            1);
}

// A gateway stopped with both concurrent stages in flight: its io_context destroys the two
// suspended coroutines in no set order, and the prefill's, when last, still unlinks its socket
// (it once wrote into the request's freed frame; ASan catches that here).
TEST_F(PdDispatchTest, StoppingWithBothStagesInFlightFreesThemInAnyOrder) {
  auto hold = [this](const std::string& request) {
    if (request.starts_with("POST")) WaitFor([this] { return release_.load(); }, 20s);
    return Script{{JsonResponse(kDecodeJson)}};
  };
  fleet_.prefill = std::make_unique<ScriptedUpstream>(hold);
  fleet_.decode = std::make_unique<ScriptedUpstream>(hold);
  Start("sglang-bootstrap");
  // The streamed relay and the logprobs merge spawn the prefill stage each their own way.
  StreamingRequest relay(port_, "/v1/chat/completions",
                         R"({"model":"fake-model","messages":[],"stream":true})");
  StreamingRequest merge(port_, "/generate",
                         R"({"model":"fake-model","text":"a","return_logprob":true})");
  ASSERT_TRUE(WaitFor(
      [&] { return Posts(*fleet_.prefill).size() == 2 && Posts(*fleet_.decode).size() == 2; }));
  gateway_->Stop();
  gateway_.reset();
  release_ = true;
}

// peers.md §8.1: load counted only when decode streams back sends a burst of long prompts to
// one prefill worker. Here each prefill's load is reserved at dispatch.
TEST_F(PdDispatchTest, BurstOfLongPromptsSpreadsOverThePrefillPool) {
  auto hold = [this](const std::string& request) {
    if (request.starts_with("POST")) WaitFor([this] { return release_.load(); }, 20s);
    return Script{{PrefillAnswer()}};
  };
  fleet_.prefill = std::make_unique<ScriptedUpstream>(hold);
  fleet_.prefill2 = std::make_unique<ScriptedUpstream>(hold);
  fleet_.decode = std::make_unique<ScriptedUpstream>(
      [](const std::string&) { return Script{{JsonResponse(kDecodeJson)}}; });
  Start("vllm-nixl", "kvaware");
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      // Distinct long prompts: no cache affinity, only load decides.
      const std::string body = common::StrCat(
          R"({"model":"fake-model","messages":[{"role":"user","content":")",
          std::string(1, static_cast<char>('A' + i)), std::string(20000, 'x'), R"("}]})");
      if (Fetch(port_, "POST", "/v1/chat/completions", body).status == 200) ++ok;
    });
  }
  EXPECT_TRUE(WaitFor([&] {
    return Completions(*fleet_.prefill).size() + Completions(*fleet_.prefill2).size() == 4;
  }));
  EXPECT_EQ(Completions(*fleet_.prefill).size(), 2u);
  EXPECT_EQ(Completions(*fleet_.prefill2).size(), 2u);
  release_ = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 4);
}

}  // namespace
}  // namespace kvgate::testing
