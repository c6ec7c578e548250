// File: tests/store/rpc_server_test.cc
// The master's RPC server is event-driven (issue 27): an open connection costs a socket, not a
// thread, so hundreds of idle peers leave the thread count flat and the master answering; and a
// process out of descriptors backs off instead of spinning on accept.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "spdlog/sinks/sink.h"
#include "spdlog/spdlog.h"
#include "store/client.h"
#include "store/data_node.h"
#include "store/master_service.h"
#include "tests/store/store_harness.h"
#include "tests/store/test_credentials.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"

namespace kvgate::store {
namespace {

using kvgate::testing::StartTestMaster;
using kvgate::testing::StartTestNode;
using kvgate::testing::TestAuth;
using kvgate::testing::TestClientOptions;
using kvgate::testing::TestCredentialsFile;
using kvgate::testing::TestNodeOptions;
using kvgate::testing::WaitFor;
using transfer::PeerRole;

size_t ThreadCount() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

int Connect(uint16_t port) {
  const int fd = kvgate::testing::ConnectLoopback(port);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Counts warnings that contain `what`. Formats nothing itself: spdlog's formatter objects live in
// the uninstrumented library, where UBSan's vptr check cannot see their type.
class CountingSink : public spdlog::sinks::sink {
 public:
  explicit CountingSink(std::string what) : what_(std::move(what)) {}
  void log(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find(what_) != std::string::npos)
      count_.fetch_add(1);
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
  size_t count() const { return count_.load(); }

 private:
  const std::string what_;
  std::atomic<size_t> count_{0};
};

// A Hello over an already open connection; @return whether an OK reply came back.
bool HelloOn(int fd, uint64_t id) {
  const std::string hello = EncodeRequest(HelloRequest{"probe"});
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader({static_cast<uint32_t>(hello.size()), kProtocolVersion, Op::kHello, id},
                    header);
  std::string frame(reinterpret_cast<const char*>(header), sizeof(header));
  frame += hello;
  if (::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size()))
    return false;
  uint8_t raw[kFrameHeaderSize];
  if (::recv(fd, raw, sizeof(raw), MSG_WAITALL) != sizeof(raw)) return false;
  auto reply = DecodeFrameHeader(raw);
  if (!reply.ok() || reply->request_id != id) return false;
  std::string body(reply->body_length, '\0');
  if (!body.empty() &&
      ::recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size()))
    return false;
  return DecodeStatus(body).ok();
}

TEST(RpcServerTest, HundredsOfIdleConnectionsCostNoThreads) {
  constexpr int kIdle = 500;
  rlimit fds{};
  ::getrlimit(RLIMIT_NOFILE, &fds);
  if (fds.rlim_cur < 2 * kIdle + 200) {
    if (fds.rlim_max < 2 * kIdle + 200) GTEST_SKIP() << "needs " << 2 * kIdle + 200 << " fds";
    fds.rlim_cur = fds.rlim_max;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &fds), 0);
  }
  auto svc = StartTestMaster();
  ASSERT_TRUE(svc.ok()) << svc.status();
  auto node = StartTestNode(TestNodeOptions("node-a", (*svc)->address(), {"tcp"}, 4 << 20));
  ASSERT_TRUE(node.ok()) << node.status();
  auto client = StoreClient::Create(TestClientOptions((*svc)->address(), "tenant-a"));
  ASSERT_TRUE(client.ok()) << client.status();
  constexpr uint64_t kSize = 8 << 10;
  auto* buf = static_cast<uint8_t*>(*(*client)->AllocateBuffer(2 * kSize));
  const ObjectKey key{MakeNamespace("a", "", "", 0), 1};
  // A put and a get before: every thread the client, node and master start is running now.
  std::memset(buf, 0x5a, kSize);
  std::vector<PutEntry> first = {{key, {{buf, kSize}}, std::nullopt, {}}};
  ASSERT_EQ((*client)->BatchPutFrom(first)[0].code, PutCode::kStored);
  const size_t before = ThreadCount();

  // kIdle authenticated peers that then say nothing.
  const auto self = TestAuth(PeerRole::kClient, "tenant-b")->self;
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = Connect((*svc)->port());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    idle.push_back(fd);
    const auto s = transfer::AuthenticateToServer(fd, *self, "master");
    ASSERT_TRUE(s.ok()) << "connection " << i << ": " << s;
  }
  const size_t during = ThreadCount();
  spdlog::info("rpc_server_test: {} threads before, {} with {} idle connections", before, during,
               kIdle);
  EXPECT_LT(during, before + 5) << "threads: " << before << " before, " << during << " with "
                                << kIdle << " idle connections";

  // The master still serves: a health-style hello on a new connection, quickly; the tenant's put
  // and get; and the idle connections themselves when they speak up.
  const auto start = std::chrono::steady_clock::now();
  RpcConnection fresh("127.0.0.1", (*svc)->port(), self);
  auto hello =
      fresh.Call(Op::kHello, EncodeRequest(HelloRequest{"probe"}), std::chrono::seconds(5));
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const ObjectKey key2{MakeNamespace("a", "", "", 0), 2};
  std::memset(buf, 0x6b, kSize);
  std::vector<PutEntry> second = {{key2, {{buf, kSize}}, std::nullopt, {}}};
  ASSERT_EQ((*client)->BatchPutFrom(second)[0].code, PutCode::kStored);
  std::memset(buf + kSize, 0, kSize);
  std::vector<GetEntry> gets = {{key, {{buf + kSize, kSize}}}};
  auto got = (*client)->BatchGetInto(gets);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(buf[kSize], 0x5a);
  EXPECT_EQ(buf[2 * kSize - 1], 0x5a);
  EXPECT_TRUE(HelloOn(idle.front(), 11));
  EXPECT_TRUE(HelloOn(idle.back(), 12));
  EXPECT_EQ((*svc)->protocol_errors(), 0u);
  for (int fd : idle) ::close(fd);
}

