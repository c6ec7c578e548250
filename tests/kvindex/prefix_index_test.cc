#include "kvindex/prefix_index.h"

#include <list>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvgate::kvindex {
namespace {

std::vector<BlockHash> MakeChain(uint64_t seed, size_t n) {
  std::vector<BlockHash> c(n);
  uint64_t h = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    c[i] = h + i;
  }
  return c;
}

constexpr Holder kA{1, 0};
constexpr Holder kB{2, 0};
constexpr Holder kA1{1, 1};

TEST(PrefixIndexTest, BasicMatch) {
  PrefixIndex index;
  const auto chain = MakeChain(1, 100);
  ASSERT_TRUE(index.Insert(kA, absl::MakeSpan(chain).first(60), Tier::kGpu).ok());
  ASSERT_TRUE(index.Insert(kB, absl::MakeSpan(chain).first(10), Tier::kHost).ok());
  ASSERT_TRUE(index.Insert(kA1, chain, Tier::kStore).ok());
  const Holder unknown{9, 9};
  auto r = index.Match(chain, {kA, kB, unknown, kA1});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].holder, kA);
  EXPECT_EQ(r[0].blocks[0], 60u);
  EXPECT_EQ(r[0].blocks[1], 0u);
  EXPECT_EQ(r[0].any_tier_blocks, 60u);
  EXPECT_EQ(r[1].blocks[1], 10u);
  EXPECT_EQ(r[2].any_tier_blocks, 0u);
  EXPECT_EQ(r[3].blocks[2], 100u);
  // All holders when eligible is empty.
  EXPECT_EQ(index.Match(chain).size(), 3u);
  // Other chains miss.
  EXPECT_EQ(index.Match(MakeChain(2, 50), {kA})[0].any_tier_blocks, 0u);
}

TEST(PrefixIndexTest, AnyTierCombinesTiers) {
  PrefixIndex index;
  const auto chain = MakeChain(3, 20);
  ASSERT_TRUE(index.Insert(kA, absl::MakeSpan(chain).first(5), Tier::kGpu).ok());
  ASSERT_TRUE(
      index.InsertAfter(kA, std::nullopt, absl::MakeSpan(chain).first(12), Tier::kHost).ok());
  auto r = index.Match(chain, {kA});
  EXPECT_EQ(r[0].blocks[0], 5u);
  EXPECT_EQ(r[0].blocks[1], 12u);
  EXPECT_EQ(r[0].any_tier_blocks, 12u);
}

TEST(PrefixIndexTest, HoleInTheMiddleFallsBackToLinearAndHeals) {
  PrefixIndex index;
  const auto chain = MakeChain(4, 1000);
  ASSERT_TRUE(index.Insert(kA, chain, Tier::kGpu).ok());
  EXPECT_EQ(index.Remove(kA, {chain[500]}, Tier::kGpu), 1u);
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 500u);
  EXPECT_FALSE(index.Stats().holders[0].tiers[0].prefix_closed);
  // Re-inserting the missing block restores the full match (the tail is still held).
  ASSERT_TRUE(index.InsertAfter(kA, chain[499], {chain[500]}, Tier::kGpu).ok());
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 1000u);
  index.ClearHolder(kA);
  EXPECT_TRUE(index.Stats().holders[0].tiers[0].prefix_closed);
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 0u);
}

TEST(PrefixIndexTest, TailRemovalKeepsPrefixClosure) {
  PrefixIndex index;
  const auto chain = MakeChain(5, 100);
  ASSERT_TRUE(index.Insert(kA, chain, Tier::kGpu).ok());
  // Engine-style eviction: tail blocks in any order within the batch.
  std::vector<BlockHash> tail(chain.begin() + 60, chain.end());
  EXPECT_EQ(index.Remove(kA, tail, Tier::kGpu), 40u);
  EXPECT_TRUE(index.Stats().holders[0].tiers[0].prefix_closed);
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 60u);
}

