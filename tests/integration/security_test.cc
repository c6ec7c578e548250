// Who gets in (issue 18): API keys on the data plane (stored hashed; 401 with an OpenAI-style
// body), the admin endpoints off the API listener unless a token is set, Bearer in any case,
// per-key rate limits (429 with Retry-After), the concurrency cap and its queue (503 with
// Retry-After), per-client connection limits with probes still reachable at the global limit,
// /ready that waits for a passed health check, and a worker that answers garbage (502).
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config/loader.h"
#include "router/handlers/auth.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/scripted_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/held_connection.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kKeyA[] = "sk-team-a-0123456789";
constexpr char kKeyB[] = "sk-team-b-9876543210";

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakeUpstream>(FakeUpstream::Options{});
    fake_->Start();
  }
  ~SecurityTest() override {
    if (gateway_) gateway_->Stop();
  }
  static config::Config Base() { return TestGatewayConfig(); }
  // `c` with the fake as its worker, for a config reloaded later (Start adds it to its copy).
  config::Config WithWorker(config::Config c) {
    AddTestWorker(c, fake_->url());
    return c;
  }
  void Start(config::Config c) {
    if (c.workers.empty()) AddTestWorker(c, fake_->url());
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    port_ = gateway_->port();
  }
  HttpResponse Chat(const Headers& headers = {}, size_t bytes = 0) {
    return Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false, bytes), headers);
  }
  static Headers Key(const std::string& key, const std::string& scheme = "Bearer") {
    return {{"Authorization", scheme + " " + key}};
  }
  // The /metrics line that starts with `series` ("" when none): failures print one line.
  std::string Metric(const std::string& series) {
    const std::string text = Fetch(port_, "GET", "/metrics").body;
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return "";
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  }
  void ExpectOpenAiError(const HttpResponse& r, int status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_THAT(r.body, HasSubstr(R"({"error":{"message":)"));
    EXPECT_THAT(r.body, HasSubstr("\"code\":\"" + code + "\"")) << r.body;
  }

  std::unique_ptr<FakeUpstream> fake_;
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

TEST_F(SecurityTest, ApiKeysAreCheckedAgainstTheirHashes) {
  auto c = Base();
  c.auth.api_keys = {{"team-a", router::Sha256Hex(kKeyA), std::nullopt},
                     {"team-b", router::Sha256Hex(kKeyB), std::nullopt}};
  c.auth.key_names_in_metrics = true;
  Start(c);
  const HttpResponse missing = Chat();
  ExpectOpenAiError(missing, 401, "invalid_api_key");
  EXPECT_THAT(missing.body, HasSubstr("didn't provide an API key"));
  EXPECT_EQ(missing.Header("www-authenticate"), "Bearer");
  ExpectOpenAiError(Chat(Key("sk-team-a-012345678")), 401, "invalid_api_key");  // one short
  ExpectOpenAiError(Chat(Key(kKeyA, "Basic")), 401, "invalid_api_key");
  ExpectOpenAiError(Chat(Key(router::Sha256Hex(kKeyA))), 401, "invalid_api_key");  // the hash
  EXPECT_EQ(fake_->requests(), 0u);

  EXPECT_EQ(Chat(Key(kKeyA)).status, 200);
  EXPECT_EQ(Chat(Key(kKeyB, "bearer")).status, 200);  // the scheme is case-insensitive
  EXPECT_EQ(Chat(Key(kKeyB, "BEARER")).status, 200);
  EXPECT_EQ(fake_->requests(), 3u);
  // Probes and the scrape need no key; the models list does.
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/version").status, 200);
  // No key, or another scheme: missing; a wrong key: invalid.
  EXPECT_EQ(Metric(R"(kvgate_auth_failures_total{reason="missing"})"),
            R"(kvgate_auth_failures_total{reason="missing"} 2)");
  EXPECT_EQ(Metric(R"(kvgate_auth_failures_total{reason="invalid"})"),
            R"(kvgate_auth_failures_total{reason="invalid"} 2)");
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models").status, 401);
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models", "", Key(kKeyA)).status, 200);
  // Each key's requests, by name (the key itself appears nowhere).
  EXPECT_EQ(Metric(R"(kvgate_api_key_requests_total{code="200",key="team-a"})"),
            R"(kvgate_api_key_requests_total{code="200",key="team-a"} 2)");
  EXPECT_EQ(Metric(R"(kvgate_api_key_requests_total{code="200",key="team-b"})"),
            R"(kvgate_api_key_requests_total{code="200",key="team-b"} 2)");
}

