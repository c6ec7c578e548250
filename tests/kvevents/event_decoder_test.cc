#include "kvevents/event_decoder.h"

#include <msgpuck.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "xxhash.h"

namespace kvgate::kvevents {
namespace {

using ::testing::ElementsAre;

constexpr double kTs = 1789095808.8378847;
constexpr uint64_t kHash = 0xdab89baa7b5857c0ull;  // 15760518052499183552, >= 2^63.

// Bytes from a spec of hex bytes and quoted ASCII strings: `93 cb 41da "GPU" 00`.
std::string Bytes(std::string_view spec) {
  std::string out;
  size_t i = 0;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  while (i < spec.size()) {
    const char c = spec[i];
    if (c == ' ') {
      ++i;
    } else if (c == '"') {
      const size_t close = spec.find('"', i + 1);
      out.append(spec.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      out.push_back(static_cast<char>(nibble(c) * 16 + nibble(spec[i + 1])));
      i += 2;
    }
  }
  return out;
}

// A msgpack builder over msgpuck's encoders, for readable test cases.
class Mp {
 public:
  Mp& Array(uint32_t n) {
    return Put(mp_sizeof_array(n), [&](char* p) { return mp_encode_array(p, n); });
  }
  Mp& Map(uint32_t n) {
    return Put(mp_sizeof_map(n), [&](char* p) { return mp_encode_map(p, n); });
  }
  Mp& Uint(uint64_t v) {
    return Put(mp_sizeof_uint(v), [&](char* p) { return mp_encode_uint(p, v); });
  }
  // Negative values only (msgpuck's int encoders require them).
  Mp& Int(int64_t v) {
    return Put(mp_sizeof_int(v), [&](char* p) { return mp_encode_int(p, v); });
  }
  Mp& Double(double v) {
    return Put(mp_sizeof_double(v), [&](char* p) { return mp_encode_double(p, v); });
  }
  Mp& Float(float v) {
    return Put(mp_sizeof_float(v), [&](char* p) { return mp_encode_float(p, v); });
  }
  Mp& Nil() {
    return Put(mp_sizeof_nil(), [&](char* p) { return mp_encode_nil(p); });
  }
  Mp& Bool(bool v) {
    return Put(mp_sizeof_bool(v), [&](char* p) { return mp_encode_bool(p, v); });
  }
  Mp& Str(std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    return Put(mp_sizeof_str(n), [&](char* p) { return mp_encode_str(p, s.data(), n); });
  }
  Mp& Bin(std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    return Put(mp_sizeof_bin(n), [&](char* p) { return mp_encode_bin(p, s.data(), n); });
  }
  Mp& Raw(std::string_view bytes) {
    out_.append(bytes);
    return *this;
  }
  Mp& Uints(const std::vector<uint64_t>& v) {
    Array(static_cast<uint32_t>(v.size()));
    for (uint64_t x : v) {
      Uint(x);
    }
    return *this;
  }
  // `[ts, [<events>], dp_rank]` around `n` events already encoded in `events`.
  static std::string Batch(uint32_t n, const Mp& events, uint64_t dp_rank = 0) {
    return Mp().Array(3).Double(kTs).Array(n).Raw(events.bytes()).Uint(dp_rank).bytes();
  }
  const std::string& bytes() const { return out_; }

 private:
  template <typename F>
  Mp& Put(size_t max, F encode) {
    const size_t at = out_.size();
    out_.resize(at + max);
    char* end = encode(out_.data() + at);
    out_.resize(static_cast<size_t>(end - out_.data()));
    return *this;
  }
  std::string out_;
};

// A one-event batch's only event, which must decode and be a T.
template <typename T>
T OnlyEvent(const std::string& payload) {
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload);
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok() || batch->events.size() != 1 || !std::holds_alternative<T>(batch->events[0])) {
    ADD_FAILURE() << "not a single event of the expected type";
    return T{};
  }
  return std::get<T>(batch->events[0]);
}

std::string ErrorOf(const std::string& payload) {
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload);
  if (batch.ok()) {
    return "OK";
  }
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(batch.status().message());
}

