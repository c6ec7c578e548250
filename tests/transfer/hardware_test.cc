// RDMA, CUDA and HIP: the code is built wherever the headers are, and these tests skip with the
// missing piece named ("no RDMA device", "no GPU") on machines without the hardware. The
// device-memory paths (bounce buffers over tcp, runtime copies on local) also run against a fake
// GPU runtime whose "device memory" is host memory, so they are exercised everywhere.
#include <atomic>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/transfer/test_support.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/rdma/rdma_transport.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer {
namespace {

using testing::FillPattern;
using testing::FindPatternMismatch;

constexpr auto kWait = std::chrono::seconds(20);

// Moves `n` bytes host -> device -> host through `engine`'s own segment and checks them.
void RoundTripThroughDevice(TransferEngine& engine, void* device, uint64_t n,
                            const std::string& location) {
  std::vector<uint8_t> src(n), dst(n);
  FillPattern(src.data(), n, 31);
  ASSERT_TRUE(engine.RegisterMemory(src.data(), n).ok());
  ASSERT_TRUE(engine.RegisterMemory(dst.data(), n).ok());
  absl::Status reg = engine.RegisterMemory(device, n, location);
  ASSERT_TRUE(reg.ok()) << reg;
  auto seg = engine.OpenSegment(engine.segment_name());
  ASSERT_TRUE(seg.ok());
  const auto dev = reinterpret_cast<uint64_t>(device);
  auto batch = engine.AllocateBatch(2);
  // Host -> device (remote side is device memory), then device -> host.
  ASSERT_TRUE(engine.Submit(*batch, {{TransferOp::kWrite, src.data(), *seg, dev, n}}).ok());
  auto st = engine.Wait(*batch, Clock::now() + kWait);
  ASSERT_EQ(st->state, TaskState::kCompleted) << st->first_error;
  ASSERT_TRUE(engine.Submit(*batch, {{TransferOp::kRead, dst.data(), *seg, dev, n}}).ok());
  st = engine.Wait(*batch, Clock::now() + kWait);
  ASSERT_EQ(st->state, TaskState::kCompleted) << st->first_error;
  EXPECT_EQ(FindPatternMismatch(dst.data(), n, 31), -1);
  ASSERT_TRUE(engine.FreeBatch(*batch).ok());
  ASSERT_TRUE(engine.UnregisterMemory(device).ok());
  ASSERT_TRUE(engine.UnregisterMemory(src.data()).ok());
  ASSERT_TRUE(engine.UnregisterMemory(dst.data()).ok());
}

TEST(RdmaTest, LoopbackReadWrite) {
  auto probe = CreateRdmaTransport(RdmaParams{});
  if (!probe.ok()) {
    EXPECT_TRUE(absl::StartsWith(probe.status().message(), "no RDMA device")) << probe.status();
    GTEST_SKIP() << "skipped: " << probe.status().message();
  }
  probe->reset();
  testing::TempDir dir;
  auto engine = TransferEngine::Create(
      testing::TestEngineOptions("rdma-self", "file:" + dir.path() + "/s", {"rdma"}));
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<uint8_t> remote(8 << 20), local(8 << 20);
  FillPattern(remote.data(), remote.size(), 4);
  ASSERT_TRUE((*engine)->RegisterMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE((*engine)->RegisterMemory(local.data(), local.size()).ok());
  auto seg = (*engine)->OpenSegment("rdma-self");
  ASSERT_TRUE(seg.ok()) << seg.status();
  auto batch = (*engine)->AllocateBatch(1);
  ASSERT_TRUE((*engine)
                  ->Submit(*batch, {{TransferOp::kRead, local.data(), *seg,
                                     reinterpret_cast<uint64_t>(remote.data()), local.size()}})
                  .ok());
  auto st = (*engine)->Wait(*batch, Clock::now() + kWait);
  ASSERT_EQ(st->state, TaskState::kCompleted) << st->first_error;
  EXPECT_EQ(FindPatternMismatch(local.data(), local.size(), 4), -1);
}

TEST(RdmaTest, MissingDeviceLeavesRdmaOutAndTcpCarries) {
  testing::TempDir dir;
  auto engine = TransferEngine::Create(
      testing::TestEngineOptions("self", "file:" + dir.path() + "/s", {"rdma", "tcp"}));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const auto offered = (*engine)->Transports();
  if (std::find(offered.begin(), offered.end(), "rdma") != offered.end()) {
    GTEST_SKIP() << "an RDMA device is present";
  }
  const auto missing = (*engine)->UnavailableTransports();
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].first, "rdma");
  EXPECT_TRUE(absl::StartsWith(missing[0].second, "no RDMA device")) << missing[0].second;
  EXPECT_EQ(offered, std::vector<std::string>{"tcp"});
}