// Claude Code sends its key as x-api-key: accepted as the key, and /v1/messages' refusals come
// in Anthropic's error shape.
// /metrics answers anyone who reaches it: a key's name (often its owner's) is in
// kvgate_api_key_requests_total only with auth.key_names_in_metrics, else "redacted".
TEST_F(SecurityTest, KeyNamesInMetricsOnlyWhenEnabled) {
  auto c = WithWorker(Base());
  c.auth.api_keys = {{"team-a", router::Sha256Hex(kKeyA), std::nullopt},
                     {"team-b", router::Sha256Hex(kKeyB), std::nullopt}};
  Start(c);
  ASSERT_EQ(Chat(Key(kKeyA)).status, 200);
  ASSERT_EQ(Chat(Key(kKeyB)).status, 200);
  EXPECT_EQ(Metric(R"(kvgate_api_key_requests_total{code="200",key="redacted"})"),
            R"(kvgate_api_key_requests_total{code="200",key="redacted"} 2)");
  const std::string text = Fetch(port_, "GET", "/metrics").body;
  EXPECT_THAT(text, ::testing::Not(HasSubstr("team-a")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("team-b")));
  // Turned on by a reload: named from then on; what was counted redacted stays so.
  c.auth.key_names_in_metrics = true;
  ASSERT_TRUE(gateway_->Reload(c).ok());
  ASSERT_EQ(Chat(Key(kKeyA)).status, 200);
  EXPECT_EQ(Metric(R"(kvgate_api_key_requests_total{code="200",key="team-a"})"),
            R"(kvgate_api_key_requests_total{code="200",key="team-a"} 1)");
  EXPECT_EQ(Metric(R"(kvgate_api_key_requests_total{code="200",key="redacted"})"),
            R"(kvgate_api_key_requests_total{code="200",key="redacted"} 2)");
}

TEST_F(SecurityTest, AnthropicClientsMaySendTheKeyAsXApiKey) {
  auto c = Base();
  c.auth.api_keys = {{"team-a", router::Sha256Hex(kKeyA), std::nullopt}};
  Start(c);
  const std::string body =
      R"({"model":"fake-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]})";
  const HttpResponse missing = Fetch(port_, "POST", "/v1/messages", body);
  EXPECT_EQ(missing.status, 401);
  EXPECT_THAT(missing.body, HasSubstr(R"({"type":"error","error":{"type":"authentication_error")"));
  EXPECT_EQ(Fetch(port_, "POST", "/v1/messages", body, {{"x-api-key", "sk-wrong"}}).status, 401);
  EXPECT_EQ(Fetch(port_, "POST", "/v1/messages", body, {{"x-api-key", kKeyA}}).status, 200);
  EXPECT_EQ(Fetch(port_, "POST", "/v1/messages", body, Key(kKeyA)).status, 200);
  EXPECT_EQ(fake_->requests(), 2u);
}