// --- protocols.md §1.6, byte for byte ---

const std::string kLegacyBlockStored = Bytes(
    "93 cb 41 da a8 db e0 35 9f e7 91 98 ab \"BlockStored\" 91 cf da b8 9b aa 7b 58 57 c0 c0 "
    "94 ce 00 02 50 5c cd 03 68 cc c6 cd 23 68 04 c0 a3 \"GPU\" c0 00");

const std::string kMapBlockStored = Bytes(
    "93 cb 41 da a8 db e0 35 9f e7 91 8b a4 \"type\" ab \"BlockStored\" ac \"block_hashes\" "
    "91 cf da b8 9b aa 7b 58 57 c0 b1 \"parent_block_hash\" c0 a9 \"token_ids\" "
    "94 ce 00 02 50 5c cd 03 68 cc c6 cd 23 68 aa \"block_size\" 04 a7 \"lora_id\" c0 "
    "a6 \"medium\" a3 \"GPU\" a9 \"lora_name\" c0 aa \"extra_keys\" 91 c0 a9 \"group_idx\" 00 "
    "b2 \"kv_cache_spec_kind\" ae \"full_attention\" 00");

TEST(DecodeEventBatchTest, LegacyBlockStoredReferenceBytes) {
  ASSERT_EQ(kLegacyBlockStored.size(), 57u);
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(kLegacyBlockStored);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, kTs);
  EXPECT_EQ(batch->data_parallel_rank, 0);
  EXPECT_EQ(batch->ignored_events, 0u);
  ASSERT_EQ(batch->events.size(), 1u);
  const BlockStored& e = std::get<BlockStored>(batch->events[0]);
  EXPECT_THAT(e.block_hashes, ElementsAre(15760518052499183552ull));
  EXPECT_EQ(e.parent_block_hash, std::nullopt);
  EXPECT_THAT(e.token_ids, ElementsAre(151644u, 872u, 198u, 9064u));
  EXPECT_EQ(e.block_size, 4u);
  EXPECT_EQ(e.lora_id, std::nullopt);
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(e.lora_name, std::nullopt);
  EXPECT_EQ(e.group_idx, std::nullopt);
}

TEST(DecodeEventBatchTest, LegacyBlockRemovedReferenceBytes) {
  const std::string payload = Bytes(
      "93 cb 41 da a8 db e0 35 9f e7 91 93 ac \"BlockRemoved\" 91 cf da b8 9b aa 7b 58 57 c0 "
      "a3 \"GPU\" 00");
  const BlockRemoved e = OnlyEvent<BlockRemoved>(payload);
  EXPECT_THAT(e.block_hashes, ElementsAre(kHash));
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(e.group_idx, std::nullopt);
}

TEST(DecodeEventBatchTest, LegacyAllBlocksClearedReferenceBytes) {
  const std::string payload =
      Bytes("93 cb 41 da a8 db e0 35 9f e7 91 91 b0 \"AllBlocksCleared\" 00");
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, kTs);
  EXPECT_EQ(batch->data_parallel_rank, 0);
  ASSERT_EQ(batch->events.size(), 1u);
  EXPECT_EQ(std::get<AllBlocksCleared>(batch->events[0]).medium, std::nullopt);
}

TEST(DecodeEventBatchTest, MapFormReferenceBytes) {
  ASSERT_EQ(kMapBlockStored.size(), 197u);
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(kMapBlockStored);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, kTs);
  EXPECT_EQ(batch->data_parallel_rank, 0);
  ASSERT_EQ(batch->events.size(), 1u);
  const BlockStored& e = std::get<BlockStored>(batch->events[0]);
  EXPECT_THAT(e.block_hashes, ElementsAre(kHash));
  EXPECT_EQ(e.parent_block_hash, std::nullopt);
  EXPECT_THAT(e.token_ids, ElementsAre(151644u, 872u, 198u, 9064u));
  EXPECT_EQ(e.block_size, 4u);
  EXPECT_EQ(e.lora_id, std::nullopt);
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(e.lora_name, std::nullopt);
  EXPECT_EQ(e.group_idx, 0);  // extra_keys and kv_cache_spec_kind are skipped.
}

