#include "router/precise/speculative_blocks.h"

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

}  // namespace
}  // namespace kvgate::router
