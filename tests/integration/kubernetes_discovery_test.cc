// Workers found by watching EndpointSlices (discovery.kubernetes) against a Kubernetes API
// double on loopback that speaks the real list/watch protocol over HTTPS with a bearer token:
// pods appear (health-checked before traffic), go not ready (no new requests, kept in the
// fleet), terminate (in-flight requests finish, new ones go elsewhere) and leave; the watch
// resumes from its last resourceVersion after a dropped connection and after a bookmark, and
// lists again after 410 Gone (as an ERROR event and as an HTTP answer); roles and DP sizes
// come from pod annotations; a wrong CA or token finds nothing.
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/kube_api_double.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/test_certs.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "kvgate-test-token";

class KubernetesDiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = MakeTestCerts();
    // A service account directory as the kubelet mounts it: token, ca.crt, namespace.
    token_file_ = certs_.dir + "/token";
    std::ofstream(token_file_) << kToken << "\n";
    std::ofstream(certs_.dir + "/namespace") << "llm";
    api_ = std::make_unique<KubeApiDouble>(
        KubeApiDouble::Options{certs_.server_cert, certs_.server_key, kToken, "llm"});
    // Three pods on one port, at three loopback addresses, as pods of one Service are.
    for (size_t i = 0; i < 3; ++i) {
      FakeUpstream::Options o;
      o.host = "127.0.0." + std::to_string(i + 2);
      o.port = port_;
      workers_[i] = std::make_unique<FakeUpstream>(o);
      workers_[i]->Start();
      port_ = workers_[i]->port();
    }
  }
  ~KubernetesDiscoveryTest() override {
    if (gateway_) gateway_->Stop();
    std::filesystem::remove_all(certs_.dir);
  }

  config::KubernetesDiscoveryConfig Source() {
    config::KubernetesDiscoveryConfig k;
    k.service = "vllm";
    k.port_name = "http";
    k.api_server = api_->url();
    k.token_file = token_file_;
    k.ca_file = certs_.ca_cert;
    k.timeout_ms = 2'000;
    k.watch_timeout_s = 60;
    k.retry_max_ms = 200;
    k.worker.models = {"fake-model"};
    k.allowed_networks = {"127.0.0.0/8"};  // the pods here are loopback addresses (issue 27)
    return k;
  }
  void Start(const config::KubernetesDiscoveryConfig& k) {
    config::Config c = TestGatewayConfig(/*health_checks=*/true);
    c.admin.token = kAdminToken;
    c.discovery.kubernetes.push_back(k);
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    gw_port_ = gateway_->port();
  }

  // A slice of the Service "vllm" with the pods `which`, each in its state.
  FakeSlice Slice(std::vector<std::pair<size_t, std::string>> which,
                  const std::string& name = "vllm-abcde") {
    FakeSlice s;
    s.name = name;
    s.service = "vllm";
    s.ports = {{"metrics", 9090}, {"http", port_}};
    for (const auto& [i, state] : which) {
      FakeEndpoint e;
      e.address = "127.0.0." + std::to_string(i + 2);
      e.pod = "vllm-" + std::to_string(i);
      e.ready = state == "ready";
      e.serving = state != "not_ready";
      e.terminating = state == "terminating";
      s.endpoints.push_back(e);
    }
    return s;
  }
  std::string Workers() { return AdminFetch(gw_port_, "GET", "/admin/workers").body; }
  std::string Url(size_t i) { return workers_[i]->url(); }
  bool Lists(size_t i) { return Workers().find(Url(i)) != std::string::npos; }
  // The worker's entry in /admin/workers (up to the next worker's).
  std::string Entry(size_t i) {
    const std::string all = Workers();
    const size_t at = all.find("\"url\":\"" + Url(i) + "\"");
    if (at == std::string::npos) return "";
    return all.substr(at, all.find("\"url\":", at + 6) - at);
  }
  bool Serves(size_t i) {
    return WaitFor([&] {
      const auto r = Fetch(gw_port_, "POST", "/v1/chat/completions", ChatBody(false));
      return r.status == 200 && r.Header("x-kvgate-worker") == Url(i);
    });
  }
  // Sends `n` requests; every one must be answered by a worker other than `i`.
  void NoneTo(size_t i, int n = 6) {
    const uint64_t before = workers_[i]->requests();
    for (int k = 0; k < n; ++k) {
      const auto r = Fetch(gw_port_, "POST", "/v1/chat/completions", ChatBody(false));
      EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_EQ(workers_[i]->requests(), before);
  }

  TestCerts certs_;
  std::string token_file_;
  std::unique_ptr<KubeApiDouble> api_;
  uint16_t port_ = 0;
  std::unique_ptr<FakeUpstream> workers_[3];
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t gw_port_ = 0;
};