// A client's key is kvgate's to check, not the workers' to see (issue 27): with API keys on,
// neither Authorization nor x-api-key is forwarded; a configured worker key is sent instead;
// and a request with two credentials of one kind is refused.
TEST_F(SecurityTest, CredentialsStayHome) {
  auto c = Base();
  c.auth.api_keys = {{"team-a", router::Sha256Hex(kKeyA), std::nullopt}};
  Start(c);
  ASSERT_EQ(Chat(Key(kKeyA)).status, 200);
  EXPECT_EQ(fake_->last_header("authorization"), "");
  ASSERT_EQ(Chat({{"x-api-key", kKeyA}}).status, 200);
  EXPECT_EQ(fake_->last_header("x-api-key"), "");
  const uint64_t before = fake_->requests();
  ExpectOpenAiError(Chat({{"Authorization", std::string("Bearer ") + kKeyA},
                          {"Authorization", "Bearer attacker-chosen"}}),
                    400, "duplicate_credentials");
  ExpectOpenAiError(Chat({{"x-api-key", kKeyA}, {"x-api-key", "other"}}), 400,
                    "duplicate_credentials");
  EXPECT_EQ(fake_->requests(), before);
  gateway_->Stop();
  gateway_.reset();

  // The worker key, from a file (a mounted Secret, with its trailing newline).
  auto w = Base();
  w.upstream.api_key_file = WriteSecretFile("worker.key", "worker-secret-1\n");
  const std::string path = WriteTempFile(
      "kvgate.yaml", common::StrCat("upstream: {api_key_file: ", w.upstream.api_key_file, "}\n"));
  auto loaded = config::LoadConfigFromFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->upstream.api_key, "worker-secret-1");
  w.upstream.api_key = loaded->upstream.api_key;
  Start(w);
  ASSERT_EQ(Chat({{"Authorization", "Bearer client-key"}}).status, 200);
  EXPECT_EQ(fake_->last_header("authorization"), "Bearer worker-secret-1");
  // A missing or empty key source is a configuration error, not an open door.
  EXPECT_FALSE(
      config::LoadConfigFromString("upstream: {api_key_file: /nonexistent/key}\n", "t").ok());
  EXPECT_FALSE(
      config::LoadConfigFromString(
          common::StrCat("upstream: {api_key_file: ", WriteSecretFile("empty.key", "\n"), "}\n"),
          "t")
          .ok());
  EXPECT_FALSE(
      config::LoadConfigFromString("upstream: {api_key_env: KVGATE_TEST_UNSET_VARIABLE}\n", "t")
          .ok());
}

TEST_F(SecurityTest, AdminIsOffTheApiListenerUnlessATokenIsSet) {
  Start(Base());
  ExpectOpenAiError(Fetch(port_, "GET", "/admin/workers"), 404, "not_found");
  ExpectOpenAiError(Fetch(port_, "POST", "/admin/explain", ChatBody(false)), 404, "not_found");
  ExpectOpenAiError(
      Fetch(port_, "POST", "/admin/drain", common::StrCat(R"({"worker":")", fake_->url(), "\"}")),
      404, "not_found");
  gateway_->Stop();

  auto c = Base();
  c.admin.token = "s3cret";
  Start(c);
  ExpectOpenAiError(Fetch(port_, "GET", "/admin/workers"), 401, "invalid_admin_token");
  ExpectOpenAiError(Fetch(port_, "GET", "/admin/workers", "", Key("s3cre")), 401,
                    "invalid_admin_token");
  EXPECT_EQ(Fetch(port_, "GET", "/admin/workers", "", Key("s3cret", "bearer")).status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/admin/workers", "", Key("s3cret")).status, 200);
}

// The admin token from admin.token_file (deploy/ mounts a Secret there) guards /admin/* on the
// admin listener; Prometheus and the kubelet still reach /metrics and /health there without
// it. A reload reads the file again: a rotated Secret's token replaces the old one.
TEST_F(SecurityTest, AdminTokenFromAFileGuardsTheAdminEndpointsOnly) {
  const std::string token = WriteSecretFile("admin-token", "file-token-1\n");
  const std::string yaml = WriteTempFile(
      "kvgate.yaml", common::StrCat("admin: {listen: \"127.0.0.1:0\", token_file: ", token, "}\n"));
  auto loaded = config::LoadConfigFromFile(yaml);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto c = WithWorker(Base());
  c.admin = loaded->admin;
  Start(c);
  const uint16_t admin = gateway_->admin_port();
  ASSERT_NE(admin, 0);
  const std::string drain = common::StrCat(R"({"worker":")", fake_->url(), "\"}");
  ExpectOpenAiError(Fetch(admin, "POST", "/admin/drain", drain), 401, "invalid_admin_token");
  ExpectOpenAiError(Fetch(admin, "POST", "/admin/drain", drain, Key("file-token-")), 401,
                    "invalid_admin_token");
  EXPECT_EQ(Fetch(admin, "GET", "/admin/workers", "", Key("file-token-1")).status, 200);
  EXPECT_EQ(Fetch(admin, "GET", "/metrics").status, 200);
  EXPECT_EQ(Fetch(admin, "GET", "/health").status, 200);
  EXPECT_EQ(Chat().status, 200);  // the workers were never drained

  std::ofstream(token, std::ios::trunc) << "file-token-2\n";
  loaded = config::LoadConfigFromFile(yaml);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  c.admin = loaded->admin;
  ASSERT_TRUE(gateway_->Reload(c).ok());
  ExpectOpenAiError(Fetch(admin, "GET", "/admin/workers", "", Key("file-token-1")), 401,
                    "invalid_admin_token");
  EXPECT_EQ(Fetch(admin, "GET", "/admin/workers", "", Key("file-token-2")).status, 200);
}

