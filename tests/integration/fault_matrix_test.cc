// The fault matrix (issue 18): each worker fault a fleet meets — a crash mid-stream, a hang
// before the response head or mid-stream, a storm of 5xx, reset connections, a slow start — and
// a gateway restart under load. Every cell checks what the client got (a complete response, a
// clean OpenAI error, or a stream closed after partial output; never a wait past the configured
// timeouts) and that the gateway let go of everything afterwards: no worker keeps in-flight
// requests, prefill tokens, decode slots or KV blocks reserved, no client connection is left
// open, and the next request is served. Lost KV events are the precise-mode cell, in
// tests/precise/sim_precise_test.cc.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <regex>
#include <thread>

#include "common/mutex.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A worker that accepts, reads the request and answers with a TCP reset (SO_LINGER 0): a
// worker whose process died under the connection, or a proxy that drops it.
class ResettingWorker {
 public:
  ResettingWorker() {
    fd_ = ListenLoopback(&port_, 64);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        (void)::recv(c, buf, sizeof(buf), 0);
        const linger l{1, 0};
        ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        ::close(c);
        resets_.fetch_add(1);
      }
    });
  }
  ~ResettingWorker() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return common::StrCat("http://127.0.0.1:", port_); }
  uint64_t resets() const { return resets_.load(); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<uint64_t> resets_{0};
};

