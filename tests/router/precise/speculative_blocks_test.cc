#include "router/precise/speculative_blocks.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

using Clock = SpeculativeBlocks::Clock;
using std::chrono::milliseconds;

TEST(SpeculativeBlocks, ExtendsConfirmedMatchesUntilTheyExpire) {
  SpeculativeBlocks s;
  const kvindex::Holder a{1, 0}, b{1, 1};
  const std::vector<kvindex::BlockHash> chain = {10, 11, 12, 13};
  const auto t0 = Clock::now();
  s.Insert(a, {chain.data(), 3}, t0 + milliseconds(100));
  EXPECT_EQ(s.Extend(a, chain, 0, t0), 3u);
  EXPECT_EQ(s.Extend(a, chain, 2, t0), 3u);  // Confirmed blocks count first.
  EXPECT_EQ(s.Extend(a, chain, 4, t0), 4u);
  EXPECT_EQ(s.Extend(b, chain, 0, t0), 0u);                      // Another DP rank holds nothing.
  EXPECT_EQ(s.Extend(a, chain, 1, t0 + milliseconds(100)), 1u);  // Expired.
  // A later insert extends an earlier one's life, never shortens it.
  s.Insert(a, {chain.data(), 1}, t0 + milliseconds(500));
  s.Insert(a, {chain.data(), 1}, t0 + milliseconds(50));
  EXPECT_EQ(s.Extend(a, chain, 0, t0 + milliseconds(200)), 1u);
}

// Expired guesses go when the table has doubled since the last sweep, so it keeps the size a
// TTL's worth of guesses needs; unexpired ones stay.
TEST(SpeculativeBlocks, ExpiredGuessesAreSweptBeforeTheTableGrows) {
  SpeculativeBlocks s;
  const kvindex::Holder a{1, 0};
  const auto t0 = Clock::now();
  const std::vector<kvindex::BlockHash> live = {1, 2, 3};
  s.Insert(a, live, t0 + std::chrono::hours(1));
  constexpr size_t kChain = 50'000;  // An 800K-token prompt's blocks.
  std::vector<kvindex::BlockHash> chain(kChain);
  size_t most = 0;
  for (uint64_t turn = 0; turn < 20; ++turn) {
    for (size_t i = 0; i < kChain; ++i) chain[i] = (turn << 32) + i + 100;
    s.Insert(a, chain, t0 - milliseconds(1));  // Expired as soon as inserted.
    most = std::max(most, s.size());
  }
  EXPECT_LE(most, 2 * kChain + live.size());
  EXPECT_EQ(s.Extend(a, live, 0, t0), 3u);
}

TEST(SpeculativeBlocks, ForgetDropsOneHolder) {
  SpeculativeBlocks s;
  const kvindex::Holder a{1, 0}, b{2, 0};
  const std::vector<kvindex::BlockHash> chain = {7, 8};
  const auto later = Clock::now() + milliseconds(1000);
  s.Insert(a, chain, later);
  s.Insert(b, chain, later);
  EXPECT_EQ(s.size(), 4u);
  s.Forget(a);
  EXPECT_EQ(s.Extend(a, chain, 0, Clock::now()), 0u);
  EXPECT_EQ(s.Extend(b, chain, 0, Clock::now()), 2u);
  EXPECT_EQ(s.size(), 2u);
}

// A request that was not served takes its guess back (issue 33): the blocks from where it
// left the cached prefix on, for its holder only.
TEST(SpeculativeBlocks, RemoveTakesBackOneGuess) {
  SpeculativeBlocks s;
  const kvindex::Holder a{1, 0}, b{2, 0};
  const std::vector<kvindex::BlockHash> chain = {7, 8, 9};
  const auto later = Clock::now() + milliseconds(1000);
  s.Insert(a, chain, later);
  s.Insert(b, chain, later);
  s.Remove(a, {chain.data() + 1, 2});
  EXPECT_EQ(s.Extend(a, chain, 0, Clock::now()), 1u);
  EXPECT_EQ(s.Extend(b, chain, 0, Clock::now()), 3u);
}

// Hybrid models (issue 32): a request forking inside a prompt still in flight is predicted what
// every group will keep of that prompt, not its full-attention prefix.
std::vector<kvindex::BlockHash> Chain(uint32_t n, kvindex::BlockHash first) {
  std::vector<kvindex::BlockHash> chain(n);
  for (uint32_t i = 0; i < n; ++i) chain[i] = first + i;
  return chain;
}

