// Replica sync (issue 29) with two gateways in one process, so that ThreadSanitizer (make
// test-tsan runs the Gateway* tests) sees the sync's threads beside the gateway threads: a
// request in flight on one replica counts on the other, learning and drains cross over, and
// with Redis gone both keep serving and say they are degraded. The three-process version,
// with SIGKILL and reconvergence, is tests/sim/cluster_gateway_test.cc.
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/cluster/cluster_message.h"
#include "router/cluster/redis_link.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/redis_server.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

std::string Chat(const std::string& words, bool stream) {
  std::string text;
  for (int i = 0; i < 300; ++i) common::StrAppend(&text, words, i, " ");
  return common::StrCat(R"({"model":"fake-model","stream":)", stream ? "true" : "false",
                        R"(,"messages":[{"role":"user","content":")", text, R"("}]})");
}

class GatewayClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string redis = FindRedis();
    if (redis.empty()) GTEST_SKIP() << "redis-server not installed (scripts/setup installs it)";
    ASSERT_TRUE(redis_.Start(redis));
    for (auto& f : fakes_) {
      f = std::make_unique<FakeUpstream>(FakeUpstream::Options{});
      f->Start();
    }
    for (int i = 0; i < 2; ++i) {
      config::Config c = TestGatewayConfig();
      c.admin.token = kAdminToken;
      c.routing.policy = "kvaware";
      c.cluster.redis = redis_.Url();
      c.cluster.name = common::StrCat("gw", getpid());
      c.cluster.replica = common::StrCat("r", i);
      c.cluster.heartbeat_ms = 50;
      c.cluster.peer_timeout_ms = 600;
      c.cluster.snapshot_interval_ms = 300;
      c.cluster.connect_timeout_ms = 500;
      for (auto& f : fakes_) AddTestWorker(c, f->url());
      gateways_[i] = StartTestGateway(c);
      ASSERT_NE(gateways_[i], nullptr);
      ports_[i] = gateways_[i]->port();
    }
    ASSERT_TRUE(WaitFor([&] {
      return AdminFetch(ports_[0], "GET", "/admin/cluster").body.find("\"replica\":\"r1\"") !=
             std::string::npos;
    }));
  }
  void TearDown() override {
    for (auto& g : gateways_) g.reset();  // before the fakes they hold connections to
  }

  RedisServer redis_;
  std::unique_ptr<FakeUpstream> fakes_[2];
  std::unique_ptr<router::Gateway> gateways_[2];
  uint16_t ports_[2] = {0, 0};
};

TEST_F(GatewayClusterTest, LoadLearningAndDrainsCrossBetweenReplicas) {
  // A stream held by its worker through replica 0 counts on replica 1 as another's load.
  StreamingRequest held(ports_[0], "/v1/chat/completions", Chat("a", true),
                        {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "1"}});
  ASSERT_TRUE(held.ReadHeader());
  const std::string worker = held.Header("x-kvgate-worker");
  ASSERT_FALSE(worker.empty());
  EXPECT_EQ(AdminInFlight(ports_[0], worker), (std::pair<int64_t, int64_t>(1, 1)));
  EXPECT_TRUE(WaitFor([&] {
    return AdminInFlight(ports_[1], worker) == std::pair<int64_t, int64_t>(1, 0);
  })) << AdminInFlight(ports_[1], worker).first;
  for (auto& f : fakes_) f->ReleaseChunk();
  held.ReadAll();
  EXPECT_TRUE(WaitFor([&] { return AdminInFlight(ports_[1], worker).first == 0; }));
  // Replica 1 learned what replica 0 routed: the same blocks, and the same worker for it.
  EXPECT_TRUE(WaitFor([&] { return AdminIndexBlocks(ports_[1]) == AdminIndexBlocks(ports_[0]); }));
  EXPECT_FALSE(AdminIndexBlocks(ports_[1])[worker].empty());
  auto r = Fetch(ports_[1], "POST", "/v1/chat/completions", Chat("a", false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("x-kvgate-worker"), worker);
  // A drain on replica 1 reaches replica 0.
  auto d = AdminFetch(ports_[1], "POST", "/admin/drain",
                      common::StrCat(R"({"worker":")", worker, R"(","draining":true})"));
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_TRUE(WaitFor([&] {
    auto again = Fetch(ports_[0], "POST", "/v1/chat/completions", Chat("a", false));
    return again.status == 200 && again.Header("x-kvgate-worker") != worker;
  }));
}

// The channel is input from peers: a gap in a sender's numbers is counted as lost frames (and
// that sender asked for a snapshot), a malformed frame is refused and counted, and neither
// stops a replica from serving.
TEST_F(GatewayClusterTest, LostAndMalformedFramesAreCountedAndRefused) {
  auto link =
      router::cluster::RedisLink::Connect("127.0.0.1", redis_.port(), "", std::chrono::seconds(2));
  ASSERT_TRUE(link.ok()) << link.status();
  const std::string channel = common::StrCat("kvgate:gw", getpid(), ":sync");
  router::cluster::Record hello{.kind = router::cluster::RecordKind::kHello, .text = "intruder"};
  std::string rec;
  router::cluster::AppendRecord(&rec, hello);
  const uint64_t sender = 0xabcdef;
  ASSERT_TRUE((*link)
                  ->Publish(channel, {router::cluster::EncodeFrame(sender, 1, 0, 1, rec),
                                      router::cluster::EncodeFrame(sender, 5, 0, 1, rec),
                                      "not a frame at all"})
                  .ok());
  for (uint16_t port : ports_) {
    EXPECT_TRUE(WaitFor([&] {
      const std::string m = Fetch(port, "GET", "/metrics").body;
      return m.find("kvgate_cluster_messages_lost_total 3") != std::string::npos &&
             m.find("kvgate_cluster_decode_errors_total 1") != std::string::npos;
    })) << Fetch(port, "GET", "/metrics").body;
    EXPECT_THAT(AdminFetch(port, "GET", "/admin/cluster").body,
                ::testing::HasSubstr("\"replica\":\"intruder\""));
    EXPECT_EQ(Fetch(port, "POST", "/v1/chat/completions", Chat("x", false)).status, 200);
  }
}

TEST_F(GatewayClusterTest, WithoutRedisBothReplicasServeAndSayTheyAreDegraded) {
  redis_.Stop();
  for (uint16_t port : ports_) {
    EXPECT_TRUE(WaitFor([&] {
      return Fetch(port, "GET", "/metrics").body.find("kvgate_cluster_degraded 1") !=
             std::string::npos;
    }));
    EXPECT_EQ(Fetch(port, "GET", "/ready").status, 200);
    for (int i = 0; i < 4; ++i) {
      auto r = Fetch(port, "POST", "/v1/chat/completions", Chat(common::StrCat("s", i), false));
      EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_THAT(AdminFetch(port, "GET", "/admin/cluster").body,
                ::testing::HasSubstr("\"connected\":false"));
  }
}

}  // namespace
}  // namespace kvgate::testing