class FaultMatrixTest : public ::testing::Test {
 protected:
  ~FaultMatrixTest() override {
    if (gateway_) gateway_->Stop();
  }
  static config::WorkerConfig Worker(const std::string& url) {
    config::WorkerConfig w;
    w.url = *common::ParseHttpUrl(url);
    w.kv_capacity_tokens = 1'000'000;  // so that routing reserves KV blocks too
    return w;
  }
  // kvaware routing (every reservation kind) with short timeouts, so that a hang ends fast.
  static config::Config Base(bool health_checks = false) {
    auto c = TestGatewayConfig(health_checks);
    c.routing.policy = "kvaware";
    c.admin.token = kAdminToken;
    c.upstream.response_timeout_ms = 400;
    c.upstream.stream_idle_timeout_ms = 400;
    c.retry.backoff_base_ms = 1;
    c.retry.backoff_max_ms = 2;
    return c;
  }
  void Start(config::Config c) {
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    port_ = gateway_->port();
  }
  HttpResponse Chat(bool stream, const Headers& headers = {}) {
    return Fetch(port_, "POST", "/v1/chat/completions", ChatBody(stream, 4096), headers, 10s);
  }
  // The gateway let go of everything, and still serves.
  void ExpectRecovered(bool serves = true) {
    EXPECT_TRUE(WaitFor([&] { return HeldReservations(port_).empty(); }, 5s))
        << HeldReservations(port_);
    // Only the connection asking for the metrics is open.
    EXPECT_TRUE(WaitFor(
        [&] {
          return gateway_->MetricsText().find("\nkvgate_http_connections 0\n") != std::string::npos;
        },
        5s));
    EXPECT_NE(gateway_->MetricsText().find("\nkvgate_admission_running 0\n"), std::string::npos);
    if (serves) EXPECT_EQ(Chat(true).status, 200);
  }
  static void ExpectOpenAiError(const HttpResponse& r, int status) {
    EXPECT_EQ(r.status, status) << r.body << r.error;
    EXPECT_THAT(r.body, HasSubstr(R"({"error":{"message":)"));
  }

  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

TEST_F(FaultMatrixTest, WorkerCrashMidStream) {
  // A real worker process, killed with SIGKILL while it streams.
  ChildProcess worker({BinDir() + "/kvgate-fake-upstream", "--chunks", "200", "--delay-ms", "20"});
  std::smatch m;
  std::string log;
  ASSERT_TRUE(WaitFor([&] {
    log = worker.Log();
    return std::regex_search(log, m, std::regex("port=([0-9]+)"));
  }));
  FakeUpstream spare(FakeUpstream::Options{});
  spare.Start();
  auto c = Base();
  c.workers = {Worker(common::StrCat("http://127.0.0.1:", m[1].str())), Worker(spare.url())};
  c.routing.policy = "round_robin";  // the first request goes to the process
  Start(c);
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true, 4096));
  ASSERT_TRUE(s.ReadHeader());
  EXPECT_EQ(s.status(), 200);
  std::string got = s.ReadSome();
  ASSERT_THAT(got, HasSubstr("data: "));
  worker.Signal(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  got += s.ReadAll(5s);
  // Partial output, then the connection closed (well before ReadAll's 5 s): no last chunk, no
  // [DONE], no hang.
  EXPECT_FALSE(s.done());
  EXPECT_THAT(got, ::testing::Not(HasSubstr("[DONE]")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  ExpectRecovered();  // the next request is served by the spare (the dead one is retried past)
}

TEST_F(FaultMatrixTest, WorkerHangsBeforeTheHead) {
  FakeUpstream fake(FakeUpstream::Options{});
  fake.Start();
  auto c = Base();
  c.workers = {Worker(fake.url())};
  c.retry.max_attempts = 1;
  Start(c);
  const auto start = std::chrono::steady_clock::now();
  const HttpResponse r = Chat(true, {{"x-fake-mode", "hang"}});
  ExpectOpenAiError(r, 504);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  // The worker saw its connection closed: it stops working for nobody.
  EXPECT_TRUE(WaitFor([&] { return fake.cancelled() >= 1; }, 5s));
  ExpectRecovered();
}

TEST_F(FaultMatrixTest, WorkerHangsMidStream) {
  FakeUpstream fake(FakeUpstream::Options{});
  fake.Start();
  auto c = Base();
  c.workers = {Worker(fake.url())};
  Start(c);
  StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true, 4096),
                     {{"x-fake-mode", "lockstep"}});
  fake.ReleaseChunk();
  fake.ReleaseChunk();  // two events, then the worker goes silent
  ASSERT_TRUE(s.ReadHeader());
  EXPECT_EQ(s.status(), 200);
  const auto start = std::chrono::steady_clock::now();
  const std::string got = s.ReadAll(5s);
  EXPECT_FALSE(s.done());  // closed without the last chunk: a broken stream, not a clean end
  EXPECT_THAT(got, HasSubstr("data: "));
  EXPECT_THAT(got, ::testing::Not(HasSubstr("[DONE]")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);  // stream_idle_timeout_ms = 400
  EXPECT_TRUE(WaitFor([&] { return fake.cancelled() >= 1; }, 5s));
  ExpectRecovered();
}

TEST_F(FaultMatrixTest, StormOf5xx) {
  FakeUpstream a(FakeUpstream::Options{}), b(FakeUpstream::Options{});
  a.Start();
  b.Start();
  auto c = Base();
  c.workers = {Worker(a.url()), Worker(b.url())};
  Start(c);
  // One worker failing: every request is served by the other.
  a.set_force_status(503);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0}, errors{0}, other{0};
  auto storm = [&](int n) {
    clients.clear();
    for (int t = 0; t < 4; ++t) {
      clients.emplace_back([&, n] {
        for (int i = 0; i < n; ++i) {
          const HttpResponse r = Chat(i % 2 == 0);
          if (r.status == 200) {
            ok.fetch_add(1);
          } else if (r.status >= 500 && r.body.find(R"({"error":)") != std::string::npos) {
            errors.fetch_add(1);
          } else {
            other.fetch_add(1);
          }
        }
      });
    }
    for (auto& t : clients) t.join();
  };
  storm(10);
  EXPECT_EQ(ok.load(), 40);
  EXPECT_EQ(errors.load() + other.load(), 0);
  // Both failing: each client gets the worker's 5xx (the last attempt is relayed), bounded
  // retries, nothing else.
  b.set_force_status(500);
  ok = 0;
  storm(10);
  EXPECT_EQ(ok.load(), 0);
  EXPECT_EQ(errors.load(), 40);
  EXPECT_EQ(other.load(), 0);
  EXPECT_LE(a.requests() + b.requests(), 40u + 40u * 3u);
  a.set_force_status(0);
  b.set_force_status(0);
  ExpectRecovered();
}