TEST_F(SecurityTest, PerKeyRateLimitsAnswer429WithRetryAfter) {
  auto c = Base();
  c.limits.rate.requests_per_minute = 2;
  config::RateLimitConfig b_rate;
  b_rate.requests_per_minute = 100;
  b_rate.prompt_tokens_per_minute = 1000;  // about 4000 body bytes
  c.auth.api_keys = {{"team-a", router::Sha256Hex(kKeyA), std::nullopt},
                     {"team-b", router::Sha256Hex(kKeyB), b_rate}};
  Start(c);
  EXPECT_EQ(Chat(Key(kKeyA)).status, 200);
  EXPECT_EQ(Chat(Key(kKeyA)).status, 200);
  const HttpResponse limited = Chat(Key(kKeyA));
  ExpectOpenAiError(limited, 429, "rate_limit_exceeded");
  EXPECT_THAT(limited.body, HasSubstr("team-a on requests per minute"));
  const int retry = std::atoi(limited.Header("retry-after").c_str());
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 30);  // half a request's refill at 2 a minute
  // Another key has its own bucket (and its own limits).
  EXPECT_EQ(Chat(Key(kKeyB), 1500).status, 200);
  EXPECT_EQ(Chat(Key(kKeyB), 1500).status, 200);
  const HttpResponse tokens = Chat(Key(kKeyB), 1500);  // ~375 tokens, ~250 left
  ExpectOpenAiError(tokens, 429, "rate_limit_exceeded");
  EXPECT_THAT(tokens.body, HasSubstr("\"type\":\"tokens\""));
  const HttpResponse huge = Chat(Key(kKeyB), 8000);
  ExpectOpenAiError(huge, 429, "rate_limit_exceeded");
  EXPECT_THAT(huge.body, HasSubstr("more than the limit of 1000 per minute"));
  EXPECT_EQ(fake_->requests(), 4u);
  EXPECT_EQ(Metric(R"(kvgate_rate_limited_total{limit="requests"})"),
            R"(kvgate_rate_limited_total{limit="requests"} 1)");
}

TEST_F(SecurityTest, WithoutKeysTheClientAddressIsRateLimited) {
  auto c = Base();
  c.limits.rate.requests_per_minute = 1;
  Start(c);
  EXPECT_EQ(Chat().status, 200);
  ExpectOpenAiError(Chat(), 429, "rate_limit_exceeded");
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);  // probes are not limited
}

TEST_F(SecurityTest, ConcurrencyCapQueuesThenRefusesWith503) {
  auto c = Base();
  c.threads = 2;  // the place may pass between gateway threads (TSan runs this)
  c.limits.max_concurrent_requests = 1;
  c.limits.queue_size = 1;
  c.limits.queue_timeout_ms = 60'000;
  Start(c);
  StreamingRequest running(port_, "/v1/chat/completions", ChatBody(true),
                           {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "1"}});
  ASSERT_TRUE(running.ReadHeader());
  // The second waits in the queue; the third finds it full.
  HttpResponse queued;
  std::thread waiter([&] { queued = Chat(); });
  ASSERT_TRUE(
      WaitFor([&] { return Metric("kvgate_admission_queued") == "kvgate_admission_queued 1"; }));
  const HttpResponse full = Chat();
  ExpectOpenAiError(full, 503, "overloaded");
  EXPECT_EQ(full.Header("retry-after"), "1");
  EXPECT_EQ(fake_->requests(), 1u);
  // The running stream ends: its place goes to the queued request.
  fake_->ReleaseChunk();
  EXPECT_THAT(running.ReadAll(), HasSubstr("[DONE]"));
  waiter.join();
  EXPECT_EQ(queued.status, 200) << queued.body;
  EXPECT_EQ(fake_->requests(), 2u);
  // The place is given back when the exchange ends, just after its response went out.
  EXPECT_TRUE(
      WaitFor([&] { return Metric("kvgate_admission_running") == "kvgate_admission_running 0"; }));
}

