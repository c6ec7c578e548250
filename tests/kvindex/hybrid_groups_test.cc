// The hybrid-model group rules (vLLM's single-type managers, as its coordinator combines them)
// on hand-made residencies, and HybridGroups' bookkeeping.
#include "kvindex/hybrid_groups.h"

#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kvindex/group_imitation.h"

namespace kvgate::kvindex {
namespace {

uint32_t Hit(const GroupSpec& spec, uint32_t block_size, uint32_t full_blocks,
             std::set<uint32_t> cached) {
  return GroupHit(spec, block_size, full_blocks, [&](uint32_t i) { return cached.count(i) > 0; });
}

TEST(GroupHit, FullAttentionIsTheLeadingRun) {
  const GroupSpec full{GroupKind::kFullAttention};
  EXPECT_EQ(Hit(full, 16, 6, {0, 1, 2, 4, 5}), 3u);
  EXPECT_EQ(Hit(full, 16, 2, {0, 1, 2, 3}), 2u);  // Never above the full hit.
  EXPECT_EQ(Hit(full, 16, 6, {1, 2}), 0u);
}

TEST(GroupHit, SlidingWindowNeedsTheBlocksItsWindowCovers) {
  // W = 33 tokens, 16-token blocks: the token at the hit sees 32 tokens back, 2 blocks.
  const GroupSpec swa{GroupKind::kSlidingWindow, 33};
  // Everything cached: the full hit stands.
  EXPECT_EQ(Hit(swa, 16, 8, {0, 1, 2, 3, 4, 5, 6, 7}), 8u);
  // The window's blocks at the end of the prefix were evicted; the last two-block run ends at 4.
  EXPECT_EQ(Hit(swa, 16, 8, {0, 1, 3, 4, 7}), 5u);
  // No run as long as the window: the run reaching block 0, shorter than it, still serves.
  EXPECT_EQ(Hit(swa, 16, 8, {0, 2, 4, 6}), 1u);
  // The head left as the context moved past it, the window at the end stayed: full hit.
  EXPECT_EQ(Hit(swa, 16, 8, {6, 7}), 8u);
  EXPECT_EQ(Hit(swa, 16, 8, {}), 0u);
  // A window of 17 tokens needs one block; of 128 with 16-token blocks, ceil(127/16) = 8.
  EXPECT_EQ(Hit({GroupKind::kSlidingWindow, 17}, 16, 8, {3}), 4u);
  EXPECT_EQ(Hit({GroupKind::kSlidingWindow, 128}, 16, 10, {2, 3, 4, 5, 6, 7, 8, 9}), 10u);
  EXPECT_EQ(Hit({GroupKind::kSlidingWindow, 128}, 16, 10, {1, 2, 3, 4, 5, 6, 7, 8}), 9u);
  EXPECT_EQ(Hit({GroupKind::kSlidingWindow, 128}, 16, 10, {2, 3, 4, 5, 6, 7, 8}), 0u);
}

// The block-by-block scan down from the hit, as vLLM's sliding-window manager walks it.
uint32_t WindowHitByScan(uint32_t needed, uint32_t full_blocks, const std::vector<bool>& cached) {
  uint32_t run = 0;
  for (uint32_t i = full_blocks; i-- > 0;) {
    if (!cached[i]) {
      run = 0;
      continue;
    }
    if (++run >= needed) return i + run;
  }
  return run;
}

// GroupHit probes a window apart instead of scanning every block: the same hit on random
// residencies (sparse, dense, in runs), and on a prefix the group has dropped entirely, one
// lookup per window's worth of blocks.
TEST(GroupHit, SlidingWindowProbesEqualTheBlockByBlockScan) {
  std::mt19937_64 rng(32);
  for (int round = 0; round < 20000; ++round) {
    const uint32_t block_size = 16;
    const uint32_t window = std::uniform_int_distribution<uint32_t>(0, 200)(rng);
    const uint32_t full = std::uniform_int_distribution<uint32_t>(0, 120)(rng);
    const double density = std::uniform_real_distribution<double>(0, 1)(rng);
    const uint32_t mean_run = std::uniform_int_distribution<uint32_t>(1, 16)(rng);
    std::vector<bool> cached(full);
    bool state = false;
    for (uint32_t i = 0; i < full; ++i) {
      if (std::uniform_int_distribution<uint32_t>(0, mean_run - 1)(rng) == 0) {
        state = std::uniform_real_distribution<double>(0, 1)(rng) < density;
      }
      cached[i] = state;
    }
    const GroupSpec swa{GroupKind::kSlidingWindow, window};
    const uint32_t needed = WindowBlocks(window, block_size);
    const uint32_t got = GroupHit(swa, block_size, full,
                                  [&](uint32_t i) { return static_cast<bool>(cached.at(i)); });
    ASSERT_EQ(got, WindowHitByScan(needed, full, cached))
        << "round " << round << ", window " << window << ", " << full << " blocks";
  }
  // 20,000 blocks, none held in the window's group: a lookup per 8 blocks (window 128).
  uint32_t lookups = 0;
  EXPECT_EQ(GroupHit({GroupKind::kSlidingWindow, 128}, 16, 20000,
                     [&](uint32_t) {
                       ++lookups;
                       return false;
                     }),
            0u);
  EXPECT_LE(lookups, 20000u / 8 + 8);
}

TEST(GroupHit, MambaTakesTheLastStateAtOrBeforeTheHit) {
  const GroupSpec mamba{GroupKind::kMamba};
  EXPECT_EQ(Hit(mamba, 16, 10, {3, 7, 12}), 8u);  // State 12 is past the full hit.
  EXPECT_EQ(Hit(mamba, 16, 10, {9}), 10u);
  EXPECT_EQ(Hit(mamba, 16, 10, {}), 0u);
  EXPECT_EQ(Hit(mamba, 16, 0, {0}), 0u);
}

TEST(GroupKindNames, VllmAndSglangNamesParse) {
  GroupKind k;
  ASSERT_TRUE(ParseGroupKind("full_attention", &k));
  EXPECT_EQ(k, GroupKind::kFullAttention);
  ASSERT_TRUE(ParseGroupKind("Sliding_Window", &k));
  EXPECT_EQ(k, GroupKind::kSlidingWindow);
  ASSERT_TRUE(ParseGroupKind("mamba", &k));
  EXPECT_EQ(k, GroupKind::kMamba);
  EXPECT_FALSE(ParseGroupKind("cross_attention", &k));
  EXPECT_EQ(GroupKindName(GroupKind::kSlidingWindow), "sliding_window");
}

class HybridGroupsTest : public ::testing::Test {
 protected:
  const Holder w0_{0, 0};
  const std::vector<BlockHash> chain_{101, 102, 103, 104, 105, 106};
  HybridGroups groups_;
};

TEST_F(HybridGroupsTest, NotHybridUntilAGroupArrives) {
  EXPECT_FALSE(groups_.Hybrid(w0_));
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true), 6u);
  groups_.Store(w0_, 1, {GroupKind::kMamba}, 16, {}, Tier::kGpu);
  EXPECT_TRUE(groups_.Hybrid(w0_));
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true),
            0u);  // A known group with nothing serves nothing.
}

