// The gateway in-process against fake workers on loopback: proxying, streaming, failures,
// limits, health, metrics, reload and drain.
#include "router/server/gateway.h"

#include <unistd.h>

#include <boost/asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;

TEST_F(GatewayTest, NonStreamedChatIsProxied) {
  FakeUpstream& f = StartWithOneFake();
  const HttpResponse r = Chat(false);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_THAT(r.body, HasSubstr(R"("object":"chat.completion")"));
  EXPECT_EQ(r.Header("x-kvgate-worker"), f.url());
  EXPECT_EQ(r.Header("x-request-id").size(), 32u);
  EXPECT_EQ(f.last_request_id(), r.Header("x-request-id"));
  EXPECT_EQ(f.last_body(), ChatBody(false));  // forwarded unchanged
  EXPECT_EQ(f.requests(), 1u);
}

TEST_F(GatewayTest, RequestIdFromClientPropagatesBothWays) {
  FakeUpstream& f = StartWithOneFake();
  const HttpResponse r = Chat(false, {{"X-Request-Id", "client-id-1"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("x-request-id"), "client-id-1");
  EXPECT_EQ(f.last_request_id(), "client-id-1");
}

TEST_F(GatewayTest, HopByHopHeadersNotForwarded) {
  FakeUpstream& f = StartWithOneFake();
  ASSERT_EQ(Chat(false, {{"Connection", "keep-alive, x-secret"}, {"x-custom", "v"}}).status, 200);
  EXPECT_EQ(f.last_header("x-custom"), "v");
  EXPECT_NE(f.last_header("host"), "127.0.0.1");  // rewritten to the worker's authority
}

TEST_F(GatewayTest, StreamedBytesAreIdentical) {
  StartWithOneFake();
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-chunks", "40"}, {"x-fake-chunk-bytes", "300"}});
  ASSERT_TRUE(s.ReadHeader());
  EXPECT_EQ(s.status(), 200);
  EXPECT_EQ(s.Header("content-type"), "text/event-stream");
  const std::string id = s.Header("x-request-id");
  const std::string body = s.ReadAll();
  EXPECT_TRUE(s.done());
  EXPECT_EQ(body, FakeUpstream::ExpectedStream(40, 300, "fake-model", id));
}

TEST_F(GatewayTest, EachEventArrivesBeforeTheNextIsSent) {
  // Lockstep: the fake sends event i+1 only after we saw event i through the gateway. A
  // gateway that buffered would make ReadSome time out.
  FakeUpstream& f = StartWithOneFake();
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "5"}});
  ASSERT_TRUE(s.ReadHeader());
  for (int i = 0; i < 5; ++i) {
    f.ReleaseChunk();
    const std::string piece = s.ReadSome(5s);
    EXPECT_THAT(piece, HasSubstr(common::StrCat("tok", i, " "))) << "event " << i;
  }
  EXPECT_THAT(s.ReadAll(), HasSubstr("data: [DONE]"));
}

TEST_F(GatewayTest, ClientDisconnectMidStreamCancelsUpstream) {
  FakeUpstream& f = StartWithOneFake();
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "100"}});
  ASSERT_TRUE(s.ReadHeader());
  f.ReleaseChunk();
  EXPECT_THAT(s.ReadSome(5s), HasSubstr("tok0"));
  s.Close();
  EXPECT_TRUE(WaitFor([&] { return f.cancelled() == 1; }, 5s));
  EXPECT_EQ(f.completed_streams(), 0u);
}

TEST_F(GatewayTest, ClientDisconnectWhileWaitingCancelsUpstream) {
  FakeUpstream& f = StartWithOneFake();
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true), {{"x-fake-mode", "hang"}});
  ASSERT_TRUE(WaitFor([&] { return f.active() == 1; }));
  s.Close();
  EXPECT_TRUE(WaitFor([&] { return f.cancelled() == 1; }, 5s));
}

