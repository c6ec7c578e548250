// Value types and single-process pieces: locations, segment descriptors (JSON and range checks),
// CRC32C, the memory registry, the static metadata file and metadata URIs.
#include "transfer/segment.h"

#include <thread>

#include "gtest/gtest.h"
#include "tests/transfer/test_support.h"
#include "transfer/crc32c.h"
#include "transfer/memory_registry.h"
#include "transfer/metadata/segment_metadata.h"
#include "transfer/metadata/static_metadata.h"
#include "transfer/types.h"

namespace kvgate::transfer {
namespace {

TEST(LocationTest, ParsesKnownKinds) {
  EXPECT_EQ(ParseLocation("cpu:0")->ToString(), "cpu:0");
  EXPECT_EQ(ParseLocation("*")->ToString(), "cpu:0");
  EXPECT_EQ(ParseLocation("cuda:3")->ToString(), "cuda:3");
  EXPECT_EQ(ParseLocation("hip:1")->kind, MemoryKind::kHip);
  for (const char* bad : {"gpu:0", "cuda:", "cuda:x", "cuda:99999", "", "cuda:-1", "cpu:0x"}) {
    auto loc = ParseLocation(bad);
    ASSERT_FALSE(loc.ok()) << bad;
    EXPECT_EQ(loc.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(loc.status().message().find(bad), absl::string_view::npos);
  }
}

SegmentDescriptor TwoBuffers() {
  SegmentDescriptor d;
  d.name = "peer-1";
  d.instance = "42-abc";
  d.host_id = "boot/host";
  d.version = 7;
  d.tcp_endpoint = "127.0.0.1:5000";
  d.shm_socket = "kvgate-shm-42-abc";
  d.buffers.push_back({0x1000, 0x1000, "cpu:0", 1, true, {}});
  d.buffers.push_back({0x2000, 0x800, "cuda:0", 2, false, {}});
  return d;
}

TEST(SegmentTest, JsonRoundTrip) {
  SegmentDescriptor d = TwoBuffers();
  d.rdma_endpoint = "10.0.0.1:6000";
  d.rdma_devices.push_back({"mlx5_0", 3, "fe800000000000000000000000000001"});
  d.buffers[0].rkeys = {77};
  d.buffers[1].rkeys = {78};
  auto parsed = ParseSegmentJson(SegmentToJson(d));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, d);
}

TEST(SegmentTest, RejectsMalformedDescriptors) {
  const std::string good = SegmentToJson(TwoBuffers());
  std::vector<std::string> bad = {
      "",
      "[]",
      "{\"name\":\"x\"}",                 // no instance
      "{\"instance\":\"i\"}",             // no name
      "{\"name\":1,\"instance\":\"i\"}",  // wrong type
      good.substr(0, good.size() / 2),    // truncated
      "{\"name\":\"x\",\"instance\":\"i\",\"buffers\":[{\"addr\":1}]}",
      "{\"name\":\"x\",\"instance\":\"i\",\"buffers\":[{\"addr\":1,\"length\":0}]}",
      "{\"name\":\"x\",\"instance\":\"i\",\"buffers\":[{\"addr\":1,\"length\":10},"
      "{\"addr\":5,\"length\":10}]}",  // overlap
      "{\"name\":\"x\",\"instance\":\"i\",\"buffers\":[{\"addr\":18446744073709551615,"
      "\"length\":2}]}",  // wraps
      "{\"name\":\"x\",\"instance\":\"i\",\"buffers\":[{\"addr\":1,\"length\":10,"
      "\"rkeys\":[1]}]}",  // rkeys without devices
  };
  for (const std::string& json : bad) {
    auto d = ParseSegmentJson(json);
    EXPECT_FALSE(d.ok()) << json;
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << json;
    }
  }
}

TEST(SegmentTest, FindRangeNeedsOneBufferHoldingAllBytes) {
  const SegmentDescriptor d = TwoBuffers();
  EXPECT_EQ(d.FindRange(0x1000, 0x1000)->id, 1u);
  EXPECT_EQ(d.FindRange(0x1fff, 1)->id, 1u);
  EXPECT_EQ(d.FindRange(0x2000, 0x800)->id, 2u);
  EXPECT_EQ(d.FindRange(0x0fff, 2), nullptr);  // starts before
  EXPECT_EQ(d.FindRange(0x1fff, 2), nullptr);  // spans two adjacent buffers
  EXPECT_EQ(d.FindRange(0x2000, 0x801), nullptr);
  EXPECT_EQ(d.FindRange(0x2800, 1), nullptr);           // just past the end
  EXPECT_EQ(d.FindRange(0x1000, 0), nullptr);           // empty
  EXPECT_EQ(d.FindRange(0x1800, UINT64_MAX), nullptr);  // wraps
  EXPECT_EQ(d.FindRange(0, 0x10), nullptr);
}

TEST(Crc32cTest, KnownVectorAndIncremental) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32c(0, s, 9), 0xE3069283u);
  std::vector<uint8_t> data(100003);
  testing::FillPattern(data.data(), data.size(), 5);
  const uint32_t whole = Crc32c(0, data.data(), data.size());
  uint32_t parts = Crc32c(0, data.data(), 7);
  parts = Crc32c(parts, data.data() + 7, data.size() - 7);
  EXPECT_EQ(whole, parts);
  data[500] ^= 1;
  EXPECT_NE(Crc32c(0, data.data(), data.size()), whole);
}

