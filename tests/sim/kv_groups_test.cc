// The hybrid-model group rules of sim/kv_groups.h on hand-made cases: the prefix hit of one
// full-attention group beside a sliding-window or Mamba group (vLLM's
// HybridKVCacheCoordinator), the blocks a sliding window frees, Mamba's block-aligned chunks.
#include "sim/kv_groups.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace kvgate::sim {
namespace {

constexpr uint32_t kB = 16;

std::vector<KvGroupSpec> Swa(uint32_t window) {
  return {{KvGroupKind::kFullAttention, 0, 100}, {KvGroupKind::kSlidingWindow, window, 100}};
}
std::vector<KvGroupSpec> Mamba() {
  return {{KvGroupKind::kFullAttention, 0, 100}, {KvGroupKind::kMamba, 0, 100}};
}

// The hit, in blocks, when full attention serves `f` leading blocks and the other group holds
// `held`.
size_t Hit(const std::vector<KvGroupSpec>& groups, size_t f, std::set<size_t> held) {
  return HybridCacheHit(groups, kB, f, [&](size_t i) { return held.contains(i); });
}

TEST(KvGroups, MaxHitLeavesTheLastTokenToCompute) {
  EXPECT_EQ(MaxHitBlocks(0, kB), 0u);
  EXPECT_EQ(MaxHitBlocks(1, kB), 0u);
  EXPECT_EQ(MaxHitBlocks(16, kB), 0u);
  EXPECT_EQ(MaxHitBlocks(17, kB), 1u);
  EXPECT_EQ(MaxHitBlocks(32, kB), 1u);
  EXPECT_EQ(MaxHitBlocks(33, kB), 2u);
}

TEST(KvGroups, WindowBlocksIsCeilOfWindowMinusOne) {
  EXPECT_EQ(WindowBlocks(16, kB), 1u);
  EXPECT_EQ(WindowBlocks(17, kB), 1u);
  EXPECT_EQ(WindowBlocks(18, kB), 2u);
  EXPECT_EQ(WindowBlocks(33, kB), 2u);
  EXPECT_EQ(WindowBlocks(128, kB), 8u);
  EXPECT_EQ(WindowBlocks(1024, kB), 64u);
}

TEST(KvGroups, OneGroupHitsWhatFullAttentionServes) {
  const std::vector<KvGroupSpec> full = {{KvGroupKind::kFullAttention, 0, 100}};
  EXPECT_EQ(Hit(full, 7, {}), 7u);
  EXPECT_EQ(Hit(full, 0, {}), 0u);
}

TEST(KvGroups, SlidingWindowWithItsWholeWindowHitsAllOfFullAttention) {
  // W = 33: c = 2 blocks before the hit.
  EXPECT_EQ(Hit(Swa(33), 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), 10u);
  EXPECT_EQ(Hit(Swa(33), 10, {8, 9}), 10u);  // Only the window is needed.
  EXPECT_EQ(Hit(Swa(33), 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}), 12u);
  EXPECT_EQ(Hit(Swa(33), 0, {0, 1, 2}), 0u);
}

TEST(KvGroups, SlidingWindowPartlyEvictedGivesAShorterHit) {
  // The window before block 10 lost block 8: the first run of 2 scanning down ends at 6.
  EXPECT_EQ(Hit(Swa(33), 10, {0, 1, 2, 3, 4, 5, 9}), 6u);
  EXPECT_EQ(Hit(Swa(33), 10, {0, 1, 2, 3, 4, 5, 6, 7, 9}), 8u);
  // W = 128 (c = 8): eight consecutive blocks are needed.
  std::set<size_t> held;
  for (size_t i = 0; i < 30; ++i) held.insert(i);
  held.erase(25);
  EXPECT_EQ(Hit(Swa(128), 30, held), 25u);  // Blocks 17..24 are the run.
  held.erase(20);
  EXPECT_EQ(Hit(Swa(128), 30, held), 20u);  // 21..24 are too few; 12..19 are the run.
}