TEST_F(GatewayTest, DeadWorkerIsSkippedAndRequestRetried) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  const DeadPort dead;
  AddTestWorker(c, common::StrCat("http://127.0.0.1:", dead.port()));
  AddTestWorker(c, f.url());
  c.circuit_breaker.consecutive_failures = 1000;  // keep retrying through the dead one
  StartGateway(c);
  for (int i = 0; i < 10; ++i) {
    const HttpResponse r = Chat(false);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Header("x-kvgate-worker"), f.url());
  }
  EXPECT_EQ(f.requests(), 10u);
  // Round robin spends one turn per try, so every request first met the dead worker.
  EXPECT_THAT(gateway_->MetricsText(),
              HasSubstr(R"(kvgate_upstream_retries_total{reason="connect_error"} 10)"));
}

TEST_F(GatewayTest, CircuitBreakerEjectsDeadWorker) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  const DeadPort dead_port;  // held: the gateway's own port 0 cannot land on it
  const std::string dead = common::StrCat("http://127.0.0.1:", dead_port.port());
  AddTestWorker(c, dead);
  AddTestWorker(c, f.url());
  c.circuit_breaker.consecutive_failures = 2;
  c.circuit_breaker.open_ms = 60000;
  StartGateway(c);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Chat(false).status, 200);
  // Two connection failures opened the breaker; later requests never tried the dead worker.
  EXPECT_THAT(
      gateway_->MetricsText(),
      HasSubstr(common::StrCat("kvgate_upstream_connect_errors_total{worker=\"", dead, "\"} 2")));
}

TEST_F(GatewayTest, AllWorkersDeadGives503Json) {
  auto c = BaseConfig();
  const DeadPort dead_a, dead_b;
  AddTestWorker(c, common::StrCat("http://127.0.0.1:", dead_a.port()));
  AddTestWorker(c, common::StrCat("http://127.0.0.1:", dead_b.port()));
  StartGateway(c);
  ExpectOpenAiError(Chat(true), 503);
}

TEST_F(GatewayTest, NoWorkersGives503AndNotReady) {
  StartGateway(BaseConfig());
  ExpectOpenAiError(Chat(false), 503);
  ExpectOpenAiError(Fetch(port_, "GET", "/ready"), 503);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  // The build, answered whatever the fleet's state.
  const HttpResponse v = Fetch(port_, "GET", "/version");
  EXPECT_EQ(v.status, 200);
  EXPECT_THAT(v.body, HasSubstr(R"("version":")"));
  EXPECT_THAT(v.body, HasSubstr(R"("commit":")"));
}

TEST_F(GatewayTest, ServerErrorBeforeFirstByteIsRetriedElsewhere) {
  FakeUpstream& bad = AddFake();
  bad.set_force_status(503);
  FakeUpstream& good = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, bad.url());
  AddTestWorker(c, good.url());
  StartGateway(c);
  for (int i = 0; i < 6; ++i) {
    const HttpResponse r = Chat(false);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("x-kvgate-worker"), good.url());
  }
  EXPECT_GE(bad.requests(), 3u);
  EXPECT_EQ(good.requests(), 6u);
  EXPECT_THAT(gateway_->MetricsText(),
              HasSubstr(R"(kvgate_upstream_retries_total{reason="status_5xx"})"));
}

TEST_F(GatewayTest, LastAttemptServerErrorIsRelayed) {
  FakeUpstream& f = StartWithOneFake();
  f.set_force_status(500);
  const HttpResponse r = Chat(false);
  EXPECT_EQ(r.status, 500);
  EXPECT_THAT(r.body, HasSubstr("fake failure"));  // the worker's own error body
}

TEST_F(GatewayTest, UpstreamTimeoutGives504) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.upstream.response_timeout_ms = 200;
  StartGateway(c);
  ExpectOpenAiError(Chat(false, {{"x-fake-mode", "hang"}}), 504);
  EXPECT_EQ(f.requests(), 1u);  // a timed-out generation is not retried
}

TEST_F(GatewayTest, UpstreamClosingMidStreamClosesClient) {
  StartWithOneFake();
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "close-mid"}, {"x-fake-chunks", "10"}});
  ASSERT_TRUE(s.ReadHeader());
  const std::string body = s.ReadAll(5s);
  EXPECT_THAT(body, HasSubstr("tok4"));
  EXPECT_FALSE(s.done());  // no final chunk: the client sees a broken stream, not a clean end
}

