// EventApplier: engine events -> precise index, checked through Match with chains the router
// would compute for the same tokens (TokenRootSeed + HashTokenBlocks).
#include "kvevents/event_applier.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvindex/block_hash.h"

namespace kvgate::kvevents {
namespace {

using kvindex::Holder;
using kvindex::Tier;
using ::testing::UnorderedElementsAre;

constexpr Holder kW0{0, 0};
constexpr Holder kW1{1, 0};

std::vector<uint32_t> Tokens(uint32_t from, uint32_t n) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = from + i;
  return t;
}

// The chain a request for `tokens` under `model` hashes to (router side).
std::vector<kvindex::BlockHash> Chain(const std::vector<uint32_t>& tokens, uint32_t block,
                                      std::string_view model = "m") {
  std::vector<kvindex::BlockHash> out;
  kvindex::HashTokenBlocks(tokens, TokenRootSeed(model), block, &out);
  return out;
}

BlockStored Stored(std::vector<EngineBlockId> ids, std::optional<EngineBlockId> parent,
                   std::vector<uint32_t> tokens, uint32_t block = 4,
                   std::optional<std::string> medium = std::nullopt) {
  BlockStored s;
  s.block_hashes = std::move(ids);
  s.parent_block_hash = parent;
  s.token_ids = std::move(tokens);
  s.block_size = block;
  s.medium = std::move(medium);
  return s;
}

EventBatch Batch(std::vector<KvEvent> events) {
  EventBatch b;
  b.events = std::move(events);
  return b;
}

uint32_t Held(const kvindex::PrefixIndex& index, Holder h,
              const std::vector<kvindex::BlockHash>& chain, Tier tier = Tier::kGpu) {
  auto m = index.Match(chain, {&h, 1});
  return m.empty() ? 0 : m[0].blocks[static_cast<int>(tier)];
}

class EventApplierTest : public ::testing::Test {
 protected:
  kvindex::PrefixIndex index_;
  EventApplier applier_{index_, {.media = {{"disk", Tier::kStore}}}};
};

TEST_F(EventApplierTest, StoredChainsMatchTheRouterChainOfTheSameTokens) {
  const auto prompt = Tokens(100, 12);  // Three 4-token blocks.
  auto r = applier_.Apply(kW0, "m", Batch({Stored({11, 12}, std::nullopt, Tokens(100, 8))}));
  EXPECT_EQ(r.stored_blocks, 2u);
  // The continuation names its parent by the engine's id; its tokens are only the new block's.
  r = applier_.Apply(kW0, "m", Batch({Stored({13}, 12, Tokens(108, 4))}));
  EXPECT_EQ(r.stored_blocks, 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4)), 3u);
  EXPECT_EQ(Held(index_, kW1, Chain(prompt, 4)), 0u);
  // Another model's namespace, and another block size, never match.
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4, "other")), 0u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 2)), 0u);
  EXPECT_THAT(applier_.EngineBlocks(kW0, Tier::kGpu), UnorderedElementsAre(11, 12, 13));
  EXPECT_EQ(applier_.LastBlockSize(kW0), 4u);
}

TEST_F(EventApplierTest, RemovedTranslatesEngineIdsPerTier) {
  const auto prompt = Tokens(1, 8);
  applier_.Apply(kW0, "m",
                 Batch({Stored({7, 8}, std::nullopt, prompt),
                        Stored({7, 8}, std::nullopt, prompt, 4, "cpu")}));
  EXPECT_EQ(applier_.BlockCounts(kW0)[0], 2u);
  EXPECT_EQ(applier_.BlockCounts(kW0)[1], 2u);
  BlockRemoved gone;
  gone.block_hashes = {8, 999};  // 999 was never stored.
  gone.medium = "GPU";
  auto r = applier_.Apply(kW0, "m", Batch({gone}));
  EXPECT_EQ(r.removed_blocks, 1u);
  EXPECT_EQ(r.unknown_removals, 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4), Tier::kGpu), 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4), Tier::kHost), 2u);  // Still offloaded.
  EXPECT_THAT(applier_.EngineBlocks(kW0, Tier::kGpu), UnorderedElementsAre(7));
  EXPECT_THAT(applier_.EngineBlocks(kW0, Tier::kHost), UnorderedElementsAre(7, 8));
}

