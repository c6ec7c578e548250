// Approximate mode's imitation of hybrid models' other KV-cache groups (issue 32, item 4): what
// a sliding window or a Mamba group still serves after the prompts routed to a worker.
#include "kvindex/group_imitation.h"

#include <numeric>

#include "gtest/gtest.h"

namespace kvgate::kvindex {
namespace {

constexpr Holder kWorker{1, 0};
constexpr uint32_t kBs = 16;

// A chain of `n` distinct blocks; `prefix` blocks shared with `base`.
std::vector<BlockHash> Chain(uint64_t seed, uint32_t n, const std::vector<BlockHash>& base = {},
                             uint32_t prefix = 0) {
  std::vector<BlockHash> c(base.begin(), base.begin() + std::min<size_t>(prefix, base.size()));
  while (c.size() < n) c.push_back(seed * 1'000'003 + c.size());
  return c;
}

TEST(GroupImitation, AForkInsideAnOldPrefixMissesTheWindowFullAttentionStillHolds) {
  GroupImitation g;
  // W = 257 tokens: a hit needs the 16 blocks before it.
  const ImitatedGroupSpec swa{{GroupKind::kSlidingWindow, 257}, 64};
  g.Configure(kWorker, {&swa, 1});
  const auto turn1 = Chain(1, 250);
  EXPECT_EQ(g.Cap(kWorker, turn1, kBs, 0), 0u);
  g.Learn(kWorker, turn1, kBs, 0);
  // The pool keeps the last 64 blocks it was given: the end of turn 1.
  ASSERT_EQ(g.Groups(kWorker).at(0).blocks, 64u);
  // The session's next turn extends turn 1: the window before its end is there.
  const auto turn2 = Chain(2, 300, turn1, 250);
  EXPECT_EQ(g.Cap(kWorker, turn2, kBs, 250), 250u);
  // A sub-agent forks at block 200: full attention has the 200 blocks, the window before them
  // aged out (the engine recomputes), and no run of 16 reaches back to block 0.
  const auto fork = Chain(3, 260, turn1, 200);
  EXPECT_EQ(g.Cap(kWorker, fork, kBs, 200), 0u);
  // Learning turn 2 from its hit touches only the window before it and what is new.
  g.Learn(kWorker, turn2, kBs, 250);
  EXPECT_EQ(g.Cap(kWorker, Chain(4, 320, turn2, 300), kBs, 300), 300u);
}

TEST(GroupImitation, SkippedBlocksAgeWhileTheWindowIsRefreshed) {
  GroupImitation g;
  const ImitatedGroupSpec swa{{GroupKind::kSlidingWindow, 33}, 12};  // 2 blocks a window
  g.Configure(kWorker, {&swa, 1});
  const auto p = Chain(1, 8);
  g.Learn(kWorker, p, kBs, 0);  // blocks 0..7
  // Three continuations, each touching the two blocks before its hit and one new block.
  auto chain = p;
  for (uint32_t turn = 0; turn < 3; ++turn) {
    const uint32_t hit = static_cast<uint32_t>(chain.size());
    chain = Chain(10 + turn, hit + 1, chain, hit);
    g.Learn(kWorker, chain, kBs, hit);
  }
  // 11 blocks went in, 12 fit: nothing evicted yet; one more unrelated block evicts block 0,
  // which no later turn read.
  EXPECT_EQ(g.Cap(kWorker, p, kBs, 8), 8u);
  g.Learn(kWorker, Chain(99, 2), kBs, 0);
  EXPECT_EQ(g.Cap(kWorker, Chain(5, 3, p, 1), kBs, 1), 0u);  // block 0 is gone
  EXPECT_EQ(g.Cap(kWorker, chain, kBs, 11), 11u);            // the session's tail is not
}

TEST(GroupImitation, MambaServesOnlyAtACheckpoint) {
  GroupImitation g;
  const ImitatedGroupSpec mamba{{GroupKind::kMamba, 0}, 2};
  g.Configure(kWorker, {&mamba, 1});
  const auto a = Chain(1, 10);
  g.Learn(kWorker, a, kBs, 0);
  // The next turn starts from the state at a's end.
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 14, a, 10), kBs, 10), 10u);
  // A fork inside a: no state before block 6 was kept, so nothing is reused.
  EXPECT_EQ(g.Cap(kWorker, Chain(3, 14, a, 6), kBs, 6), 0u);
  // Two more prompts fill the pool of two states: a's is evicted.
  g.Learn(kWorker, Chain(4, 5), kBs, 0);
  g.Learn(kWorker, Chain(5, 5), kBs, 0);
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 14, a, 10), kBs, 10), 0u);
}

