// File: tests/store/auth_test.cc
// The store's trust boundary (issue 27), one test per red-team finding: outsiders, clients
// posing as data nodes, tenants reaching into each other's namespaces, a peer at the transfer
// port without a credential, frames announcing huge bodies, connections that never finish the
// handshake. Each attack fails with a clear error and the legitimate tenant is unaffected: its
// objects stay, byte-exact.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/strings.h"
#include "store/admin_http.h"
#include "store/client.h"
#include "store/data_node.h"
#include "store/master_service.h"
#include "store/store_cli.h"
#include "store/wire.h"
#include "tests/fakes/test_client.h"
#include "tests/store/store_harness.h"
#include "tests/store/test_credentials.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"
#include "transfer/shm/unix_socket.h"

namespace kvgate::store {
namespace {

using kvgate::testing::StartTestMaster;
using kvgate::testing::StartTestNode;
using kvgate::testing::TestAuth;
using kvgate::testing::TestClientOptions;
using kvgate::testing::TestCredentialsFile;
using kvgate::testing::TestMasterOptions;
using kvgate::testing::TestNodeOptions;
using kvgate::testing::WaitFor;
using transfer::PeerRole;

constexpr uint64_t kSize = 16 << 10;

int ConnectLoopback(uint16_t port) {
  const int fd = kvgate::testing::ConnectLoopback(port);
  EXPECT_GE(fd, 0) << "cannot connect to 127.0.0.1:" << port;
  return fd;
}

// Bytes the peer sends before it hangs up (bounded by a 5 s receive time-out).
size_t DrainUntilClosed(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[512];
  size_t total = 0;
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) total += static_cast<size_t>(n);
  return total;
}

class StoreAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterServiceOptions mo = TestMasterOptions();
    mo.limits.handshake_timeout = std::chrono::milliseconds(300);
    mo.limits.max_handshakes = 4;
    mo.limits.max_body_bytes_in_flight = 1 << 20;
    auto svc = StartTestMaster(mo);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    auto n = StartTestNode(TestNodeOptions("node-a", svc_->address()));
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(*n);
    tenant_a_ = Client("tenant-a");
    ASSERT_NE(tenant_a_, nullptr);
    buf_ = static_cast<uint8_t*>(*tenant_a_->AllocateBuffer(8 * kSize));
    // Tenant a's objects, which every attack below must leave as they are.
    std::vector<PutEntry> entries;
    for (uint64_t i = 0; i < 4; ++i) {
      std::memset(buf_ + i * kSize, static_cast<int>(0x40 + i), kSize);
      entries.push_back({AKey(i), {{buf_ + i * kSize, kSize}}, std::nullopt, {}});
    }
    for (const auto& r : tenant_a_->BatchPutFrom(entries))
      ASSERT_EQ(r.code, PutCode::kStored) << r.error;
  }

  static ObjectKey AKey(uint64_t h) { return {MakeNamespace("a", "", "", 0), h}; }

  std::unique_ptr<StoreClient> Client(const std::string& credential, const std::string& file = "") {
    StoreClientOptions o = TestClientOptions(svc_->address(), credential);
    o.timeout = std::chrono::seconds(3);
    if (!file.empty()) o.credentials_file = file;
    auto c = StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Tenant a reads its four objects back, byte-exact; the store holds `objects` in all.
  void ExpectTenantAIntact(uint64_t objects = 4) {
    std::vector<GetEntry> gets;
    std::memset(buf_ + 4 * kSize, 0, 4 * kSize);
    for (uint64_t i = 0; i < 4; ++i) gets.push_back({AKey(i), {{buf_ + (4 + i) * kSize, kSize}}});
    auto got = tenant_a_->BatchGetInto(gets);
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      for (uint64_t b = 0; b < kSize; b += 997)
        ASSERT_EQ(buf_[(4 + i) * kSize + b], 0x40 + i) << "object " << i << " byte " << b;
    }
    EXPECT_EQ(svc_->master()->Stats().objects, objects);
    EXPECT_TRUE(node_->registered());
  }

  // A raw call as `credential` (the test file's secret).
  absl::StatusOr<std::string> CallAs(const std::string& credential, const Request& req) {
    auto self = TestAuth(PeerRole::kClient, credential);
    std::optional<transfer::Credential> cred;
    if (self != nullptr) cred = self->self;
    if (self == nullptr) cred = TestAuth(PeerRole::kNode, credential)->self;
    RpcConnection conn("127.0.0.1", svc_->port(), cred);
    return conn.Call(RequestOp(req), EncodeRequest(req), std::chrono::seconds(3));
  }

  std::unique_ptr<MasterService> svc_;
  std::unique_ptr<DataNode> node_;
  std::unique_ptr<StoreClient> tenant_a_;
  uint8_t* buf_ = nullptr;
};