TEST_F(GatewayTest, MalformedJsonGives400) {
  FakeUpstream& f = StartWithOneFake();
  for (const char* body : {"{not json", R"({"model":"m","messages":[}")", "[]", ""}) {
    ExpectOpenAiError(Fetch(port_, "POST", "/v1/chat/completions", body), 400);
  }
  ExpectOpenAiError(Fetch(port_, "POST", "/v1/completions", "{\"prompt\": tru}"), 400);
  EXPECT_EQ(f.requests(), 0u);
}

TEST_F(GatewayTest, BodyOverLimitGives413) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.limits.max_body_bytes = 4096;
  StartGateway(c);
  ExpectOpenAiError(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false, 8192)), 413);
  EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false, 4000)).status, 200);
  EXPECT_EQ(f.requests(), 1u);
}

TEST_F(GatewayTest, ChunkedBodyOverLimitGives413) {
  StartWithOneFake();
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket sock(ioc);
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), port_});
  std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string chunk(1 << 20, 'a');
  req += "100000\r\n" + chunk + "\r\n";
  boost::system::error_code ec;
  for (int i = 0; i < 40 && !ec; ++i) {
    boost::asio::write(sock, boost::asio::buffer(i == 0 ? req : "100000\r\n" + chunk + "\r\n"), ec);
  }
  std::string response(4096, '\0');
  const size_t n = sock.read_some(boost::asio::buffer(response), ec);
  EXPECT_THAT(response.substr(0, n), StartsWith("HTTP/1.1 413"));
}

TEST_F(GatewayTest, OversizedHeaderGives431) {
  StartWithOneFake();
  ExpectOpenAiError(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false),
                          {{"x-big", std::string(20000, 'h')}}),
                    431);
}

TEST_F(GatewayTest, UnknownRoutesAndMethods) {
  StartWithOneFake();
  ExpectOpenAiError(Fetch(port_, "GET", "/nope"), 404);
  ExpectOpenAiError(Fetch(port_, "GET", "/v1/chat/completions"), 405);
  ExpectOpenAiError(Fetch(port_, "POST", "/metrics", "{}"), 405);
}

TEST_F(GatewayTest, UnknownModelGives404) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.workers[0].models = {"fake-model"};
  StartGateway(c);
  ExpectOpenAiError(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false, 0, "other-model")),
                    404);
  EXPECT_EQ(Chat(false).status, 200);
}

TEST_F(GatewayTest, OtherV1PostsPassThrough) {
  FakeUpstream& f = StartWithOneFake();
  const HttpResponse r =
      Fetch(port_, "POST", "/v1/embeddings", R"({"input":"x","model":"fake-model"})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(f.last_body(), R"({"input":"x","model":"fake-model"})");
}

TEST_F(GatewayTest, PipelinedRequestsAnsweredInOrder) {
  StartWithOneFake();
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket sock(ioc);
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), port_});
  const std::string body = ChatBody(false);
  std::string two;
  for (const char* id : {"first", "second"}) {
    two += common::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: ", id,
                          "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
  }
  boost::asio::write(sock, boost::asio::buffer(two));
  std::string got;
  boost::system::error_code ec;
  char buf[8192];
  while (got.find("cmpl-second") == std::string::npos && !ec) {
    got.append(buf, sock.read_some(boost::asio::buffer(buf), ec));
  }
  const size_t a = got.find("cmpl-first");
  const size_t b = got.find("cmpl-second");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_LT(a, b);
}

TEST_F(GatewayTest, SlowReadingClientDoesNotStallOthers) {
  StartWithOneFake(FakeUpstream::Options{.threads = 2});
  // 32 MiB of events that this client never reads: the gateway's writes to it block.
  StreamingRequest slow(port_, "/v1/chat/completions", ChatBody(true),
                        {{"x-fake-chunks", "4096"}, {"x-fake-chunk-bytes", "8192"}});
  ASSERT_TRUE(slow.ReadHeader());
  for (int i = 0; i < 5; ++i) {
    const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false), {}, 5s);
    EXPECT_EQ(r.status, 200) << r.error;
    StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true), {{"x-fake-chunks", "3"}});
    ASSERT_TRUE(s.ReadHeader(5s));
    EXPECT_THAT(s.ReadAll(5s), HasSubstr("[DONE]"));
  }
}

