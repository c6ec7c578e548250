// TLS both ways (issue 18), with certificates the test makes: HTTPS on the client listener
// (plain HTTP and untrusted clients refused, mutual TLS, a certificate read again on reload
// while an open connection keeps working), and https:// workers — health checks and requests
// over TLS, verified against a CA bundle, with a client certificate where the worker asks for
// one. The https worker is a second gateway with a TLS listener in front of the fake worker.
// Half-open handshakes (issue 27) hold little memory, give way to real clients and time out.
#include <fstream>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/scripted_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/fakes/tls_client.h"
#include "tests/integration/held_connection.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_certs.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

std::string ChatRequest(bool stream, bool close = true) {
  const std::string body = ChatBody(stream);
  return common::StrCat("POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n",
                        "content-type: application/json\r\ncontent-length: ", body.size(), "\r\n",
                        close ? "connection: close\r\n" : "", "\r\n", body);
}

constexpr char kHealth[] = "GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::trunc) << content;
}

// The value of the first /metrics series starting with `series`, or -1.
double MetricValue(const router::Gateway& gw, const std::string& series) {
  const std::string text = gw.MetricsText();
  const size_t at = text.find("\n" + series);
  if (at == std::string::npos) return -1;
  const size_t space = text.find(' ', at + 1);
  return std::strtod(text.c_str() + space + 1, nullptr);
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = MakeTestCerts();
    fake_ = std::make_unique<FakeUpstream>(FakeUpstream::Options{});
    fake_->Start();
  }
  ~TlsTest() override {
    for (auto& g : gateways_) g->Stop();
  }
  config::WorkerConfig Worker(const std::string& url) {
    config::WorkerConfig w;
    w.url = *common::ParseHttpUrl(url, /*allow_https=*/true);
    return w;
  }
  // A gateway serving HTTPS with the test CA's server certificate, in front of the fake.
  config::Config TlsConfig(bool health_checks = false) {
    auto c = TestGatewayConfig(health_checks);
    c.tls.cert_file = certs_.server_cert;
    c.tls.key_file = certs_.server_key;
    c.workers.push_back(Worker(fake_->url()));
    return c;
  }
  router::Gateway* Start(config::Config c) {
    auto gw = StartTestGateway(std::move(c));
    if (gw == nullptr) return nullptr;
    gateways_.push_back(std::move(gw));
    return gateways_.back().get();
  }
  TlsClientOptions Trusting(const std::string& ca) const {
    TlsClientOptions o;
    o.ca_file = ca;
    return o;
  }

  TestCerts certs_;
  std::unique_ptr<FakeUpstream> fake_;
  std::vector<std::unique_ptr<router::Gateway>> gateways_;
};

TEST_F(TlsTest, ListenerServesHttpsAndRefusesPlainOrUntrusted) {
  router::Gateway* gw = Start(TlsConfig());
  ASSERT_NE(gw, nullptr);
  const TlsClientOptions trusted = Trusting(certs_.ca_cert);

  std::string error;
  const std::string chat = TlsExchange(gw->port(), trusted, ChatRequest(false), &error);
  EXPECT_THAT(chat, StartsWith("HTTP/1.1 200")) << error;
  EXPECT_THAT(chat, HasSubstr("\"choices\""));
  const std::string stream = TlsExchange(gw->port(), trusted, ChatRequest(true), &error);
  EXPECT_THAT(stream, StartsWith("HTTP/1.1 200")) << error;
  EXPECT_THAT(stream, HasSubstr("data: [DONE]"));
  EXPECT_THAT(TlsExchange(gw->port(), trusted, kHealth), StartsWith("HTTP/1.1 200"));
  // By address, as a client that dials the IP does: the certificate names 127.0.0.1 too.
  TlsClientOptions by_ip = trusted;
  by_ip.host = "127.0.0.1";
  EXPECT_THAT(TlsExchange(gw->port(), by_ip, kHealth), StartsWith("HTTP/1.1 200"));

  {  // Keep-alive: three requests on one TLS connection.
    TlsClient keep(trusted);
    ASSERT_TRUE(keep.Connect(gw->port())) << keep.error();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(keep.Send(ChatRequest(false, /*close=*/false)));
      EXPECT_THAT(keep.ReadResponse(), StartsWith("HTTP/1.1 200")) << keep.error();
    }
  }

  // Plain HTTP on the TLS port gets no HTTP answer; the failed handshake is counted.
  bool closed = false;
  const std::string plain = RawExchange(gw->port(), kHealth, 5s, &closed);
  EXPECT_TRUE(closed);
  EXPECT_THAT(plain, ::testing::Not(HasSubstr("HTTP/1.1 200")));
  // A client that trusts another CA refuses the server.
  const std::string untrusted =
      TlsExchange(gw->port(), Trusting(certs_.other_ca_cert), kHealth, &error);
  EXPECT_EQ(untrusted, "");
  EXPECT_THAT(error, HasSubstr("certificate verify failed"));
  // A name the certificate does not carry is refused too.
  TlsClientOptions wrong_name = trusted;
  wrong_name.host = "kvgate.example.com";
  EXPECT_EQ(TlsExchange(gw->port(), wrong_name, kHealth, &error), "");
  EXPECT_TRUE(WaitFor(
      [&] { return MetricValue(*gw, "kvgate_tls_handshake_errors_total{side=\"client\"}") >= 3; },
      5s))
      << gw->MetricsText();
  // Nothing leaked: every connection closed.
  EXPECT_TRUE(WaitFor([&] { return MetricValue(*gw, "kvgate_http_connections") == 0; }, 5s));
}