TEST_F(SecurityTest, AQueuedRequestGivesUpAtTheQueueTimeout) {
  auto c = Base();
  c.limits.max_concurrent_requests = 1;
  c.limits.queue_size = 4;
  c.limits.queue_timeout_ms = 100;
  Start(c);
  StreamingRequest running(port_, "/v1/chat/completions", ChatBody(true),
                           {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "1"}});
  ASSERT_TRUE(running.ReadHeader());
  const HttpResponse r = Chat();
  ExpectOpenAiError(r, 503, "overloaded");
  EXPECT_THAT(r.body, HasSubstr("no place within 100 ms"));
  EXPECT_EQ(Metric(R"(kvgate_admission_rejected_total{reason="queue_timeout"})"),
            R"(kvgate_admission_rejected_total{reason="queue_timeout"} 1)");
  fake_->ReleaseChunk();
  EXPECT_THAT(running.ReadAll(), HasSubstr("[DONE]"));
  EXPECT_EQ(Chat().status, 200);  // the place came back
}

TEST_F(SecurityTest, AQueuedClientThatLeavesGivesUpItsPlace) {
  auto c = Base();
  c.limits.max_concurrent_requests = 1;
  c.limits.queue_size = 1;
  c.limits.queue_timeout_ms = 60'000;
  Start(c);
  StreamingRequest running(port_, "/v1/chat/completions", ChatBody(true),
                           {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "1"}});
  ASSERT_TRUE(running.ReadHeader());
  {
    StreamingRequest leaving(port_, "/v1/chat/completions", ChatBody(true));
    ASSERT_TRUE(
        WaitFor([&] { return Metric("kvgate_admission_queued") == "kvgate_admission_queued 1"; }));
    leaving.Close();
  }
  // Its place in the queue is free again long before the queue timeout: the next one waits.
  ASSERT_TRUE(
      WaitFor([&] { return Metric("kvgate_admission_queued") == "kvgate_admission_queued 0"; }));
  HttpResponse queued;
  std::thread waiter([&] { queued = Chat(); });
  ASSERT_TRUE(
      WaitFor([&] { return Metric("kvgate_admission_queued") == "kvgate_admission_queued 1"; }));
  fake_->ReleaseChunk();
  EXPECT_THAT(running.ReadAll(), HasSubstr("[DONE]"));
  waiter.join();
  EXPECT_EQ(queued.status, 200) << queued.body;
  EXPECT_EQ(fake_->requests(), 2u);  // the one that left never reached the worker
  EXPECT_TRUE(
      WaitFor([&] { return Metric("kvgate_admission_running") == "kvgate_admission_running 0"; }));
}

TEST_F(SecurityTest, OneClientCannotTakeEveryConnection) {
  auto c = Base();
  c.limits.max_connections_per_client = 3;
  Start(c);
  std::vector<std::unique_ptr<HeldConnection>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<HeldConnection>(port_));
  // Once the three are accepted, a fourth is closed at once...
  ASSERT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/health").status == 0; }));
  HeldConnection fourth(port_);
  EXPECT_TRUE(fourth.ClosedByPeer());
  held.pop_back();  // ...until one of the three leaves
  EXPECT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/health").status == 200; }));
}