TEST(GroupImitation, MambaCheckpointsEveryPrefillChunkFromTheHit) {
  GroupImitation g;
  ImitatedGroupSpec mamba{{GroupKind::kMamba, 0}, 100};
  mamba.chunk_blocks = 4;
  g.Configure(kWorker, {&mamba, 1});
  const auto a = Chain(1, 10);
  g.Learn(kWorker, a, kBs, 0);  // chunks end at blocks 4 and 8, the prompt at 10
  // Another session sharing a's first 9 blocks starts from the state after the second chunk.
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 12, a, 9), kBs, 9), 8u);
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 12, a, 7), kBs, 7), 4u);
  // A prompt learned from a hit of 10 checkpoints at 14 and 18 (its chunks start at the hit).
  const auto b = Chain(3, 20, a, 10);
  g.Learn(kWorker, b, kBs, 10);
  EXPECT_EQ(g.Cap(kWorker, Chain(4, 30, b, 17), kBs, 17), 14u);
  EXPECT_EQ(g.Cap(kWorker, Chain(4, 30, b, 13), kBs, 13), 10u);
}

// A decode checkpoints Mamba's state at every block boundary its output crosses, and a window
// caches every block it fills: blocks no later prompt names, which age the pool. A 300-token
// answer after a 160-token prompt (blocks 10..28) crosses 18 boundaries.
TEST(GroupImitation, TheDecodesBlocksAgeEveryGroup) {
  GroupImitation g;
  const ImitatedGroupSpec groups[] = {{{GroupKind::kSlidingWindow, 33}, 40},
                                      {{GroupKind::kMamba, 0}, 20}};
  g.Configure(kWorker, groups);
  const auto a = Chain(1, 10);
  const auto next = Chain(2, 14, a, 10);  // the session's next turn
  g.Learn(kWorker, a, kBs, 0);
  // An answer inside a's last block crosses no boundary: nothing ages.
  g.LearnOutput(kWorker, 160 + 5, 10, kBs);
  EXPECT_EQ(g.Groups(kWorker).at(1).blocks, 1u);
  g.LearnOutput(kWorker, 160, 300, kBs);
  EXPECT_EQ(g.Groups(kWorker).at(0).blocks, 28u);  // 10 + 18
  EXPECT_EQ(g.Groups(kWorker).at(1).blocks, 19u);  // a's state + 18
  EXPECT_EQ(g.Cap(kWorker, next, kBs, 10), 10u);   // both pools still hold a's end
  // Another request's answer of 2 blocks: Mamba's 20 states are full and a's goes first.
  g.LearnOutput(kWorker, 0, 33, kBs);
  EXPECT_EQ(g.Groups(kWorker).at(1).blocks, 20u);
  EXPECT_EQ(g.Cap(kWorker, next, kBs, 10), 0u);
  // Learned again (the engine recomputed it), then 40 blocks of output push the window's
  // blocks of a out too; Mamba's own pool is only turned over, never grown past 20.
  g.Learn(kWorker, a, kBs, 0);
  EXPECT_EQ(g.Cap(kWorker, next, kBs, 10), 10u);
  g.LearnOutput(kWorker, 0, 40 * kBs + 1, kBs);
  EXPECT_EQ(g.Groups(kWorker).at(0).blocks, 40u);
  EXPECT_EQ(g.Groups(kWorker).at(1).blocks, 20u);
  EXPECT_EQ(g.Cap(kWorker, next, kBs, 10), 0u);
  // A worker imitated as full attention alone keeps nothing of it.
  g.LearnOutput(Holder{2, 0}, 0, 1000, kBs);
  EXPECT_FALSE(g.Hybrid(Holder{2, 0}));
}