// --- Block hashes ---

TEST(DecodeEventBatchTest, UintHashesAtAndAbove2To63) {
  Mp ev;
  ev.Array(5).Str("BlockStored");
  ev.Uints({0, 127, 1ull << 63, std::numeric_limits<uint64_t>::max()});
  ev.Uint(0xffffffffffffff00ull).Uints({}).Uint(0);
  const BlockStored e = OnlyEvent<BlockStored>(Mp::Batch(1, ev));
  EXPECT_THAT(e.block_hashes, ElementsAre(0u, 127u, 0x8000000000000000ull, 0xffffffffffffffffull));
  EXPECT_EQ(e.parent_block_hash, 0xffffffffffffff00ull);
}

TEST(DecodeEventBatchTest, NegativeInt64HashesAreBitCast) {
  Mp ev;
  ev.Array(2).Str("BlockRemoved").Array(4);
  ev.Int(-1).Int(-42).Int(std::numeric_limits<int64_t>::min());
  ev.Raw(Bytes("d3 00 00 00 00 00 00 00 07"));  // A non-negative int64 (0xd3) is accepted too.
  const BlockRemoved e = OnlyEvent<BlockRemoved>(Mp::Batch(1, ev));
  EXPECT_THAT(e.block_hashes,
              ElementsAre(0xffffffffffffffffull, 0xffffffffffffffd6ull, 0x8000000000000000ull, 7u));
}

TEST(DecodeEventBatchTest, BinHashesFoldWithXxh3) {
  const std::string a(32, '\x11');
  std::string b = a;
  b[31] = '\x12';
  Mp ev;
  ev.Array(5).Str("BlockStored");
  ev.Array(3).Bin(a).Bin(a).Bin(b);
  ev.Bin(b).Uints({}).Uint(0);
  const BlockStored e = OnlyEvent<BlockStored>(Mp::Batch(1, ev));
  ASSERT_EQ(e.block_hashes.size(), 3u);
  EXPECT_EQ(e.block_hashes[0], XXH3_64bits(a.data(), a.size()));
  EXPECT_EQ(e.block_hashes[0], e.block_hashes[1]);
  EXPECT_NE(e.block_hashes[0], e.block_hashes[2]);
  EXPECT_EQ(e.parent_block_hash, e.block_hashes[2]);
}

TEST(DecodeEventBatchTest, StrHashesFoldLikeBin) {
  const std::string digest(32, 'z');
  Mp ev;
  ev.Array(2).Str("BlockRemoved").Array(2).Str(digest).Bin(digest);
  const BlockRemoved e = OnlyEvent<BlockRemoved>(Mp::Batch(1, ev));
  EXPECT_THAT(e.block_hashes, ElementsAre(XXH3_64bits(digest.data(), digest.size()),
                                          XXH3_64bits(digest.data(), digest.size())));
}

// --- Batch shapes ---

TEST(DecodeEventBatchTest, OuterMapBatchIgnoresUnknownKeys) {
  Mp ev;
  ev.Array(2).Str("BlockRemoved").Uints({9});
  Mp m;
  m.Map(5);
  m.Str("events").Array(1).Raw(ev.bytes());
  m.Str("future").Map(1).Str("x").Array(2).Nil().Str("y");
  m.Str("data_parallel_rank").Uint(3);
  m.Uint(7).Str("non-string key");
  m.Str("ts").Double(12.5);
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, 12.5);
  EXPECT_EQ(batch->data_parallel_rank, 3);
  ASSERT_EQ(batch->events.size(), 1u);
  EXPECT_THAT(std::get<BlockRemoved>(batch->events[0]).block_hashes, ElementsAre(9u));
}