TEST_F(StoreAuthTest, AnOutsiderWithoutTheSecretIsRefused) {
  // Junk, an old client's frame and a forged credential: each connection ends, nothing runs.
  int junk = ConnectLoopback(svc_->port());
  ASSERT_GT(::send(junk, "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL), 0);
  EXPECT_EQ(DrainUntilClosed(junk), 0u);
  ::close(junk);
  transfer::Credential forged = *TestAuth(PeerRole::kClient, "default")->self;
  forged.secret[0] ^= 1;
  RpcConnection conn("127.0.0.1", svc_->port(), forged);
  auto r = conn.Call(Op::kExists, EncodeRequest(ExistsRequest{{AKey(0)}, false, 0}),
                     std::chrono::seconds(3));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << r.status();
  EXPECT_TRUE(WaitFor([&] { return svc_->auth_failures() >= 2; }));
  // A client whose file holds the wrong secret gets the same clear error from the start.
  const std::string other = TestCredentialsFile() + ".other";
  {
    std::ofstream out(other, std::ios::trunc);
    out << "client default " << std::string(64, '9') << " *\n";
  }
  std::filesystem::permissions(
      other, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  StoreClientOptions o;
  o.master = svc_->address();
  o.transports = {"tcp"};
  o.credentials_file = other;
  o.timeout = std::chrono::seconds(3);
  auto c = StoreClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto exists = (*c)->BatchExists({AKey(0)}, true);
  EXPECT_EQ(exists.status().code(), absl::StatusCode::kUnauthenticated) << exists.status();
  ExpectTenantAIntact();
}

TEST_F(StoreAuthTest, AClientCannotPoseAsADataNode) {
  // register_node with the node's name once wiped the store; heartbeat stole its journal;
  // publish_segment redirected every client to the attacker.
  auto reg = CallAs("tenant-b", RegisterNodeRequest{"node-a", "evil", 0, 1 << 20, {}});
  EXPECT_EQ(reg.status().code(), absl::StatusCode::kPermissionDenied) << reg.status();
  auto hb = CallAs("tenant-b", HeartbeatRequest{"node-a", 1});
  EXPECT_EQ(hb.status().code(), absl::StatusCode::kPermissionDenied) << hb.status();
  auto pub = CallAs("default", PublishSegmentRequest{"node-a", "{\"name\":\"node-a\"}"});
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kPermissionDenied) << pub.status();
  EXPECT_NE(pub.status().message().find("node credential"), std::string::npos) << pub.status();
  EXPECT_GE(svc_->denied_requests(), 3u);
  ExpectTenantAIntact();
}

TEST_F(StoreAuthTest, ATenantTouchesOnlyItsNamespaces) {
  auto b = Client("tenant-b");
  ASSERT_NE(b, nullptr);
  auto* b_buf = static_cast<uint8_t*>(*b->AllocateBuffer(kSize));
  std::memset(b_buf, 0x66, kSize);
  // List, read, lease, pin, remove and pre-write (poison) tenant a's keys: all refused.
  auto exists = b->BatchExists({AKey(0)}, false);
  EXPECT_EQ(exists.status().code(), absl::StatusCode::kPermissionDenied) << exists.status();
  for (const Request& req : std::vector<Request>{
           GetRequest{{AKey(1)}, 600000, ""}, ExistsRequest{{AKey(2)}, false, 600000},
           RemoveRequest{{AKey(3)}}, PinRequest{{AKey(0)}, true},
           PutStartRequest{{PutItem{AKey(99), {kSize}, std::nullopt, {}}}, "", 1},
           WaitKeysRequest{{AKey(0)}, 10}}) {
    auto r = CallAs("tenant-b", req);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied)
        << OpName(RequestOp(req)) << ": " << r.status();
  }
  std::vector<PutEntry> poison = {{AKey(7), {{b_buf, kSize}}, std::nullopt, {}}};
  auto put = b->BatchPutFrom(poison);
  EXPECT_EQ(put[0].code, PutCode::kError);
  // Its own namespace works.
  std::vector<PutEntry> own = {{{MakeNamespace("b", "", "", 0), 1}, {{b_buf, kSize}}, {}, {}}};
  auto own_put = b->BatchPutFrom(own);
  EXPECT_EQ(own_put[0].code, PutCode::kStored) << own_put[0].error;
  EXPECT_EQ(svc_->master()->Stats().leased, 0u);
  EXPECT_EQ(svc_->master()->Stats().pinned, 0u);
  // Tenant a still owns exactly its four objects (and b its one).
  EXPECT_EQ(svc_->master()->Stats().objects, 5u);
  std::vector<ObjectKey> mine = {AKey(0), AKey(1), AKey(2), AKey(3), AKey(7)};
  auto present = tenant_a_->BatchExists(mine, false);
  ASSERT_TRUE(present.ok()) << present.status();
  EXPECT_EQ(*present, (std::vector<bool>{true, true, true, true, false}));
}

TEST_F(StoreAuthTest, TheTransferPortServesOnlyCredentialHolders) {
  auto desc = svc_->master()->LookupSegment({"node-a"});
  ASSERT_TRUE(desc.ok()) << desc.status();
  const std::string& json = desc->json;
  const size_t at = json.find("\"tcp_endpoint\":\"127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << json;
  const uint16_t port = static_cast<uint16_t>(std::stoi(json.substr(at + 26)));
  // A READ of the pool's first bytes without the handshake: the owner hangs up, sends nothing.
  int fd = ConnectLoopback(port);
  uint8_t hello[40] = {'K', 'V', 'T', 'R', 1};
  ASSERT_GT(::send(fd, hello, sizeof(hello), MSG_NOSIGNAL), 0);
  EXPECT_EQ(DrainUntilClosed(fd), 0u);
  ::close(fd);
  // A forged credential fails the challenge.
  fd = ConnectLoopback(port);
  transfer::Credential forged = *TestAuth(PeerRole::kClient, "tenant-b")->self;
  forged.secret[5] ^= 0x20;
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  auto s = transfer::AuthenticateToServer(fd, forged, "node-a");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  ::close(fd);
  // The real credential, asking for another segment than the one at this port: the client
  // sees that the answer is not from the node it was told about.
  fd = ConnectLoopback(port);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  s = transfer::AuthenticateToServer(fd, *TestAuth(PeerRole::kClient, "tenant-b")->self, "node-b");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  ::close(fd);
  ExpectTenantAIntact();
}

TEST_F(StoreAuthTest, HugeFramesAndStalledHandshakesAreBounded) {
  // An authenticated peer announcing a 64 MiB body while the server's budget is 1 MiB: refused
  // before anything is allocated, and the connection ends.
  auto self = TestAuth(PeerRole::kClient, "tenant-b")->self;
  int fd = ConnectLoopback(svc_->port());
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_TRUE(transfer::AuthenticateToServer(fd, *self, "master").ok());
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader({kMaxFrameBody, kProtocolVersion, Op::kExists, 7}, header);
  ASSERT_GT(::send(fd, header, sizeof(header), MSG_NOSIGNAL), 0);
  EXPECT_GT(DrainUntilClosed(fd), 0u);  // The refusal, then EOF.
  ::close(fd);
  // Connections that never say hello: past max_handshakes (4) new ones are turned away at once,
  // and the stalled ones end at the handshake time-out, after which clients get in again.
  std::vector<int> stalled;
  for (int i = 0; i < 5; ++i) stalled.push_back(ConnectLoopback(svc_->port()));
  EXPECT_TRUE(WaitFor([&] { return svc_->refused_connections() == 1; }));
  for (int fd2 : stalled) EXPECT_EQ(DrainUntilClosed(fd2), 0u);
  for (int fd2 : stalled) ::close(fd2);
  EXPECT_TRUE(WaitFor([&] { return svc_->auth_failures() >= 4; }));
  auto late = Client("default");
  ASSERT_NE(late, nullptr);
  auto present = late->BatchExists({AKey(0)}, true);
  ASSERT_TRUE(present.ok()) << present.status();
  ExpectTenantAIntact();
}

TEST_F(StoreAuthTest, LongNamespacesAndSegmentNamesCostBoundedMemory) {
  // A 4 KB namespace is refused when the request is read.
  ObjectKey huge{std::string(4096, 'b'), 1};
  auto r = CallAs("default", ExistsRequest{{huge}, false, 0});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  // Tiny objects under the longest namespace allowed once held the master's memory at a
  // multiple of the pool they filled: each is now charged its metadata, so eviction bounds the
  // count by the pool (8 MiB) over that cost. Tenant a pins its objects so they stay.
  for (const auto& s : tenant_a_->BatchPin({AKey(0), AKey(1), AKey(2), AKey(3)}, true))
    ASSERT_TRUE(s.ok()) << s;
  auto b = Client("tenant-b");
  ASSERT_NE(b, nullptr);
  const std::string ns = MakeNamespace("b", std::string(kMaxNamespaceBytes - 16, 'x'), "", 0);
  ASSERT_LE(ns.size(), kMaxNamespaceBytes);
  constexpr uint64_t kTiny = 64;
  constexpr uint64_t kBatch = 1000;
  auto* tiny = static_cast<uint8_t*>(*b->AllocateBuffer(kBatch * kTiny));
  std::memset(tiny, 0x5a, kBatch * kTiny);
  uint64_t stored = 0;
  for (uint64_t round = 0; round < 20; ++round) {
    std::vector<PutEntry> entries;
    for (uint64_t i = 0; i < kBatch; ++i)
      entries.push_back({{ns, round * kBatch + i}, {{tiny + i * kTiny, kTiny}}, std::nullopt, {}});
    for (const auto& put : b->BatchPutFrom(entries)) stored += put.code == PutCode::kStored;
  }
  EXPECT_EQ(stored, 20 * kBatch);  // Every put was served, older ones evicted for newer ones.
  const uint64_t per_object = 2 * ns.size() + 256;
  const uint64_t objects = svc_->master()->Stats().objects;
  EXPECT_LE(objects, 4 + (8u << 20) / per_object);
  EXPECT_GT(svc_->master()->Stats().evictions, 0u);
  // Segment names no registered node owns stop at kMaxUnregisteredSegments, and a node's
  // segment goes with the node.
  size_t published = 0;
  absl::Status last;
  for (size_t i = 0; i < kMaxUnregisteredSegments + 10; ++i) {
    auto pub = CallAs("node", PublishSegmentRequest{common::StrCat("ghost-", i), "{}"});
    if (pub.ok()) ++published;
    last = pub.status();
  }
  EXPECT_EQ(published, kMaxUnregisteredSegments);
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  ASSERT_TRUE(CallAs("node", RegisterNodeRequest{"node-z", "", 0, 1 << 20, {}}).ok());
  ASSERT_TRUE(CallAs("node", PublishSegmentRequest{"node-z", "{}"}).ok());
  EXPECT_TRUE(svc_->master()->LookupSegment({"node-z"}).ok());
  // node-z never heartbeats: the master drops it, and its segment with it.
  EXPECT_TRUE(WaitFor([&] { return !svc_->master()->LookupSegment({"node-z"}).ok(); }));
  ExpectTenantAIntact(objects);
}

// The shm socket is an abstract Unix socket: no file mode, anyone on the host may connect. A
// served peer gets a read-write mapping of the pool, so only the store's own user may be one.
TEST(StoreShmTest, AnotherUserCannotMapThePool) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user (nobody)";
  auto svc = StartTestMaster();
  ASSERT_TRUE(svc.ok()) << svc.status();
  auto node = StartTestNode(TestNodeOptions("node-shm", (*svc)->address(), {"shm"}, 4 << 20));
  ASSERT_TRUE(node.ok()) << node.status();
  auto desc = (*svc)->master()->LookupSegment({"node-shm"});
  ASSERT_TRUE(desc.ok()) << desc.status();
  const size_t at = desc->json.find("\"shm_socket\":\"");
  ASSERT_NE(at, std::string::npos) << desc->json;
  const size_t from = at + 14;
  const std::string name = desc->json.substr(from, desc->json.find('"', from) - from);
  // Asks for the pool's memfd; @return whether one came back.
  auto map_pool = [&]() -> bool {
    auto sock = transfer::shm_internal::ConnectAbstract(name);
    if (!sock.ok()) return false;
    transfer::shm_internal::ShmMessage get;
    get.seq = 1;
    get.addr = (*node)->base();
    int fd = -1;
    transfer::shm_internal::ShmMessage reply;
    const bool got = transfer::shm_internal::SendMessage(*sock, get).ok() &&
                     transfer::shm_internal::ReceiveMessage(*sock, &reply, &fd).ok() && fd >= 0;
    if (fd >= 0) ::close(fd);
    ::close(*sock);
    return got;
  };
  EXPECT_TRUE(map_pool());  // The store's own user: served (the check below can fail).
  const int code = kvgate::testing::RunInChild([&] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 2;
    return map_pool() ? 1 : 0;
  });
  ASSERT_GE(code, 0) << "cannot fork";
  ASSERT_LT(code, 128) << "the child was killed by signal " << code - 128;
  EXPECT_EQ(code, 0) << "nobody mapped root's pool (2: could not become nobody)";
}