TEST_F(GatewayTest, ModelsAreTheUnionOfWorkers) {
  FakeUpstream& a = AddFake(FakeUpstream::Options{.model = "model-a"});
  FakeUpstream& b = AddFake(FakeUpstream::Options{.model = "model-b"});
  auto c = BaseConfig();
  AddTestWorker(c, a.url());
  AddTestWorker(c, b.url());
  c.workers[0].models = {"configured-a"};
  c.models_refresh_interval_ms = 100;
  StartGateway(c);
  EXPECT_TRUE(WaitFor([&] {
    const std::string body = Fetch(port_, "GET", "/v1/models").body;
    return body.find("\"model-a\"") != std::string::npos &&
           body.find("\"model-b\"") != std::string::npos &&
           body.find("\"configured-a\"") != std::string::npos;
  }));
  // Routing respects discovered models.
  const HttpResponse r =
      Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false, 0, "model-b"));
  EXPECT_EQ(r.Header("x-kvgate-worker"), b.url());
}

// Issue 33: the OpenAI SDK's models.retrieve (GET /v1/models/{id}) was a 405.
TEST_F(GatewayTest, ModelsRetrieveAnswersForAServedModel) {
  FakeUpstream& f = AddFake(FakeUpstream::Options{.model = "org/model-a"});
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.models_refresh_interval_ms = 100;
  StartGateway(c);
  ASSERT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/v1/models/org/model-a").status == 200; }));
  const HttpResponse r = Fetch(port_, "GET", "/v1/models/org/model-a");
  EXPECT_EQ(r.body, R"({"id":"org/model-a","object":"model","created":0,"owned_by":"kvgate"})");
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models/org%2Fmodel-a").status, 200);  // percent-encoded
  const HttpResponse missing = Fetch(port_, "GET", "/v1/models/other");
  ExpectOpenAiError(missing, 404);
  EXPECT_THAT(missing.body, HasSubstr(R"("code":"model_not_found")"));
  EXPECT_EQ(f.requests(), 0u);  // answered by kvgate
}

// Issue 33: vLLM's and SGLang's own root routes (/tokenize, /score, ...) were 404s; they are
// proxied to a worker as /v1/ routes are, and the list is configurable.
TEST_F(GatewayTest, EngineRootRoutesAreProxied) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.engine_routes = {"/tokenize", "/score"};
  StartGateway(c);
  const HttpResponse t =
      Fetch(port_, "POST", "/tokenize", R"({"model":"fake-model","prompt":"hello"})");
  EXPECT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.Header("x-kvgate-worker"), f.url());
  EXPECT_EQ(Fetch(port_, "POST", "/score", R"({"model":"fake-model","text_1":"a"})").status, 200);
  EXPECT_EQ(f.requests(), 2u);
  ExpectOpenAiError(Fetch(port_, "POST", "/pooling", R"({"model":"fake-model"})"), 404);
  ExpectOpenAiError(Fetch(port_, "GET", "/tokenize"), 405);
  EXPECT_EQ(Fetch(port_, "GET", "/version").status, 200);
}

// Issue 33: no CORS option. An allowed origin gets its preflight answered by kvgate and is
// named on every answer (relayed ones too); another origin's preflight is refused.
TEST_F(GatewayTest, CorsPreflightAndAllowedOrigin) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.cors.allowed_origins = {"https://chat.example.com"};
  c.auth.api_keys.push_back({"team", std::string(64, 'a'), std::nullopt});
  StartGateway(c);
  const Headers preflight = {{"Origin", "https://chat.example.com"},
                             {"Access-Control-Request-Method", "POST"},
                             {"Access-Control-Request-Headers", "authorization, content-type"}};
  const HttpResponse p = Fetch(port_, "OPTIONS", "/v1/chat/completions", "", preflight);
  EXPECT_EQ(p.status, 200) << p.body;  // before the API-key check: a preflight carries none
  EXPECT_EQ(p.Header("access-control-allow-origin"), "https://chat.example.com");
  EXPECT_THAT(p.Header("access-control-allow-headers"), HasSubstr("authorization"));
  EXPECT_THAT(p.Header("access-control-allow-methods"), HasSubstr("POST"));
  EXPECT_EQ(p.Header("access-control-max-age"), "600");
  EXPECT_EQ(f.requests(), 0u);
  const HttpResponse other =
      Fetch(port_, "OPTIONS", "/v1/chat/completions", "",
            {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  ExpectOpenAiError(other, 403);
  EXPECT_EQ(other.Header("access-control-allow-origin"), "");
  // A real request from the page: its 401 (no key) names the origin, so the script can read it.
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false),
                               {{"Origin", "https://chat.example.com"}});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Header("access-control-allow-origin"), "https://chat.example.com");
  EXPECT_EQ(r.Header("vary"), "origin");
}

