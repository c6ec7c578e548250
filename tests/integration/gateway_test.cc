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
#include "tests/integration/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;

class GatewayTest : public ::testing::Test {
 protected:
  ~GatewayTest() override {
    if (gateway_) gateway_->Stop();
  }

  FakeUpstream& AddFake(FakeUpstream::Options o = {}) {
    fakes_.push_back(std::make_unique<FakeUpstream>(o));
    fakes_.back()->Start();
    return *fakes_.back();
  }

  // A config on loopback port 0 with one thread and no background health checks (tests that
  // need them turn them on).
  static config::Config BaseConfig() {
    config::Config c;
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.threads = 1;
    c.health_check.enabled = false;
    c.admin.token = kAdminToken;
    c.routing.policy = "round_robin";  // tests below count on its order
    c.retry.backoff_base_ms = 1;
    c.retry.backoff_max_ms = 2;
    return c;
  }

  static void AddWorker(config::Config& c, const std::string& url) {
    config::WorkerConfig w;
    w.url = *common::ParseHttpUrl(url);
    c.workers.push_back(w);
  }

  void StartGateway(config::Config c) {
    auto gw = router::Gateway::Create(std::move(c));
    ASSERT_TRUE(gw.ok()) << gw.status();
    gateway_ = std::move(*gw);
    ASSERT_TRUE(gateway_->Start().ok());
    port_ = gateway_->port();
  }

  // One fake behind the gateway; the common case.
  FakeUpstream& StartWithOneFake(FakeUpstream::Options o = {}) {
    FakeUpstream& f = AddFake(o);
    auto c = BaseConfig();
    AddWorker(c, f.url());
    StartGateway(c);
    return f;
  }

  HttpResponse Chat(bool stream, const Headers& h = {}) {
    return Fetch(port_, "POST", "/v1/chat/completions", ChatBody(stream), h);
  }

  std::vector<std::unique_ptr<FakeUpstream>> fakes_;
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

void ExpectOpenAiError(const HttpResponse& r, int status) {
  EXPECT_EQ(r.status, status) << r.body << r.error;
  EXPECT_THAT(r.Header("content-type"), HasSubstr("application/json"));
  EXPECT_THAT(r.body, StartsWith(R"({"error":{"message":)"));
  EXPECT_THAT(r.body, HasSubstr(R"("type":)"));
  EXPECT_THAT(r.body, HasSubstr(R"("code":)"));
}

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
  AddWorker(c, common::StrCat("http://127.0.0.1:", UnusedPort()));
  AddWorker(c, f.url());
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
  const std::string dead = common::StrCat("http://127.0.0.1:", UnusedPort());
  AddWorker(c, dead);
  AddWorker(c, f.url());
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
  AddWorker(c, common::StrCat("http://127.0.0.1:", UnusedPort()));
  AddWorker(c, common::StrCat("http://127.0.0.1:", UnusedPort()));
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
  AddWorker(c, bad.url());
  AddWorker(c, good.url());
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
  AddWorker(c, f.url());
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
  AddWorker(c, f.url());
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
  AddWorker(c, f.url());
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
  AddWorker(c, a.url());
  AddWorker(c, b.url());
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

TEST_F(GatewayTest, ActiveHealthChecksEjectAndReadmit) {
  FakeUpstream& f = AddFake();
  auto c = BaseConfig();
  AddWorker(c, f.url());
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
  AddWorker(c, f.url());
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
  AddWorker(c, a.url());
  StartGateway(c);
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "2"}});
  ASSERT_TRUE(s.ReadHeader());
  AddWorker(c, b.url());
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
  AddWorker(c, a.url());
  AddWorker(c, b.url());
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