// A caller that knows blocks' parents keeps the flag itself; once the index evicts on its own,
// its list is no longer what the caller knows, and the caller's "closed" is refused until the
// list empties.
TEST(PrefixIndexTest, CallerTrackedClosureHoldsUntilTheIndexEvictsOnItsOwn) {
  PrefixIndex index;
  const auto chain = MakeChain(6, 10);
  auto closed = [&](Tier t) {
    return index.Stats().holders[0].tiers[static_cast<int>(t)].prefix_closed;
  };
  ASSERT_TRUE(index.InsertAfter(kA, std::nullopt, chain, Tier::kGpu, Closure::kCallerTracks).ok());
  // Not the LRU tail, yet the caller knows it is a leaf: the flag stays.
  ASSERT_TRUE(
      index.InsertAfter(kA, chain[4], {MakeChain(7, 1)[0]}, Tier::kGpu, Closure::kCallerTracks)
          .ok());
  EXPECT_EQ(index.Remove(kA, {MakeChain(7, 1)[0]}, Tier::kGpu, Closure::kCallerTracks), 1u);
  EXPECT_TRUE(closed(Tier::kGpu));
  // A hole the caller announces, in the tier and in "any tier": matches walk, and stop at it.
  index.SetPrefixClosed(kA, Tier::kGpu, false);
  index.SetPrefixClosed(kA, std::nullopt, false);
  EXPECT_EQ(index.Remove(kA, {chain[3]}, Tier::kGpu, Closure::kCallerTracks), 1u);
  EXPECT_FALSE(closed(Tier::kGpu));
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 3u);
  EXPECT_EQ(index.Match(chain, {kA})[0].any_tier_blocks, 3u);
  ASSERT_TRUE(index.InsertAfter(kA, chain[2], {chain[3]}, Tier::kGpu, Closure::kCallerTracks).ok());
  index.SetPrefixClosed(kA, Tier::kGpu, true);  // Every tier closed: so is "any tier".
  EXPECT_TRUE(closed(Tier::kGpu));
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 10u);
  EXPECT_EQ(index.Match(chain, {kA})[0].any_tier_blocks, 10u);
  // The index's own eviction: "closed" is refused until the list empties, and orphans mark the
  // list as in kGuess.
  ASSERT_TRUE(index.SetCapacity(kA, Tier::kGpu, 8).ok());
  index.SetPrefixClosed(kA, Tier::kGpu, false);
  index.SetPrefixClosed(kA, Tier::kGpu, true);
  EXPECT_FALSE(closed(Tier::kGpu));
  EXPECT_EQ(index.Remove(kA, absl::MakeSpan(chain).first(8), Tier::kGpu, Closure::kCallerTracks),
            8u);
  EXPECT_TRUE(closed(Tier::kGpu));  // Emptied.
  ASSERT_TRUE(index
                  .InsertAfter(kA, std::nullopt, absl::MakeSpan(chain).first(2), Tier::kGpu,
                               Closure::kCallerTracks)
                  .ok());
  index.SetPrefixClosed(kA, Tier::kGpu, false);
  index.SetPrefixClosed(kA, Tier::kGpu, true);
  EXPECT_TRUE(closed(Tier::kGpu));
}

TEST(PrefixIndexTest, CapacityLruEvictsTailsOfLeastRecentChains) {
  PrefixIndex index;
  ASSERT_TRUE(index.SetCapacity(kA, Tier::kGpu, 100).ok());
  const auto shared = MakeChain(6, 50);
  auto c1 = shared, c2 = shared;
  const auto t1 = MakeChain(7, 40), t2 = MakeChain(8, 40);
  c1.insert(c1.end(), t1.begin(), t1.end());
  c2.insert(c2.end(), t2.begin(), t2.end());
  ASSERT_TRUE(index.Insert(kA, c1, Tier::kGpu).ok());
  ASSERT_TRUE(index.Insert(kA, c2, Tier::kGpu).ok());  // 130 blocks > 100.
  EXPECT_EQ(index.Match(c2, {kA})[0].blocks[0], 90u);
  EXPECT_EQ(index.Match(c1, {kA})[0].blocks[0], 60u);  // Lost its 30 oldest tail blocks.
  auto stats = index.Stats();
  EXPECT_EQ(stats.holders[0].tiers[0].blocks, 100u);
  EXPECT_EQ(stats.holders[0].tiers[0].evicted_blocks, 30u);
  ASSERT_TRUE(index.SetCapacity(kA, Tier::kGpu, 55).ok());
  EXPECT_EQ(index.Match(c2, {kA})[0].blocks[0], 55u);
  EXPECT_EQ(index.Match(c1, {kA})[0].blocks[0], 50u);
  EXPECT_TRUE(index.Stats().holders[0].tiers[0].prefix_closed);
}

