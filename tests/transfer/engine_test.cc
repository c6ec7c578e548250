// The engine in one process: the local transport (requests to its own segment), every refusal
// at the boundary, task and batch states, transport fallback and fault injection, counters.
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/transfer/fault_proxy_transport.h"
#include "tests/transfer/test_support.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer {
namespace {

using testing::FillPattern;
using testing::FindPatternMismatch;

constexpr auto kWait = std::chrono::seconds(20);

bool Contains(const absl::Status& st, std::string_view s) {
  return absl::StrContains(st.message(), absl::string_view(s.data(), s.size()));
}

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<TransferEngine> MakeEngine(std::vector<std::string> transports);
  std::string Uri() const { return "file:" + dir_.path() + "/segments"; }
  testing::TempDir dir_;
};

std::unique_ptr<TransferEngine> EngineTest::MakeEngine(std::vector<std::string> transports) {
  auto e = TransferEngine::Create(testing::TestEngineOptions("self", Uri(), std::move(transports)));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST_F(EngineTest, LocalReadWriteRandomSizesAndOffsets) {
  auto engine = MakeEngine({"local"});
  ASSERT_NE(engine, nullptr);
  constexpr uint64_t kRemote = 4 << 20, kLocal = 4 << 20;
  std::vector<uint8_t> remote(kRemote), local(kLocal);
  FillPattern(remote.data(), kRemote, 11);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), kRemote).ok());
  ASSERT_TRUE(engine->RegisterMemory(local.data(), kLocal, "cpu:0").ok());
  auto seg = engine->OpenSegment("self");
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ(*engine->SegmentTransports(*seg), std::vector<std::string>{"local"});
  std::mt19937_64 rng(1);
  const auto base = reinterpret_cast<uint64_t>(remote.data());
  for (int round = 0; round < 20; ++round) {
    const uint64_t len = 1 + rng() % (2 << 20);
    const uint64_t roff = rng() % (kRemote - len);
    const uint64_t loff = rng() % (kLocal - len);
    auto batch = engine->AllocateBatch(2);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(
        engine->Submit(*batch, {{TransferOp::kRead, local.data() + loff, *seg, base + roff, len}})
            .ok());
    auto st = engine->Wait(*batch, Clock::now() + kWait);
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(st->state, TaskState::kCompleted) << st->first_error;
    EXPECT_EQ(st->bytes_done, len);
    ASSERT_EQ(FindPatternMismatch(local.data() + loff, len, 11, roff), -1) << "round " << round;
    // Write it back somewhere else and check the remote bytes.
    const uint64_t woff = rng() % (kRemote - len);
    ASSERT_TRUE(
        engine->Submit(*batch, {{TransferOp::kWrite, local.data() + loff, *seg, base + woff, len}})
            .ok());
    st = engine->Wait(*batch, Clock::now() + kWait);
    ASSERT_EQ(st->state, TaskState::kCompleted);
    ASSERT_EQ(std::memcmp(remote.data() + woff, local.data() + loff, len), 0);
    FillPattern(remote.data(), kRemote, 11);
    ASSERT_TRUE(engine->FreeBatch(*batch).ok());
  }
}