TEST_F(TlsTest, MutualTlsAsksForAClientCertificate) {
  auto c = TlsConfig();
  c.tls.client_ca_file = certs_.ca_cert;
  router::Gateway* gw = Start(c);
  ASSERT_NE(gw, nullptr);
  TlsClientOptions with_cert = Trusting(certs_.ca_cert);
  with_cert.cert_file = certs_.server_cert;  // carries clientAuth too
  with_cert.key_file = certs_.server_key;
  EXPECT_THAT(TlsExchange(gw->port(), with_cert, ChatRequest(false)), StartsWith("HTTP/1.1 200"));
  // Without one, or with one another CA signed: no HTTP answer.
  std::string error;
  EXPECT_EQ(TlsExchange(gw->port(), Trusting(certs_.ca_cert), kHealth, &error), "");
  TlsClientOptions foreign = Trusting(certs_.ca_cert);
  foreign.cert_file = certs_.other_server_cert;
  foreign.key_file = certs_.other_server_key;
  EXPECT_EQ(TlsExchange(gw->port(), foreign, kHealth, &error), "");
}

TEST_F(TlsTest, ReloadReadsTheCertificateAgainAndOpenConnectionsKeepTheirs) {
  // The files the config names are replaced, as cert-manager renews a Secret.
  const std::string cert = WriteTempFile("tls-cert.pem", ReadFile(certs_.server_cert));
  const std::string key = WriteTempFile("tls-key.pem", ReadFile(certs_.server_key));
  auto c = TlsConfig();
  c.tls.cert_file = cert;
  c.tls.key_file = key;
  router::Gateway* gw = Start(c);
  ASSERT_NE(gw, nullptr);
  TlsClient open(Trusting(certs_.ca_cert));
  ASSERT_TRUE(open.Connect(gw->port())) << open.error();
  ASSERT_TRUE(open.Send(ChatRequest(false, false)));
  EXPECT_THAT(open.ReadResponse(), StartsWith("HTTP/1.1 200"));

  WriteFile(cert, ReadFile(certs_.other_server_cert));
  WriteFile(key, ReadFile(certs_.other_server_key));
  ASSERT_TRUE(gw->Reload(c).ok());
  EXPECT_THAT(TlsExchange(gw->port(), Trusting(certs_.other_ca_cert), kHealth),
              StartsWith("HTTP/1.1 200"));
  EXPECT_EQ(TlsExchange(gw->port(), Trusting(certs_.ca_cert), kHealth), "");
  // The connection made before the reload still works, with its session.
  ASSERT_TRUE(open.Send(ChatRequest(false, false)));
  EXPECT_THAT(open.ReadResponse(), StartsWith("HTTP/1.1 200")) << open.error();

  // A broken file is refused with the file named; the running certificate stays.
  WriteFile(key, "not a key");
  const absl::Status bad = gw->Reload(c);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("tls.key_file"));
  EXPECT_THAT(TlsExchange(gw->port(), Trusting(certs_.other_ca_cert), kHealth),
              StartsWith("HTTP/1.1 200"));
}