TEST_F(HybridGroupsTest, CapTakesEveryGroupsRuleAndTiersApart) {
  groups_.Store(w0_, 1, {GroupKind::kSlidingWindow, 17}, 16, {101, 102, 103, 104, 105, 106},
                Tier::kGpu);
  groups_.Store(w0_, 2, {GroupKind::kMamba}, 16, {102}, Tier::kGpu);
  groups_.Store(w0_, 2, {GroupKind::kMamba}, 16, {104}, Tier::kHost);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, /*gpu_only=*/true), 2u);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, /*gpu_only=*/false), 4u);
  // The SWA block before the Mamba state leaves: the SWA rule lowers, then Mamba again.
  groups_.Remove(w0_, 1, {101, 102}, Tier::kGpu);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, false), 4u);
  groups_.Remove(w0_, 1, {104}, Tier::kGpu);
  // SWA lowers to 3, Mamba to its state at 2, SWA (blocks 0 and 1 gone) to 0.
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, false), 0u);
  // Another block size is not kvgate's chain: the group is not consulted.
  EXPECT_EQ(groups_.Cap(w0_, chain_, 32, 6, false), 6u);
  const auto views = groups_.Groups(w0_);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].group, 1u);
  EXPECT_EQ(views[0].blocks[0], 3u);
  EXPECT_EQ(views[1].blocks[1], 1u);
  groups_.Clear(w0_, Tier::kHost, false);
  EXPECT_EQ(groups_.Groups(w0_)[1].blocks[1], 0u);
  groups_.Forget(w0_);
  EXPECT_FALSE(groups_.Hybrid(w0_));
}

