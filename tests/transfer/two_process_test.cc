// Two processes: this test and a peer (the same binary, --transfer-peer) that owns a segment.
// For shm and tcp: byte-exact READ and WRITE at random sizes and offsets from several threads,
// refusals by the owner, and a peer that stops or dies mid-batch.
#include <signal.h>

#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "common/strings.h"
#include "gtest/gtest.h"
#include "tests/transfer/test_support.h"
#include "transfer/crc32c.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer {
namespace {

using testing::FillPattern;
using testing::FindPatternMismatch;
using testing::PeerOptions;
using testing::PeerProcess;

constexpr auto kWait = std::chrono::seconds(30);

class TwoProcessTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Uri() const { return "file:" + dir_.path() + "/segments"; }

  std::unique_ptr<PeerProcess> StartPeer(const std::string& name, uint64_t seed,
                                         uint64_t bytes = 16 << 20) {
    PeerOptions o;
    o.name = name;
    o.metadata_uri = Uri();
    o.bytes = bytes;
    o.seed = seed;
    auto p = std::make_unique<PeerProcess>(o);
    EXPECT_TRUE(p->WaitReady()) << "peer " << name << " did not start";
    return p;
  }

  std::unique_ptr<TransferEngine> Engine(std::vector<std::string> transports,
                                         const std::string& name = "client") {
    auto e = TransferEngine::Create(testing::TestEngineOptions(name, Uri(), std::move(transports)));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  testing::TempDir dir_;
  // Per writer thread: the range of its last WRITE and the CRC32C of what it wrote.
  uint32_t expected_crc_[4] = {};
  std::pair<uint64_t, uint64_t> expected_range_[4];
};

TEST_P(TwoProcessTest, ByteExactReadAndWriteFromSeveralThreads) {
  const std::string transport = GetParam();
  auto peer = StartPeer("peer", 77);
  auto engine = Engine({transport});
  ASSERT_NE(engine, nullptr);
  auto seg = engine->OpenSegment("peer");
  ASSERT_TRUE(seg.ok()) << seg.status();
  ASSERT_EQ(*engine->SegmentTransports(*seg), std::vector<std::string>{transport});
  const uint64_t base = peer->buffer_addr();
  const uint64_t size = peer->buffer_len();
  // Thread t reads anywhere but writes only into its own quarter of the peer's second half.
  const uint64_t write_zone = size / 2 / 4;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> local(8 << 20);  // Room for 12 requests of up to 600 KB.
      if (!engine->RegisterMemory(local.data(), local.size()).ok()) return ++bad, void();
      std::mt19937_64 rng(100 + t);
      for (int b = 0; b < 6; ++b) {
        auto batch = engine->AllocateBatch(14);  // 12 READs, a WRITE, its read-back.
        std::vector<TransferRequest> reqs;
        std::vector<uint64_t> roffs;
        uint64_t used = 0;
        for (int i = 0; i < 12; ++i) {
          // Sizes from 1 byte to ~600 KiB: below, at and across slice boundaries.
          const uint64_t len = 1 + rng() % (i % 3 == 0 ? 100 : 600000);
          const uint64_t roff = rng() % (size / 2 - len);  // Reads: the untouched first half.
          reqs.push_back({TransferOp::kRead, local.data() + used, *seg, base + roff, len});
          roffs.push_back(roff);
          used += len;
        }
        if (auto st = engine->Submit(*batch, reqs); !st.ok()) {
          ADD_FAILURE() << st;
          return ++bad, void();
        }
        auto st = engine->Wait(*batch, Clock::now() + kWait);
        if (!st.ok() || st->state != TaskState::kCompleted) {
          ADD_FAILURE() << "READ batch: " << (st.ok() ? st->first_error : st.status());
          return ++bad, void();
        }
        for (size_t i = 0; i < reqs.size(); ++i) {
          const auto* p = static_cast<const uint8_t*>(reqs[i].local);
          if (FindPatternMismatch(p, reqs[i].length, 77, roffs[i]) != -1) {
            ADD_FAILURE() << "wrong bytes in READ " << i;
            ++bad;
          }
        }
        // WRITE random bytes into this thread's zone, then check them at the owner.
        const uint64_t len = 1 + rng() % (write_zone / 2);
        const uint64_t woff = size / 2 + t * write_zone + rng() % (write_zone - len);
        FillPattern(local.data(), len, 1000 + t * 100 + b);
        std::vector<TransferRequest> w = {
            {TransferOp::kWrite, local.data(), *seg, base + woff, len}};
        if (auto st = engine->Submit(*batch, w); !st.ok()) {
          ADD_FAILURE() << st;
          return ++bad, void();
        }
        st = engine->Wait(*batch, Clock::now() + kWait);
        if (st->state != TaskState::kCompleted) {
          ADD_FAILURE() << "WRITE: " << st->first_error;
          return ++bad, void();
        }
        // Read it back through the engine as well.
        std::vector<TransferRequest> r = {
            {TransferOp::kRead, local.data() + len, *seg, base + woff, len}};
        if (auto st = engine->Submit(*batch, r); !st.ok()) {
          ADD_FAILURE() << st;
          return ++bad, void();
        }
        st = engine->Wait(*batch, Clock::now() + kWait);
        if (st->state != TaskState::kCompleted ||
            FindPatternMismatch(local.data() + len, len, 1000 + t * 100 + b) != -1) {
          ADD_FAILURE() << "WRITE read back differs";
          ++bad;
        }
        if (!engine->FreeBatch(*batch).ok()) ++bad;
        expected_crc_[t] = Crc32c(0, local.data(), len);
        expected_range_[t] = {woff, len};
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  // The owner's own view of the last WRITE of each thread.
  for (int t = 0; t < 4; ++t) {
    auto crc = peer->Crc(base + expected_range_[t].first, expected_range_[t].second);
    ASSERT_TRUE(crc.ok()) << crc.status();
    EXPECT_EQ(*crc, expected_crc_[t]) << "thread " << t;
  }
}

TEST_P(TwoProcessTest, OwnerRefusesRangesItNoLongerRegisters) {
  const std::string transport = GetParam();
  auto peer = StartPeer("peer", 5);
  auto reply = peer->Command("register 65536");
  ASSERT_TRUE(reply.ok() && absl::StartsWith(*reply, "buffer ")) << *reply;
  uint64_t extra = 0;
  ASSERT_TRUE(common::ParseUint64(reply->substr(7), &extra));
  auto engine = Engine({transport});
  auto seg = engine->OpenSegment("peer");
  ASSERT_TRUE(seg.ok());
  std::vector<uint8_t> local(65536);
  ASSERT_TRUE(engine->RegisterMemory(local.data(), local.size()).ok());
  auto batch = engine->AllocateBatch(4);
  // The client's own check first: past the end of the main buffer.
  auto st = engine->Submit(*batch, {{TransferOp::kRead, local.data(), *seg,
                                     peer->buffer_addr() + peer->buffer_len() - 100, 101}});
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "segment 'peer'")) << st;
  // The extra buffer works...
  ASSERT_TRUE(engine->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, extra, 4096}}).ok());
  ASSERT_EQ(engine->Wait(*batch, Clock::now() + kWait)->state, TaskState::kCompleted);
  EXPECT_EQ(FindPatternMismatch(local.data(), 4096, 5), -1);
  // ...until the owner unregisters it. Our cached descriptor still lists it, so the request
  // reaches the owner, which must refuse it rather than touch the memory.
  ASSERT_EQ(*peer->Command("unregister " + std::to_string(extra)), "ok");
  ASSERT_TRUE(engine
                  ->Submit(*batch, {{TransferOp::kWrite, local.data(), *seg, extra, 4096},
                                    {TransferOp::kRead, local.data(), *seg, extra, 4096}})
                  .ok());
  auto bs = engine->Wait(*batch, Clock::now() + kWait);
  ASSERT_TRUE(bs->finished());
  EXPECT_EQ(bs->failed, 2u) << bs->first_error;
  EXPECT_TRUE(absl::StrContains(bs->first_error.message(), "segment 'peer'")) << bs->first_error;
  // And the peer is fine.
  ASSERT_TRUE(peer->Crc(peer->buffer_addr(), 16).ok());
}