// One connection sending its request a byte at a time once blocked /health for everyone (and
// kvgate then marked the store down).
TEST(StoreHttpTest, SlowPeersDoNotHoldUpHealth) {
  AdminPages pages;
  pages.health = [] { return std::make_pair(200, std::string(R"({"status":"ok"})")); };
  pages.metrics = [] { return std::string(); };
  pages.admin = [] { return std::string("{}"); };
  auto http = AdminHttpServer::Start("127.0.0.1", 0, pages);
  ASSERT_TRUE(http.ok()) << http.status();
  std::vector<int> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(ConnectLoopback((*http)->port()));
    ASSERT_GT(::send(slow.back(), "G", 1, MSG_NOSIGNAL), 0);
  }
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r =
        kvgate::testing::Fetch((*http)->port(), "GET", "/health", "", {}, std::chrono::seconds(5));
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  }
  for (int fd : slow) EXPECT_EQ(DrainUntilClosed(fd), 0u);  // Closed at their deadline.
  for (int fd : slow) ::close(fd);
}

TEST(StoreCliTest, ListenersStayWhereTheStoreListens) {
  const char* loopback[] = {"kvgate-store", "--listen", "127.0.0.1:7400"};
  auto cli = ParseStoreCli(3, loopback);
  ASSERT_TRUE(cli.ok()) << cli.status();
  EXPECT_EQ(cli->data.tcp.listen_address, "127.0.0.1");
  const char* events[] = {"kvgate-store", "--kv-events", "tcp://*:5557"};
  auto open = ParseStoreCli(3, events);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(open.status().message().find("--kv-events-remote"), std::string::npos);
  const char* remote[] = {"kvgate-store", "--kv-events", "tcp://*:5557", "--kv-events-remote"};
  EXPECT_TRUE(ParseStoreCli(4, remote).ok());
  const char* local[] = {"kvgate-store", "--kv-events", "tcp://127.0.0.1:5557"};
  EXPECT_TRUE(ParseStoreCli(3, local).ok());
}