namespace kvgate::testing {
namespace {

class KvAwareGatewayTest : public GatewayTest {
 protected:
  static config::AdminConfig Admin(std::string listen, std::string token) {
    config::AdminConfig a;
    a.listen = std::move(listen);
    a.token = std::move(token);
    return a;
  }
  void StartFleet(int n, const std::string& policy,
                  config::AdminConfig admin = Admin("", kAdminToken)) {
    auto c = BaseConfig();
    c.routing.policy = policy;
    c.admin = admin;
    for (int i = 0; i < n; ++i) AddWorker(c, AddFake().url());
    StartGateway(c);
  }

  static std::string Body(int session, int turn) {
    std::string content = common::StrCat("session ", session, " ");
    content.append(4000, static_cast<char>('a' + session % 26));
    for (int t = 0; t < turn; ++t) content += common::StrCat(" turn ", t, std::string(800, 'x'));
    return common::StrCat(R"({"model":"fake-model","messages":[{"role":"user","content":")",
                          content, R"("}]})");
  }
};

std::string JsonString(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  const size_t p = json.find(k);
  if (p == std::string::npos) return "";
  return json.substr(p + k.size(), json.find('"', p + k.size()) - p - k.size());
}

TEST_F(KvAwareGatewayTest, ExplainMatchesTheProxyDecision) {
  StartFleet(4, "kvaware");
  for (int i = 0; i < 24; ++i) {
    const std::string body = Body(i % 5, i / 5);
    const HttpResponse e = AdminFetch(port_, "POST", "/admin/explain", body);
    ASSERT_EQ(e.status, 200) << e.body;
    EXPECT_THAT(e.body, HasSubstr(R"("candidates":[)"));
    EXPECT_THAT(e.body, HasSubstr(R"("predicted_ttft_s":)"));
    const std::string chosen = JsonString(e.body, "chosen");
    const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("x-kvgate-worker"), chosen) << "request " << i << ": " << e.body;
  }
}

TEST_F(KvAwareGatewayTest, LaterTurnsOfASessionStayOnItsWorker) {
  StartFleet(4, "kvaware");
  std::map<int, std::string> home;
  for (int turn = 0; turn < 3; ++turn) {
    for (int s = 0; s < 8; ++s) {
      const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", Body(s, turn));
      ASSERT_EQ(r.status, 200);
      if (turn == 0) {
        home[s] = r.Header("x-kvgate-worker");
      } else {
        EXPECT_EQ(r.Header("x-kvgate-worker"), home[s]) << "session " << s << " turn " << turn;
      }
    }
  }
  std::set<std::string> used;
  for (const auto& [s, w] : home) used.insert(w);
  EXPECT_GE(used.size(), 3u);  // sessions spread
}

TEST_F(KvAwareGatewayTest, AdminWorkersShowsIndexAndLoad) {
  StartFleet(2, "kvaware");
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Body(1, 0)).status, 200);
  const HttpResponse w = AdminFetch(port_, "GET", "/admin/workers");
  ASSERT_EQ(w.status, 200);
  EXPECT_THAT(w.body, HasSubstr(R"("healthy":true)"));
  EXPECT_THAT(w.body, HasSubstr(R"("load":{"in_flight":0)"));
  EXPECT_THAT(w.body, HasSubstr(R"("blocks":{"gpu":)"));
  EXPECT_THAT(w.body, HasSubstr(R"("distinct_blocks":)"));
}

TEST_F(KvAwareGatewayTest, ExplainRejectsBadInput) {
  StartFleet(1, "kvaware");
  ExpectOpenAiError(AdminFetch(port_, "POST", "/admin/explain", "{nope"), 400);
  ExpectOpenAiError(AdminFetch(port_, "GET", "/admin/explain"), 405);
}

