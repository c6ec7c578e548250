// Replica sync (issue 29) end to end: three kvgate processes sharing a real Redis, in front of
// in-process kvgate-sim workers (and a fake worker that holds requests open). One session's
// turns sent to different replicas stay on one worker with its cache; a stored Responses
// response is reached through any replica; drains and learning reach every replica; a replica
// killed with SIGKILL leaves no load behind; with Redis killed every request still succeeds,
// the replicas say they are degraded, and after it is back their indexes converge.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/sim/sim_test_util.h"
#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using testing::AdminFetch;
using testing::Fetch;
using testing::WaitFor;

class ClusterGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = testing::TestBinary("kvgate");
    if (binary_.empty()) GTEST_SKIP() << "kvgate binary not built (set KVGATE_GATEWAY_BIN)";
    const std::string redis = testing::FindRedis();
    if (redis.empty()) GTEST_SKIP() << "redis-server not installed (scripts/setup installs it)";
    redis_binary_ = redis;
    ASSERT_TRUE(redis_.Start(redis_binary_, "cluster-test-pass"));
    sim_ = StartTwoWorkerSim();
    ASSERT_NE(sim_, nullptr);
    testing::FakeUpstream::Options fake;
    fake.model = "sim-model";
    fake_ = std::make_unique<testing::FakeUpstream>(fake);
    fake_->Start();
  }
  void TearDown() override {
    replicas_.clear();
    if (sim_) sim_->Stop();
  }

  std::string SimUrl(size_t i) const {
    return common::StrCat("http://127.0.0.1:", sim_->ports()[i]);
  }

  // Starts replica r<i> of the cluster over `workers` (URLs) and waits until it is ready and
  // knows `peers` other replicas.
  uint16_t StartReplica(int i, const std::vector<std::string>& workers, size_t peers) {
    std::string list;
    for (const auto& w : workers) common::StrAppend(&list, "  - url: ", w, "\n");
    const std::string password = testing::WriteTempFile("cluster-pass", "cluster-test-pass\n");
    chmod(password.c_str(), 0600);  // kvgate refuses a secret other users can read
    const std::string config = testing::WriteTempFile(
        "kvgate.yaml",
        common::StrCat("listen: \"127.0.0.1:0\"\nthreads: 1\n",
                       "admin: {token: ", testing::kAdminToken, "}\n",
                       "limits: {max_body_bytes: 1048576}\n", "routing: {policy: kvaware}\n",
                       "cluster:\n  redis: ", redis_.Url(), "\n  name: t", getpid(),
                       "\n  replica: r", i, "\n  password_file: ", password,
                       "\n  heartbeat_ms: 50\n  peer_timeout_ms: 600\n"
                       "  snapshot_interval_ms: 300\n  connect_timeout_ms: 500\n",
                       "workers:\n", list));
    replicas_.push_back(std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{binary_, "--config", config}));
    const uint16_t port = replicas_.back()->Port();
    EXPECT_NE(port, 0) << replicas_.back()->Log();
    if (port == 0) return 0;
    EXPECT_TRUE(WaitFor([&] { return Fetch(port, "GET", "/ready").status == 200; }));
    EXPECT_TRUE(WaitFor([&] {
      const std::string c = AdminFetch(port, "GET", "/admin/cluster").body;
      return c.find("\"connected\":true") != std::string::npos &&
             static_cast<size_t>(std::count(c.begin(), c.end(), '{')) >= 1 + peers;
    })) << AdminFetch(port, "GET", "/admin/cluster").body;
    return port;
  }

  std::vector<uint16_t> StartThree(const std::vector<std::string>& workers) {
    std::vector<uint16_t> ports;
    for (int i = 0; i < 3 && !HasFailure(); ++i) ports.push_back(StartReplica(i, workers, i));
    if (HasFailure()) return ports;
    // Every replica hears every other one.
    EXPECT_TRUE(WaitFor([&] {
      for (uint16_t p : ports) {
        const std::string c = AdminFetch(p, "GET", "/admin/cluster").body;
        if (std::count(c.begin(), c.end(), '{') < 3) return false;
      }
      return true;
    }));
    return ports;
  }

  std::string binary_;
  std::string redis_binary_;
  testing::RedisServer redis_;
  std::unique_ptr<SimProcess> sim_;
  std::unique_ptr<testing::FakeUpstream> fake_;
  std::vector<std::unique_ptr<testing::ChildProcess>> replicas_;
};