TEST(PrefixIndexTest, ChainLongerThanCapacityKeepsItsHead) {
  PrefixIndex index;
  ASSERT_TRUE(index.SetCapacity(kA, Tier::kGpu, 10).ok());
  const auto chain = MakeChain(9, 25);
  ASSERT_TRUE(index.Insert(kA, chain, Tier::kGpu).ok());
  EXPECT_EQ(index.Match(chain, {kA})[0].blocks[0], 10u);
}

TEST(PrefixIndexTest, TooManyHolders) {
  PrefixIndex index;
  const auto chain = MakeChain(10, 3);
  for (uint32_t w = 0; w < PrefixIndex::kMaxHolders; ++w) {
    ASSERT_TRUE(index.Insert(Holder{w, 0}, chain, Tier::kGpu).ok());
  }
  EXPECT_EQ(index.Insert(Holder{1000, 0}, chain, Tier::kGpu).code(),
            absl::StatusCode::kResourceExhausted);
  index.RemoveHolder(Holder{5, 0});
  EXPECT_TRUE(index.Insert(Holder{1000, 0}, chain, Tier::kGpu).ok());
  auto all = index.Match(chain);
  EXPECT_EQ(all.size(), static_cast<size_t>(PrefixIndex::kMaxHolders));
  for (const auto& r : all) {
    EXPECT_EQ(r.blocks[0], 3u);
    EXPECT_NE(r.holder, (Holder{5, 0}));
  }
}

TEST(PrefixIndexTest, GlobalMemoryBoundIsEnforced) {
  PrefixIndexOptions o;
  o.max_memory_bytes = 1000 * PrefixIndex::kBudgetBytesPerResidency;
  o.num_shards = 8;
  PrefixIndex index(o);
  for (uint32_t i = 0; i < 200; ++i) {
    const auto chain = MakeChain(100 + i, 64);
    ASSERT_TRUE(index.Insert(Holder{i % 8, 0}, chain, static_cast<Tier>(i % 3)).ok());
    ASSERT_LE(index.Stats().residencies, 1000u);
  }
  const auto stats = index.Stats();
  EXPECT_GT(stats.global_evictions, 0u);
  EXPECT_GT(stats.residencies, 900u);
  // Recent chains are kept (at least their heads).
  EXPECT_GT(index.Match(MakeChain(299, 64), {Holder{7, 0}})[0].blocks[1], 0u);  // i = 199.
  for (const auto& h : stats.holders) {
    for (const auto& t : h.tiers) {
      EXPECT_TRUE(t.prefix_closed);
    }
  }
  EXPECT_NE(StatsToJson(stats).find("\"global_evictions\":"), std::string::npos);
}

TEST(PrefixIndexTest, StatsAndMemory) {
  PrefixIndex index;
  const auto chain = MakeChain(11, 1000);
  ASSERT_TRUE(index.Insert(kA, chain, Tier::kGpu).ok());
  ASSERT_TRUE(index.Insert(kB, chain, Tier::kGpu).ok());
  const auto stats = index.Stats();
  EXPECT_EQ(stats.distinct_blocks, 1000u);
  EXPECT_EQ(stats.residencies, 2000u);
  EXPECT_GT(stats.memory_bytes, 1000u * 48);
  const std::string json = StatsToJson(stats);
  EXPECT_NE(json.find("\"gpu\":{\"blocks\":1000"), std::string::npos) << json;
  index.ClearHolder(kA);
  index.ClearHolder(kB);
  EXPECT_EQ(index.Stats().distinct_blocks, 0u);
}

// ---- Property test against a naive reference model -----------------------------------

// Straightforward model: per (holder, tier) an LRU list (front = most recent) and a hash map.
class ReferenceIndex {
 public:
  explicit ReferenceIndex(uint64_t default_capacity) : default_capacity_(default_capacity) {}

