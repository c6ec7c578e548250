// HTTP/1.1 framing at the session stage, as RFC 9112 requires and as an attacker probes it:
// every ambiguous message is refused with a 400 and a closed connection, never read in a way
// another hop could read differently.
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/scripted_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;

std::string Hex(size_t n) {
  char b[16];
  std::snprintf(b, sizeof(b), "%zx", n);
  return b;
}

class FramingTest : public ::testing::Test {
 protected:
  void Start(config::Config c = Base()) {
    fake_ = std::make_unique<FakeUpstream>(FakeUpstream::Options{});
    fake_->Start();
    AddTestWorker(c, fake_->url());
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    port_ = gateway_->port();
  }
  static config::Config Base() { return TestGatewayConfig(); }
  ~FramingTest() override {
    if (gateway_) gateway_->Stop();
  }
  int Count(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
  }

  std::unique_ptr<FakeUpstream> fake_;
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

TEST_F(FramingTest, TransferEncodingThatIsNotFinallyChunkedCannotSmuggleARequest) {
  Start();
  for (const char* te : {"identity", "chunked, identity", "xchunked"}) {
    // Read as an empty body, the second request would reach /admin/workers unseen.
    const std::string attack =
        common::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ", te,
                       "\r\n\r\n", "GET /admin/workers HTTP/1.1\r\nHost: x\r\n\r\n");
    bool closed = false;
    const std::string r = RawExchange(port_, attack, 5s, &closed);
    EXPECT_THAT(r, StartsWith("HTTP/1.1 400 ")) << te;
    EXPECT_EQ(Count(r, "HTTP/1.1 "), 1) << te << ": " << r;
    EXPECT_THAT(r, Not(HasSubstr("\"workers\""))) << te;
    EXPECT_TRUE(closed) << te;
  }
  EXPECT_EQ(fake_->requests(), 0u);
}

TEST_F(FramingTest, AmbiguousLengthsAreRefused) {
  Start();
  for (const char* fields :
       {"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 3\r\n"
        "Content-Length: 3\r\n",
        "Content-Length: 3, 3\r\n", "X-Folded: a\r\n b\r\nContent-Length: 3\r\n"}) {
    bool closed = false;
    const std::string r = RawExchange(
        port_, common::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n", fields, "\r\nabc"),
        5s, &closed);
    EXPECT_THAT(r, StartsWith("HTTP/1.1 400 ")) << fields;
    EXPECT_THAT(r, HasSubstr("\"error\"")) << fields;
    EXPECT_TRUE(closed) << fields;
  }
  // Refused at the header stage, and still counted.
  EXPECT_TRUE(WaitFor([&] {
    return gateway_->MetricsText().find(
               R"(kvgate_http_requests_total{api="completions",code="400",endpoint="/v1/completions",worker=""} 4)") !=
           std::string::npos;
  })) << gateway_->MetricsText();
}

TEST_F(FramingTest, ChunkedRequestBodyIsForwardedWithAContentLengthOnly) {
  Start();
  const std::string body = R"({"model":"fake-model","prompt":"hello"})";
  const std::string req = common::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n",
      "a;ext=1\r\n", body.substr(0, 10), "\r\n", Hex(body.size() - 10), "\r\n", body.substr(10),
      "\r\n0\r\nX-Trailer: 1\r\n\r\n");
  const std::string r = RawExchange(port_, req, 5s);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 "));
  EXPECT_EQ(fake_->last_body(), body);
  EXPECT_EQ(fake_->last_header("transfer-encoding"), "");
  EXPECT_EQ(fake_->last_header("content-length"), std::to_string(body.size()));
}

TEST_F(FramingTest, MalformedChunkedRequestBodyIsA400) {
  Start();
  bool closed = false;
  const std::string r = RawExchange(
      port_,
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n",
      5s, &closed);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr("malformed chunked request body"));
  EXPECT_TRUE(closed);
}

TEST_F(FramingTest, HeadResponsesHaveNoBody) {
  Start();
  bool closed = false;
  const std::string r = RawExchange(
      port_, "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5s, &closed);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 "));
  EXPECT_THAT(r, HasSubstr("content-length: 15\r\n"));
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "");
  EXPECT_TRUE(closed);
}

