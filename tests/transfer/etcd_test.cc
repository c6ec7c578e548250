// Discovery through a real etcd (Debian's etcd-server) started on loopback by the test: two
// engines find each other, and a killed process's segment disappears when its lease expires.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/transfer/test_support.h"
#include "transfer/metadata/etcd_metadata.h"
#include "transfer/metadata/http_client.h"
#include "transfer/transfer_engine.h"

extern char** environ;

namespace kvgate::transfer {
namespace {

using testing::FindPatternMismatch;

std::string FindEtcd() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// One etcd member on loopback with its data in a temp dir. Ports: etcd cannot bind port 0, so
// free ones are picked just before it starts.
class EtcdServer {
 public:
  bool Start(const std::string& binary) {
    client_port_ = testing::FreePort();
    const uint16_t peer_port = testing::FreePort();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    log_ = dir_.path() + "/etcd.log";
    std::vector<std::string> args = {binary,
                                     "--name=kvgate-test",
                                     "--data-dir=" + dir_.path() + "/data",
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=kvgate-test=" + peer,
                                     "--heartbeat-interval=50",
                                     "--election-timeout=500"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return false;
    // Ready once a read succeeds (leader elected).
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      auto r = HttpPost("127.0.0.1", client_port_, "/v3/kv/range", "{\"key\":\"AA==\"}",
                        std::chrono::milliseconds(500));
      if (r.ok() && r->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  ~EtcdServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string Uri(const std::string& prefix, int ttl_s) const {
    return "etcd://127.0.0.1:" + std::to_string(client_port_) + "/" + prefix +
           "?ttl_s=" + std::to_string(ttl_s);
  }
  uint16_t port() const { return client_port_; }

 private:
  testing::TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  uint16_t client_port_ = 0;
};

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bin = FindEtcd();
    if (bin.empty())
      GTEST_SKIP() << "skipped: etcd not installed (scripts/setup installs etcd-server)";
    ASSERT_TRUE(etcd_.Start(bin)) << "etcd did not become ready";
  }
  EtcdServer etcd_;
};

TEST_F(EtcdTest, EnginesFindEachOtherAndADeadProcessSegmentExpires) {
  testing::PeerOptions po;
  po.name = "store-0";
  po.metadata_uri = etcd_.Uri("cluster-a", 2);
  po.transports = "tcp";
  po.bytes = 1 << 20;
  po.seed = 8;
  testing::PeerProcess peer(po);
  ASSERT_TRUE(peer.WaitReady());

  auto engine = TransferEngine::Create(
      testing::TestEngineOptions("worker-0", etcd_.Uri("cluster-a", 2), {"tcp"}));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto seg = (*engine)->OpenSegment("store-0");
  ASSERT_TRUE(seg.ok()) << seg.status();
  std::vector<uint8_t> local(1 << 20);
  ASSERT_TRUE((*engine)->RegisterMemory(local.data(), local.size()).ok());
  auto batch = (*engine)->AllocateBatch(1);
  ASSERT_TRUE((*engine)
                  ->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, peer.buffer_addr(),
                                     local.size()}})
                  .ok());
  ASSERT_EQ((*engine)->Wait(*batch, Clock::now() + std::chrono::seconds(10))->state,
            TaskState::kCompleted);
  EXPECT_EQ(FindPatternMismatch(local.data(), local.size(), 8), -1);

  // Another cluster prefix does not see it.
  auto other = OpenSegmentMetadata(etcd_.Uri("cluster-b", 2));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Lookup("store-0").status().code(), absl::StatusCode::kNotFound);
  // The peer sees us too (both published).
  auto md = OpenSegmentMetadata(etcd_.Uri("cluster-a", 2));
  ASSERT_TRUE(md.ok());
  EXPECT_TRUE((*md)->Lookup("worker-0").ok());

  // SIGKILL: no clean-up runs; the lease (TTL 2 s) must take the segment away.
  peer.Signal(SIGKILL);
  peer.Wait();
  const auto killed = Clock::now();
  EXPECT_TRUE((*md)->Lookup("store-0").ok()) << "gone before the lease expired";
  bool gone = false;
  while (!gone && Clock::now() - killed < std::chrono::seconds(15)) {
    gone = absl::IsNotFound((*md)->Lookup("store-0").status());
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "segment of a killed process still published";
  std::cerr << "segment gone "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count()
            << " ms after SIGKILL\n";
  EXPECT_EQ((*engine)->OpenSegment("store-0").status().code(), absl::StatusCode::kNotFound);
  // Our own segment is kept alive meanwhile.
  EXPECT_TRUE((*md)->Lookup("worker-0").ok());
}

TEST_F(EtcdTest, CleanExitRemovesAtOnceAndALostLeaseIsReplaced) {
  auto md = OpenSegmentMetadata(etcd_.Uri("c", 30));
  ASSERT_TRUE(md.ok());
  {
    auto engine = TransferEngine::Create(
        testing::TestEngineOptions("short-lived", etcd_.Uri("c", 30), {"tcp"}));
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_TRUE((*md)->Lookup("short-lived").ok());
  }
  EXPECT_EQ((*md)->Lookup("short-lived").status().code(), absl::StatusCode::kNotFound);

  // Revoke the lease behind the metadata client's back (as an etcd restart would lose it): the
  // keep-alive notices and publishes again under a new lease.
  EtcdParams params;
  params.endpoints = {{"127.0.0.1", etcd_.port()}};
  params.prefix = "c";
  params.lease_ttl_s = 3;  // Keep-alive every second.
  EtcdMetadata owner(params);
  SegmentDescriptor d;
  d.name = "phoenix";
  d.instance = "1-a";
  ASSERT_TRUE(owner.Publish(d).ok());
  const int64_t lease = owner.LeaseIdForTest();
  ASSERT_NE(lease, 0);
  auto r = HttpPost("127.0.0.1", etcd_.port(), "/v3/lease/revoke",
                    "{\"ID\":\"" + std::to_string(lease) + "\"}", std::chrono::seconds(2));
  ASSERT_TRUE(r.ok() && r->status == 200);
  EXPECT_EQ((*md)->Lookup("phoenix").status().code(), absl::StatusCode::kNotFound);
  bool back = false;
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  while (!back && Clock::now() < deadline) {
    back = (*md)->Lookup("phoenix").ok();
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(back) << "not re-published after the lease was lost";
  EXPECT_NE(owner.LeaseIdForTest(), lease);
}

TEST(EtcdUnreachableTest, CreateFailsWithUnavailable) {
  const uint16_t port = testing::FreePort();  // Nothing listens there.
  auto o = testing::TestEngineOptions(
      "x", "etcd://127.0.0.1:" + std::to_string(port) + "/p?timeout_ms=500", {"tcp"});
  auto engine = TransferEngine::Create(std::move(o));
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnavailable) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "etcd")) << engine.status();
}

}  // namespace
}  // namespace kvgate::transfer