TEST_F(TlsTest, StartRefusesMissingOrMismatchedFiles) {
  auto c = TlsConfig();
  c.tls.cert_file = certs_.dir + "/missing.pem";
  auto gw = router::Gateway::Create(c);
  ASSERT_FALSE(gw.ok());
  EXPECT_THAT(std::string(gw.status().message()), HasSubstr("tls.cert_file"));
  c = TlsConfig();
  c.tls.key_file = certs_.other_server_key;
  gw = router::Gateway::Create(c);
  ASSERT_FALSE(gw.ok());
  EXPECT_THAT(std::string(gw.status().message()), HasSubstr("tls.key_file"));
  c = TestGatewayConfig();
  c.upstream.tls.ca_file = certs_.dir + "/missing-ca.pem";
  gw = router::Gateway::Create(c);
  ASSERT_FALSE(gw.ok());
  EXPECT_THAT(std::string(gw.status().message()), HasSubstr("upstream.tls"));
}

TEST_F(TlsTest, HttpsWorkersAreCheckedAndServedOverTls) {
  // The https worker: a TLS gateway in front of the fake worker.
  router::Gateway* worker = Start(TlsConfig());
  ASSERT_NE(worker, nullptr);
  auto c = TestGatewayConfig(/*health_checks=*/true);
  c.workers.push_back(Worker(common::StrCat("https://localhost:", worker->port())));
  c.upstream.tls.ca_file = certs_.ca_cert;
  router::Gateway* gw = Start(c);
  ASSERT_NE(gw, nullptr);
  // Admitted by a health check over TLS.
  EXPECT_TRUE(WaitFor([&] { return Fetch(gw->port(), "GET", "/ready").status == 200; }, 5s));
  for (bool stream : {false, true, false}) {
    const HttpResponse r = Fetch(gw->port(), "POST", "/v1/chat/completions", ChatBody(stream));
    EXPECT_EQ(r.status, 200) << r.body;
    if (stream) EXPECT_THAT(r.body, HasSubstr("data: [DONE]"));
  }
  EXPECT_EQ(fake_->requests(), 3u);
  EXPECT_EQ(MetricValue(*gw, "kvgate_tls_handshake_errors_total{side=\"worker\"}"), -1);
}

TEST_F(TlsTest, UntrustedWorkerCertificateIsRefused) {
  router::Gateway* worker = Start(TlsConfig());
  ASSERT_NE(worker, nullptr);
  auto c = TestGatewayConfig();  // no health checks: the request path meets the worker
  c.workers.push_back(Worker(common::StrCat("https://localhost:", worker->port())));
  c.upstream.tls.ca_file = certs_.other_ca_cert;
  c.retry.max_attempts = 1;
  router::Gateway* gw = Start(c);
  ASSERT_NE(gw, nullptr);
  const HttpResponse r = Fetch(gw->port(), "POST", "/v1/chat/completions", ChatBody(false));
  EXPECT_GE(r.status, 502) << r.body;
  EXPECT_THAT(r.body, HasSubstr("TLS handshake"));
  EXPECT_EQ(fake_->requests(), 0u);
  EXPECT_GE(MetricValue(*gw, "kvgate_tls_handshake_errors_total{side=\"worker\"}"), 1);
  // With health checks on, such a worker is never admitted.
  c.health_check.enabled = true;
  c.health_check.interval_ms = 50;
  c.health_check.healthy_threshold = 1;
  router::Gateway* checked = Start(c);
  ASSERT_NE(checked, nullptr);
  std::this_thread::sleep_for(300ms);  // several check rounds: none may pass
  EXPECT_EQ(Fetch(checked->port(), "GET", "/ready").status, 503);
}