// A prompt whose history is loaded from a store (or host tier) past its GPU hit: the engine's
// sliding window allocates only the last window of the loaded span (the positions it has moved
// past stay empty) and Mamba starts from the loaded state, so neither pool is flushed by the
// history's length.
TEST(GroupImitation, ALoadedHistoryTakesOnlyItsLastWindow) {
  GroupImitation g;
  const ImitatedGroupSpec groups[] = {{{GroupKind::kSlidingWindow, 33}, 12},  // 2 blocks a window
                                      {{GroupKind::kMamba, 0}, 12}};
  g.Configure(kWorker, groups);
  const auto a = Chain(1, 5);
  const auto next = Chain(2, 7, a, 5);
  g.Learn(kWorker, a, kBs, 0);
  // A 40-block session moved here: nothing in GPU, blocks 0-34 loaded, 35-39 computed. The
  // window keeps 33-39 (7 blocks), Mamba checkpoints its last block only: a's 5 and 1 stay.
  const auto moved = Chain(3, 40);
  g.Learn(kWorker, moved, kBs, 0, 35);
  EXPECT_EQ(g.Groups(kWorker).at(0).blocks, 12u);
  EXPECT_EQ(g.Groups(kWorker).at(1).blocks, 2u);
  EXPECT_EQ(g.Cap(kWorker, next, kBs, 5), 5u);
  EXPECT_EQ(g.Cap(kWorker, Chain(4, 42, moved, 40), kBs, 40), 40u);
  // Computed from its hit instead, the same prompt would have pushed a out of the window.
  g.Learn(kWorker, Chain(5, 40), kBs, 0);
  EXPECT_EQ(g.Cap(kWorker, next, kBs, 5), 0u);
  // A hit followed by a load: Mamba's state is the loaded one; the checkpoint at the hit is
  // not read, so it does not become the most recently used. Three states: a's, x's, then the
  // loaded prompt's own; one more evicts a's.
  GroupImitation m;
  const ImitatedGroupSpec three{{GroupKind::kMamba, 0}, 3};
  m.Configure(kWorker, {&three, 1});
  m.Learn(kWorker, a, kBs, 0);
  m.Learn(kWorker, Chain(6, 2), kBs, 0);
  m.Learn(kWorker, Chain(7, 12, a, 5), kBs, 5, 9);  // a hit of 5, loaded up to block 9
  EXPECT_EQ(m.Cap(kWorker, next, kBs, 5), 5u);
  m.Learn(kWorker, Chain(8, 3), kBs, 0);
  EXPECT_EQ(m.Cap(kWorker, next, kBs, 5), 0u);
}

TEST(GroupImitation, EveryGroupMustServeAndUnlearnTakesBackAnAttempt) {
  GroupImitation g;
  const ImitatedGroupSpec groups[] = {{{GroupKind::kSlidingWindow, 33}, 100},
                                      {{GroupKind::kMamba, 0}, 100}};
  g.Configure(kWorker, groups);
  const auto a = Chain(1, 10);
  g.Learn(kWorker, a, kBs, 0);
  // The window holds all of a; Mamba only its end: a fork at 6 is 0, a continuation 10.
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 12, a, 6), kBs, 6), 0u);
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 12, a, 10), kBs, 10), 10u);
  // The attempt did not run: what it added is gone from every group.
  g.Unlearn(kWorker, a);
  EXPECT_EQ(g.Cap(kWorker, Chain(2, 12, a, 10), kBs, 10), 0u);
  for (const auto& v : g.Groups(kWorker)) EXPECT_EQ(v.blocks, 0u);
}

TEST(GroupImitation, ConfigureKeepsAnUnchangedLayoutAndForgetsOtherwise) {
  GroupImitation g;
  const ImitatedGroupSpec swa{{GroupKind::kSlidingWindow, 33}, 100};
  EXPECT_FALSE(g.Hybrid(kWorker));
  // Not hybrid: a full-attention hit is never lowered.
  EXPECT_EQ(g.Cap(kWorker, Chain(1, 5), kBs, 5), 5u);
  g.Configure(kWorker, {&swa, 1});
  EXPECT_TRUE(g.Hybrid(kWorker));
  g.Learn(kWorker, Chain(1, 5), kBs, 0);
  g.Configure(kWorker, {&swa, 1});  // a reload, same layout
  EXPECT_EQ(g.Groups(kWorker).at(0).blocks, 5u);
  const ImitatedGroupSpec wider{{GroupKind::kSlidingWindow, 65}, 100};
  g.Configure(kWorker, {&wider, 1});  // another model: nothing learned holds
  EXPECT_EQ(g.Groups(kWorker).at(0).blocks, 0u);
  g.Configure(kWorker, {});
  EXPECT_FALSE(g.Hybrid(kWorker));
  // The capacity is bounded whatever is configured.
  const ImitatedGroupSpec huge{{GroupKind::kMamba, 0}, ~uint64_t{0}};
  g.Configure(kWorker, {&huge, 1});
  EXPECT_EQ(g.Groups(kWorker).at(0).capacity_blocks, GroupImitation::kMaxBlocksPerGroup);
}

}  // namespace
}  // namespace kvgate::kvindex
