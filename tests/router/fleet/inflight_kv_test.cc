#include "router/fleet/inflight_kv.h"

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "kvindex/block_hash.h"

namespace kvgate::router {
namespace {

using kvindex::BlockHash;

// A chain as the gateway builds one: each hash covers its block and everything before it.
std::vector<BlockHash> Chain(const std::vector<uint32_t>& blocks) {
  std::vector<BlockHash> out;
  kvindex::HashTokenBlocks(blocks, 7, 1, &out);
  return out;
}

// `shared` blocks of a common prefix, then `own` blocks that only this request has.
std::vector<uint32_t> Prompt(uint32_t shared, uint32_t own, uint32_t who) {
  std::vector<uint32_t> t(shared, 1);
  for (uint32_t i = 0; i < own; ++i) t.push_back(1000 + who * 100000 + i);
  return t;
}

constexpr int64_t G = InFlightKv::kGroup;

TEST(InFlightKv, ASharedPrefixCountsOnce) {
  InFlightKv kv;
  // Ten sub-agents sharing a 40-group system prompt, each with 2 groups of its own.
  std::vector<InFlightKv::Held> held;
  for (uint32_t a = 0; a < 10; ++a) {
    const auto c = Chain(Prompt(40 * G, 2 * G, a));
    held.push_back(kv.Add(c, static_cast<int64_t>(c.size())));
  }
  EXPECT_EQ(kv.blocks(), 40 * G + 10 * 2 * G);  // counted per request: 420 groups, not 60
  kv.Remove(held[3]);
  EXPECT_EQ(kv.blocks(), 40 * G + 9 * 2 * G);
  for (size_t i = 0; i < held.size(); ++i) {
    if (i != 3) kv.Remove(held[i]);
  }
  EXPECT_EQ(kv.blocks(), 0);
  EXPECT_EQ(kv.keys(), 0u);
}

TEST(InFlightKv, TheSamePromptTwiceIsHeldOnceUntilBothLeave) {
  InFlightKv kv;
  const auto c = Chain(Prompt(100, 0, 0));  // not a whole number of groups
  const auto a = kv.Add(c, 100);
  const auto b = kv.Add(c, 100);
  EXPECT_EQ(kv.blocks(), 100);
  kv.Remove(a);
  EXPECT_EQ(kv.blocks(), 100);
  kv.Remove(b);
  EXPECT_EQ(kv.blocks(), 0);
}

TEST(InFlightKv, BlocksWithoutAChainAreTheirOwn) {
  InFlightKv kv;
  const auto none = kv.Add({}, 50);  // a policy that hashes nothing
  const auto c = Chain(Prompt(64, 0, 0));
  const auto more = kv.Add(c, 70);  // 6 blocks past its chain (an estimate's rounding)
  const auto same = kv.Add(c, 64);
  EXPECT_EQ(kv.blocks(), 50 + 64 + 6);
  kv.Remove(more);
  EXPECT_EQ(kv.blocks(), 50 + 64);
  kv.Remove(none);
  kv.Remove(same);
  EXPECT_EQ(kv.blocks(), 0);
  const auto shorter = kv.Add(c, 10);  // fewer blocks than its chain: the chain's first ten
  EXPECT_EQ(kv.blocks(), 10);
  kv.Remove(shorter);
  EXPECT_EQ(kv.keys(), 0u);
}

// Against the exact union on random families of prompts (a tree of shared prefixes, as an
// agent's sessions and sub-agents make), added and removed in random order: never below it,
// above it by less than a group per request held, and exact when every prefix parts at a group
// boundary.
TEST(InFlightKv, CountIsTheUnionWithinAGroupPerRequest) {
  std::mt19937_64 rng(20261207);
  for (int round = 0; round < 300; ++round) {
    const bool aligned = round % 3 == 0;
    auto len = [&](uint32_t max) {
      const uint32_t n = static_cast<uint32_t>(rng() % max);
      return aligned ? (n / G) * G : n;
    };
    // Prompts: a few roots, each continued by later prompts that copy a prefix of an earlier one.
    std::vector<std::vector<uint32_t>> prompts;
    for (int i = 0; i < 12; ++i) {
      std::vector<uint32_t> p;
      if (!prompts.empty() && rng() % 4 != 0) {
        const auto& base = prompts[rng() % prompts.size()];
        p.assign(base.begin(), base.begin() + len(static_cast<uint32_t>(base.size()) + 1));
      }
      const uint32_t own = len(6 * G);
      for (uint32_t j = 0; j < own; ++j) p.push_back(static_cast<uint32_t>(rng()));
      prompts.push_back(p);
    }
    InFlightKv kv;
    std::vector<std::pair<size_t, InFlightKv::Held>> in;
    for (int step = 0; step < 40; ++step) {
      if (!in.empty() && rng() % 3 == 0) {
        const size_t k = rng() % in.size();
        kv.Remove(in[k].second);
        in.erase(in.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        const size_t which = rng() % prompts.size();
        const auto c = Chain(prompts[which]);
        in.emplace_back(which, kv.Add(c, static_cast<int64_t>(c.size())));
      }
      absl::flat_hash_set<BlockHash> exact;
      for (const auto& [which, unused] : in) {
        for (BlockHash h : Chain(prompts[which])) exact.insert(h);
      }
      const int64_t truth = static_cast<int64_t>(exact.size());
      ASSERT_GE(kv.blocks(), truth) << "round " << round << " step " << step;
      if (aligned) {
        ASSERT_EQ(kv.blocks(), truth) << "round " << round << " step " << step;
      } else {
        ASSERT_LT(kv.blocks() - truth, std::max<int64_t>(1, static_cast<int64_t>(in.size()) * G))
            << "round " << round << " step " << step;
      }
    }
    for (const auto& [which, held] : in) kv.Remove(held);
    ASSERT_EQ(kv.blocks(), 0);
    ASSERT_EQ(kv.keys(), 0u);
  }
}

}  // namespace
}  // namespace kvgate::router