  void SetCapacity(Holder h, Tier t, uint64_t cap) {
    L& l = Get(h, t);
    l.capacity = cap;
    Evict(l);
  }
  void Insert(Holder h, std::optional<BlockHash> parent, const std::vector<BlockHash>& blocks,
              Tier t) {
    L& l = Get(h, t);
    auto pos = l.lru.begin();  // Insert before `pos`.
    if (parent.has_value() && l.where.count(*parent)) {
      pos = std::next(l.where[*parent]);
    }
    for (BlockHash b : blocks) {
      auto it = l.where.find(b);
      if (it != l.where.end()) {
        if (it->second == pos) {
          ++pos;
          continue;
        }
        l.lru.erase(it->second);
      }
      l.where[b] = l.lru.insert(pos, b);
    }
    Evict(l);
  }
  void Remove(Holder h, const std::vector<BlockHash>& blocks, Tier t) {
    if (!Known(h)) {
      return;
    }
    L& l = Get(h, t);
    for (BlockHash b : blocks) {
      auto it = l.where.find(b);
      if (it != l.where.end()) {
        l.lru.erase(it->second);
        l.where.erase(it);
      }
    }
  }
  void Touch(Holder h, const std::vector<BlockHash>& chain, Tier t) {
    if (!Known(h)) {
      return;
    }
    L& l = Get(h, t);
    auto pos = l.lru.begin();
    for (BlockHash b : chain) {
      auto it = l.where.find(b);
      if (it == l.where.end()) {
        break;
      }
      if (it->second == pos) {
        ++pos;
        continue;
      }
      l.lru.erase(it->second);
      it->second = l.lru.insert(pos, b);
    }
  }
  void Clear(Holder h) {
    for (int t = 0; t < kNumTiers; ++t) {
      auto it = lists_.find({h.Key(), t});
      if (it != lists_.end()) {
        it->second.lru.clear();
        it->second.where.clear();
      }
    }
  }
  MatchResult Match(const std::vector<BlockHash>& chain, Holder h) {
    MatchResult r{h, {}, 0};
    std::array<const L*, kNumTiers> ls{};
    for (int t = 0; t < kNumTiers; ++t) {
      auto it = lists_.find({h.Key(), t});
      ls[t] = it == lists_.end() ? nullptr : &it->second;
    }
    auto held = [&](int t, BlockHash b) { return ls[t] && ls[t]->where.count(b) > 0; };
    for (int t = 0; t < kNumTiers; ++t) {
      while (r.blocks[t] < chain.size() && held(t, chain[r.blocks[t]])) {
        ++r.blocks[t];
      }
    }
    while (r.any_tier_blocks < chain.size()) {
      const BlockHash b = chain[r.any_tier_blocks];
      if (!held(0, b) && !held(1, b) && !held(2, b)) {
        break;
      }
      ++r.any_tier_blocks;
    }
    return r;
  }
  uint64_t Count(Holder h, Tier t) {
    auto it = lists_.find({h.Key(), static_cast<int>(t)});
    return it == lists_.end() ? 0 : it->second.lru.size();
  }

 private:
  struct L {
    uint64_t capacity;
    std::list<BlockHash> lru;
    std::unordered_map<BlockHash, std::list<BlockHash>::iterator> where;
  };
  bool Known(Holder h) { return lists_.count({h.Key(), 0}) > 0; }
  L& Get(Holder h, Tier t) {
    for (int i = 0; i < kNumTiers; ++i) {
      lists_.try_emplace({h.Key(), i}, L{default_capacity_, {}, {}});
    }
    return lists_.at({h.Key(), static_cast<int>(t)});
  }
  void Evict(L& l) {
    while (l.lru.size() > l.capacity) {
      l.where.erase(l.lru.back());
      l.lru.pop_back();
    }
  }
  uint64_t default_capacity_;
  std::map<std::pair<uint64_t, int>, L> lists_;
};

struct PropertyParams {
  uint32_t seed;
  int holders;
  int ops;
  int num_shards;
};

class PrefixIndexPropertyTest : public ::testing::TestWithParam<PropertyParams> {};

