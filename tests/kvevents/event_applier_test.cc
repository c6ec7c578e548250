// EventApplier: engine events -> precise index, checked through Match with chains the router
// would compute for the same tokens (TokenRootSeed + HashTokenBlocks).
#include "kvevents/event_applier.h"

#include <algorithm>
#include <map>
#include <random>

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

bool PrefixClosed(const kvindex::PrefixIndex& index, Holder h, Tier tier) {
  for (const auto& hs : index.Stats().holders) {
    if (hs.holder == h) return hs.tiers[static_cast<int>(tier)].prefix_closed;
  }
  return true;
}

BlockRemoved Removed(std::vector<EngineBlockId> ids, std::optional<std::string> medium = {}) {
  BlockRemoved r;
  r.block_hashes = std::move(ids);
  r.medium = std::move(medium);
  return r;
}

// Engines evict leaves in their own order (vLLM: least recently freed first), not the index's
// LRU order: that keeps the list prefix-closed, so matches stay binary searches. Only a block
// evicted under a held child opens it, until the child goes or the block comes back.
TEST_F(EventApplierTest, LeafEvictionsInAnyOrderKeepTheListPrefixClosed) {
  applier_.Apply(kW0, "m", Batch({Stored({1, 2, 3}, std::nullopt, Tokens(0, 12))}));
  applier_.Apply(kW0, "m", Batch({Stored({4, 5, 6}, std::nullopt, Tokens(100, 12))}));
  applier_.Apply(kW0, "m", Batch({Removed({6})}));  // A leaf, not the index's LRU tail.
  EXPECT_TRUE(PrefixClosed(index_, kW0, Tier::kGpu));
  applier_.Apply(kW0, "m", Batch({Removed({2})}));  // Block 3 still held.
  EXPECT_FALSE(PrefixClosed(index_, kW0, Tier::kGpu));
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 12), 4)), 1u);
  applier_.Apply(kW0, "m", Batch({Stored({2}, 1, Tokens(4, 4))}));
  EXPECT_TRUE(PrefixClosed(index_, kW0, Tier::kGpu));
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 12), 4)), 3u);
  applier_.Apply(kW0, "m", Batch({Removed({2}), Removed({3})}));  // Mended by the child's going.
  EXPECT_TRUE(PrefixClosed(index_, kW0, Tier::kGpu));
  EXPECT_EQ(Held(index_, kW0, Chain(Tokens(0, 12), 4)), 1u);
}

// A block that leaves every tier while the host holds its child: the "any tier" set has a hole
// although the GPU list stays closed, and the any-tier match must stop at it.
TEST_F(EventApplierTest, AHoleInEveryTierStopsTheAnyTierMatch) {
  const auto prompt = Tokens(0, 20);  // Five blocks.
  applier_.Apply(kW0, "m",
                 Batch({Stored({1, 2, 3, 4, 5}, std::nullopt, prompt),
                        Stored({3, 4, 5}, 2, Tokens(8, 12), 4, "CPU")}));
  applier_.Apply(kW0, "m", Batch({Removed({5, 4, 3}), Removed({2})}));
  EXPECT_TRUE(PrefixClosed(index_, kW0, Tier::kGpu));
  Holder h = kW0;
  auto m = index_.Match(Chain(prompt, 4), {&h, 1});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].blocks[static_cast<int>(Tier::kGpu)], 1u);
  EXPECT_EQ(m[0].blocks[static_cast<int>(Tier::kHost)], 0u);
  EXPECT_EQ(m[0].any_tier_blocks, 1u);
}