TEST_F(GatewayTest, CorsOriginOnRelayedAnswers) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.cors.allowed_origins = {"*"};
  StartGateway(c);
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(true),
                               {{"Origin", "http://localhost:3000"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("access-control-allow-origin"), "http://localhost:3000");
  EXPECT_THAT(r.Header("access-control-expose-headers"), HasSubstr("x-request-id"));
  // Without an Origin (not a browser) nothing is added.
  EXPECT_EQ(Chat(false).Header("access-control-allow-origin"), "");
  EXPECT_EQ(f.requests(), 2u);
}

TEST_F(GatewayTest, ActiveHealthChecksEjectAndReadmit) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.health_check.enabled = true;
  c.health_check.interval_ms = 20;
  c.health_check.unhealthy_threshold = 2;
  c.health_check.healthy_threshold = 2;
  StartGateway(c);
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 200);
  f.set_healthy(false);
  EXPECT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/ready").status == 503; }));
  ExpectOpenAiError(Chat(false), 503);
  EXPECT_THAT(gateway_->MetricsText(),
              HasSubstr(common::StrCat("kvgate_worker_healthy{worker=\"", f.url(), "\"} 0")));
  f.set_healthy(true);
  EXPECT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/ready").status == 200; }));
  EXPECT_EQ(Chat(false).status, 200);
}

TEST_F(GatewayTest, MetricsPassPromtool) {
  FakeUpstream& f = StartWithOneFake();
  ASSERT_EQ(Chat(false).status, 200);
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true));
  ASSERT_TRUE(s.ReadHeader());
  s.ReadAll();
  Fetch(port_, "POST", "/v1/chat/completions", "{bad");
  const HttpResponse m = Fetch(port_, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_THAT(m.Header("content-type"), HasSubstr("text/plain"));
  for (const char* name :
       {"kvgate_http_requests_total", "kvgate_http_request_duration_seconds_bucket",
        "kvgate_upstream_time_to_first_byte_seconds_bucket",
        "kvgate_router_overhead_seconds_bucket", "kvgate_worker_in_flight_requests",
        "kvgate_upstream_connect_errors_total", "kvgate_worker_healthy",
        // the standard process collector's families, and the build
        "process_cpu_seconds_total ", "process_resident_memory_bytes ",
        "process_start_time_seconds ", "process_open_fds ", "process_max_fds ",
        "kvgate_build_info{program=\"kvgate\",version=\""}) {
    EXPECT_THAT(m.body, HasSubstr(name));
  }
  // RSS and open descriptors are this process's: plausible, not zero.
  const size_t rss = m.body.find("\nprocess_resident_memory_bytes ");
  ASSERT_NE(rss, std::string::npos);
  EXPECT_GT(std::stod(m.body.substr(rss + 31)), 1e6);
  EXPECT_THAT(
      m.body,
      HasSubstr(common::StrCat(
          R"(kvgate_http_requests_total{api="chat",code="200",endpoint="/v1/chat/completions",worker=")",
          f.url(), "\"} 2")));
  EXPECT_THAT(
      m.body,
      HasSubstr(
          R"(kvgate_http_requests_total{api="chat",code="400",endpoint="/v1/chat/completions",worker=""} 1)"));
  const std::string path = WriteTempFile("metrics.txt", m.body);
  ASSERT_EQ(std::system("command -v promtool >/dev/null"), 0)
      << "promtool (Debian package prometheus) is required; run scripts/setup";
  const int rc = std::system(("promtool check metrics < " + path + " 2>" + path + ".err").c_str());
  std::ifstream err(path + ".err");
  std::string err_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << err_text;
}