TEST_F(FramingTest, FieldsNamedInConnectionAreNotForwarded) {
  Start();
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false),
                               {{"Connection", "keep-alive, X-Secret"},
                                {"X-Secret", "s"},
                                {"X-Kept", "k"},
                                {"Keep-Alive", "timeout=5"},
                                {"TE", "trailers"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(fake_->last_header("x-secret"), "");
  EXPECT_EQ(fake_->last_header("keep-alive"), "");
  EXPECT_EQ(fake_->last_header("te"), "");
  EXPECT_EQ(fake_->last_header("x-kept"), "k");
}

TEST_F(FramingTest, StalledBodyGetsA408) {
  config::Config c = Base();
  c.limits.read_timeout_ms = 300;
  Start(c);
  bool closed = false;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string r = RawExchange(
      port_, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
      5s, &closed);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 408 "));
  EXPECT_THAT(r, HasSubstr("request_timeout"));
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST_F(FramingTest, TricklingHeaderGetsTheReadTimeoutNotTheIdleTimeout) {
  config::Config c = Base();
  c.limits.read_timeout_ms = 300;
  c.limits.idle_timeout_ms = 60'000;
  Start(c);
  bool closed = false;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string r =
      RawExchange(port_, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", 5s, &closed);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 408 "));
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_TRUE(WaitFor([&] {
    return gateway_->MetricsText().find(
               R"(kvgate_http_requests_total{api="completions",code="408",endpoint="/v1/completions",worker=""} 1)") !=
           std::string::npos;
  })) << gateway_->MetricsText();
}

TEST_F(FramingTest, DotSegmentsAreNormalisedBeforeRouting) {
  config::Config c = Base();
  c.admin.token = "s3cret";
  Start(c);
  for (const char* target :
       {"/v1/../admin/workers", "/v1/%2e%2e/admin/workers", "/v1/./../admin/workers"}) {
    // Routed as /admin/workers: behind the admin token, never forwarded to a worker.
    const HttpResponse r = Fetch(port_, "GET", target);
    EXPECT_EQ(r.status, 401) << target;
    const HttpResponse ok = Fetch(port_, "GET", target, "", {{"Authorization", "Bearer s3cret"}});
    EXPECT_EQ(ok.status, 200) << target;
    EXPECT_THAT(ok.body, HasSubstr("\"workers\"")) << target;
  }
  EXPECT_EQ(fake_->requests(), 0u);
  // A normalised path that stays under /v1/ is forwarded normalised.
  ASSERT_EQ(Fetch(port_, "POST", "/v1/x/../chat/completions", ChatBody(false)).status, 200);
  EXPECT_EQ(fake_->requests(), 1u);
}

TEST_F(FramingTest, AbsoluteFormTargetsNeverChooseTheHost) {
  Start();
  const std::string r = RawExchange(
      port_,
      common::StrCat("POST http://169.254.169.254/v1/chat/completions HTTP/1.1\r\nHost: "
                     "169.254.169.254\r\nX-Forwarded-Host: 169.254.169.254\r\n"
                     "X-Forwarded-Proto: http\r\nForwarded: host=169.254.169.254\r\n"
                     "Connection: close\r\nContent-Length: ",
                     ChatBody(false).size(), "\r\n\r\n", ChatBody(false)),
      5s);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 "));
  EXPECT_EQ(fake_->requests(), 1u);  // the configured worker, whatever the target named
  EXPECT_NE(fake_->last_header("host"), "169.254.169.254");
}

TEST_F(FramingTest, UnsupportedVersionsAndCodings) {
  Start();
  EXPECT_THAT(RawExchange(port_, "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 5s),
              StartsWith("HTTP/1.1 505 "));
  EXPECT_THAT(RawExchange(port_,
                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          "Transfer-Encoding: gzip, chunked\r\n\r\n",
                          5s),
              StartsWith("HTTP/1.1 501 "));
  EXPECT_THAT(RawExchange(port_, "GET /health HTTP/1.1\r\n\r\n", 5s),
              StartsWith("HTTP/1.1 400 "));  // no Host
}

}  // namespace
}  // namespace kvgate::testing
