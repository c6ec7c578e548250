#include "sim/kv_events.h"

#include <chrono>
#include <zmq.hpp>

#include "gtest/gtest.h"
#include "kvevents/event_decoder.h"

namespace kvgate::sim {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

KvEvent Stored() {
  KvEvent e;
  e.type = KvEvent::Type::kBlockStored;
  e.block_hashes = {0xdab89baa7b5857c0ull};
  e.token_ids = {151644, 872, 198, 9064};
  e.block_size = 4;
  return e;
}

constexpr double kTs = 1789095808.8378847;

// shared/reference/protocols.md §1.6, byte for byte.
TEST(EncodeEventBatch, LegacyArrayMatchesReferenceBytes) {
  std::string out;
  const KvEvent events[] = {Stored()};
  EncodeEventBatch(kTs, events, 0, EventEncoding::kArray, &out);
  EXPECT_EQ(out.size(), 57u);
  EXPECT_EQ(Hex(out),
            "93cb41daa8dbe0359fe7"
            "91"
            "98"
            "ab426c6f636b53746f726564"
            "91cfdab89baa7b5857c0"
            "c0"
            "94ce0002505ccd0368ccc6cd2368"
            "04"
            "c0"
            "a3475055"
            "c0"
            "00");
}

TEST(EncodeEventBatch, RemovedAndCleared) {
  KvEvent removed;
  removed.type = KvEvent::Type::kBlockRemoved;
  removed.block_hashes = {0xdab89baa7b5857c0ull};
  KvEvent cleared;
  cleared.type = KvEvent::Type::kAllBlocksCleared;
  std::string out;
  const KvEvent a[] = {removed};
  EncodeEventBatch(kTs, a, 0, EventEncoding::kArray, &out);
  EXPECT_EQ(Hex(out).substr(20),
            "9193ac426c6f636b52656d6f766564"
            "91cfdab89baa7b5857c0"
            "a3475055"
            "00");
  out.clear();
  const KvEvent b[] = {cleared};
  EncodeEventBatch(kTs, b, 0, EventEncoding::kArray, &out);
  EXPECT_EQ(Hex(out).substr(20),
            "9191b0416c6c426c6f636b73436c6561726564"
            "00");
}

TEST(EncodeEventBatch, MapFormKeysFieldsByName) {
  std::string out;
  const KvEvent events[] = {Stored()};
  EncodeEventBatch(kTs, events, 2, EventEncoding::kMap, &out);
  const std::string hex = Hex(out);
  // [ts, [ {type: "BlockStored", block_hashes: [uint64], ...} ], 2]
  EXPECT_EQ(hex.substr(0, 20), "93cb41daa8dbe0359fe7");
  EXPECT_EQ(hex.substr(20, 4), "9188");
  EXPECT_EQ(hex.substr(24, 10), "a474797065");  // "type"
  EXPECT_NE(hex.find("ac626c6f636b5f686173686573"
                     "91cfdab89baa7b5857c0"),
            std::string::npos);
  EXPECT_NE(hex.find("a66d656469756d"
                     "a3475055"),
            std::string::npos);  // medium: "GPU"
  EXPECT_EQ(hex.substr(hex.size() - 2), "02");
}

// Hybrid models' group fields (vLLM PRs #37688, #40984), after lora_name: extra_keys (one nil
// per block, as vLLM sends), group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window.
KvEvent HybridStored(std::optional<int64_t> group, std::optional<std::string> kind,
                     std::optional<int64_t> window) {
  KvEvent e = Stored();
  e.group_idx = group;
  e.kv_cache_spec_kind = std::move(kind);
  e.kv_cache_spec_sliding_window = window;
  return e;
}

// The one BlockStored of a batch, as kvgate's decoder reads it.
kvevents::BlockStored DecodedStored(const std::string& payload) {
  auto batch = kvevents::DecodeEventBatch(payload);
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok() || batch->events.size() != 1) {
    ADD_FAILURE() << "expected one event";
    return {};
  }
  const auto* stored = std::get_if<kvevents::BlockStored>(&batch->events[0]);
  EXPECT_NE(stored, nullptr);
  return stored ? *stored : kvevents::BlockStored{};
}

TEST(EncodeEventBatch, ArrayFormAppendsGroupFieldsPositionally) {
  for (const auto encoding : {EventEncoding::kArray, EventEncoding::kMap}) {
    std::string out;
    const KvEvent events[] = {HybridStored(1, "sliding_window", 128)};
    EncodeEventBatch(kTs, events, 0, encoding, &out);
    const std::string hex = Hex(out);
    if (encoding == EventEncoding::kArray) {
      // [tag, 7 fields, extra_keys=[nil], group_idx=1, "sliding_window", 128]
      EXPECT_EQ(hex.substr(20, 4), "919c");
      const std::string tail =
          "91c0"
          "01"
          "ae736c6964696e675f77696e646f77"
          "cc80"
          "00";
      EXPECT_EQ(hex.substr(hex.size() - tail.size()), tail);
    } else {
      EXPECT_EQ(hex.substr(20, 4), "918c");  // 12 keys.
      EXPECT_NE(hex.find("bc6b765f63616368655f737065635f736c6964696e675f77696e646f77"
                         "cc80"),
                std::string::npos);  // kv_cache_spec_sliding_window: 128
    }
    const kvevents::BlockStored s = DecodedStored(out);
    EXPECT_EQ(s.block_hashes, std::vector<uint64_t>{0xdab89baa7b5857c0ull});
    EXPECT_EQ(s.group_idx, std::optional<int64_t>(1));
    EXPECT_EQ(s.kv_cache_spec_kind, std::optional<std::string>("sliding_window"));
    EXPECT_EQ(s.kv_cache_spec_sliding_window, std::optional<int64_t>(128));
    EXPECT_EQ(s.medium, std::optional<std::string>("GPU"));
  }
}