// Random stores (a run after a held ancestor, as engines send them), evictions of any block
// and tier clears, on a fixed forest of blocks in two tiers: every match equals a walk over
// what the engine holds, and the index calls a list prefix-closed exactly when it is.
TEST_F(EventApplierTest, MatchesEqualAWalkUnderRandomEvictions) {
  std::mt19937_64 rng(7);
  constexpr int kIds = 40;
  std::vector<int> parent(kIds + 1, 0);  // 0: a root block.
  for (int i = 4; i <= kIds; ++i) parent[i] = std::uniform_int_distribution<int>(1, i - 1)(rng);
  auto path = [&](int id) {
    std::vector<int> p;
    for (int i = id; i != 0; i = parent[i]) p.insert(p.begin(), i);
    return p;
  };
  auto tokens_of = [&](const std::vector<int>& ids) {
    std::vector<uint32_t> t;
    for (int i : ids) {
      for (uint32_t k = 0; k < 4; ++k) t.push_back(static_cast<uint32_t>(i) * 4 + k);
    }
    return t;
  };
  const std::optional<std::string> kMedia[] = {std::nullopt, "CPU"};
  std::map<int, uint8_t> held;  // What the engine holds: id -> tier bits.
  std::map<int, int> copies;    // GPU copies beyond the first (vLLM does not deduplicate).
  auto holds = [&](int id, int t) {
    auto it = held.find(id);
    return it != held.end() && (t < 0 ? it->second != 0 : (it->second & (1u << t)) != 0);
  };
  int closed_steps = 0;
  for (int step = 0; step < 3000; ++step) {
    const int t = static_cast<int>(rng() % 2);
    const int op = static_cast<int>(rng() % 100);
    const int id = std::uniform_int_distribution<int>(1, kIds)(rng);
    if (op < 55) {
      const auto p = path(id);
      size_t from = 0;  // The run starts after the deepest ancestor some tier holds.
      for (size_t k = 1; k < p.size(); ++k) {
        if (holds(p[k - 1], -1)) from = k;
      }
      const std::vector<int> run(p.begin() + static_cast<std::ptrdiff_t>(from), p.end());
      std::vector<EngineBlockId> ids(run.begin(), run.end());
      const std::optional<EngineBlockId> par =
          from == 0 ? std::nullopt : std::optional<EngineBlockId>(p[from - 1]);
      applier_.Apply(kW0, "m", Batch({Stored(ids, par, tokens_of(run), 4, kMedia[t])}));
      for (int i : run) {
        if (t == 0 && holds(i, 0)) ++copies[i];
        held[i] |= static_cast<uint8_t>(1u << t);
      }
    } else if (op < 98) {
      std::vector<EngineBlockId> ids;
      for (int k = 0; k < 3; ++k) {
        int victim = std::uniform_int_distribution<int>(1, kIds)(rng);
        // Mostly a leaf, as engines evict; else any block.
        for (bool descended = op < 85; descended;) {
          descended = false;
          for (int c = victim + 1; c <= kIds && !descended; ++c) {
            if (parent[c] == victim && holds(c, t)) victim = c, descended = true;
          }
        }
        if (holds(victim, t)) ids.push_back(static_cast<EngineBlockId>(victim));
        if (t == 0 && copies[victim] > 0) {
          --copies[victim];
        } else {
          held[victim] &= static_cast<uint8_t>(~(1u << t));
        }
      }
      applier_.Apply(kW0, "m", Batch({Removed(ids, kMedia[t])}));
    } else {
      AllBlocksCleared c;
      c.medium = t == 0 ? "GPU" : "CPU";
      applier_.Apply(kW0, "m", Batch({c}));
      for (auto& [i, bits] : held) bits &= static_cast<uint8_t>(~(1u << t));
      if (t == 0) copies.clear();
    }
    for (int tier = 0; tier < 2; ++tier) {
      bool closed = true;
      for (const auto& [i, bits] : held) {
        if (holds(i, tier) && parent[i] != 0 && !holds(parent[i], tier)) closed = false;
      }
      ASSERT_EQ(PrefixClosed(index_, kW0, static_cast<Tier>(tier)), closed)
          << "step " << step << " tier " << tier;
      closed_steps += closed ? 1 : 0;
    }
    for (int probe = 0; probe < 4; ++probe) {
      const auto p = path(std::uniform_int_distribution<int>(1, kIds)(rng));
      Holder h = kW0;
      auto m = index_.Match(Chain(tokens_of(p), 4), {&h, 1});
      ASSERT_EQ(m.size(), 1u);
      for (int tier = -1; tier < 2; ++tier) {
        uint32_t expected = 0;
        while (expected < p.size() && holds(p[expected], tier)) ++expected;
        const uint32_t got = tier < 0 ? m[0].any_tier_blocks : m[0].blocks[tier];
        ASSERT_EQ(got, expected) << "step " << step << " tier " << tier;
      }
    }
  }
  EXPECT_GT(closed_steps, 500);  // The binary search was exercised, not only the walk.
}

TEST_F(EventApplierTest, HiCacheAndLmcacheMediaMapToTiers) {
  const auto t = Tokens(0, 4);
  applier_.Apply(kW0, "m",
                 Batch({Stored({1}, std::nullopt, t, 4, "CPU_PINNED"),
                        Stored({1}, std::nullopt, t, 4, "EXTERNAL")}));
  EXPECT_EQ(Held(index_, kW0, Chain(t, 4), Tier::kHost), 1u);
  EXPECT_EQ(Held(index_, kW0, Chain(t, 4), Tier::kStore), 1u);
  // The device turns over; the host and store copies stay routable (sglang#39108).
  BlockRemoved gpu;
  gpu.block_hashes = {1};
  gpu.medium = "GPU";
  applier_.Apply(kW0, "m", Batch({Stored({1}, std::nullopt, t, 4, "GPU"), gpu}));
  EXPECT_EQ(Held(index_, kW0, Chain(t, 4), Tier::kGpu), 0u);
  EXPECT_EQ(Held(index_, kW0, Chain(t, 4), Tier::kHost), 1u);
}