TEST(PatternTest, FillMatchesBytewise) {
  std::vector<uint8_t> a(1000);
  testing::FillPattern(a.data(), a.size(), 9, 13);
  EXPECT_EQ(testing::FindPatternMismatch(a.data(), a.size(), 9, 13), -1);
  EXPECT_EQ(a[0], testing::PatternByte(9, 13));
  a[77] ^= 0x40;
  EXPECT_EQ(testing::FindPatternMismatch(a.data(), a.size(), 9, 13), 77);
}

TEST(MemoryRegistryTest, RefusesOverlapsAndFindsContainedRanges) {
  MemoryRegistry reg;
  std::vector<uint8_t> mem(4096);
  ASSERT_TRUE(reg.Add(mem.data(), 1024, {}).ok());
  ASSERT_TRUE(reg.Add(mem.data() + 2048, 1024, {}).ok());
  auto overlap = reg.Add(mem.data() + 1000, 100, {});
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.status().message().find("overlaps"), absl::string_view::npos);
  EXPECT_FALSE(reg.Add(mem.data() + 2000, 100, {}).ok());
  EXPECT_FALSE(reg.Add(nullptr, 10, {}).ok());
  EXPECT_FALSE(reg.Add(mem.data() + 1024, 0, {}).ok());
  ASSERT_TRUE(reg.Add(mem.data() + 1024, 1024, {}).ok());  // The gap exactly.
  const auto base = reinterpret_cast<uint64_t>(mem.data());
  EXPECT_NE(reg.Find(base + 10, 1014), nullptr);
  EXPECT_EQ(reg.Find(base + 10, 1015), nullptr);  // Crosses into the next buffer.
  EXPECT_EQ(reg.Find(base + 3072, 1), nullptr);
  EXPECT_EQ(reg.Remove(mem.data() + 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(reg.Remove(mem.data()).ok());
  EXPECT_EQ(reg.Find(base, 1), nullptr);
}

TEST(MemoryRegistryTest, ManagedBuffersAreMemfdBacked) {
  MemoryRegistry reg;
  auto buf = reg.AddManaged(10000);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_TRUE((*buf)->managed());
  EXPECT_GE((*buf)->length, 10000u);
  (*buf)->data()[9999] = 7;  // Mapped and writable.
  EXPECT_EQ(reg.Find((*buf)->addr + 9999, 1), *buf);
}

TEST(StaticMetadataTest, PublishLookupRemove) {
  testing::TempDir dir;
  StaticMetadata md(dir.path() + "/segments");
  EXPECT_EQ(md.Lookup("peer-1").status().code(), absl::StatusCode::kNotFound);
  SegmentDescriptor d = TwoBuffers();
  ASSERT_TRUE(md.Publish(d).ok());
  d.version = 8;
  ASSERT_TRUE(md.Publish(d).ok());  // Replaces.
  auto got = md.Lookup("peer-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 8u);
  ASSERT_TRUE(md.Remove("peer-1").ok());
  EXPECT_EQ(md.Lookup("peer-1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(md.Remove("never-there").ok());
}

TEST(StaticMetadataTest, ConcurrentPublishersKeepEveryEntry) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/segments";
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      StaticMetadata md(path);  // One instance per "process".
      for (int i = 0; i < 10; ++i) {
        SegmentDescriptor d = TwoBuffers();
        d.name = "seg-" + std::to_string(t) + "-" + std::to_string(i);
        ASSERT_TRUE(md.Publish(d).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  StaticMetadata md(path);
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 10; ++i) {
      EXPECT_TRUE(md.Lookup("seg-" + std::to_string(t) + "-" + std::to_string(i)).ok());
    }
  }
}

TEST(MetadataUriTest, ParsesAndRefuses) {
  EXPECT_TRUE(OpenSegmentMetadata("file:/tmp/x").ok());
  EXPECT_TRUE(OpenSegmentMetadata("file:///tmp/x").ok());
  EXPECT_TRUE(OpenSegmentMetadata("etcd://127.0.0.1:2379,127.0.0.1:2380/cluster-a?ttl_s=5").ok());
  for (const char* bad : {"", "redis://h:1", "file:relative", "etcd://", "etcd://host",
                          "etcd://h:0", "etcd://h:1?ttl_s=0", "etcd://h:1?bogus=1"}) {
    auto md = OpenSegmentMetadata(bad);
    EXPECT_FALSE(md.ok()) << bad;
    if (!md.ok()) {
      EXPECT_EQ(md.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace kvgate::transfer