TEST(EncodeEventBatch, MapFormMatchesTheReferenceCapture) {
  // shared/reference/protocols.md §1.6: the kthena #1535 capture, 197 bytes.
  std::string out;
  const KvEvent events[] = {HybridStored(0, "full_attention", std::nullopt)};
  EncodeEventBatch(kTs, events, 0, EventEncoding::kMap, &out);
  EXPECT_EQ(out.size(), 197u);
  const std::string hex = Hex(out);
  EXPECT_EQ(hex.substr(20, 4), "918b");
  const std::string tail =
      "aa65787472615f6b657973"
      "91c0"  // extra_keys: [nil]
      "a967726f75705f696478"
      "00"  // group_idx: 0
      "b26b765f63616368655f737065635f6b696e64"
      "ae66756c6c5f617474656e74696f6e"  // kv_cache_spec_kind: "full_attention"
      "00";
  EXPECT_EQ(hex.substr(hex.size() - tail.size()), tail);
  const kvevents::BlockStored s = DecodedStored(out);
  EXPECT_EQ(s.group_idx, std::optional<int64_t>(0));
  EXPECT_EQ(s.kv_cache_spec_kind, std::optional<std::string>("full_attention"));
  EXPECT_FALSE(s.kv_cache_spec_sliding_window.has_value());

  // Array form of the same: 11 elements, no window.
  out.clear();
  EncodeEventBatch(kTs, events, 0, EventEncoding::kArray, &out);
  EXPECT_EQ(Hex(out).substr(20, 4), "919b");
  EXPECT_EQ(DecodedStored(out).kv_cache_spec_kind, std::optional<std::string>("full_attention"));
  // group_idx alone: 10 elements.
  out.clear();
  const KvEvent only_group[] = {HybridStored(2, std::nullopt, std::nullopt)};
  EncodeEventBatch(kTs, only_group, 0, EventEncoding::kArray, &out);
  EXPECT_EQ(Hex(out).substr(20, 4), "919a");
  EXPECT_EQ(DecodedStored(out).group_idx, std::optional<int64_t>(2));
  EXPECT_FALSE(DecodedStored(out).kv_cache_spec_kind.has_value());
}

TEST(EncodeEventBatch, RemovedCarriesItsGroup) {
  KvEvent removed;
  removed.type = KvEvent::Type::kBlockRemoved;
  removed.block_hashes = {0xdab89baa7b5857c0ull};
  removed.group_idx = 1;
  const KvEvent a[] = {removed};
  for (const auto encoding : {EventEncoding::kArray, EventEncoding::kMap}) {
    std::string out;
    EncodeEventBatch(kTs, a, 0, encoding, &out);
    if (encoding == EventEncoding::kArray) {
      EXPECT_EQ(Hex(out).substr(20),
                "9194ac426c6f636b52656d6f766564"
                "91cfdab89baa7b5857c0"
                "a3475055"
                "01"
                "00");
    }
    auto batch = kvevents::DecodeEventBatch(out);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->events.size(), 1u);
    const auto* r = std::get_if<kvevents::BlockRemoved>(&batch->events[0]);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->group_idx, std::optional<int64_t>(1));
  }
}

// A long prefill's batch (a value per token id) appended after bytes already in the string:
// those bytes stay, and what follows them decodes to the events, nothing after.
KvEvent LongStored(uint32_t blocks, uint32_t first_token) {
  KvEvent e;
  e.type = KvEvent::Type::kBlockStored;
  for (uint32_t b = 0; b < blocks; ++b) e.block_hashes.push_back((uint64_t{1} << 63) | b);
  for (uint32_t t = 0; t < blocks * 16; ++t) e.token_ids.push_back(first_token + t);
  e.block_size = 16;
  e.group_idx = 1;
  e.kv_cache_spec_kind = "sliding_window";
  e.kv_cache_spec_sliding_window = 128;
  return e;
}