// A stopped peer: its tasks time out at the batch deadline. A killed peer: its tasks fail at
// once. In both cases the engine goes on working with another peer.
TEST_P(TwoProcessTest, StoppedOrKilledPeerFailsPendingTasksAndOthersKeepWorking) {
  const std::string transport = GetParam();
  auto victim = StartPeer("victim", 1);
  auto other = StartPeer("other", 2);
  auto engine = Engine({transport});
  auto vseg = engine->OpenSegment("victim");
  auto oseg = engine->OpenSegment("other");
  ASSERT_TRUE(vseg.ok() && oseg.ok());
  std::vector<uint8_t> local(8 << 20);
  ASSERT_TRUE(engine->RegisterMemory(local.data(), local.size()).ok());
  auto read_all = [&](SegmentId seg, uint64_t base, std::chrono::milliseconds timeout) {
    auto batch = engine->AllocateBatch(8, timeout);
    std::vector<TransferRequest> reqs;
    for (int i = 0; i < 8; ++i) {
      reqs.push_back(
          {TransferOp::kRead, local.data() + i * (1 << 20), seg, base + i * (1 << 20), 1 << 20});
    }
    EXPECT_TRUE(engine->Submit(*batch, reqs).ok());
    return *batch;
  };
  // Warm up both (connections, mappings).
  for (auto [seg, p] : {std::pair{*vseg, victim.get()}, std::pair{*oseg, other.get()}}) {
    auto b = read_all(seg, p->buffer_addr(), std::chrono::seconds(10));
    ASSERT_EQ(engine->Wait(b, Clock::now() + kWait)->state, TaskState::kCompleted);
  }
  if (transport == "tcp") {
    ASSERT_TRUE(victim->Stop());
    const auto start = Clock::now();
    auto b = read_all(*vseg, victim->buffer_addr(), std::chrono::milliseconds(300));
    EXPECT_EQ(engine->FreeBatch(b).code(), absl::StatusCode::kFailedPrecondition);
    auto st = engine->Wait(b, Clock::now() + kWait);
    const auto took = Clock::now() - start;
    ASSERT_TRUE(st->finished());
    EXPECT_EQ(st->state, TaskState::kTimedOut) << st->first_error;
    EXPECT_EQ(st->timed_out, 8u);
    EXPECT_LT(took, std::chrono::seconds(5));
    EXPECT_TRUE(engine->FreeBatch(b).ok());
  }
  // Killed while a batch is in flight (stopped first, so the batch is surely still pending).
  ASSERT_TRUE(victim->Stop());
  auto b = read_all(*vseg, victim->buffer_addr(), std::chrono::seconds(20));
  victim->Signal(SIGKILL);
  EXPECT_EQ(victim->Wait(), 128 + SIGKILL);
  const auto start = Clock::now();
  auto st = engine->Wait(b, Clock::now() + kWait);
  ASSERT_TRUE(st->finished());
  if (transport == "tcp") {
    // Connection resets, reconnects refused: failed well before the 20 s time-out.
    EXPECT_EQ(st->failed, 8u) << st->first_error;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  } else {
    // shm copies are plain memory accesses to a mapping we hold: they complete. New requests
    // must fail once the owner's socket is gone.
    bool refused = false;
    for (int i = 0; i < 500 && !refused; ++i) {
      auto b2 = read_all(*vseg, victim->buffer_addr(), std::chrono::seconds(5));
      auto st2 = engine->Wait(b2, Clock::now() + kWait);
      refused = st2->failed == 8;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(refused) << "shm kept serving a dead peer";
  }
  // The other peer is unaffected.
  auto ok = read_all(*oseg, other->buffer_addr(), std::chrono::seconds(10));
  auto ost = engine->Wait(ok, Clock::now() + kWait);
  EXPECT_EQ(ost->state, TaskState::kCompleted) << ost->first_error;
  EXPECT_EQ(FindPatternMismatch(local.data(), 8 << 20, 2), -1);

  // The victim comes back under the same name (a new instance, port and buffers): the open
  // segment follows it without being reopened.
  victim = StartPeer("victim", 3);
  bool back = false;
  const auto until = Clock::now() + std::chrono::seconds(15);
  while (!back && Clock::now() < until) {
    auto b3 = read_all(*vseg, victim->buffer_addr(), std::chrono::seconds(5));
    back = engine->Wait(b3, Clock::now() + kWait)->state == TaskState::kCompleted;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(back) << "the restarted peer was never reached";
  EXPECT_EQ(FindPatternMismatch(local.data(), 8 << 20, 3), -1);
}

INSTANTIATE_TEST_SUITE_P(Transports, TwoProcessTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

// The best transport is picked per peer and a refused one falls back: shm for managed buffers,
// tcp for a peer's plain (malloc'd) buffers, which shm cannot map.
TEST(TransportSelectionTest, ShmForManagedTcpForPlainMemory) {
  testing::TempDir dir;
  const std::string uri = "file:" + dir.path() + "/segments";
  PeerOptions o;
  o.name = "plain";
  o.metadata_uri = uri;
  o.managed = false;
  o.bytes = 1 << 20;
  o.seed = 3;
  PeerProcess plain(o);
  ASSERT_TRUE(plain.WaitReady());
  o.name = "managed";
  o.managed = true;
  PeerProcess managed(o);
  ASSERT_TRUE(managed.WaitReady());
  auto engine = TransferEngine::Create(testing::TestEngineOptions("client", uri, {"shm", "tcp"}));
  ASSERT_TRUE(engine.ok());
  std::vector<uint8_t> local(1 << 20);
  ASSERT_TRUE((*engine)->RegisterMemory(local.data(), local.size()).ok());
  for (auto [name, p, want] :
       {std::tuple{"plain", &plain, "tcp"}, std::tuple{"managed", &managed, "shm"}}) {
    auto seg = (*engine)->OpenSegment(name);
    ASSERT_TRUE(seg.ok());
    auto batch = (*engine)->AllocateBatch(1);
    ASSERT_TRUE((*engine)
                    ->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, p->buffer_addr(),
                                       local.size()}})
                    .ok());
    ASSERT_EQ((*engine)->Wait(*batch, Clock::now() + kWait)->state, TaskState::kCompleted);
    EXPECT_EQ((*engine)->GetTaskStatus(*batch, 0)->transport, want) << name;
    EXPECT_EQ(FindPatternMismatch(local.data(), local.size(), 3), -1);
  }
}

}  // namespace
}  // namespace kvgate::transfer