// Hybrid models: one KV-cache group per layer kind, each with its own events.
class HybridApplierTest : public ::testing::Test {
 protected:
  static BlockStored Group(BlockStored s, int64_t group, std::string kind,
                           std::optional<int64_t> window = std::nullopt) {
    s.group_idx = group;
    s.kv_cache_spec_kind = std::move(kind);
    s.kv_cache_spec_sliding_window = window;
    return s;
  }
  static BlockRemoved Removed(std::vector<EngineBlockId> ids, int64_t group) {
    BlockRemoved r;
    r.block_hashes = std::move(ids);
    r.group_idx = group;
    return r;
  }
  // What routing would take as the hit on `h`: the index's full-attention run, capped by the
  // other groups.
  uint32_t Hit(Holder h, const std::vector<kvindex::BlockHash>& chain) {
    return groups_.Cap(h, chain, 4, Held(index_, h, chain), /*gpu_only=*/true);
  }

  kvindex::PrefixIndex index_;
  kvindex::HybridGroups groups_;
  EventApplier applier_{index_, {}, &groups_};
};

TEST_F(HybridApplierTest, EvictedSlidingWindowShortensTheHitFullAttentionWouldGive) {
  const auto prompt = Tokens(0, 32);  // Eight 4-token blocks.
  const auto chain = Chain(prompt, 4);
  // The engine's ids are the same in both groups, as vLLM's are.
  const std::vector<EngineBlockId> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  auto r = applier_.Apply(
      kW0, "m",
      Batch({Group(Stored(ids, std::nullopt, prompt), 0, "full_attention"),
             Group(Stored(ids, std::nullopt, prompt), 1, "sliding_window", /*window=*/9)}));
  EXPECT_EQ(r.stored_blocks, 16u);
  EXPECT_EQ(Hit(kW0, chain), 8u);
  // The window's blocks at the end were evicted, the full-attention ones kept: the engine hits
  // up to the last run of two SWA blocks (ceil((9-1)/4)), not the whole prefix.
  r = applier_.Apply(kW0, "m", Batch({Removed({7, 8}, 1)}));
  EXPECT_EQ(r.removed_blocks, 2u);
  EXPECT_EQ(Held(index_, kW0, chain), 8u);  // Full attention untouched by group 1's ids.
  EXPECT_EQ(Hit(kW0, chain), 6u);
  // Group 0's removal of the same ids leaves group 1's.
  applier_.Apply(kW0, "m", Batch({Removed({5, 6}, 0)}));
  EXPECT_EQ(Held(index_, kW0, chain), 4u);
  EXPECT_EQ(Hit(kW0, chain), 4u);
  ASSERT_EQ(groups_.Groups(kW0).size(), 1u);
  EXPECT_EQ(groups_.Groups(kW0)[0].blocks[0], 6u);
  EXPECT_EQ(groups_.Groups(kW0)[0].spec.sliding_window, 9u);
}

TEST_F(HybridApplierTest, ABlockComputedAgainBesideItsCachedCopyLeavesWithTheLastCopy) {
  // A prompt hit short of its full-attention prefix (the window's blocks were gone) recomputes
  // blocks both groups still cache: vLLM caches the new copies beside the old, announces them,
  // and removes each copy when it is evicted (the old one first: it was freed first).
  const auto prompt = Tokens(0, 32);
  const auto chain = Chain(prompt, 4);
  const std::vector<EngineBlockId> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto stored = Batch({Group(Stored(ids, std::nullopt, prompt), 0, "full_attention"),
                             Group(Stored(ids, std::nullopt, prompt), 1, "sliding_window", 9)});
  applier_.Apply(kW0, "m", stored);
  applier_.Apply(kW0, "m", stored);  // The copies.
  auto r = applier_.Apply(kW0, "m", Batch({Removed({5, 6, 7, 8}, 0), Removed({7, 8}, 1)}));
  EXPECT_EQ(r.unknown_removals, 0u);
  EXPECT_EQ(Held(index_, kW0, chain), 8u);
  EXPECT_EQ(Hit(kW0, chain), 8u);
  // The second copies' eviction takes the blocks.
  r = applier_.Apply(kW0, "m", Batch({Removed({7, 8}, 1)}));
  EXPECT_EQ(r.removed_blocks, 2u);
  EXPECT_EQ(Hit(kW0, chain), 6u);
  applier_.Apply(kW0, "m", Batch({Removed({5, 6, 7, 8}, 0)}));
  EXPECT_EQ(Held(index_, kW0, chain), 4u);
  EXPECT_EQ(Hit(kW0, chain), 4u);
  // A cleared GPU drops every copy.
  AllBlocksCleared cleared;
  cleared.medium = "GPU";
  applier_.Apply(kW0, "m", Batch({cleared}));
  EXPECT_EQ(Held(index_, kW0, chain), 0u);
  applier_.Apply(kW0, "m",
                 Batch({Group(Stored({1}, std::nullopt, Tokens(0, 4)), 0, "full_attention")}));
  r = applier_.Apply(kW0, "m", Batch({Removed({1}, 0)}));
  EXPECT_EQ(r.removed_blocks, 1u);
  EXPECT_EQ(Held(index_, kW0, chain), 0u);
}