TEST(CredentialsTest, FilesAreCheckedAndScopesMatch) {
  auto bad = transfer::CredentialSet::Parse("client x 00 *\n", "f");
  EXPECT_NE(bad.status().message().find("f:1"), std::string::npos) << bad.status();
  auto role = transfer::CredentialSet::Parse("admin x " + std::string(64, 'a') + " *\n", "f");
  EXPECT_EQ(role.status().code(), absl::StatusCode::kInvalidArgument);
  auto set =
      transfer::CredentialSet::Parse("# c\nclient t " + std::string(64, 'a') + " a|*,exact\n", "f");
  ASSERT_TRUE(set.ok()) << set.status();
  const transfer::Credential* t = set->Find("t");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->InScope("a|lora|salt|0"));
  EXPECT_TRUE(t->InScope("exact"));
  EXPECT_FALSE(t->InScope("ab|||0"));
  EXPECT_FALSE(t->InScope("exact2"));
  // A world-readable file is refused; a missing one is made 0600 with fresh secrets.
  const std::string dir = TestCredentialsFile() + ".d";
  auto made = transfer::CredentialSet::LoadOrCreate(dir + "/credentials");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->Select(PeerRole::kNode, "").ok());
  EXPECT_TRUE(made->Select(PeerRole::kClient, "").ok());
  std::filesystem::permissions(dir + "/credentials", std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  EXPECT_EQ(transfer::CredentialSet::Load(dir + "/credentials").status().code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace kvgate::store