// Out of descriptors, accept fails at once for as long as the connection waits in the backlog:
// the server waits between tries (little CPU), says so once, and serves the peer once
// descriptors are back.
TEST(RpcServerTest, OutOfDescriptorsAcceptBacksOffAndRecovers) {
  auto sink = std::make_shared<CountingSink>("accept failed");
  spdlog::default_logger()->sinks().push_back(sink);  // Before the server's threads start.
  auto server = RpcServer::Start("127.0.0.1", 0, nullptr,
                                 [](const transfer::Principal&, Op, std::string_view) {
                                   return EncodeStatus(absl::OkStatus());
                                 },
                                 {});
  ASSERT_TRUE(server.ok()) << server.status();
  {
    // A junk frame first, so the server has logged a warning before descriptors run out: UBSan
    // checks a type the first time it meets it with a pipe(), which would then fail.
    const int junk = Connect((*server)->port());
    ASSERT_GE(junk, 0);
    ASSERT_EQ(::send(junk, "0123456789abcdef", kFrameHeaderSize, MSG_NOSIGNAL),
              static_cast<ssize_t>(kFrameHeaderSize));
    char b[256];
    while (::recv(junk, b, sizeof(b), 0) > 0) {
    }
    ::close(junk);
  }
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // The lowest free descriptor becomes the limit: nothing new can be opened until it is lifted.
  const int probe = ::dup(0);
  ASSERT_GE(probe, 0);
  ::close(probe);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // Opened before the limit.
  ASSERT_GE(fd, 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(probe + 1);  // `fd` took the lowest free one.
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  ASSERT_LT(::dup(0), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((*server)->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);  // Into the backlog.
  ASSERT_TRUE(WaitFor([&] { return sink->count() > 0; }));
  // Half a second of the episode: a spinning acceptor would burn all of it.
  rusage r0{}, r1{};
  ::getrusage(RUSAGE_SELF, &r0);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500)) ::usleep(20000);
  ::getrusage(RUSAGE_SELF, &r1);
  auto cpu_ms = [](const rusage& u) {
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000.0 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000.0;
  };
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);  // Before any check can print.
  EXPECT_LT(cpu_ms(r1) - cpu_ms(r0), 150.0) << "ms of CPU in 500 ms out of descriptors";
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_TRUE(HelloOn(fd, 1));
  ::close(fd);
  server->reset();
  std::erase(spdlog::default_logger()->sinks(), sink);
  EXPECT_EQ(sink->count(), 1u);  // One episode, one line.
}

}  // namespace
}  // namespace kvgate::store