TEST(DecodeEventBatchTest, OuterMapBatchWithoutRank) {
  Mp m;
  m.Map(2).Str("ts").Uint(5).Str("events").Array(0);
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, 5.0);
  EXPECT_TRUE(batch->events.empty());
  EXPECT_EQ(batch->data_parallel_rank, std::nullopt);
}

TEST(DecodeEventBatchTest, TwoElementOuterArrayHasNoRank) {
  Mp ev;
  ev.Array(1).Str("AllBlocksCleared");
  const std::string payload = Mp().Array(2).Double(1.0).Array(1).Raw(ev.bytes()).bytes();
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->data_parallel_rank, std::nullopt);
  ASSERT_EQ(batch->events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(batch->events[0]));
}

TEST(DecodeEventBatchTest, RankNilAndExtraBatchSlots) {
  const std::string payload = Mp().Array(4).Double(1.0).Array(0).Nil().Str("extra").bytes();
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->data_parallel_rank, std::nullopt);
}

TEST(DecodeEventBatchTest, TsAsFloat32AndIntegers) {
  auto ts_of = [](const Mp& ts) {
    absl::StatusOr<EventBatch> b =
        DecodeEventBatch(Mp().Array(3).Raw(ts.bytes()).Array(0).Uint(1).bytes());
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? b->ts : -1.0;
  };
  EXPECT_EQ(ts_of(Mp().Float(2.5f)), 2.5);
  EXPECT_EQ(ts_of(Mp().Uint(1789095808)), 1789095808.0);
  EXPECT_EQ(ts_of(Mp().Int(-3)), -3.0);
  EXPECT_EQ(ts_of(Mp().Double(kTs)), kTs);
}

// --- Events: unknown tags and keys, missing and extra fields ---

TEST(DecodeEventBatchTest, UnknownTagsAreSkippedAndCounted) {
  Mp evs;
  evs.Array(3).Str("BlockTransferred").Uints({1, 2}).Map(1).Str("k").Nil();  // Positional.
  evs.Array(2).Str("BlockRemoved").Uints({5});
  evs.Map(2).Str("block_hashes").Uints({1}).Str("type").Str("SomethingNew");  // Map.
  evs.Array(1).Str("AllBlocksCleared");
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(Mp::Batch(4, evs));
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ignored_events, 2u);
  ASSERT_EQ(batch->events.size(), 2u);
  EXPECT_THAT(std::get<BlockRemoved>(batch->events[0]).block_hashes, ElementsAre(5u));
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(batch->events[1]));
}

TEST(DecodeEventBatchTest, MapEventIgnoresUnknownKeysAndTakesTypeAnywhere) {
  Mp ev;
  ev.Map(9);
  ev.Str("metadata").Map(1).Str("a").Array(2).Uint(1).Map(0);  // SGLang extras.
  ev.Str("block_hashes").Uints({10, 11});
  ev.Uint(1).Uint(2);  // Non-string key.
  ev.Str("token_ids").Uints({1, 2, 3, 4});
  ev.Str("type").Str("BlockStored");
  ev.Str("block_size").Uint(2);
  ev.Str("cache_salt").Str("s");
  ev.Str("lora_name").Str("adapter-a");
  ev.Str("parent_block_hash").Uint(99);
  const BlockStored e = OnlyEvent<BlockStored>(Mp::Batch(1, ev));
  EXPECT_THAT(e.block_hashes, ElementsAre(10u, 11u));
  EXPECT_EQ(e.parent_block_hash, 99u);
  EXPECT_THAT(e.token_ids, ElementsAre(1u, 2u, 3u, 4u));
  EXPECT_EQ(e.block_size, 2u);
  EXPECT_EQ(e.lora_name, "adapter-a");
  EXPECT_EQ(e.medium, std::nullopt);  // Absent = null.
  EXPECT_EQ(e.lora_id, std::nullopt);
}