TEST_F(KvAwareGatewayTest, SeparateAdminListenerWithToken) {
  StartFleet(1, "kvaware", Admin("127.0.0.1:0", "s3cret"));
  const uint16_t admin = gateway_->admin_port();
  ASSERT_NE(admin, 0);
  ExpectOpenAiError(Fetch(port_, "GET", "/admin/workers"), 404);  // not on the main listener
  ExpectOpenAiError(Fetch(admin, "GET", "/admin/workers"), 401);
  EXPECT_EQ(Fetch(admin, "GET", "/admin/workers", "", {{"Authorization", "Bearer s3cret"}}).status,
            200);
  ExpectOpenAiError(Fetch(admin, "POST", "/v1/chat/completions", Body(0, 0)), 404);
  EXPECT_EQ(Fetch(admin, "GET", "/metrics").status, 200);
}

TEST_F(KvAwareGatewayTest, EveryPolicyServesTraffic) {
  for (const char* p : {"round_robin", "random", "least_request", "power_of_two", "consistent_hash",
                        "cache_aware", "cost", "weighted", "kvaware"}) {
    fakes_.clear();
    if (gateway_) gateway_->Stop();
    StartFleet(3, p);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Body(i, 0)).status, 200) << p;
    }
  }
}

}  // namespace
}  // namespace kvgate::testing

namespace kvgate::testing {
namespace {

// A client that stops reading a 1 GiB stream: the relay reads from the worker only as fast as
// the client drains, so the gateway's memory stays bounded while others keep being served.
TEST_F(GatewayTest, ClientThatStopsReadingAGigabyteStreamHoldsBoundedMemory) {
  FakeUpstream& f = StartWithOneFake(FakeUpstream::Options{.threads = 2});
  const uint64_t rss_before = ProcessRssBytes(::getpid());
  const uint64_t heap_before = HeapInUseBytes();
  StreamingRequest slow(port_, "/v1/chat/completions", ChatBody(true),
                        {{"x-fake-chunks", "131072"}, {"x-fake-chunk-bytes", "8192"}});  // 1 GiB
  ASSERT_TRUE(slow.ReadHeader());
  // Let the stream run into backpressure: the worker's bytes stop growing once the socket
  // buffers on both sides are full.
  uint64_t last = 0;
  int stable = 0;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (stable < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(100ms);
    const uint64_t now = f.streamed_bytes();
    stable = now == last && now > 0 ? stable + 1 : 0;
    last = now;
  }
  ASSERT_EQ(stable, 3) << "the worker never stopped: " << f.streamed_bytes() << " bytes";
  const uint64_t rss_stalled = ProcessRssBytes(::getpid());
  const uint64_t heap_stalled = HeapInUseBytes();
  // What left the worker is what the kernel's socket buffers hold, not the stream.
  EXPECT_LT(f.streamed_bytes(), 64ull << 20) << f.streamed_bytes();
  // Live heap, not RSS: a sanitizer's quarantine keeps every freed chunk resident for a while.
  EXPECT_LT(heap_stalled, heap_before + (16ull << 20))
      << "live heap grew from " << heap_before << " to " << heap_stalled;
  if (!UnderSanitizerAllocator()) {
    EXPECT_LT(rss_stalled, rss_before + (48ull << 20))
        << "RSS grew from " << rss_before << " to " << rss_stalled;
  }
  std::printf(
      "1 GiB stream, client not reading: worker stopped after %llu MiB; live heap %+lld KiB, "
      "RSS %+lld KiB\n",
      static_cast<unsigned long long>(f.streamed_bytes() >> 20),
      (static_cast<long long>(heap_stalled) - static_cast<long long>(heap_before)) / 1024,
      (static_cast<long long>(rss_stalled) - static_cast<long long>(rss_before)) / 1024);
  // Other clients on the same gateway thread keep flowing.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false), {}, 5s).status, 200);
    StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true), {{"x-fake-chunks", "3"}});
    ASSERT_TRUE(s.ReadHeader(5s));
    EXPECT_THAT(s.ReadAll(5s), HasSubstr("[DONE]"));
  }
  slow.Close();
  EXPECT_TRUE(WaitFor([&] { return f.cancelled() >= 1; }, 10s));
}

}  // namespace
}  // namespace kvgate::testing