TEST_F(TlsTest, WorkerAskingForAClientCertificateGetsOne) {
  auto wc = TlsConfig();
  wc.tls.client_ca_file = certs_.ca_cert;
  router::Gateway* worker = Start(wc);
  ASSERT_NE(worker, nullptr);
  auto c = TestGatewayConfig();
  c.workers.push_back(Worker(common::StrCat("https://127.0.0.1:", worker->port())));
  c.upstream.tls.ca_file = certs_.ca_cert;
  c.retry.max_attempts = 1;
  router::Gateway* without = Start(c);
  ASSERT_NE(without, nullptr);
  EXPECT_GE(Fetch(without->port(), "POST", "/v1/chat/completions", ChatBody(false)).status, 502);
  c.upstream.tls.cert_file = certs_.server_cert;
  c.upstream.tls.key_file = certs_.server_key;
  router::Gateway* with = Start(c);
  ASSERT_NE(with, nullptr);
  const HttpResponse r = Fetch(with->port(), "POST", "/v1/chat/completions", ChatBody(true));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("data: [DONE]"));
}

// Issue 27: a half-open TLS handshake cost ~49 KB. 100 of them (silent, or half a ClientHello)
// fill the connection table: they hold little memory, a real client still gets in (the oldest
// half-open one gives way: it counts as idle), and all are closed at the handshake deadline.
TEST_F(TlsTest, HalfOpenHandshakesHoldLittleGiveWayAndTimeOut) {
  constexpr int kHalfOpen = 100;
  auto c = TlsConfig();
  c.limits.max_connections = kHalfOpen;
  c.limits.tls_handshake_timeout_ms = 1500;  // read_timeout_ms stays 30 s
  router::Gateway* gw = Start(c);
  ASSERT_NE(gw, nullptr);
  const TlsClientOptions trusted = Trusting(certs_.ca_cert);
  ASSERT_THAT(TlsExchange(gw->port(), trusted, kHealth), StartsWith("HTTP/1.1 200"));
  const uint64_t heap_before = HeapInUseBytes();

  // A record announcing a 200-byte ClientHello, of which only the first bytes come.
  const std::string partial_hello =
      std::string("\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03", 11) + std::string(21, 'r');
  std::vector<std::unique_ptr<HeldConnection>> half_open;
  for (int i = 0; i < kHalfOpen; ++i) {
    const bool silent = i % 2 == 0;
    half_open.push_back(
        std::make_unique<HeldConnection>(gw->port(), silent ? "127.0.0.2" : "127.0.0.3"));
    ASSERT_TRUE(half_open.back()->ok());
    if (!silent) ASSERT_TRUE(half_open.back()->Send(partial_hello));
  }
  ASSERT_TRUE(WaitFor([&] { return MetricValue(*gw, "kvgate_http_connections ") >= kHalfOpen; }));
  const auto opened = std::chrono::steady_clock::now();

  // The table is full of half-open handshakes; a real client is served all the same.
  std::string error;
  EXPECT_THAT(TlsExchange(gw->port(), trusted, ChatRequest(false), &error),
              StartsWith("HTTP/1.1 200"))
      << error;
  EXPECT_GE(MetricValue(*gw, "kvgate_http_idle_connections_reaped_total"), 1);
  // Before: OpenSSL's state and buffers, ~45 KB each (docs/benchmarks.md).
  const uint64_t heap_held = HeapInUseBytes();
  const int64_t per_connection =
      (static_cast<int64_t>(heap_held) - static_cast<int64_t>(heap_before)) / kHalfOpen;
  EXPECT_LT(per_connection, 12 * 1024) << "live heap per half-open handshake";
  std::printf("%d half-open TLS handshakes: live heap %lld bytes each\n", kHalfOpen,
              static_cast<long long>(per_connection));

  // Each is closed at the handshake deadline, long before the read timeout.
  for (auto& h : half_open) ASSERT_TRUE(h->ClosedByPeer(10'000));
  EXPECT_LT(std::chrono::steady_clock::now() - opened, 10s);
  EXPECT_GE(MetricValue(*gw, "kvgate_tls_handshake_errors_total{side=\"client\"}"), kHalfOpen - 1);
  EXPECT_THAT(TlsExchange(gw->port(), trusted, kHealth), StartsWith("HTTP/1.1 200"));
}

}  // namespace
}  // namespace kvgate::testing