TEST_F(GatewayTest, AccessLogWritesOneJsonLinePerRequest) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, f.url());
  c.access_log.enabled = true;
  c.access_log.path = WriteTempFile("access.log", "");
  StartGateway(c);
  ASSERT_EQ(Chat(false, {{"X-Request-Id", "log-me"}}).status, 200);
  std::string line;
  EXPECT_TRUE(WaitFor([&] {
    std::ifstream in(c.access_log.path);
    std::getline(in, line);
    return !line.empty();
  }));
  EXPECT_THAT(line, HasSubstr(R"("id":"log-me")"));
  EXPECT_THAT(line, HasSubstr(R"("model":"fake-model")"));
  EXPECT_THAT(line, HasSubstr(common::StrCat(R"("worker":")", f.url(), "\"")));
  EXPECT_THAT(line, HasSubstr(R"("status":200)"));
  EXPECT_THAT(line, HasSubstr(R"("cached_tokens":64)"));
}

TEST_F(GatewayTest, ReloadAddsWorkerWithoutDroppingConnections) {
  FakeUpstream& a = AddFake();
  FakeUpstream& b = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, a.url());
  StartGateway(c);
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "2"}});
  ASSERT_TRUE(s.ReadHeader());
  AddTestWorker(c, b.url());
  ASSERT_TRUE(gateway_->Reload(c).ok());
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Chat(false).status, 200);
  EXPECT_EQ(b.requests(), 2u);
  a.ReleaseChunk();
  a.ReleaseChunk();
  EXPECT_THAT(s.ReadAll(5s), HasSubstr("[DONE]"));  // the stream survived the reload
  c.routing.policy = "bogus";
  EXPECT_FALSE(gateway_->Reload(c).ok());
  EXPECT_EQ(Chat(false).status, 200);
}

TEST_F(GatewayTest, DrainFinishesInFlightStreamsAndRefusesNewOnes) {
  FakeUpstream& f = StartWithOneFake();
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "3"}});
  ASSERT_TRUE(s.ReadHeader());
  auto drained = std::async(std::launch::async, [&] { return gateway_->Drain(10s); });
  // New connections are refused once the listener closed.
  EXPECT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/health", "", {}, 1s).status == 0; }));
  for (int i = 0; i < 3; ++i) f.ReleaseChunk();
  const std::string rest = s.ReadAll(5s);
  EXPECT_THAT(rest, HasSubstr("[DONE]"));
  EXPECT_TRUE(s.done());
  EXPECT_TRUE(drained.get());
}

TEST_F(GatewayTest, DrainedWorkerGetsNoNewRequestsUntilUndrained) {
  FakeUpstream& a = AddFake();
  FakeUpstream& b = AddFake();
  auto c = BaseConfig();
  AddTestWorker(c, a.url());
  AddTestWorker(c, b.url());
  StartGateway(c);
  // An in-flight stream on `a` survives the drain.
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "2"}});
  ASSERT_TRUE(s.ReadHeader());
  ASSERT_EQ(s.Header("x-kvgate-worker"), a.url());
  auto r =
      AdminFetch(port_, "POST", "/admin/drain", common::StrCat(R"({"worker":")", a.url(), R"("})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("draining":true)"));
  EXPECT_THAT(AdminFetch(port_, "GET", "/admin/workers").body, HasSubstr(R"("draining":true)"));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Chat(false).Header("x-kvgate-worker"), b.url());
  a.ReleaseChunk();
  a.ReleaseChunk();
  EXPECT_THAT(s.ReadAll(5s), HasSubstr("[DONE]"));
  // Back in rotation.
  r = AdminFetch(port_, "POST", "/admin/drain",
                 common::StrCat(R"({"worker":")", a.url(), R"(","draining":false})"));
  ASSERT_EQ(r.status, 200) << r.body;
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) seen.insert(Chat(false).Header("x-kvgate-worker"));
  EXPECT_EQ(seen.size(), 2u);
  // Bad input: a clear error, nothing changed.
  r = AdminFetch(port_, "POST", "/admin/drain", R"({"worker":"http://nowhere:1"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_THAT(r.body, HasSubstr("unknown_worker"));
  for (const char* bad : {"", "{", R"({"worker":3})", R"({"worker":"x","draining":"yes"})"}) {
    r = AdminFetch(port_, "POST", "/admin/drain", bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_THAT(r.body, HasSubstr("invalid_body")) << bad;
  }
  EXPECT_THAT(AdminFetch(port_, "GET", "/admin/workers").body,
              Not(HasSubstr(R"("draining":true)")));
}

}  // namespace
}  // namespace kvgate::testing