TEST(DecodeEventBatchTest, MissingTrailingFieldsAreNull) {
  Mp evs;
  evs.Array(5).Str("BlockStored").Uints({1}).Nil().Uints({7, 8}).Uint(2);  // Oldest vLLM.
  evs.Array(2).Str("BlockRemoved").Uints({1});
  evs.Array(1).Str("AllBlocksCleared");
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(Mp::Batch(3, evs));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->events.size(), 3u);
  const BlockStored& s = std::get<BlockStored>(batch->events[0]);
  EXPECT_THAT(s.token_ids, ElementsAre(7u, 8u));
  EXPECT_EQ(s.lora_id, std::nullopt);
  EXPECT_EQ(s.medium, std::nullopt);
  EXPECT_EQ(s.lora_name, std::nullopt);
  EXPECT_EQ(s.group_idx, std::nullopt);
  const BlockRemoved& r = std::get<BlockRemoved>(batch->events[1]);
  EXPECT_EQ(r.medium, std::nullopt);
  EXPECT_EQ(r.group_idx, std::nullopt);
  EXPECT_EQ(std::get<AllBlocksCleared>(batch->events[2]).medium, std::nullopt);
}

TEST(DecodeEventBatchTest, AllFieldsAndExtraTrailingFields) {
  Mp evs;
  evs.Array(14).Str("BlockStored").Uints({1}).Uint(0).Uints({5, 6}).Uint(2);
  evs.Uint(7).Str("cpu").Str("adapter").Array(1).Nil().Uint(3);  // lora_id ... group_idx
  evs.Str("sliding_window").Uint(4096).Str("from the future").Map(0);
  evs.Array(5).Str("BlockRemoved").Uints({1}).Str("cpu").Int(-1).Bool(true);
  evs.Array(3).Str("AllBlocksCleared").Str("cpu").Uint(1);
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(Mp::Batch(3, evs));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->events.size(), 3u);
  const BlockStored& s = std::get<BlockStored>(batch->events[0]);
  EXPECT_EQ(s.parent_block_hash, 0u);
  EXPECT_EQ(s.lora_id, 7);
  EXPECT_EQ(s.medium, "cpu");
  EXPECT_EQ(s.lora_name, "adapter");
  EXPECT_EQ(s.group_idx, 3);
  const BlockRemoved& r = std::get<BlockRemoved>(batch->events[1]);
  EXPECT_EQ(r.medium, "cpu");
  EXPECT_EQ(r.group_idx, -1);
  EXPECT_EQ(std::get<AllBlocksCleared>(batch->events[2]).medium, "cpu");
}

TEST(DecodeEventBatchTest, MapAllBlocksClearedWithMedium) {
  Mp ev;
  ev.Map(2).Str("medium").Str("cpu").Str("type").Str("AllBlocksCleared");
  EXPECT_EQ(OnlyEvent<AllBlocksCleared>(Mp::Batch(1, ev)).medium, "cpu");
}

TEST(DecodeEventBatchTest, BlockSizeZeroSkipsTokenCountCheck) {
  Mp ev;
  ev.Array(5).Str("BlockStored").Uints({1, 2}).Nil().Uints({1, 2, 3}).Uint(0);
  const BlockStored e = OnlyEvent<BlockStored>(Mp::Batch(1, ev));
  EXPECT_EQ(e.token_ids.size(), 3u);
  EXPECT_EQ(e.block_size, 0u);
}

TEST(DecodeEventBatchTest, TokenIdsUpToUint32Max) {
  Mp ev;
  ev.Array(5).Str("BlockStored").Uints({1}).Nil().Uints({0, 0xffffffffull}).Uint(2);
  EXPECT_THAT(OnlyEvent<BlockStored>(Mp::Batch(1, ev)).token_ids, ElementsAre(0u, 0xffffffffu));
}