TEST_F(KubernetesDiscoveryTest, PodsAppearGoNotReadyTerminateAndLeave) {
  api_->Apply(Slice({{0, "ready"}}));
  Start(Source());
  ASSERT_TRUE(Serves(0)) << Workers();
  EXPECT_EQ(api_->lists(), 1u);

  // A new pod whose engine is still loading: listed, no traffic until its check passes.
  workers_[1]->set_healthy(false);
  api_->Apply(Slice({{0, "ready"}, {1, "ready"}}));
  ASSERT_TRUE(WaitFor([&] { return Lists(1); })) << Workers();
  NoneTo(1);
  workers_[1]->set_healthy(true);
  ASSERT_TRUE(Serves(1));

  // Pod 0 fails its readiness probe: kept in the fleet, no new requests.
  api_->Apply(Slice({{0, "not_ready"}, {1, "ready"}}));
  ASSERT_TRUE(WaitFor([&] {
    return Entry(0).find(R"("discovery":"not_ready")") != std::string::npos;
  })) << Workers();
  EXPECT_THAT(Entry(0), HasSubstr(R"("available":false)"));
  NoneTo(0);
  api_->Apply(Slice({{0, "ready"}, {1, "ready"}}));
  ASSERT_TRUE(Serves(0));

  // Pod 1 terminates with a stream in flight: the stream completes, new requests go to pod 0.
  StreamingRequest* stream = nullptr;
  std::unique_ptr<StreamingRequest> holder;
  ASSERT_TRUE(WaitFor([&] {
    holder = std::make_unique<StreamingRequest>(
        gw_port_, "/v1/chat/completions", ChatBody(true),
        Headers{{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "2"}});
    return holder->ReadHeader() && holder->Header("x-kvgate-worker") == Url(1);
  }));
  stream = holder.get();
  api_->Apply(Slice({{0, "ready"}, {1, "terminating"}}));
  ASSERT_TRUE(WaitFor([&] {
    return Entry(1).find(R"("discovery":"terminating")") != std::string::npos;
  })) << Workers();
  NoneTo(1);
  workers_[1]->ReleaseChunk();
  workers_[1]->ReleaseChunk();
  const std::string body = stream->ReadAll();
  EXPECT_THAT(body, HasSubstr("data: [DONE]"));

  // Pod 1 is gone: it leaves the fleet (and the index).
  api_->Apply(Slice({{0, "ready"}}));
  ASSERT_TRUE(WaitFor([&] { return !Lists(1); })) << Workers();
  EXPECT_EQ(api_->lists(), 1u);  // every change came through the one watch
  EXPECT_EQ(api_->unauthorized(), 0u);

  // The slice is deleted: no workers left.
  api_->Delete("vllm-abcde");
  ASSERT_TRUE(WaitFor([&] { return !Lists(0); })) << Workers();
}