TEST_F(HybridApplierTest, FullAttentionNeedNotBeGroupZero) {
  // Gemma-3-like: the sliding-window layers come first.
  const auto prompt = Tokens(0, 16);
  const std::vector<EngineBlockId> ids = {1, 2, 3, 4};
  applier_.Apply(kW0, "m",
                 Batch({Group(Stored(ids, std::nullopt, prompt), 0, "sliding_window", 1024),
                        Group(Stored(ids, std::nullopt, prompt), 1, "full_attention")}));
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4)), 4u);
  EXPECT_EQ(Hit(kW0, Chain(prompt, 4)), 4u);
  applier_.Apply(kW0, "m", Batch({Removed({1}, 0)}));  // The window reaches block 0.
  EXPECT_EQ(Hit(kW0, Chain(prompt, 4)), 0u);
  EXPECT_EQ(Held(index_, kW0, Chain(prompt, 4)), 4u);
}

TEST_F(HybridApplierTest, MambaHitsAtTheLastCheckpoint) {
  const auto prompt = Tokens(0, 24);
  const auto chain = Chain(prompt, 4);
  // A checkpoint is one block named after its parent, which only full attention holds.
  auto r = applier_.Apply(
      kW0, "m",
      Batch({Group(Stored({1, 2, 3, 4, 5, 6}, std::nullopt, prompt), 0, "full_attention"),
             Group(Stored({2}, 1, Tokens(4, 4)), 1, "mamba"),
             Group(Stored({4}, 3, Tokens(12, 4)), 1, "mamba"),
             Group(Stored({9}, /*never seen=*/77, Tokens(40, 4)), 1, "mamba")}));
  EXPECT_EQ(r.orphan_blocks, 1u);
  EXPECT_EQ(Hit(kW0, chain), 4u);  // Six full-attention blocks, the last state at block 4.
  applier_.Apply(kW0, "m", Batch({Removed({4}, 1)}));
  EXPECT_EQ(Hit(kW0, chain), 2u);
  applier_.Apply(kW0, "m", Batch({Removed({2}, 1)}));
  EXPECT_EQ(Hit(kW0, chain), 0u);
}

TEST_F(HybridApplierTest, UnknownKindsAndKindlessGroupsAreIgnored) {
  auto r = applier_.Apply(
      kW0, "m",
      Batch({Group(Stored({1}, std::nullopt, Tokens(0, 4)), 1, "cross_attention"),
             Group(Stored({1}, std::nullopt, Tokens(0, 4)), 2, "sliding_window" /*no window*/)}));
  EXPECT_EQ(r.ignored_events, 2u);
  EXPECT_FALSE(groups_.Hybrid(kW0));
  // Clearing everything empties the groups too, and forgetting drops them.
  applier_.Apply(kW0, "m",
                 Batch({Group(Stored({1}, std::nullopt, Tokens(0, 4)), 1, "mamba"),
                        Group(Stored({1}, std::nullopt, Tokens(0, 4)), 0, "full_attention")}));
  EXPECT_EQ(Hit(kW0, Chain(Tokens(0, 4), 4)), 1u);
  applier_.Apply(kW0, "m", Batch({AllBlocksCleared{}}));
  EXPECT_EQ(groups_.Groups(kW0)[0].blocks[0], 0u);
  applier_.Forget(kW0);
  EXPECT_FALSE(groups_.Hybrid(kW0));
}

}  // namespace
}  // namespace kvgate::kvevents