TEST(DecodeEventBatchTest, DeeplyNestedUnknownValueIsSkipped) {
  // Skipping is iterative (mp_next), so nesting depth costs no stack.
  const int depth = 100000;
  Mp deep;
  for (int i = 0; i < depth; ++i) {
    deep.Array(1);
  }
  deep.Nil();
  Mp ev;
  ev.Map(3).Str("type").Str("BlockRemoved").Str("future").Raw(deep.bytes());
  ev.Str("block_hashes").Uints({4});
  EXPECT_THAT(OnlyEvent<BlockRemoved>(Mp::Batch(1, ev)).block_hashes, ElementsAre(4u));
}

// --- Rejections ---

TEST(DecodeEventBatchTest, EveryTruncationIsAnError) {
  for (const std::string& valid : {kLegacyBlockStored, kMapBlockStored}) {
    ASSERT_TRUE(DecodeEventBatch(valid).ok());
    for (size_t len = 0; len < valid.size(); ++len) {
      // A heap copy of exactly `len` bytes, so ASan catches any read past the end.
      const std::string prefix = valid.substr(0, len);
      const std::vector<char> copy(prefix.begin(), prefix.end());
      absl::StatusOr<EventBatch> batch =
          DecodeEventBatch(std::string_view(copy.data(), copy.size()));
      ASSERT_FALSE(batch.ok()) << "length " << len;
      EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(batch.status().message(), "invalid or truncated msgpack") << "length " << len;
    }
  }
}

TEST(DecodeEventBatchTest, RejectsInvalidMsgpack) {
  EXPECT_EQ(ErrorOf(""), "invalid or truncated msgpack");
  EXPECT_EQ(ErrorOf(Bytes("c1")), "batch: expected array or map");  // Reserved byte: one item.
  EXPECT_EQ(ErrorOf(Bytes("93 cb 00")), "invalid or truncated msgpack");
  EXPECT_EQ(ErrorOf(Bytes("dc 00")), "invalid or truncated msgpack");
  EXPECT_EQ(ErrorOf(Bytes("93 db 00 00 00 ff")), "invalid or truncated msgpack");  // str32.
  // Counts that wrap mp_check()'s int counter (2^32-1, 2^31, 2 * 2^31): it would accept these.
  EXPECT_EQ(ErrorOf(Bytes("dd ff ff ff ff")), "invalid or truncated msgpack");
  EXPECT_EQ(ErrorOf(Bytes("dd 80 00 00 00 00")), "invalid or truncated msgpack");
  EXPECT_EQ(ErrorOf(Bytes("df 80 00 00 00 00 00")), "invalid or truncated msgpack");
  EXPECT_EQ(ErrorOf(Bytes("93 cb 41 da a8 db e0 35 9f e7 dd ff ff ff fe 00")),
            "invalid or truncated msgpack");
}

TEST(DecodeEventBatchTest, RejectsTrailingBytes) {
  EXPECT_EQ(ErrorOf(kLegacyBlockStored + '\0'), "trailing bytes after the batch (1 of 58)");
  EXPECT_EQ(ErrorOf(kLegacyBlockStored + kLegacyBlockStored),
            "trailing bytes after the batch (57 of 114)");
}

TEST(DecodeEventBatchTest, RejectsBadBatch) {
  EXPECT_EQ(ErrorOf(Mp().Uint(1).bytes()), "batch: expected array or map");
  EXPECT_EQ(ErrorOf(Mp().Array(1).Double(1).bytes()),
            "batch: expected [ts, events, data_parallel_rank?], got 1 items");
  EXPECT_EQ(ErrorOf(Mp().Array(3).Str("now").Array(0).Uint(0).bytes()),
            "batch: ts: expected number");
  EXPECT_EQ(ErrorOf(Mp().Array(3).Nil().Array(0).Uint(0).bytes()), "batch: ts: expected number");
  EXPECT_EQ(ErrorOf(Mp().Array(3).Double(1).Map(0).Uint(0).bytes()),
            "batch: events: expected array");
  EXPECT_EQ(ErrorOf(Mp().Array(3).Double(1).Array(0).Str("0").bytes()),
            "batch: data_parallel_rank: expected int or nil");
  EXPECT_EQ(ErrorOf(Mp().Map(1).Str("events").Array(0).bytes()), "batch: missing ts");
  EXPECT_EQ(ErrorOf(Mp().Map(1).Str("ts").Double(1).bytes()), "batch: missing events");
  EXPECT_EQ(ErrorOf(Mp().Map(2).Str("ts").Double(1).Str("events").Nil().bytes()),
            "batch: events: expected array");
}