std::string Chat(const std::string& session, int turns) {
  std::string messages =
      common::StrCat(R"({"role":"system","content":")", Words("sys", 150), R"("})");
  for (int t = 0; t < turns; ++t) {
    common::StrAppend(&messages, R"(,{"role":"user","content":")",
                      Words(session + "u" + std::to_string(t) + "w", 60), R"("})");
    if (t + 1 < turns) {
      common::StrAppend(&messages, R"(,{"role":"assistant","content":"ok )", t, R"("})");
    }
  }
  return common::StrCat(R"({"model":"sim-model","max_tokens":4,"messages":[)", messages, "]}");
}

TEST_F(ClusterGatewayTest, ASessionsTurnsOnDifferentReplicasStayWithItsCache) {
  const auto ports = StartThree({SimUrl(0), SimUrl(1)});
  ASSERT_FALSE(HasFailure());
  std::set<std::string> workers;
  for (int turn = 1; turn <= 6; ++turn) {
    const uint16_t port = ports[turn % 3];  // as a connection-spreading balancer would
    auto r = Fetch(port, "POST", "/v1/chat/completions", Chat("s1", turn));
    ASSERT_EQ(r.status, 200) << r.body;
    workers.insert(r.Header("x-kvgate-worker"));
    if (turn > 1) {
      EXPECT_GT(Field(r.body, "cached_tokens"), 100) << "turn " << turn << r.body;
    }
    // The next turn's replica has heard of this one before it comes (an agent's next turn
    // comes seconds later; the sync takes milliseconds).
    ASSERT_TRUE(WaitFor([&] {
      return testing::AdminIndexBlocks(ports[(turn + 1) % 3]) == testing::AdminIndexBlocks(port);
    })) << "turn "
        << turn;
  }
  EXPECT_EQ(workers.size(), 1u);
  // Every replica's approximate index is the same, block for block.
  const auto blocks = testing::AdminIndexBlocks(ports[0]);
  EXPECT_FALSE(blocks.at(SimUrl(0)).empty() && blocks.at(SimUrl(1)).empty());
  EXPECT_EQ(testing::AdminIndexBlocks(ports[1]), blocks);
  EXPECT_EQ(testing::AdminIndexBlocks(ports[2]), blocks);
  // A replica that joins now loads the others' snapshots before it serves: its first request,
  // the session's next turn, goes to the session's worker and finds its cache.
  const uint16_t joined = StartReplica(3, {SimUrl(0), SimUrl(1)}, 3);
  ASSERT_NE(joined, 0);
  EXPECT_TRUE(WaitFor([&] { return testing::AdminIndexBlocks(joined) == blocks; }));
  auto r = Fetch(joined, "POST", "/v1/chat/completions", Chat("s1", 7));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("x-kvgate-worker"), *workers.begin());
  EXPECT_GT(Field(r.body, "cached_tokens"), 100) << r.body;
}

TEST_F(ClusterGatewayTest, AResponsesContinuationThroughAnotherReplicaReachesItsWorker) {
  const auto ports = StartThree({SimUrl(0), SimUrl(1)});
  ASSERT_FALSE(HasFailure());
  const std::string first = common::StrCat(R"({"model":"sim-model","max_output_tokens":4,)",
                                           R"("input":")", Words("q", 120), R"("})");
  auto r1 = Fetch(ports[0], "POST", "/v1/responses", first);
  ASSERT_EQ(r1.status, 200) << r1.body;
  const std::string id = StringField(r1.body, "id");
  const std::string owner = r1.Header("x-kvgate-worker");
  ASSERT_THAT(id, ::testing::StartsWith("resp_"));
  for (int i = 1; i <= 2; ++i) {
    const std::string next =
        common::StrCat(R"({"model":"sim-model","max_output_tokens":4,"previous_response_id":")", id,
                       R"(","input":"and then )", i, R"("})");
    // A pin reaches the other replicas within milliseconds; until then the id is unknown (404).
    testing::HttpResponse r;
    ASSERT_TRUE(WaitFor([&] {
      r = Fetch(ports[i], "POST", "/v1/responses", next);
      return r.status == 200;
    })) << r.status
        << r.body;
    EXPECT_EQ(r.Header("x-kvgate-worker"), owner);
    auto g = Fetch(ports[i], "GET", "/v1/responses/" + id);
    EXPECT_EQ(g.status, 200) << g.body;
    EXPECT_EQ(g.Header("x-kvgate-worker"), owner);
  }
}