TEST(EncodeEventBatch, LongBatchesAppendExactlyTheirBytes) {
  const KvEvent events[] = {LongStored(5000, 70000), Stored()};
  std::string fresh;
  EncodeEventBatch(kTs, events, 0, EventEncoding::kArray, &fresh);
  std::string out = "prefix";
  EncodeEventBatch(kTs, events, 0, EventEncoding::kArray, &out);
  ASSERT_EQ(out.size(), 6 + fresh.size());
  EXPECT_EQ(out.substr(0, 6), "prefix");
  EXPECT_EQ(out.substr(6), fresh);
  auto batch = kvevents::DecodeEventBatch(fresh);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->events.size(), 2u);
  const auto* stored = std::get_if<kvevents::BlockStored>(&batch->events[0]);
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->token_ids, events[0].token_ids);
  EXPECT_EQ(stored->block_hashes, events[0].block_hashes);
}

TEST(Endpoints, OffsetAndBindRules) {
  EXPECT_EQ(OffsetEndpoint("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(OffsetEndpoint("tcp://*:5557", 3), "tcp://*:5560");
  EXPECT_EQ(OffsetEndpoint("tcp://10.0.0.1:5557", 1), "tcp://10.0.0.1:5558");
  EXPECT_EQ(OffsetEndpoint("tcp://127.0.0.1:*", 2), "tcp://127.0.0.1:*");
  EXPECT_EQ(OffsetEndpoint("ipc:///tmp/kv", 2), "ipc:///tmp/kv_dp2");
  EXPECT_TRUE(ShouldBind("tcp://*:5557"));
  EXPECT_TRUE(ShouldBind("ipc:///tmp/kv"));
  EXPECT_TRUE(ShouldBind("tcp://[::]:5557"));
  EXPECT_FALSE(ShouldBind("tcp://127.0.0.1:5557"));
}

uint64_t Be64(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const unsigned char*>(m.data())[i];
  return v;
}

// Asks `pub`'s replay socket for every batch from sequence 0 and collects the answers in the
// order they came, the end marker (sequence ~0, empty) last.
std::vector<std::pair<uint64_t, std::string>> ReplayAll(zmq::context_t& ctx,
                                                        KvEventPublisher& pub) {
  std::vector<std::pair<uint64_t, std::string>> got;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 50);
  dealer.connect(pub.replay_endpoint());
  dealer.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(std::string(8, '\0')));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pub.ServiceReplay();
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    if (!dealer.recv(m)) continue;
    frames.push_back(std::move(m));
    while (frames.back().more()) {
      zmq::message_t next;
      if (!dealer.recv(next)) {
        ADD_FAILURE() << "a replayed batch ended early";
        return got;
      }
      frames.push_back(std::move(next));
    }
    EXPECT_EQ(frames.size(), 3u);  // "", seq8, payload
    if (frames.size() != 3) return got;
    EXPECT_EQ(frames[0].size(), 0u);
    got.emplace_back(Be64(frames[1]), frames[2].to_string());
    if (got.back().first == ~uint64_t{0}) break;
  }
  return got;
}

// A publisher on loopback whose replay socket keeps the last two batches.
PublisherOptions KeepingTwoBatches() {
  PublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.buffer_steps = 2;
  return o;
}

TEST(KvEventPublisher, ReplaysBufferedBatchesThenEndMarker) {
  zmq::context_t ctx(1);
  const PublisherOptions o = KeepingTwoBatches();
  auto pub = KvEventPublisher::Create(ctx, o);
  ASSERT_TRUE(pub.ok()) << pub.status();
  const KvEvent events[] = {Stored()};
  for (int i = 0; i < 3; ++i) (*pub)->Publish(kTs, events);  // Keeps seq 1 and 2.
  EXPECT_EQ((*pub)->next_seq(), 3u);
  const auto got = ReplayAll(ctx, **pub);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].first, 1u);
  EXPECT_EQ(got[1].first, 2u);
  EXPECT_EQ(got[2].first, ~uint64_t{0});
  EXPECT_EQ(got[0].second.size(), 57u);
  EXPECT_EQ(got[1].second.size(), 57u);
  EXPECT_TRUE(got[2].second.empty());
}

// The publisher reuses the buffer of the batch leaving its replay buffer for the next one: each
// replayed batch must still be its own bytes, whatever size the buffer had before.
TEST(KvEventPublisher, ReusedBuffersHoldOnlyTheirOwnBatch) {
  zmq::context_t ctx(1);
  const PublisherOptions o = KeepingTwoBatches();
  auto pub = KvEventPublisher::Create(ctx, o);
  ASSERT_TRUE(pub.ok()) << pub.status();
  // Sizes large, small, small (into the large one's buffer), medium (into a small one's).
  const std::vector<uint32_t> blocks = {400, 1, 2, 30};
  std::vector<std::string> expected;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const KvEvent events[] = {LongStored(blocks[i], static_cast<uint32_t>(i) * 1000)};
    (*pub)->Publish(kTs, events);
    expected.emplace_back();
    EncodeEventBatch(kTs, events, o.dp_rank, o.encoding, &expected.back());
  }
  const auto got = ReplayAll(ctx, **pub);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::make_pair(uint64_t{2}, expected[2]));
  EXPECT_EQ(got[1], std::make_pair(uint64_t{3}, expected[3]));
}

}  // namespace
}  // namespace kvgate::sim