// vLLM does not pin a waiting request's hit: the prefill queued ahead of it caches new blocks,
// and a sliding window's small pool evicts its least recently used ones first. A full pool of
// 16 window blocks: a session's six, then ten of other prompts. Its window at the hit (blocks
// 4 and 5, two blocks for W = 33) has 4 and 5 blocks older than it.
TEST_F(HybridGroupsTest, AWindowTheQueueAheadWillEvictIsNotAHit) {
  const GroupSpec swa{GroupKind::kSlidingWindow, 33};
  // A prompt sent with a hit of `hit` blocks that computes from `start` reads, of group 1, what
  // ForEachKeptBlock keeps below its hit (precise mode passes PendingGroups' masks).
  auto touch = [&](uint32_t hit, uint32_t start) {
    std::vector<uint32_t> masks(hit, 0);
    ForEachKeptBlock({swa}, 16, static_cast<uint32_t>(chain_.size()), hit, start, [&](uint32_t i) {
      if (i < hit) masks[i] = 1u << 1;
    });
    groups_.Touch(w0_, absl::MakeConstSpan(chain_).first(hit), masks);
  };
  // The pool has evicted (an older prompt's block 200), so it has been full: 16 is its size.
  groups_.Store(w0_, 1, swa, 16, {200}, Tier::kGpu);
  groups_.Remove(w0_, 1, {200}, Tier::kGpu);
  groups_.Store(w0_, 1, swa, 16, chain_, Tier::kGpu);
  groups_.Store(w0_, 1, swa, 16, {201, 202, 203, 204, 205, 206, 207, 208, 209, 210}, Tier::kGpu);
  groups_.Store(w0_, 1, swa, 16, {101, 102, 103, 104, 105, 106}, Tier::kHost);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true), 6u);
  // Four blocks' worth of prefill ahead evicts the four oldest (blocks 0-3): the window stays.
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 4 * 16), 6u);
  // A fifth takes block 4: no two-block run is left, nor a run from block 0.
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 5 * 16), 0u);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 5 * 16 + 15), 0u);
  // Another tier is not the GPU's pool: the host copy still serves.
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, false, nullptr, 100 * 16), 6u);
  // A prompt sent with a hit of 4 that loads blocks 4 and 5 from a store reads no window block
  // of its hit (its window is the loaded blocks): nothing is refreshed.
  touch(4, 6);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 5 * 16), 0u);
  // A prompt sent with that hit read its window: now the pool's newest, it outlives the queue.
  touch(6, 6);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 5 * 16), 6u);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 14 * 16), 6u);
  // Fifteen: block 4 is among the oldest again, and nothing below it is left.
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 15 * 16), 0u);
  // A pool with room (three blocks removed below its most) takes the queue's blocks first.
  groups_.Remove(w0_, 1, {201, 202, 203}, Tier::kGpu);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 14 * 16), 6u);
  // A Mamba pool does not turn over with prefill (it checkpoints a few states a prompt).
  const Holder w1{1, 0};
  groups_.Store(w1, 2, {GroupKind::kMamba}, 16, {103}, Tier::kGpu);
  groups_.Store(w1, 2, {GroupKind::kMamba}, 16, {301, 302, 303}, Tier::kGpu);
  EXPECT_EQ(groups_.Cap(w1, chain_, 16, 6, true, nullptr, 1000 * 16), 3u);
}

// vLLM hands out never-used blocks before it evicts a cached one, so a pool that has never
// evicted is larger than what it holds: the queue ahead fills its free room, not the window.
// (Seen as a flaky precise prediction: a young worker's window predicted evicted by a queue of
// 17 blocks, its pool of 160 holding 50.)
TEST_F(HybridGroupsTest, APoolThatNeverEvictedKeepsTheWindowFromTheQueue) {
  const GroupSpec swa{GroupKind::kSlidingWindow, 33};
  groups_.Store(w0_, 1, swa, 16, chain_, Tier::kGpu);
  groups_.Store(w0_, 1, swa, 16, {201, 202, 203, 204, 205, 206, 207, 208, 209, 210}, Tier::kGpu);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 100 * 16), 6u);
  // Its first eviction (the oldest, block 0) says it is full at 16: four blocks ahead take its
  // free slot and blocks 1-3, a fifth the window's block 4.
  groups_.Remove(w0_, 1, {101}, Tier::kGpu);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 4 * 16), 6u);
  EXPECT_EQ(groups_.Cap(w0_, chain_, 16, 6, true, nullptr, 5 * 16), 0u);
  // Another tier's removal is not the GPU pool's eviction.
  const Holder w1{1, 0};
  groups_.Store(w1, 1, swa, 16, chain_, Tier::kGpu);
  groups_.Store(w1, 1, swa, 16, {201, 202}, Tier::kGpu);
  groups_.Store(w1, 1, swa, 16, {301}, Tier::kHost);
  groups_.Remove(w1, 1, {301}, Tier::kHost);
  EXPECT_EQ(groups_.Cap(w1, chain_, 16, 6, true, nullptr, 100 * 16), 6u);
}

}  // namespace
}  // namespace kvgate::kvindex