TEST(KvGroups, SlidingWindowWithoutAFullRunFallsBackToTheRunFromBlockZero) {
  // No run of c anywhere: the run that reaches block 0 is the hit.
  EXPECT_EQ(Hit(Swa(33), 6, {0, 3, 5}), 1u);
  EXPECT_EQ(Hit(Swa(128), 5, {0, 1, 2, 3, 4}), 5u);  // Shorter than the window: all of it.
  // Block 0 not held: nothing, even with blocks cached further on.
  EXPECT_EQ(Hit(Swa(33), 5, {2, 4}), 0u);
  EXPECT_EQ(Hit(Swa(128), 5, {1, 2, 3, 4}), 0u);
}

TEST(KvGroups, SlidingWindowOfOneBlockNeedsOnlyTheLastBlock) {
  EXPECT_EQ(Hit(Swa(16), 10, {3, 7}), 8u);  // c = 1: the highest held block below f.
  EXPECT_EQ(Hit(Swa(17), 10, {9}), 10u);
}

TEST(KvGroups, MambaHitsAtTheLastCheckpointFullAttentionCovers) {
  EXPECT_EQ(Hit(Mamba(), 10, {3, 7, 12}), 8u);  // Checkpoint 7: state after block 7.
  EXPECT_EQ(Hit(Mamba(), 8, {3, 7, 12}), 8u);
  EXPECT_EQ(Hit(Mamba(), 7, {3, 7, 12}), 4u);  // 7 is beyond what full attention serves.
  EXPECT_EQ(Hit(Mamba(), 3, {3, 7, 12}), 0u);
  EXPECT_EQ(Hit(Mamba(), 10, {}), 0u);
  EXPECT_EQ(Hit(Mamba(), 10, {0}), 1u);
}

TEST(KvGroups, WhatEachGroupKeepsOfAHit) {
  EXPECT_EQ(HitBlocksKept(Swa(33)[0], kB, 10), 10u);
  EXPECT_EQ(HitBlocksKept(Swa(33)[1], kB, 10), 2u);
  EXPECT_EQ(HitBlocksKept(Swa(33)[1], kB, 1), 1u);
  EXPECT_EQ(HitBlocksKept(Swa(128)[1], kB, 10), 8u);
  EXPECT_EQ(HitBlocksKept(Mamba()[1], kB, 10), 1u);
  EXPECT_EQ(HitBlocksKept(Mamba()[1], kB, 0), 0u);
}

TEST(KvGroups, SlidingWindowFreesTheBlocksItMovedPast) {
  // vLLM: blocks with index < (num_computed - W + 1) / block_size.
  EXPECT_EQ(SlidingWindowSkippedBlocks(0, 33, kB), 0u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(32, 33, kB), 0u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(47, 33, kB), 0u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(48, 33, kB), 1u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(64, 33, kB), 2u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(160, 128, kB), 2u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(127, 128, kB), 0u);
  EXPECT_EQ(SlidingWindowSkippedBlocks(143, 128, kB), 1u);
}

TEST(KvGroups, MambaChunksEndOnBlockBoundaries) {
  // A 40-token prompt at once: cut at 32 so that the state there is cached, then the rest.
  EXPECT_EQ(MambaAlignedChunk(0, 40, 40, 40, kB), 32u);
  EXPECT_EQ(MambaAlignedChunk(32, 8, 40, 40, kB), 8u);
  // A chunk cut by the token budget ends on a block boundary.
  EXPECT_EQ(MambaAlignedChunk(0, 50, 100, 100, kB), 48u);
  EXPECT_EQ(MambaAlignedChunk(48, 52, 100, 100, kB), 48u);
  EXPECT_EQ(MambaAlignedChunk(96, 4, 100, 100, kB), 4u);
  EXPECT_EQ(MambaAlignedChunk(0, 7, 100, 100, kB), 0u);  // Less than a block: not now.
  // An aligned prompt runs whole.
  EXPECT_EQ(MambaAlignedChunk(0, 64, 64, 64, kB), 64u);
  // Decoding is untouched.
  EXPECT_EQ(MambaAlignedChunk(40, 1, 41, 40, kB), 1u);
  // A request resumed after preemption recomputes prompt and output the same way.
  EXPECT_EQ(MambaAlignedChunk(0, 45, 45, 40, kB), 32u);
  EXPECT_EQ(MambaAlignedChunk(32, 13, 45, 40, kB), 13u);
}

}  // namespace
}  // namespace kvgate::sim