TEST_P(PrefixIndexPropertyTest, MatchesReferenceModel) {
  const PropertyParams p = GetParam();
  std::mt19937_64 rng(p.seed);
  auto uniform = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  // Chains over a 3-letter alphabet so that they share prefixes and branch often.
  auto chain_from = [](const std::vector<int>& letters) {
    std::vector<BlockHash> c;
    uint64_t h = 0x1234;
    for (int l : letters) {
      h = (h ^ static_cast<uint64_t>(l + 1)) * 0x9E3779B97F4A7C15ULL;
      h ^= h >> 29;
      c.push_back(h);
    }
    return c;
  };
  std::vector<std::vector<BlockHash>> chains;
  for (int i = 0; i < 64; ++i) {
    std::vector<int> letters(1 + uniform(i % 8 == 0 ? 300 : 48));
    const size_t shared = uniform(letters.size() + 1);
    for (size_t k = 0; k < letters.size(); ++k) {
      letters[k] = k < shared ? static_cast<int>(k % 2) : static_cast<int>(uniform(3));
    }
    chains.push_back(chain_from(letters));
  }
  const uint64_t default_capacity = 1 + uniform(400);
  PrefixIndexOptions options;
  options.default_capacity_blocks = default_capacity;
  options.num_shards = p.num_shards;
  PrefixIndex index(options);
  ReferenceIndex ref(default_capacity);
  std::vector<Holder> holders;
  for (int i = 0; i < p.holders; ++i) {
    holders.push_back(Holder{static_cast<uint32_t>(uniform(8)), static_cast<uint16_t>(i)});
  }
  std::vector<MatchResult> got;
  for (int op = 0; op < p.ops; ++op) {
    const Holder h = holders[uniform(holders.size())];
    const Tier t = static_cast<Tier>(uniform(3));
    const auto& chain = chains[uniform(chains.size())];
    const size_t prefix = 1 + uniform(chain.size());
    const std::vector<BlockHash> head(chain.begin(), chain.begin() + prefix);
    const uint64_t dice = uniform(100);
    SCOPED_TRACE(absl::StrCat("op ", op, " dice ", dice));
    if (dice < 28) {
      ASSERT_TRUE(index.Insert(h, head, t).ok());
      ref.Insert(h, std::nullopt, head, t);
    } else if (dice < 34) {
      const size_t k = uniform(prefix);
      const std::vector<BlockHash> rest(head.begin() + k, head.end());
      std::optional<BlockHash> parent;
      if (k > 0) {
        parent = head[k - 1];
      }
      ASSERT_TRUE(index.InsertAfter(h, parent, rest, t).ok());
      ref.Insert(h, parent, rest, t);
    } else if (dice < 44) {
      std::vector<BlockHash> victims;
      if (uniform(2) == 0) {  // Engine-style: a tail of the chain.
        victims.assign(head.begin() + uniform(prefix), head.end());
        if (uniform(2) == 0) {
          std::reverse(victims.begin(), victims.end());
        }
      } else {
        for (BlockHash b : head) {
          if (uniform(4) == 0) {
            victims.push_back(b);
          }
        }
      }
      index.Remove(h, victims, t);
      ref.Remove(h, victims, t);
    } else if (dice < 45) {
      index.ClearHolder(h);
      ref.Clear(h);
    } else if (dice < 48) {
      const uint64_t cap = uniform(5) == 0 ? 0 : uniform(500);
      ASSERT_TRUE(index.SetCapacity(h, t, cap).ok());
      ref.SetCapacity(h, t, cap);
    } else if (dice < 53) {
      index.Touch(h, head, t);
      ref.Touch(h, head, t);
    } else {
      std::vector<Holder> eligible;
      for (const Holder& e : holders) {
        if (uniform(3) != 0) {
          eligible.push_back(e);
        }
      }
      if (eligible.empty()) {
        eligible.push_back(Holder{999, 9});  // Unknown holder.
      }
      index.Match(chain, eligible, &got);
      ASSERT_EQ(got.size(), eligible.size());
      for (size_t i = 0; i < eligible.size(); ++i) {
        const MatchResult want = ref.Match(chain, eligible[i]);
        ASSERT_EQ(got[i].holder, eligible[i]);
        ASSERT_EQ(got[i].blocks, want.blocks)
            << "holder " << eligible[i].worker << "/" << eligible[i].dp_rank;
        ASSERT_EQ(got[i].any_tier_blocks, want.any_tier_blocks);
      }
    }
    if (op % 997 == 0) {
      const IndexStats stats = index.Stats();
      for (const HolderStats& hs : stats.holders) {
        for (int ti = 0; ti < kNumTiers; ++ti) {
          ASSERT_EQ(hs.tiers[ti].blocks, ref.Count(hs.holder, static_cast<Tier>(ti)));
        }
      }
    }
  }
}

// 10^5 operations in total over 1-64 holders, 3 tiers.
INSTANTIATE_TEST_SUITE_P(
    Random, PrefixIndexPropertyTest,
    ::testing::Values(PropertyParams{1, 1, 10000, 64}, PropertyParams{2, 2, 10000, 1},
                      PropertyParams{3, 4, 10000, 64}, PropertyParams{4, 7, 10000, 4},
                      PropertyParams{5, 16, 10000, 64}, PropertyParams{6, 32, 10000, 16},
                      PropertyParams{7, 64, 10000, 64}, PropertyParams{8, 64, 10000, 2},
                      PropertyParams{9, 3, 10000, 64}, PropertyParams{10, 48, 10000, 64}));

}  // namespace
}  // namespace kvgate::kvindex
