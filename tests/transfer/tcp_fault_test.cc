// tcp through a fault-injecting relay between the engine and its peer: random delays, writes
// split into small pieces, connections reset mid-stream, and (with CRC32C on) flipped bits.
// Every task must end completed with the right bytes, or failed; never wrong, never stuck.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>

#include "common/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/loopback.h"
#include "tests/transfer/test_support.h"
#include "transfer/crc32c.h"
#include "transfer/metadata/static_metadata.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer {
namespace {

using testing::FillPattern;
using testing::FindPatternMismatch;

struct RelayFaults {
  double reset_rate = 0.0;  // Per forwarded chunk.
  double delay_rate = 0.0;  // Per forwarded piece: sleep up to max_delay_us.
  uint32_t max_delay_us = 0;
  uint32_t max_pieces = 1;  // Each chunk is written in up to this many pieces.
  double flip_rate = 0.0;   // Per chunk: flip one bit.
};

// A TCP relay on 127.0.0.1 forwarding each accepted connection to `target_port`, two threads
// per connection. Thread-safe; stops and joins on destruction.
class FaultRelay {
 public:
  FaultRelay(uint16_t target_port, RelayFaults faults, uint64_t seed)
      : target_port_(target_port), faults_(faults), seed_(seed) {
    listen_fd_ = kvgate::testing::ListenLoopback(&port_, 64);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FaultRelay() {
    stop_ = true;
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      common::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  uint64_t resets() const { return resets_.load(); }
  uint64_t flips() const { return flips_.load(); }
  uint64_t connections() const { return connections_.load(); }

 private:
  // Both directions of one relayed connection; the sockets close when both pumps are done.
  struct Pair {
    int client = -1;
    int server = -1;
    ~Pair() {
      close(client);
      close(server);
    }
  };

  void AcceptLoop() {
    uint64_t n = 0;
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      const int s = kvgate::testing::ConnectLoopback(target_port_);
      if (s < 0) {
        close(c);
        continue;
      }
      const int one = 1;
      setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      connections_.fetch_add(1);
      auto pair = std::make_shared<Pair>();
      pair->client = c;
      pair->server = s;
      common::MutexLock lock(&mu_);
      threads_.emplace_back([this, pair, seed = seed_ + 2 * n] { Pump(pair, true, seed); });
      threads_.emplace_back([this, pair, seed = seed_ + 2 * n + 1] { Pump(pair, false, seed); });
      ++n;
    }
  }

  void Pump(std::shared_ptr<Pair> pair, bool upstream, uint64_t seed) {
    const int from = upstream ? pair->client : pair->server;
    const int to = upstream ? pair->server : pair->client;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<uint8_t> buf(64 << 10);
    while (!stop_) {
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      if (u(rng) < faults_.reset_rate) {
        // An abortive close: RST to both sides (linger 0), whatever is in flight is lost.
        const linger lg{1, 0};
        setsockopt(pair->client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        setsockopt(pair->server, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        resets_.fetch_add(1);
        break;
      }
      if (u(rng) < faults_.flip_rate) {
        buf[rng() % static_cast<size_t>(n)] ^= static_cast<uint8_t>(1u << (rng() % 8));
        flips_.fetch_add(1);
      }
      size_t off = 0;
      bool ok = true;
      while (ok && off < static_cast<size_t>(n)) {
        size_t piece = static_cast<size_t>(n) - off;
        if (faults_.max_pieces > 1) piece = 1 + rng() % std::max<size_t>(1, piece / 2 + 1);
        if (u(rng) < faults_.delay_rate) {
          std::this_thread::sleep_for(
              std::chrono::microseconds(rng() % (faults_.max_delay_us + 1)));
        }
        const ssize_t w = send(to, buf.data() + off, piece, MSG_NOSIGNAL);
        ok = w > 0;
        if (ok) off += static_cast<size_t>(w);
      }
      if (!ok) break;
    }
    // Wake the other direction; the last pump out closes both sockets (with the RST if set).
    shutdown(pair->client, SHUT_RDWR);
    shutdown(pair->server, SHUT_RDWR);
  }

  const uint16_t target_port_;
  const RelayFaults faults_;
  const uint64_t seed_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> resets_{0}, flips_{0}, connections_{0};
  std::thread accept_thread_;
  common::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

// Reads the static metadata, pointing every peer's tcp endpoint at the relay.
class RelayMetadata final : public SegmentMetadata {
 public:
  RelayMetadata(std::string path, uint16_t relay_port)
      : inner_(std::move(path)), relay_port_(relay_port) {}
  std::string_view Kind() const override { return "relay"; }
  absl::Status Publish(const SegmentDescriptor& desc) override { return inner_.Publish(desc); }
  absl::Status Remove(std::string_view name) override { return inner_.Remove(name); }
  absl::StatusOr<SegmentDescriptor> Lookup(std::string_view name) override {
    auto d = inner_.Lookup(name);
    if (d.ok() && name != "client") d->tcp_endpoint = "127.0.0.1:" + std::to_string(relay_port_);
    return d;
  }

 private:
  StaticMetadata inner_;
  const uint16_t relay_port_;
};

struct FaultCase {
  const char* name;
  bool crc;
  RelayFaults faults;
};

class TcpFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(TcpFaultTest, EveryTaskCompletesCorrectlyOrFails) {
  const FaultCase& fc = GetParam();
  testing::TempDir dir;
  const std::string path = dir.path() + "/segments";
  testing::PeerOptions po;
  po.name = "peer";
  po.metadata_uri = "file:" + path;
  po.transports = "tcp";
  po.bytes = 8 << 20;
  po.seed = 99;
  testing::PeerProcess peer(po);
  ASSERT_TRUE(peer.WaitReady());
  auto real = StaticMetadata(path).Lookup("peer");
  ASSERT_TRUE(real.ok());
  const uint16_t peer_port = static_cast<uint16_t>(
      std::stoi(real->tcp_endpoint.substr(real->tcp_endpoint.rfind(':') + 1)));
  FaultRelay relay(peer_port, fc.faults, 4242);

  auto o = testing::TestEngineOptions("client", "", {"tcp"});
  o.metadata = std::make_unique<RelayMetadata>(path, relay.port());
  o.verify_crc32c = fc.crc;
  o.tcp.slice_bytes = 16 << 10;  // More slices, more chances for faults per request.
  o.tcp.max_retries_per_slice = 3;
  auto engine = TransferEngine::Create(std::move(o));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto seg = (*engine)->OpenSegment("peer");
  ASSERT_TRUE(seg.ok());

  const uint64_t base = peer.buffer_addr();
  const uint64_t half = peer.buffer_len() / 2;  // Reads below, writes above.
  std::vector<uint8_t> local(4 << 20);
  ASSERT_TRUE((*engine)->RegisterMemory(local.data(), local.size()).ok());
  std::mt19937_64 rng(7);
  uint64_t completed = 0, failed = 0, write_checked = 0;
  const auto batch_timeout = std::chrono::milliseconds(3000);
  for (int round = 0; round < 20; ++round) {
    std::memset(local.data(), 0, local.size());
    auto batch = (*engine)->AllocateBatch(16, batch_timeout);
    struct Req {
      TransferRequest r;
      uint64_t roff;
      uint64_t seed;  // WRITE: pattern seed of the written bytes.
    };
    std::vector<Req> reqs;
    uint64_t used = 0, wused = 0;
    for (int i = 0; i < 16; ++i) {
      const uint64_t len = 1 + rng() % 150000;
      if (i % 4 == 3) {  // WRITE into a private range of the upper half.
        const uint64_t roff = half + wused;
        wused += len;
        const uint64_t seed = 5000 + round * 100 + i;
        FillPattern(local.data() + used, len, seed);
        reqs.push_back(
            {{TransferOp::kWrite, local.data() + used, *seg, base + roff, len}, roff, seed});
      } else {
        const uint64_t roff = rng() % (half - len);
        reqs.push_back({{TransferOp::kRead, local.data() + used, *seg, base + roff, len}, roff, 0});
      }
      used += len;
    }
    std::vector<TransferRequest> plain;
    for (auto& r : reqs) plain.push_back(r.r);
    const auto start = Clock::now();
    ASSERT_TRUE((*engine)->Submit(*batch, plain).ok());
    auto st = (*engine)->Wait(*batch, Clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(st.ok());
    // Never stuck: terminal by the batch time-out plus the watchdog's period and some slack.
    ASSERT_TRUE(st->finished()) << "round " << round << ": tasks still pending";
    EXPECT_LT(Clock::now() - start, batch_timeout + std::chrono::seconds(5));
    for (uint32_t i = 0; i < reqs.size(); ++i) {
      auto t = (*engine)->GetTaskStatus(*batch, i);
      ASSERT_TRUE(t.ok());
      if (t->state != TaskState::kCompleted) {
        ++failed;
        EXPECT_TRUE(t->state == TaskState::kFailed || t->state == TaskState::kTimedOut);
        EXPECT_FALSE(t->error.ok());
        continue;
      }
      ++completed;
      const auto* p = static_cast<const uint8_t*>(reqs[i].r.local);
      if (reqs[i].r.op == TransferOp::kRead) {
        ASSERT_EQ(FindPatternMismatch(p, reqs[i].r.length, 99, reqs[i].roff), -1)
            << "wrong bytes in a completed READ, round " << round;
      } else {
        // A completed WRITE must have landed exactly: ask the owner.
        auto crc = peer.Crc(base + reqs[i].roff, reqs[i].r.length);
        ASSERT_TRUE(crc.ok());
        ASSERT_EQ(*crc, Crc32c(0, p, reqs[i].r.length))
            << "wrong bytes after a completed WRITE, round " << round;
        ++write_checked;
      }
    }
    ASSERT_TRUE((*engine)->FreeBatch(*batch).ok());
  }
  // The faults happened and did not stop everything.
  EXPECT_GT(completed, 0u);
  EXPECT_GT(write_checked, 0u);
  if (fc.faults.reset_rate > 0) {
    EXPECT_GT(relay.resets(), 0u);
  }
  if (fc.faults.flip_rate > 0) {
    EXPECT_GT(relay.flips(), 0u);
  }
  std::cerr << fc.name << ": " << completed << " completed, " << failed << " failed, "
            << relay.resets() << " resets, " << relay.flips() << " flips, " << relay.connections()
            << " connections\n";
}

INSTANTIATE_TEST_SUITE_P(
    Faults, TcpFaultTest,
    ::testing::Values(FaultCase{"DelaysAndSplits", false, {0.0, 0.05, 300, 8, 0.0}},
                      FaultCase{"Resets", false, {0.03, 0.01, 100, 3, 0.0}},
                      FaultCase{"ResetsAndBitFlipsWithCrc", true, {0.01, 0.01, 100, 3, 0.05}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvgate::transfer