TEST_F(ClusterGatewayTest, DrainsAndLoadReachEveryReplicaAndADeadOnesLoadExpires) {
  const std::string held = fake_->url();
  const auto ports = StartThree({held, SimUrl(0)});
  ASSERT_FALSE(HasFailure());
  auto d = AdminFetch(ports[0], "POST", "/admin/drain",
                      common::StrCat(R"({"worker":")", SimUrl(0), R"(","draining":true})"));
  ASSERT_EQ(d.status, 200) << d.body;
  for (uint16_t p : {ports[1], ports[2]}) {
    EXPECT_TRUE(WaitFor([&] {
      const std::string w = AdminFetch(p, "GET", "/admin/workers").body;
      const size_t at = w.find("{\"url\":\"" + SimUrl(0) + "\"");
      return at != std::string::npos && w.compare(w.find("\"draining\":", at) + 11, 4, "true") == 0;
    }));
  }
  // A request held open through replica 2: every replica counts it, only replica 2 as its own.
  std::thread client([&] {
    Fetch(ports[2], "POST", "/v1/chat/completions", Chat("held", 1), {{"x-fake-mode", "hang"}},
          std::chrono::seconds(20));
  });
  auto finish = absl::MakeCleanup([&] {
    fake_->Stop();  // ends the held request
    client.join();
  });
  ASSERT_TRUE(WaitFor(
      [&] { return testing::AdminInFlight(ports[2], held) == std::pair<int64_t, int64_t>(1, 1); }));
  for (uint16_t p : {ports[0], ports[1]}) {
    EXPECT_TRUE(WaitFor([&] {
      return testing::AdminInFlight(p, held) == std::pair<int64_t, int64_t>(1, 0);
    })) << testing::AdminInFlight(p, held).first;
  }
  // Replica 2 dies without a word: within the peer timeout its reservation is gone elsewhere.
  replicas_[2]->Signal(SIGKILL);
  replicas_[2]->Wait();
  for (uint16_t p : {ports[0], ports[1]}) {
    EXPECT_TRUE(WaitFor([&] { return testing::AdminInFlight(p, held).first == 0; },
                        std::chrono::seconds(5)));
    auto r = Fetch(p, "POST", "/v1/chat/completions", Chat("after", 1));
    EXPECT_EQ(r.status, 200) << r.body;
  }
}

TEST_F(ClusterGatewayTest, WithRedisGoneEveryRequestSucceedsAndStateConvergesWhenItIsBack) {
  const auto ports = StartThree({SimUrl(0), SimUrl(1)});
  ASSERT_FALSE(HasFailure());
  redis_.Stop();
  for (uint16_t p : ports) {
    EXPECT_TRUE(WaitFor([&] {
      return AdminFetch(p, "GET", "/admin/cluster").body.find("\"connected\":false") !=
             std::string::npos;
    }));
  }
  // Each replica learns sessions the others do not hear of.
  for (int i = 0; i < 3; ++i) {
    for (int turn = 1; turn <= 2; ++turn) {
      auto r =
          Fetch(ports[i], "POST", "/v1/chat/completions", Chat("outage" + std::to_string(i), turn));
      EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_EQ(Fetch(ports[i], "GET", "/ready").status, 200);
    const std::string metrics = Fetch(ports[i], "GET", "/metrics").body;
    EXPECT_THAT(metrics, ::testing::HasSubstr("kvgate_cluster_degraded 1"));
  }
  EXPECT_NE(testing::AdminIndexBlocks(ports[0]), testing::AdminIndexBlocks(ports[1]));
  ASSERT_TRUE(redis_.Start(redis_binary_, "cluster-test-pass"));
  // Back: each replica merges the others' snapshots; the indexes agree again.
  EXPECT_TRUE(WaitFor(
      [&] {
        const auto a = testing::AdminIndexBlocks(ports[0]);
        return testing::AdminIndexBlocks(ports[1]) == a && testing::AdminIndexBlocks(ports[2]) == a;
      },
      std::chrono::seconds(15)));
  for (uint16_t p : ports) {
    EXPECT_THAT(AdminFetch(p, "GET", "/admin/cluster").body,
                ::testing::HasSubstr("\"connected\":true"));
    EXPECT_THAT(Fetch(p, "GET", "/metrics").body,
                ::testing::HasSubstr("kvgate_cluster_degraded 0"));
  }
}

}  // namespace
}  // namespace kvgate::sim