TEST_F(EventApplierTest, MediaMapToTiersAndUnknownOnesAreIgnored) {
  auto r = applier_.Apply(kW0, "m",
                          Batch({Stored({1}, std::nullopt, Tokens(0, 4), 4, "DISK"),
                                 Stored({2}, std::nullopt, Tokens(50, 4), 4, "nvme-of")}));
  EXPECT_EQ(r.stored_blocks, 1u);
  EXPECT_EQ(r.ignored_events, 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 4), 4), Tier::kStore), 1u);
}

TEST_F(EventApplierTest, OrphansAndMalformedBlocksAreCountedNotIndexed) {
  auto r = applier_.Apply(kW0, "m",
                          Batch({Stored({5}, /*parent never seen=*/42, Tokens(0, 4)),
                                 Stored({6}, std::nullopt, Tokens(0, 3), /*block=*/4)}));
  EXPECT_EQ(r.orphan_blocks, 2u);
  EXPECT_EQ(r.stored_blocks, 0u);
  EXPECT_TRUE(applier_.EngineBlocks(kW0, Tier::kGpu).empty());
}

TEST_F(EventApplierTest, OtherKvCacheGroupsAreIgnored) {
  BlockStored sliding = Stored({3}, std::nullopt, Tokens(0, 4));
  sliding.group_idx = 1;
  auto r = applier_.Apply(kW0, "m", Batch({sliding}));
  EXPECT_EQ(r.ignored_events, 1u);
  EXPECT_EQ(r.stored_blocks, 0u);
}

TEST_F(EventApplierTest, LoraNameSelectsTheNamespace) {
  BlockStored s = Stored({9}, std::nullopt, Tokens(0, 4));
  s.lora_name = "my-adapter";
  applier_.Apply(kW0, "base", Batch({s}));
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 4), 4, "my-adapter")), 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 4), 4, "base")), 0u);
}

TEST_F(EventApplierTest, ClearedEmptiesOneTierOrAll) {
  const auto prompt = Tokens(0, 8);
  applier_.Apply(kW0, "m",
                 Batch({Stored({1, 2}, std::nullopt, prompt),
                        Stored({1, 2}, std::nullopt, prompt, 4, "CPU")}));
  applier_.Apply(kW1, "m", Batch({Stored({1, 2}, std::nullopt, prompt)}));
  AllBlocksCleared cpu;
  cpu.medium = "cpu";
  applier_.Apply(kW0, "m", Batch({cpu}));
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4), Tier::kHost), 0u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4), Tier::kGpu), 2u);
  auto r = applier_.Apply(kW0, "m", Batch({AllBlocksCleared{}}));
  EXPECT_EQ(r.cleared, 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4), Tier::kGpu), 0u);
  EXPECT_EQ(applier_.BlockCounts(kW0), (std::array<uint64_t, kvindex::kNumTiers>{}));
  EXPECT_EQ(Held(index_, kW1, Chain(prompt, 4)), 2u);  // Other workers untouched.
  // A block re-stored after the clear is indexed again.
  applier_.Apply(kW0, "m", Batch({Stored({1}, std::nullopt, Tokens(0, 4))}));
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4)), 1u);
}

TEST_F(EventApplierTest, ForgetDropsTheHolderEverywhere) {
  applier_.Apply(kW0, "m", Batch({Stored({1, 2}, std::nullopt, Tokens(0, 8))}));
  applier_.Forget(kW0);
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 8), 4)), 0u);
  EXPECT_TRUE(applier_.EngineBlocks(kW0, Tier::kGpu).empty());
  // A removal of a forgotten id is unknown, not a crash or a negative count.
  BlockRemoved gone;
  gone.block_hashes = {1};
  EXPECT_EQ(applier_.Apply(kW0, "m", Batch({gone})).unknown_removals, 1u);
  EXPECT_EQ(applier_.BlockCounts(kW0)[0], 0u);
}

}  // namespace
}  // namespace kvgate::kvevents
