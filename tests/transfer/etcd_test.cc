// Discovery through a real etcd (Debian's etcd-server) started on loopback by the test: two
// engines find each other, and a killed process's segment disappears when its lease expires.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "common/url.h"
#include "gtest/gtest.h"
#include "net/http_client.h"
#include "tests/support/etcd_server.h"
#include "tests/support/loopback.h"
#include "tests/transfer/test_support.h"
#include "transfer/metadata/etcd_metadata.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer {
namespace {

using kvgate::testing::EtcdServer;
using kvgate::testing::FindEtcd;
using testing::FindPatternMismatch;

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
  auto r = router::HttpCallBlocking(
      common::HttpUrl{"http", "127.0.0.1", etcd_.port(), ""}, "POST", "/v3/lease/revoke",
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