TEST_F(KubernetesDiscoveryTest, WatchResumesFromTheLastVersionAfterADropAndABookmark) {
  api_->Apply(Slice({{0, "ready"}}));
  Start(Source());
  ASSERT_TRUE(Serves(0));
  api_->Apply(Slice({{0, "ready"}, {1, "ready"}}));
  ASSERT_TRUE(Serves(1));
  const uint64_t seen = api_->version();
  ASSERT_TRUE(WaitFor([&] { return api_->open_watches() == 1; }));

  api_->DropWatches();
  ASSERT_TRUE(WaitFor([&] { return api_->watches() >= 2 && api_->open_watches() == 1; }));
  EXPECT_EQ(api_->last_watch_version(), std::to_string(seen));
  EXPECT_EQ(api_->lists(), 1u);

  // A bookmark moves the version on without a change; the next resume starts there. (The
  // double writes what it has for a watch before it cuts it, so the bookmark arrives first.)
  api_->Bookmark();
  const uint64_t bookmark = api_->version();
  api_->DropWatches();
  ASSERT_TRUE(WaitFor([&] { return api_->watches() >= 3 && api_->open_watches() == 1; }));
  EXPECT_EQ(api_->last_watch_version(), std::to_string(bookmark));
  api_->Apply(Slice({{0, "ready"}, {1, "ready"}, {2, "ready"}}));
  ASSERT_TRUE(Serves(2));
  EXPECT_EQ(api_->lists(), 1u);
  EXPECT_TRUE(Lists(0) && Lists(1) && Lists(2));
}

// Both spellings of 410 Gone: the ERROR event kube-apiserver streams, and an HTTP answer.
TEST_F(KubernetesDiscoveryTest, ListsAgainAfterGone) {
  for (bool as_http : {false, true}) {
    SCOPED_TRACE(as_http ? "410 as HTTP" : "410 as ERROR event");
    if (gateway_) gateway_->Stop();
    gateway_.reset();
    api_ = std::make_unique<KubeApiDouble>(
        KubeApiDouble::Options{certs_.server_cert, certs_.server_key, kToken, "llm"});
    api_->set_gone_as_http(as_http);
    api_->Apply(Slice({{0, "ready"}}));
    Start(Source());
    ASSERT_TRUE(Serves(0));
    ASSERT_TRUE(WaitFor([&] { return api_->open_watches() == 1; }));

    api_->Compact();
    api_->DropWatches();
    ASSERT_TRUE(WaitFor([&] { return api_->lists() == 2 && api_->open_watches() == 1; }))
        << api_->lists();
    EXPECT_EQ(api_->gone(), 1u);
    // The new watch works: a change after the re-list arrives.
    api_->Apply(Slice({{0, "ready"}, {1, "ready"}}));
    ASSERT_TRUE(Serves(1));
    EXPECT_EQ(api_->lists(), 2u);
  }
}

TEST_F(KubernetesDiscoveryTest, PodAnnotationsGiveRoleAndDpSize) {
  api_->SetPod("vllm-0", {{"kvgate.io/dp-size", "2"}, {"kvgate.io/role", "decode"}},
               {{"app", "vllm"}});
  api_->SetPod("vllm-1", {{"kvgate.io/role", "sideways"}});
  api_->Apply(Slice({{0, "ready"}, {1, "ready"}}));
  Start(Source());
  ASSERT_TRUE(WaitFor([&] { return Lists(0) && Lists(1); })) << Workers();
  EXPECT_THAT(Entry(0), HasSubstr(R"("role":"decode")"));
  EXPECT_THAT(Entry(0), HasSubstr(R"("dp_size":2)"));
  EXPECT_THAT(Entry(1), HasSubstr(R"("role":"mixed")"));  // the bad value was ignored
  EXPECT_EQ(api_->pod_reads(), 2u);
  // A pod is read once: later changes of its slice do not read it again.
  api_->Apply(Slice({{0, "ready"}, {1, "not_ready"}}));
  ASSERT_TRUE(WaitFor([&] { return Entry(1).find("not_ready") != std::string::npos; }));
  EXPECT_EQ(api_->pod_reads(), 2u);
}

