// The replica sync's frames: every record kind survives a round trip, and a frame from a peer
// that is cut short, mislabelled or over a limit is refused with a reason, never misread.
#include "router/cluster/cluster_message.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router::cluster {
namespace {

using ::testing::HasSubstr;

Frame EveryKind() {
  Frame f;
  f.sender = 0x1234567890abcdefULL;
  f.seq = 42;
  f.sent_unix_us = 1'760'000'000'000'000;
  Record hello{.kind = RecordKind::kHello, .text = "r0"};
  Record loads{.kind = RecordKind::kLoads, .flag = true, .changed_unix_us = 17};
  loads.loads = {{"http://a:1", {1, 2000, 1, 125}}, {"http://b:2", {0, 0, 0, 0}}};
  Record learn{.kind = RecordKind::kLearn, .worker = "http://a:1", .prompt_tokens = 4096};
  learn.blocks = {1, 2, 3, 0xffffffffffffffffULL};
  Record forget{.kind = RecordKind::kForget, .worker = "http://a:1", .blocks = {3}};
  Record pin{.kind = RecordKind::kPin, .worker = "http://b:2", .text = "resp_abc"};
  Record unpin{.kind = RecordKind::kUnpin, .text = "resp_abc"};
  Record drain{.kind = RecordKind::kDrain, .worker = "http://b:2", .flag = true};
  Record ready{.kind = RecordKind::kSnapshotReady, .text = "kvgate:c:snapshot:1", .flag = true};
  Record bye{.kind = RecordKind::kBye};
  f.records = {hello, loads, learn, forget, pin, unpin, drain, ready, bye};
  return f;
}

TEST(ClusterMessage, EveryRecordKindRoundTrips) {
  const Frame f = EveryKind();
  auto back = DecodeFrame(EncodeFrame(f));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->sender, f.sender);
  EXPECT_EQ(back->seq, f.seq);
  EXPECT_EQ(back->sent_unix_us, f.sent_unix_us);
  EXPECT_EQ(back->records, f.records);
}

TEST(ClusterMessage, TheBlocksRecordWriterMatchesTheGeneralOne) {
  Record learn{.kind = RecordKind::kLearn, .worker = "w", .prompt_tokens = 7, .blocks = {9, 8}};
  std::string a, b;
  AppendRecord(&a, learn);
  const std::vector<kvindex::BlockHash> chain = {9, 8};
  AppendBlocksRecord(&b, RecordKind::kLearn, "w", 7, chain);
  EXPECT_EQ(a, b);
}

TEST(ClusterMessage, ARecordWithoutBlocksRoundTrips) {
  Frame f;
  f.records = {Record{.kind = RecordKind::kLearn, .worker = "w"}};  // found by the fuzzer
  auto back = DecodeFrame(EncodeFrame(f));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->records, f.records);
}

TEST(ClusterMessage, EveryTruncationIsRefused) {
  const std::string bytes = EncodeFrame(EveryKind());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = DecodeFrame(std::string_view(bytes).substr(0, n));
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes was accepted";
  }
  std::string longer = bytes + "x";
  EXPECT_THAT(DecodeFrame(longer).status().message(), HasSubstr("after the last record"));
}

TEST(ClusterMessage, WrongMagicOrVersionIsNotAFrame) {
  std::string bytes = EncodeFrame(EveryKind());
  std::string bad = bytes;
  bad[0] ^= 1;
  EXPECT_THAT(DecodeFrame(bad).status().message(), HasSubstr("not a kvgate cluster frame"));
  bad = bytes;
  bad[4] = 9;
  EXPECT_THAT(DecodeFrame(bad).status().message(), HasSubstr("frame version 9"));
}

TEST(ClusterMessage, UnknownRecordKindsAreSkippedWhole) {
  std::string records;
  records += static_cast<char>(200);  // a kind from a newer replica
  const uint32_t len = 3;
  records.append(reinterpret_cast<const char*>(&len), 4);
  records += "abc";
  AppendRecord(&records, Record{.kind = RecordKind::kUnpin, .text = "resp_1"});
  auto f = DecodeFrame(EncodeFrame(1, 1, 0, 2, records));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->records.size(), 1u);
  EXPECT_EQ(f->records[0].text, "resp_1");
}

TEST(ClusterMessage, LimitsBoundWhatAPeerCanMakeAReplicaHold) {
  Record learn{.kind = RecordKind::kLearn, .worker = "w"};
  learn.blocks.assign(100, 5);
  Frame f;
  f.records = {learn};
  DecodeLimits limits;
  limits.max_blocks = 99;
  EXPECT_THAT(DecodeFrame(EncodeFrame(f), limits).status().message(),
              HasSubstr("100 blocks in a record, more than 99"));
  limits = {};
  limits.max_records = 0;
  EXPECT_THAT(DecodeFrame(EncodeFrame(f), limits).status().message(), HasSubstr("1 records"));
  limits = {};
  limits.max_frame_bytes = 10;
  EXPECT_FALSE(DecodeFrame(EncodeFrame(f), limits).ok());
  // A block count that claims more than the bytes present.
  std::string records;
  AppendBlocksRecord(&records, RecordKind::kLearn, "w", 0, std::vector<kvindex::BlockHash>{1});
  records[records.size() - 12] = 0x7f;  // the count's low byte: 127 blocks, 8 bytes of them
  EXPECT_FALSE(DecodeFrame(EncodeFrame(1, 1, 0, 1, records)).ok());
}

TEST(ClusterMessage, NegativeOrHugeLoadsAreRefused) {
  Record loads{.kind = RecordKind::kLoads};
  loads.loads = {{"w", {-1, 0, 0, 0}}};
  Frame f;
  f.records = {loads};
  EXPECT_THAT(DecodeFrame(EncodeFrame(f)).status().message(), HasSubstr("load value out of range"));
  f.records[0].loads[0].load.in_flight = kMaxLoadValue + 1;
  EXPECT_FALSE(DecodeFrame(EncodeFrame(f)).ok());
}

}  // namespace
}  // namespace kvgate::router::cluster