TEST(DecodeEventBatchTest, RejectsBadEventShape) {
  EXPECT_EQ(ErrorOf(Mp::Batch(1, Mp().Uint(1))), "event 0: expected array or map");
  EXPECT_EQ(ErrorOf(Mp::Batch(1, Mp().Array(0))), "event 0: expected a str tag in slot 0");
  EXPECT_EQ(ErrorOf(Mp::Batch(1, Mp().Array(1).Uint(0))), "event 0: expected a str tag in slot 0");
  EXPECT_EQ(ErrorOf(Mp::Batch(1, Mp().Map(1).Str("block_hashes").Uints({1}))),
            "event 0: missing type");
  EXPECT_EQ(ErrorOf(Mp::Batch(1, Mp().Map(1).Str("type").Uint(1))), "event 0: type: expected str");
}

TEST(DecodeEventBatchTest, RejectsBadFieldsWithTheirLocation) {
  Mp good;
  good.Array(2).Str("BlockRemoved").Uints({1});
  good.Array(1).Str("AllBlocksCleared");
  auto error_of_third = [&](const Mp& ev) {
    return ErrorOf(Mp::Batch(3, Mp().Raw(good.bytes()).Raw(ev.bytes())));
  };
  auto stored = [](std::string_view hashes_hex, std::string_view parent_hex) {
    return Mp().Array(5).Str("BlockStored").Raw(Bytes(hashes_hex)).Raw(Bytes(parent_hex));
  };
  EXPECT_EQ(error_of_third(Mp().Array(2).Str("BlockRemoved").Uint(1)),
            "event 2: block_hashes: expected array");
  EXPECT_EQ(error_of_third(Mp().Array(2).Str("BlockRemoved").Nil()),
            "event 2: block_hashes: expected array");
  EXPECT_EQ(error_of_third(Mp().Array(2).Str("BlockRemoved").Array(2).Uint(1).Bool(false)),
            "event 2: block_hashes[1]: expected int, bin or str");
  EXPECT_EQ(error_of_third(Mp().Array(2).Str("BlockRemoved").Array(1).Double(1.0)),
            "event 2: block_hashes[0]: expected int, bin or str");
  EXPECT_EQ(error_of_third(stored("91 01", "c3").Uints({}).Uint(0)),
            "event 2: parent_block_hash: expected int, bin, str or nil");
  EXPECT_EQ(error_of_third(Mp().Array(3).Str("BlockRemoved").Uints({1}).Uint(1)),
            "event 2: medium: expected str or nil");
  EXPECT_EQ(error_of_third(Mp().Array(4).Str("BlockRemoved").Uints({1}).Nil().Str("0")),
            "event 2: group_idx: expected int or nil");
  EXPECT_EQ(error_of_third(Mp().Array(4).Str("BlockRemoved").Uints({1}).Nil().Uint(1ull << 63)),
            "event 2: group_idx: expected int64, got 9223372036854775808");
  EXPECT_EQ(error_of_third(Mp().Array(2).Str("AllBlocksCleared").Uint(0)),
            "event 2: medium: expected str or nil");
  EXPECT_EQ(error_of_third(Mp().Map(2).Str("type").Str("BlockRemoved").Str("medium").Bin("x")),
            "event 2: medium: expected str or nil");
}