TEST(SpeculativeBlocks, AForkInsideAMambaPromptInFlightHitsItsLastCheckpoint) {
  const kvindex::Holder a{1, 0};
  constexpr uint32_t kBs = 16;
  kvindex::HybridGroups groups;
  const std::vector<kvindex::BlockHash> prompt = Chain(40, 100);
  // The events so far: the state checkpoint after block 9 (full attention holds blocks 0..9).
  groups.Store(a, 1, {kvindex::GroupKind::kMamba, 0}, kBs, {prompt.data() + 9, 1},
               kvindex::Tier::kGpu);
  const auto now = Clock::now();
  const auto later = now + milliseconds(1000);

  // Sent with a hit of 10 blocks, prefilled in chunks of 16: checkpoints after 9, 25 and 39.
  const std::vector<uint32_t> masks = PendingGroups(groups, a, 40, kBs, 10, 10, 16);
  ASSERT_EQ(masks.size(), 40u);
  for (uint32_t i = 0; i < 40; ++i) {
    EXPECT_EQ(masks[i], (i == 9 || i == 25 || i == 39) ? 2u : 0u) << i;
  }
  SpeculativeBlocks s;
  s.Insert(a, prompt, later, masks);
  std::vector<kvindex::BlockHash> fork(prompt.begin(), prompt.begin() + 35);
  for (kvindex::BlockHash h : Chain(15, 900)) fork.push_back(h);
  const uint32_t guessed = s.Extend(a, fork, 10, now);
  ASSERT_EQ(guessed, 35u);  // Full attention alone: the whole shared prefix.
  EXPECT_EQ(GuessedHybridHit(groups, s, a, fork, kBs, 10, guessed, now), 26u);
  // A fork before the first guessed checkpoint starts from the events' one.
  EXPECT_EQ(GuessedHybridHit(groups, s, a, fork, kBs, 10, 20, now), 10u);
  // Expired guesses keep nothing.
  EXPECT_EQ(GuessedHybridHit(groups, s, a, fork, kBs, 10, guessed, later), 10u);
  // Without the groups' guesses (the rule before), the state there is not known to be kept.
  SpeculativeBlocks plain;
  plain.Insert(a, prompt, later);
  EXPECT_EQ(GuessedHybridHit(groups, plain, a, fork, kBs, 10, guessed, now), 10u);
}

TEST(SpeculativeBlocks, GuessesCountOnlyPastTheConfirmedBlocks) {
  const kvindex::Holder a{1, 0};
  constexpr uint32_t kBs = 16;
  const kvindex::GroupSpec window{kvindex::GroupKind::kSlidingWindow, 129};  // 8 blocks.
  kvindex::HybridGroups groups;
  const std::vector<kvindex::BlockHash> prompt = Chain(30, 100);
  SpeculativeBlocks s;
  const auto now = Clock::now();
  // Sent cold: the window keeps every block.
  const std::vector<uint32_t> masks = PendingGroups(groups, a, 30, kBs, 0, 0, 0);
  EXPECT_TRUE(masks.empty());  // No groups known yet: a full-attention model.
  // The window's pool has evicted (an older block 999), so it is known full at four blocks.
  groups.Store(a, 2, window, kBs, {999}, kvindex::Tier::kGpu);
  groups.Remove(a, 2, {999}, kvindex::Tier::kGpu);
  groups.Store(a, 2, window, kBs, {prompt.data() + 16, 4}, kvindex::Tier::kGpu);
  s.Insert(a, prompt, now + milliseconds(1000), PendingGroups(groups, a, 30, kBs, 0, 0, 0));
  // Full attention's events confirm 20 blocks, the window's only 16..19: 20..24 are guessed.
  EXPECT_EQ(GuessedHybridHit(groups, s, a, prompt, kBs, 20, 25, now), 25u);
  // The window's pool is full; a queue ahead that caches one block evicts block 16, outside the
  // window; four take 17-19 with it, and what is left (the guessed 20-24) is shorter than it.
  EXPECT_EQ(GuessedHybridHit(groups, s, a, prompt, kBs, 20, 25, now, 1 * kBs), 25u);
  EXPECT_EQ(GuessedHybridHit(groups, s, a, prompt, kBs, 20, 25, now, 4 * kBs), 0u);
  // Block 18 left the window (its event says so): the guess does not bring it back.
  groups.Remove(a, 2, {prompt.data() + 18, 1}, kvindex::Tier::kGpu);
  EXPECT_EQ(GuessedHybridHit(groups, s, a, prompt, kBs, 20, 25, now), 0u);
  // A window group kept in another block size is not guessed.
  kvindex::HybridGroups other;
  other.Store(a, 1, window, 32, {prompt.data(), 1}, kvindex::Tier::kGpu);
  EXPECT_TRUE(PendingGroups(other, a, 30, kBs, 0, 0, 0).empty());
}

}  // namespace
}  // namespace kvgate::router