// Every place has a request in progress, so no idle connection can make room: the probes'
// reserve takes the next connections, one probe each, and idle ones cannot keep it.
TEST_F(SecurityTest, AFullGatewayStillAnswersProbes) {
  auto c = Base();
  c.limits.max_connections = 4;
  c.limits.health_reserve = 2;
  c.limits.max_connections_per_client = 0;
  Start(c);
  std::vector<std::unique_ptr<StreamingRequest>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<StreamingRequest>(
        port_, "/v1/chat/completions", ChatBody(true),
        Headers{{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "1"}}));
    ASSERT_TRUE(busy.back()->ReadHeader());
  }
  ASSERT_TRUE(
      WaitFor([&] { return Metric("kvgate_http_connections") == "kvgate_http_connections 5"; }));
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  const HttpResponse ready = Fetch(port_, "GET", "/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.Header("connection"), "close");  // a reserve place serves one probe
  const HttpResponse r = Chat();
  ExpectOpenAiError(r, 503, "too_many_connections");
  EXPECT_EQ(r.Header("connection"), "close");
  EXPECT_EQ(fake_->requests(), 4u);
  // Idle connections cannot keep the reserve: a newcomer takes the place of the one idle
  // longest (before, these six took both places and every probe after them was refused).
  std::vector<std::unique_ptr<HeldConnection>> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(std::make_unique<HeldConnection>(port_));
  EXPECT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/health").status == 200; }));
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  EXPECT_TRUE(idle.front()->ClosedByPeer(5'000));
  // Past the reserve, with no connection idle (probes whose heads are still coming): closed.
  std::vector<std::unique_ptr<HeldConnection>> probing;
  for (int i = 0; i < 2; ++i) {
    probing.push_back(std::make_unique<HeldConnection>(port_));
    ASSERT_TRUE(probing.back()->Send("GET /health HTTP/1.1\r\n"));
  }
  EXPECT_TRUE(WaitFor([&] { return HeldConnection(port_).ClosedByPeer(); }));
  EXPECT_EQ(fake_->requests(), 4u);
  fake_->ReleaseChunk();
  for (auto& b : busy) EXPECT_THAT(b->ReadAll(), HasSubstr("[DONE]"));
}

TEST_F(SecurityTest, ReadyWaitsForAPassedHealthCheck) {
  auto c = Base();
  c.health_check.enabled = true;
  c.health_check.interval_ms = 60'000;  // only the first round counts here
  const DeadPort dead_port;
  config::WorkerConfig dead;
  dead.url = *common::ParseHttpUrl(common::StrCat("http://127.0.0.1:", dead_port.port()));
  c.workers.push_back(dead);
  Start(c);
  // Its only worker never answered: not ready, and nothing is routed there.
  ExpectOpenAiError(Fetch(port_, "GET", "/ready"), 503, "no_healthy_worker");
  EXPECT_EQ(Chat().status, 503);
  gateway_->Stop();

  auto up = Base();
  up.health_check.enabled = true;
  up.health_check.interval_ms = 60'000;
  Start(up);  // the fake answers /health: ready as soon as Start returns
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 200);
  EXPECT_EQ(Chat().status, 200);
}

TEST_F(SecurityTest, AWorkerThatAnswersGarbageIsA502) {
  // Another protocol's greeting (a line that is no status line), and bytes that never make a
  // line at all (a TLS alert) before the worker closes: neither is retried, both are 502s.
  for (const std::string reply : {std::string("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"),
                                  std::string("\x15\x03\x03\x00\x02\x02\x46", 7)}) {
    ScriptedUpstream garbage([reply](const std::string&) {
      return Script{{reply}, 0ms, /*close_after=*/true};
    });
    auto c = Base();
    AddTestWorker(c, garbage.url());
    Start(c);
    const HttpResponse r = Chat();
    ExpectOpenAiError(r, 502, "bad_upstream_response");
    EXPECT_THAT(r.body, ::testing::AnyOf(HasSubstr("malformed status line"),
                                         HasSubstr("not an HTTP response")));
    int posts = 0;  // (the /v1/models refresh asks too)
    for (const auto& req : garbage.requests()) posts += req.starts_with("POST ");
    EXPECT_EQ(posts, 1);  // not retried: it would say the same again
    gateway_->Stop();
    gateway_.reset();
  }
}

}  // namespace
}  // namespace kvgate::testing