TEST_F(FaultMatrixTest, ConnectionResets) {
  ResettingWorker bad;
  FakeUpstream good(FakeUpstream::Options{});
  good.Start();
  auto c = Base();
  c.workers = {Worker(bad.url()), Worker(good.url())};
  c.routing.policy = "round_robin";
  c.circuit_breaker.consecutive_failures = 1000;  // keep sending to it: every cell a reset
  Start(c);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Chat(i % 2 == 0).status, 200);
  EXPECT_GE(bad.resets(), 5u);
  // Only the resetting worker: a clean 503 (no worker could serve it) naming the reset.
  gateway_->Stop();
  c.workers = {Worker(bad.url())};
  Start(c);
  const HttpResponse r = Chat(true);
  ExpectOpenAiError(r, 503);
  EXPECT_THAT(r.body, HasSubstr("Connection reset by peer"));
  ExpectRecovered(/*serves=*/false);
}

TEST_F(FaultMatrixTest, WorkerStartsSlowly) {
  FakeUpstream::Options o;
  o.healthy = false;  // /health answers 503 while the model loads
  FakeUpstream fake(o);
  fake.Start();
  auto c = Base(/*health_checks=*/true);
  c.workers = {Worker(fake.url())};
  Start(c);
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 503);
  ExpectOpenAiError(Chat(false), 503);
  EXPECT_EQ(fake.requests(), 0u);  // not sent to a worker that is not up
  fake.set_healthy(true);
  EXPECT_TRUE(WaitFor([&] { return Fetch(port_, "GET", "/ready").status == 200; }, 5s));
  ExpectRecovered();
}

TEST_F(FaultMatrixTest, GatewayRestartUnderLoad) {
  FakeUpstream::Options o;
  o.chunks = 20;
  o.delay_ms = 5;
  FakeUpstream fake(o);
  fake.Start();
  const std::string config = WriteTempFile(
      "kvgate.yaml",
      common::StrCat("listen: \"127.0.0.1:0\"\nthreads: 1\ndrain_timeout_ms: 10000\n",
                     "admin: {token: ", kAdminToken, "}\nworkers:\n  - url: ", fake.url(), "\n"));
  auto first = std::make_unique<ChildProcess>(
      std::vector<std::string>{BinDir() + "/kvgate", "--config", config});
  const uint16_t port = first->Port();
  ASSERT_NE(port, 0) << first->Log();
  std::atomic<bool> stop{false};
  std::atomic<int> complete{0}, refused{0}, broken{0};
  common::Mutex mu;
  std::string first_broken;  // guarded by mu (a local: no annotation)
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        const HttpResponse r = Fetch(port, "POST", "/v1/chat/completions", ChatBody(true), {}, 10s);
        if (r.status == 200 && r.body.find("[DONE]") != std::string::npos) {
          complete.fetch_add(1);
        } else if (r.status == 0 && r.body.empty()) {
          refused.fetch_add(1);  // nothing listening, or reset before a byte: retryable
          std::this_thread::sleep_for(5ms);
        } else {
          broken.fetch_add(1);
          common::MutexLock lock(&mu);
          if (first_broken.empty()) {
            first_broken = common::StrCat(r.status, " ", r.error, " ", r.body.substr(0, 300));
          }
        }
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return complete.load() >= 20; }, 10s));
  first->Signal(SIGTERM);  // drains: in-flight streams finish, then it exits
  EXPECT_EQ(first->Wait(), 0) << first->Log();
  const std::string listen = common::StrCat("127.0.0.1:", port);
  ChildProcess second({BinDir() + "/kvgate", "--config", config, "--listen", listen});
  ASSERT_EQ(second.Port(), port) << second.Log();
  const int before = complete.load();
  EXPECT_TRUE(WaitFor([&] { return complete.load() >= before + 20; }, 10s));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(broken.load(), 0) << "complete " << complete.load() << ", refused " << refused.load()
                              << "; first: " << first_broken;
  EXPECT_TRUE(WaitFor([&] { return fake.active() == 0; }, 5s));
  port_ = port;
  EXPECT_TRUE(WaitFor([&] { return HeldReservations(port_).empty(); }, 5s))
      << HeldReservations(port_);
}

}  // namespace
}  // namespace kvgate::testing