TEST(DecodeEventBatchTest, RejectsBadBlockStored) {
  auto error_of = [](const Mp& ev) { return ErrorOf(Mp::Batch(1, ev)); };
  const Mp head = Mp().Str("BlockStored").Uints({1, 2});  // tag, block_hashes
  EXPECT_EQ(error_of(Mp().Array(1).Str("BlockStored")), "event 0: missing block_hashes");
  EXPECT_EQ(error_of(Mp().Array(1).Str("BlockRemoved")), "event 0: missing block_hashes");
  EXPECT_EQ(error_of(Mp().Array(3).Raw(head.bytes()).Nil()), "event 0: missing token_ids");
  EXPECT_EQ(error_of(Mp().Array(4).Raw(head.bytes()).Nil().Uints({1, 2})),
            "event 0: missing block_size");
  EXPECT_EQ(error_of(Mp().Map(3)
                         .Str("type")
                         .Str("BlockStored")
                         .Str("block_hashes")
                         .Uints({1})
                         .Str("block_size")
                         .Uint(1)),
            "event 0: missing token_ids");
  EXPECT_EQ(error_of(Mp().Array(5).Raw(head.bytes()).Nil().Nil().Uint(1)),
            "event 0: token_ids: expected array");
  EXPECT_EQ(error_of(Mp().Array(5).Raw(head.bytes()).Nil().Uints({1, 1ull << 32}).Uint(1)),
            "event 0: token_ids[1]: expected uint32, got 4294967296");
  EXPECT_EQ(error_of(Mp().Array(5).Raw(head.bytes()).Nil().Array(2).Uint(1).Int(-1).Uint(1)),
            "event 0: token_ids[1]: expected uint32");
  EXPECT_EQ(error_of(Mp().Array(5).Raw(head.bytes()).Nil().Uints({1, 2}).Int(-1)),
            "event 0: block_size: expected uint32");
  EXPECT_EQ(error_of(Mp().Array(5).Raw(head.bytes()).Nil().Uints({1, 2}).Nil()),
            "event 0: block_size: expected uint32");
  EXPECT_EQ(error_of(Mp().Array(5).Raw(head.bytes()).Nil().Uints({1, 2, 3}).Uint(2)),
            "event 0: token_ids: 3 ids, expected block_hashes.size() * block_size = 2 * 2 = 4");
  EXPECT_EQ(error_of(Mp().Array(6).Raw(head.bytes()).Nil().Uints({1, 2}).Uint(1).Str("7")),
            "event 0: lora_id: expected int or nil");
  EXPECT_EQ(
      error_of(Mp().Array(8).Raw(head.bytes()).Nil().Uints({1, 2}).Uint(1).Nil().Nil().Uint(5)),
      "event 0: lora_name: expected str or nil");
}

// --- Sequence frames ---

TEST(SequenceTest, DecodesEightByteBigEndian) {
  EXPECT_EQ(DecodeSequence(std::string(8, '\0')), 0u);
  EXPECT_EQ(DecodeSequence(Bytes("00 00 00 00 00 00 00 01")), 1u);
  EXPECT_EQ(DecodeSequence(Bytes("01 02 03 04 05 06 07 08")), 0x0102030405060708ull);
  EXPECT_EQ(DecodeSequence(std::string(8, '\xff')), kReplayEndSequence);
  EXPECT_EQ(DecodeSequence(""), std::nullopt);
  EXPECT_EQ(DecodeSequence(std::string(7, '\0')), std::nullopt);
  EXPECT_EQ(DecodeSequence(std::string(9, '\0')), std::nullopt);
}

TEST(SequenceTest, EncodesEightByteBigEndianAndRoundTrips) {
  EXPECT_EQ(EncodeSequence(0x0102030405060708ull), Bytes("01 02 03 04 05 06 07 08"));
  EXPECT_EQ(EncodeSequence(0), std::string(8, '\0'));
  EXPECT_EQ(EncodeSequence(kReplayEndSequence), std::string(8, '\xff'));
  for (uint64_t seq :
       {uint64_t{0}, uint64_t{255}, uint64_t{256}, uint64_t{1} << 63, kReplayEndSequence - 1}) {
    EXPECT_EQ(DecodeSequence(EncodeSequence(seq)), seq);
  }
}

}  // namespace
}  // namespace kvgate::kvevents