TEST_F(KubernetesDiscoveryTest, WithoutPodAccessTheTemplateApplies) {
  api_->set_pod_status(403);
  api_->Apply(Slice({{0, "ready"}}));
  auto k = Source();
  k.worker.role = config::WorkerRole::kPrefill;
  Start(k);
  ASSERT_TRUE(WaitFor([&] { return Lists(0); })) << Workers();
  EXPECT_THAT(Entry(0), HasSubstr(R"("role":"prefill")"));
  api_->Apply(Slice({{0, "ready"}, {1, "ready"}}));
  ASSERT_TRUE(WaitFor([&] { return Lists(1); }));
  EXPECT_EQ(api_->pod_reads(), 1u);  // asked once, told no, never asked again
}

TEST_F(KubernetesDiscoveryTest, AnUntrustedServerOrAWrongTokenFindsNothing) {
  api_->Apply(Slice({{0, "ready"}}));
  auto k = Source();
  k.ca_file = certs_.other_ca_cert;
  Start(k);
  // The TLS handshake fails: nothing is listed, however often it retries.
  ASSERT_TRUE(WaitFor([&] { return api_->handshake_failures() >= 2; }));
  EXPECT_THAT(Workers(), HasSubstr(R"("workers":[])"));
  EXPECT_EQ(api_->lists(), 0u);
  gateway_->Stop();
  gateway_.reset();

  std::ofstream(token_file_, std::ios::trunc) << "stolen-token\n";
  Start(Source());
  ASSERT_TRUE(WaitFor([&] { return api_->unauthorized() >= 2; }));
  EXPECT_FALSE(Lists(0));
  // The token is read again at each call (the kubelet rotates it): the right one gets through.
  std::ofstream(token_file_, std::ios::trunc) << kToken << "\n";
  ASSERT_TRUE(Serves(0));
}

// Issue 27: a slice naming the metadata address, loopback outside allowed_networks, or a port
// not allowed adds no worker (logged and counted once); the legitimate pod still serves.
TEST_F(KubernetesDiscoveryTest, EndpointsOutsideTheBoundsAreRefused) {
  FakeSlice s = Slice({{0, "ready"}});
  for (const char* address : {"169.254.169.254", "10.9.8.7", "0.0.0.0"}) {
    FakeEndpoint e;
    e.address = address;
    e.pod = "";  // no targetRef: nothing to read
    s.endpoints.push_back(e);
  }
  api_->Apply(s);
  FakeSlice other = Slice({{1, "ready"}}, "vllm-other");
  other.ports = {{"http", 8001}};  // an allowed host, a port not allowed
  api_->Apply(other);
  auto k = Source();
  k.allowed_ports = {port_};
  Start(k);
  ASSERT_TRUE(Serves(0)) << Workers();
  auto refused = [&](const std::string& reason) {
    const std::string m = "\n" + Fetch(gw_port_, "GET", "/metrics").body;
    const std::string series = "\nkvgate_discovery_refused_total{reason=\"" + reason +
                               "\",source=\"kubernetes llm/vllm\"} ";
    const size_t at = m.find(series);
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + series.size()));
  };
  ASSERT_TRUE(WaitFor([&] { return refused("port") == 1; }));
  const std::string w = Workers();
  EXPECT_THAT(w, Not(HasSubstr("169.254.169.254")));
  EXPECT_THAT(w, Not(HasSubstr("10.9.8.7")));
  EXPECT_THAT(w, Not(HasSubstr(":8001")));
  EXPECT_EQ(refused("metadata"), 1);
  EXPECT_EQ(refused("network"), 1);
  EXPECT_EQ(refused("unspecified"), 1);
  // Another change to the slices: the same refusals are not counted again.
  api_->Apply(Slice({{0, "ready"}, {2, "ready"}}, "vllm-third"));
  ASSERT_TRUE(Serves(2));
  EXPECT_EQ(refused("metadata"), 1);
}

}  // namespace
}  // namespace kvgate::testing