TEST_F(EngineTest, ConcurrentBatchesFromSeveralThreads) {
  auto engine = MakeEngine({"local"});
  ASSERT_NE(engine, nullptr);
  constexpr uint64_t kRemote = 8 << 20;
  std::vector<uint8_t> remote(kRemote);
  FillPattern(remote.data(), kRemote, 3);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), kRemote).ok());
  auto seg = engine->OpenSegment("self");
  ASSERT_TRUE(seg.ok());
  const auto base = reinterpret_cast<uint64_t>(remote.data());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> local(1 << 20);
      if (!engine->RegisterMemory(local.data(), local.size()).ok()) return ++bad, void();
      std::mt19937_64 rng(t);
      for (int b = 0; b < 10; ++b) {
        auto batch = engine->AllocateBatch(16);
        std::vector<TransferRequest> reqs;
        std::vector<std::pair<uint64_t, uint64_t>> where;  // local off, remote off
        uint64_t used = 0;
        for (int i = 0; i < 16; ++i) {
          const uint64_t len = 1 + rng() % 60000;
          const uint64_t roff = rng() % (kRemote - len);
          reqs.push_back({TransferOp::kRead, local.data() + used, *seg, base + roff, len});
          where.emplace_back(used, roff);
          used += len;
        }
        if (!engine->Submit(*batch, reqs).ok()) return ++bad, void();
        auto st = engine->Wait(*batch, Clock::now() + kWait);
        if (!st.ok() || st->state != TaskState::kCompleted) return ++bad, void();
        for (size_t i = 0; i < reqs.size(); ++i) {
          if (FindPatternMismatch(local.data() + where[i].first, reqs[i].length, 3,
                                  where[i].second) != -1) {
            ++bad;
          }
        }
        if (!engine->FreeBatch(*batch).ok()) ++bad;
      }
      if (!engine->UnregisterMemory(local.data()).ok()) ++bad;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(EngineTest, RefusesBadRequestsWithClearErrors) {
  auto engine = MakeEngine({"local"});
  ASSERT_NE(engine, nullptr);
  std::vector<uint8_t> remote(1 << 16), local(1 << 16), stray(64);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE(engine->RegisterMemory(local.data(), local.size()).ok());
  auto seg = engine->OpenSegment("self");
  ASSERT_TRUE(seg.ok());
  auto batch = engine->AllocateBatch(2);
  ASSERT_TRUE(batch.ok());
  const auto base = reinterpret_cast<uint64_t>(remote.data());

  // Remote range outside the owner's buffers: refused before anything starts.
  auto st = engine->Submit(
      *batch, {{TransferOp::kRead, local.data(), *seg, base + remote.size() - 10, 11}});
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(st, "segment 'self'")) << st;
  EXPECT_TRUE(Contains(st, "offset 0x")) << st;
  EXPECT_TRUE(Contains(st, "transport local")) << st;
  EXPECT_EQ(engine->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, 0x10, 8}}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(
      engine->Submit(*batch, {{TransferOp::kWrite, local.data(), *seg, UINT64_MAX - 4, 8}}).code(),
      absl::StatusCode::kOutOfRange);
  // Local memory not registered.
  st = engine->Submit(*batch, {{TransferOp::kRead, stray.data(), *seg, base, 8}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st, "not inside memory registered")) << st;
  st =
      engine->Submit(*batch, {{TransferOp::kRead, local.data() + local.size() - 4, *seg, base, 8}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  // Zero length, unknown op, unknown segment, unknown batch.
  EXPECT_EQ(engine->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, base, 0}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      engine->Submit(*batch, {{static_cast<TransferOp>(9), local.data(), *seg, base, 8}}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      engine->Submit(*batch, {{TransferOp::kRead, local.data(), SegmentId{999}, base, 8}}).code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Submit(BatchId{999}, {{TransferOp::kRead, local.data(), *seg, base, 8}}).code(),
            absl::StatusCode::kNotFound);
  // A refused submit started nothing: the batch is still empty.
  EXPECT_EQ(engine->GetBatchStatus(*batch)->tasks, 0u);
  // Capacity.
  std::vector<TransferRequest> three(3, {TransferOp::kRead, local.data(), *seg, base, 8});
  EXPECT_EQ(engine->Submit(*batch, three).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->GetTaskStatus(*batch, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // Allocation, registration and segments.
  EXPECT_EQ(engine->AllocateBatch(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->AllocateBatch(1, std::chrono::milliseconds(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->RegisterMemory(remote.data() + 8, 8).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->RegisterMemory(stray.data(), 8, "gpu:0").code(),
            absl::StatusCode::kInvalidArgument);
  st = engine->RegisterMemory(stray.data(), 8, "cuda:0");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st, "no GPU") || Contains(st, "without CUDA")) << st;
  EXPECT_EQ(engine->UnregisterMemory(stray.data()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->OpenSegment("nobody").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->CloseSegment(SegmentId{999}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->FreeBatch(BatchId{999}).code(), absl::StatusCode::kNotFound);
  // Still working after all that.
  ASSERT_TRUE(engine->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, base, 8}}).ok());
  EXPECT_EQ(engine->Wait(*batch, Clock::now() + kWait)->state, TaskState::kCompleted);
  auto task = engine->GetTaskStatus(*batch, 0);
  ASSERT_TRUE(task.ok());
  EXPECT_EQ(task->transport, "local");
  EXPECT_EQ(task->bytes_done, 8u);
}

TEST_F(EngineTest, CreateRefusesBadOptions) {
  auto o = testing::TestEngineOptions("", Uri(), {"local"});
  EXPECT_EQ(TransferEngine::Create(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = testing::TestEngineOptions("x", Uri(), {"local", "carrier-pigeon"});
  EXPECT_EQ(TransferEngine::Create(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = testing::TestEngineOptions("x", Uri(), {"local", "local"});
  EXPECT_EQ(TransferEngine::Create(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = testing::TestEngineOptions("x", "nowhere://", {"local"});
  EXPECT_EQ(TransferEngine::Create(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = testing::TestEngineOptions("x", Uri(), {"tcp"});
  o.tcp.listen_address = "not-an-ip";
  EXPECT_EQ(TransferEngine::Create(std::move(o)).status().code(), absl::StatusCode::kUnavailable);
}

// Wraps the first transport in fault injection.
std::unique_ptr<TransferEngine> FaultyEngine(const std::string& uri,
                                             std::vector<std::string> transports,
                                             testing::FaultPolicy policy,
                                             testing::FaultProxyTransport** proxy) {
  auto o = testing::TestEngineOptions("self", uri, transports);
  const std::string first = transports.front();
  o.wrap_transport = [=](TransportPtr t) -> TransportPtr {
    if (t->Name() != first) return t;
    auto p = std::make_unique<testing::FaultProxyTransport>(std::move(t), policy);
    *proxy = p.get();
    return p;
  };
  auto e = TransferEngine::Create(std::move(o));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST_F(EngineTest, RefusedSubmitFallsBackToTheNextTransport) {
  testing::FaultProxyTransport* proxy = nullptr;
  testing::FaultPolicy policy;
  policy.fail_after_n_submits = 1;  // One submit through local, then refused.
  auto engine = FaultyEngine(Uri(), {"local", "tcp"}, policy, &proxy);
  ASSERT_NE(engine, nullptr);
  std::vector<uint8_t> remote(1 << 20), local(1 << 20);
  FillPattern(remote.data(), remote.size(), 21);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE(engine->RegisterMemory(local.data(), local.size()).ok());
  auto seg = engine->OpenSegment("self");
  ASSERT_TRUE(seg.ok());
  EXPECT_EQ(*engine->SegmentTransports(*seg), (std::vector<std::string>{"local", "tcp"}));
  const auto base = reinterpret_cast<uint64_t>(remote.data());
  for (const char* expected : {"local", "tcp", "tcp"}) {
    auto batch = engine->AllocateBatch(1);
    ASSERT_TRUE(
        engine->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, base, local.size()}}).ok());
    auto st = engine->Wait(*batch, Clock::now() + kWait);
    ASSERT_EQ(st->state, TaskState::kCompleted) << st->first_error;
    EXPECT_EQ(engine->GetTaskStatus(*batch, 0)->transport, expected);
    EXPECT_EQ(FindPatternMismatch(local.data(), local.size(), 21), -1);
    std::memset(local.data(), 0, local.size());
    ASSERT_TRUE(engine->FreeBatch(*batch).ok());
  }
  EXPECT_GE(proxy->refused_submits(), 2u);
}

TEST_F(EngineTest, InjectedTaskFailuresEndFailedAndTheRestComplete) {
  testing::FaultProxyTransport* proxy = nullptr;
  testing::FaultPolicy policy;
  policy.task_fail_rate = 0.3;
  policy.seed = 7;
  auto engine = FaultyEngine(Uri(), {"local"}, policy, &proxy);
  ASSERT_NE(engine, nullptr);
  std::vector<uint8_t> remote(1 << 20), local(1 << 20);
  FillPattern(remote.data(), remote.size(), 5);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE(engine->RegisterMemory(local.data(), local.size()).ok());
  auto seg = engine->OpenSegment("self");
  const auto base = reinterpret_cast<uint64_t>(remote.data());
  auto batch = engine->AllocateBatch(64);
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    reqs.push_back({TransferOp::kRead, local.data() + i * 16384, *seg, base + i * 16384, 16384});
  }
  ASSERT_TRUE(engine->Submit(*batch, reqs).ok());
  auto st = engine->Wait(*batch, Clock::now() + kWait);
  ASSERT_TRUE(st->finished());
  EXPECT_EQ(st->state, TaskState::kFailed);
  EXPECT_EQ(st->failed, proxy->failed_tasks());
  EXPECT_GT(st->failed, 0u);
  EXPECT_GT(st->completed, 0u);
  EXPECT_EQ(st->completed + st->failed, 64u);
  EXPECT_EQ(st->bytes_done, uint64_t{st->completed} * 16384);
  for (uint32_t i = 0; i < 64; ++i) {
    auto t = engine->GetTaskStatus(*batch, i);
    if (t->state == TaskState::kCompleted) {
      EXPECT_EQ(FindPatternMismatch(local.data() + i * 16384, 16384, 5, i * 16384), -1);
    } else {
      EXPECT_EQ(t->state, TaskState::kFailed);
      EXPECT_TRUE(Contains(t->error, "fault proxy")) << t->error;
    }
  }
}

TEST_F(EngineTest, FreeBatchRefusedWhileTasksArePending) {
  testing::FaultProxyTransport* proxy = nullptr;
  testing::FaultPolicy policy;
  auto engine = FaultyEngine(Uri(), {"local"}, policy, &proxy);
  ASSERT_NE(engine, nullptr);
  // Large enough to outlast the FreeBatch call on the copy workers.
  const uint64_t n = 64 << 20;
  std::vector<uint8_t> remote(n), local(n);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), n).ok());
  ASSERT_TRUE(engine->RegisterMemory(local.data(), n).ok());
  auto seg = engine->OpenSegment("self");
  // A loaded machine can deschedule this thread until the copy is done, and then FreeBatch
  // rightly succeeds (the batch is gone: Wait on it would be an error). Up to three tries to
  // see the refusal; a free that succeeds must leave nothing behind either way.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto batch = engine->AllocateBatch(1);
    ASSERT_TRUE(engine
                    ->Submit(*batch, {{TransferOp::kRead, local.data(), *seg,
                                       reinterpret_cast<uint64_t>(remote.data()), n}})
                    .ok());
    const absl::Status early = engine->FreeBatch(*batch);
    if (!early.ok()) {
      EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_TRUE(Contains(early, "unfinished")) << early;
      auto st = engine->Wait(*batch, Clock::now() + kWait);
      ASSERT_TRUE(st.ok()) << st.status();
      ASSERT_EQ(st->state, TaskState::kCompleted);
      EXPECT_TRUE(engine->FreeBatch(*batch).ok());
    }
    EXPECT_EQ(engine->GetBatchStatus(*batch).status().code(), absl::StatusCode::kNotFound);
    if (!early.ok()) break;
  }
}

class CountingSink : public MetricsSink {
 public:
  void Counter(std::string_view name, std::string_view help, std::string_view transport,
               std::string_view op, uint64_t value) override {
    values[std::string(name) + "{" + std::string(transport) + "," + std::string(op) + "}"] = value;
  }
  std::map<std::string, uint64_t> values;
};

TEST_F(EngineTest, CountersPerTransport) {
  auto engine = MakeEngine({"local"});
  std::vector<uint8_t> remote(1 << 16), local(1 << 16);
  ASSERT_TRUE(engine->RegisterMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE(engine->RegisterMemory(local.data(), local.size()).ok());
  auto seg = engine->OpenSegment("self");
  auto batch = engine->AllocateBatch(2);
  const auto base = reinterpret_cast<uint64_t>(remote.data());
  ASSERT_TRUE(engine
                  ->Submit(*batch, {{TransferOp::kRead, local.data(), *seg, base, 1000},
                                    {TransferOp::kWrite, local.data(), *seg, base + 5000, 300}})
                  .ok());
  ASSERT_EQ(engine->Wait(*batch, Clock::now() + kWait)->state, TaskState::kCompleted);
  CountingSink sink;
  engine->CollectMetrics(sink);
  EXPECT_EQ(sink.values["kvgate_transfer_bytes_total{local,read}"], 1000u);
  EXPECT_EQ(sink.values["kvgate_transfer_bytes_total{local,write}"], 300u);
  EXPECT_EQ(sink.values["kvgate_transfer_requests_total{local,read}"], 1u);
  EXPECT_EQ(sink.values["kvgate_transfer_failures_total{local,}"], 0u);
}

}  // namespace
}  // namespace kvgate::transfer
