// Workers found by DNS (discovery.dns) against a DNS server on loopback whose records change:
// a worker that appears is health-checked before it gets traffic, one that disappears gets no
// new requests and leaves /admin/workers, a failed lookup (SERVFAIL) keeps the last set, a
// name that no longer exists (NXDOMAIN) empties it; SRV and A records both.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/dns_responder.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/integration/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kSrv = "_http._tcp.vllm.test";

class DiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& w : workers_) {
      w = std::make_unique<FakeUpstream>(FakeUpstream::Options{});
      w->Start();
    }
  }
  void Start(const std::string& name, bool srv, uint16_t port = 0) {
    config::Config c = TestGatewayConfig(/*health_checks=*/true);
    c.admin.token = kAdminToken;
    config::DnsDiscoveryConfig d;
    d.name = name;
    d.srv = srv;
    d.port = port;
    d.server = dns_.address();
    d.interval_ms = 100;
    d.worker.models = {"fake-model"};
    c.discovery.dns.push_back(d);
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    port_ = gateway_->port();
  }
  ~DiscoveryTest() override {
    if (gateway_) gateway_->Stop();
  }
  std::string Workers() { return AdminFetch(port_, "GET", "/admin/workers").body; }
  bool Lists(const FakeUpstream& w) { return Workers().find(w.url()) != std::string::npos; }
  // Sends requests until one is answered by `w` (round robin over the healthy workers).
  bool Serves(const FakeUpstream& w) {
    return WaitFor([&] {
      const auto r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false));
      return r.status == 200 && r.Header("x-kvgate-worker") == w.url();
    });
  }
  void Srv(std::initializer_list<size_t> which) {
    std::vector<DnsSrv> records;
    for (size_t i : which) {
      const std::string target = "w" + std::to_string(i) + ".vllm.test";
      dns_.SetA(target, {"127.0.0.1"});
      records.push_back({target, workers_[i]->port()});
    }
    dns_.SetSrv(kSrv, records);
  }

  DnsResponder dns_;
  std::unique_ptr<FakeUpstream> workers_[2];
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

TEST_F(DiscoveryTest, SrvRecordsThatComeAndGo) {
  Srv({0});
  Start(kSrv, /*srv=*/true);
  ASSERT_TRUE(Serves(*workers_[0])) << Workers();
  EXPECT_FALSE(Lists(*workers_[1]));

  // A new pod: listed at once, served once its health check passed.
  workers_[1]->set_healthy(false);
  Srv({0, 1});
  ASSERT_TRUE(WaitFor([&] { return Lists(*workers_[1]); }));
  EXPECT_THAT(Workers(), HasSubstr(R"("healthy":false)"));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(
        Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false)).Header("x-kvgate-worker"),
        workers_[0]->url());
  }
  workers_[1]->set_healthy(true);
  ASSERT_TRUE(Serves(*workers_[1]));

  // The first pod goes away: no more traffic, and it leaves the fleet.
  Srv({1});
  ASSERT_TRUE(WaitFor([&] { return !Lists(*workers_[0]); })) << Workers();
  const uint64_t before = workers_[0]->requests();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  }
  EXPECT_EQ(workers_[0]->requests(), before);

  // SERVFAIL: a DNS blip keeps what was known.
  dns_.SetRcode(kSrv, 2);
  const uint64_t queries = dns_.queries();
  ASSERT_TRUE(WaitFor([&] { return dns_.queries() >= queries + 3; }));
  EXPECT_TRUE(Lists(*workers_[1]));
  EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);

  // NXDOMAIN: the Service is gone, and so are its workers.
  dns_.SetRcode(kSrv, 3);
  ASSERT_TRUE(WaitFor([&] { return !Lists(*workers_[1]); })) << Workers();
  const auto r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false));
  EXPECT_TRUE(r.status == 404 || r.status == 503) << r.status << r.body;
}

TEST_F(DiscoveryTest, ARecordsOnTheConfiguredPort) {
  dns_.SetA("vllm.test", {"127.0.0.1"});
  Start("vllm.test", /*srv=*/false, workers_[0]->port());
  ASSERT_TRUE(Serves(*workers_[0])) << Workers();
  dns_.SetA("vllm.test", {});  // NOERROR, no records: no ready pod
  ASSERT_TRUE(WaitFor([&] { return !Lists(*workers_[0]); })) << Workers();
}

}  // namespace
}  // namespace kvgate::testing
