// Workers found by DNS (discovery.dns) against a DNS server on loopback whose records change:
// a worker that appears is health-checked before it gets traffic, one that disappears gets no
// new requests and leaves /admin/workers, a failed lookup (SERVFAIL) keeps the last set, a
// name that no longer exists (NXDOMAIN) empties it; SRV and A records both. And the bounds of
// issue 27: a hostile answer naming 0.0.0.0, loopback, the metadata address, a port not
// allowed or records for another name adds no worker (counted, once), legitimate records still
// do; a truncated UDP answer is asked again over TCP. The fake workers listen on loopback, so
// every source here admits 127.0.0.0/8 explicitly, as it must.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/dns_responder.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/test_util.h"

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
  void Start(const std::string& name, bool srv, uint16_t port = 0,
             std::vector<std::string> networks = {"127.0.0.0/8"},
             std::vector<uint16_t> ports = {}) {
    config::Config c = TestGatewayConfig(/*health_checks=*/true);
    c.admin.token = kAdminToken;
    config::DnsDiscoveryConfig d;
    d.name = name;
    d.srv = srv;
    d.port = port;
    d.server = dns_.address();
    d.interval_ms = 100;
    d.worker.models = {"fake-model"};
    d.allowed_networks = std::move(networks);
    d.allowed_ports = std::move(ports);
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

  // One series of /metrics; -1 when absent.
  double Metric(const std::string& series) {
    const std::string m = "\n" + Fetch(port_, "GET", "/metrics").body;
    const size_t at = m.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(m.substr(at + series.size() + 2));
  }
  double Refused(const std::string& source, const std::string& reason) {
    return Metric("kvgate_discovery_refused_total{reason=\"" + reason + "\",source=\"" + source +
                  "\"}");
  }
  // Waits for `n` more lookups (each poll asks A and AAAA, or SRV and maybe targets).
  void Polls(uint64_t n) {
    const uint64_t q = dns_.queries();
    ASSERT_TRUE(WaitFor([&] { return dns_.queries() >= q + n; }));
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

// The finding: an answer naming 0.0.0.0, loopback or the metadata address made them workers
// that received prompts. Without allowed_networks they are refused; an ordinary address is not.
TEST_F(DiscoveryTest, HostileAddressesAreRefusedByDefault) {
  const uint16_t port = workers_[0]->port();
  dns_.SetA("vllm.test", {"127.0.0.1", "0.0.0.0", "169.254.169.254", "192.0.2.10"});
  Start("vllm.test", /*srv=*/false, port, /*networks=*/{});
  const std::string legit = "http://192.0.2.10:" + std::to_string(port);
  ASSERT_TRUE(WaitFor([&] { return Workers().find(legit) != std::string::npos; })) << Workers();
  Polls(6);
  const std::string w = Workers();
  EXPECT_THAT(w, Not(HasSubstr("127.0.0.1"))) << w;
  EXPECT_THAT(w, Not(HasSubstr("0.0.0.0")));
  EXPECT_THAT(w, Not(HasSubstr("169.254.169.254")));
  EXPECT_EQ(workers_[0]->requests(), 0u);  // no prompt, no probe reached the loopback worker
  // Counted once each, not at every poll.
  EXPECT_EQ(Refused("vllm.test", "loopback"), 1);
  EXPECT_EQ(Refused("vllm.test", "unspecified"), 1);
  EXPECT_EQ(Refused("vllm.test", "metadata"), 1);
}

// allowed_networks bounds the answers (loopback admitted only because it is named), and
// allowed_ports the SRV ports: another listener on an allowed host is not a worker.
TEST_F(DiscoveryTest, SrvPortsAndNetworksOutsideTheBoundsAreRefused) {
  dns_.SetA("w0.vllm.test", {"127.0.0.1"});
  dns_.SetA("w1.vllm.test", {"127.0.0.1"});        // an allowed host, a port not allowed
  dns_.SetA("w2.vllm.test", {"192.0.2.10"});       // outside allowed_networks
  dns_.SetA("w3.vllm.test", {"169.254.169.254"});  // metadata: 127.0.0.0/8 does not admit it
  dns_.SetSrv(kSrv, {{"w0.vllm.test", workers_[0]->port()},
                     {"w1.vllm.test", workers_[1]->port()},
                     {"w2.vllm.test", workers_[0]->port()},
                     {"w3.vllm.test", workers_[0]->port()}});
  Start(kSrv, /*srv=*/true, 0, {"127.0.0.0/8"}, {workers_[0]->port()});
  ASSERT_TRUE(Serves(*workers_[0])) << Workers();
  Polls(4);
  const std::string w = Workers();
  EXPECT_FALSE(Lists(*workers_[1])) << w;
  EXPECT_THAT(w, Not(HasSubstr("192.0.2.10")));
  EXPECT_THAT(w, Not(HasSubstr("169.254.169.254")));
  EXPECT_EQ(workers_[1]->requests(), 0u);
  EXPECT_EQ(Refused(kSrv, "port"), 1);
  EXPECT_EQ(Refused(kSrv, "network"), 1);
  EXPECT_EQ(Refused(kSrv, "metadata"), 1);
  // A refused address that later leaves the answer and comes back counts again.
  dns_.SetSrv(kSrv, {{"w0.vllm.test", workers_[0]->port()}});
  Polls(4);
  dns_.SetSrv(kSrv, {{"w0.vllm.test", workers_[0]->port()}, {"w1.vllm.test", workers_[1]->port()}});
  ASSERT_TRUE(WaitFor([&] { return Refused(kSrv, "port") == 2; }));
}

// Records owned by a name nobody asked about are not the name's addresses; a CNAME chain from
// the name asked is followed.
TEST_F(DiscoveryTest, RecordsForOtherNamesAreIgnored) {
  dns_.SetCname("vllm.test", "pods.vllm.test");
  dns_.SetA("pods.vllm.test", {"127.0.0.1"});
  dns_.SetForeignA("vllm.test", "evil.test", {"127.0.0.2", "127.0.0.3"});
  Start("vllm.test", /*srv=*/false, workers_[0]->port());
  ASSERT_TRUE(Serves(*workers_[0])) << Workers();
  Polls(6);
  const std::string w = Workers();
  EXPECT_THAT(w, Not(HasSubstr("127.0.0.2")));
  EXPECT_THAT(w, Not(HasSubstr("127.0.0.3")));
}

// A response with TC set carries only part of the answer (here none): the lookup is repeated
// over TCP and its answer used.
TEST_F(DiscoveryTest, TruncatedAnswersAreAskedAgainOverTcp) {
  dns_.SetTruncateUdp(true);
  Srv({0, 1});
  Start(kSrv, /*srv=*/true);
  ASSERT_TRUE(Serves(*workers_[0])) << Workers();
  ASSERT_TRUE(Serves(*workers_[1])) << Workers();
  EXPECT_GT(dns_.tcp_queries(), 0u);
  // Records that come and go are followed over TCP as well.
  Srv({1});
  ASSERT_TRUE(WaitFor([&] { return !Lists(*workers_[0]); })) << Workers();
}

}  // namespace
}  // namespace kvgate::testing