TEST(CudaTest, DeviceMemoryRoundTrip) {
  auto rt = LoadCudaRuntime();
  if (!rt.ok()) {
    EXPECT_TRUE(absl::StartsWith(rt.status().message(), "no GPU")) << rt.status();
    GTEST_SKIP() << "skipped: " << rt.status().message();
  }
  auto dev = (*rt)->AllocDevice(4 << 20, 0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  for (const char* transport : {"local", "tcp"}) {
    testing::TempDir dir;
    auto o = testing::TestEngineOptions("gpu", "file:" + dir.path() + "/s", {transport});
    o.load_gpu_runtimes = true;
    auto engine = TransferEngine::Create(std::move(o));
    ASSERT_TRUE(engine.ok());
    RoundTripThroughDevice(**engine, *dev, 4 << 20, "cuda:0");
  }
  auto dmabuf = (*rt)->ExportDmaBuf(*dev, 4 << 20);
  std::cerr << "CUDA dma-buf export (GPUDirect RDMA path): "
            << (dmabuf.ok() ? std::string("available") : std::string(dmabuf.status().message()))
            << "\n";
  if (dmabuf.ok()) close(dmabuf->fd);
  (*rt)->FreeDevice(*dev);
}

TEST(HipTest, DeviceMemoryRoundTrip) {
  auto rt = LoadHipRuntime();
  if (!rt.ok()) {
    EXPECT_TRUE(absl::StartsWith(rt.status().message(), "no GPU")) << rt.status();
    GTEST_SKIP() << "skipped: " << rt.status().message();
  }
  auto dev = (*rt)->AllocDevice(4 << 20, 0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  testing::TempDir dir;
  auto o = testing::TestEngineOptions("gpu", "file:" + dir.path() + "/s", {"local"});
  o.load_gpu_runtimes = true;
  auto engine = TransferEngine::Create(std::move(o));
  ASSERT_TRUE(engine.ok());
  RoundTripThroughDevice(**engine, *dev, 4 << 20, "hip:0");
  (*rt)->FreeDevice(*dev);
}

// "Device memory" that is host memory inside an arena: every access must go through Copy(),
// which counts, so the test sees that transports bounce instead of touching it directly.
class FakeGpuRuntime final : public testing::StubGpuRuntime {
 public:
  explicit FakeGpuRuntime(uint64_t arena) : arena_(arena) {}
  uint8_t* arena() { return arena_.data(); }
  uint64_t copies() const { return copies_.load(); }
  uint64_t pinned() const { return pinned_.load(); }

  absl::Status CheckDeviceRange(const void* addr, uint64_t length, int device) override {
    const auto* p = static_cast<const uint8_t*>(addr);
    if (p < arena_.data() || p + length > arena_.data() + arena_.size()) {
      return absl::InvalidArgumentError("not fake device memory");
    }
    return absl::OkStatus();
  }
  absl::Status Copy(void* dst, const void* src, uint64_t length) override {
    copies_.fetch_add(1);
    std::memcpy(dst, src, length);
    return absl::OkStatus();
  }
  absl::StatusOr<void*> AllocPinned(uint64_t length) override {
    pinned_.fetch_add(1);
    return static_cast<void*>(new uint8_t[length]);
  }
  void FreePinned(void* ptr) override { delete[] static_cast<uint8_t*>(ptr); }

 private:
  std::vector<uint8_t> arena_;
  std::atomic<uint64_t> copies_{0}, pinned_{0};
};

TEST(FakeGpuTest, DeviceMemoryGoesThroughTheRuntimeOnEveryTransport) {
  for (const char* transport : {"local", "tcp"}) {
    SCOPED_TRACE(transport);
    auto fake = std::make_unique<FakeGpuRuntime>(2 << 20);
    FakeGpuRuntime* gpu = fake.get();
    testing::TempDir dir;
    auto o = testing::TestEngineOptions("fake", "file:" + dir.path() + "/s", {transport});
    o.cuda_runtime = std::move(fake);
    auto engine = TransferEngine::Create(std::move(o));
    ASSERT_TRUE(engine.ok());
    // A range outside the "device" is refused at registration.
    std::vector<uint8_t> host(64);
    EXPECT_EQ((*engine)->RegisterMemory(host.data(), host.size(), "cuda:0").code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*engine)->RegisterMemory(gpu->arena(), 1024, "cuda:1").code(),
              absl::StatusCode::kInvalidArgument);
    // 1 MiB + 17: several 64 KiB tcp slices and a ragged end.
    RoundTripThroughDevice(**engine, gpu->arena() + 3, (1 << 20) + 17, "cuda:0");
    EXPECT_GT(gpu->copies(), 0u);
    if (std::string(transport) == "tcp") {
      EXPECT_GE(gpu->copies(), 2u * 17);  // Every slice bounced, both ways.
      EXPECT_GT(gpu->pinned(), 0u);       // Through pinned staging chunks.
    }
  }
}

}  // namespace
}  // namespace kvgate::transfer
