// BlockTree: the holes (held blocks whose parent is not held) per tier and in any tier, and the
// GPU tier's copies, by hand and against a naive recount over random stores and evictions.
#include "kvevents/block_tree.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include "gtest/gtest.h"

namespace kvgate::kvevents {
namespace {

using kvindex::Tier;
constexpr int kGpu = static_cast<int>(Tier::kGpu);
constexpr int kHost = static_cast<int>(Tier::kHost);
constexpr int kAny = BlockTree::kAnyTier;

// A chain 1 <- 2 <- 3 (1 the root), hashes 100 + id.
void AddChain(BlockTree& tree, Tier tier, std::initializer_list<EngineBlockId> ids,
              std::optional<EngineBlockId> parent = std::nullopt) {
  for (EngineBlockId id : ids) {
    tree.Add(id, parent, 100 + id, tier);
    parent = id;
  }
}

// What the tree must say, kept naively: each id's tiers and its GPU copies beyond the first.
struct Model {
  std::map<EngineBlockId, uint8_t> held;  // id -> tier bits
  std::map<EngineBlockId, int> extra;     // id -> GPU copies beyond the first
  bool Holds(EngineBlockId id, int view) const {
    auto it = held.find(id);
    if (it == held.end()) return false;
    return view == kAny ? it->second != 0 : (it->second & (1u << view)) != 0;
  }
  void Add(EngineBlockId id, int t) {
    if (t == kGpu && Holds(id, kGpu)) ++extra[id];
    held[id] |= static_cast<uint8_t>(1u << t);
  }
  BlockTree::Dropped Drop(EngineBlockId id, int t) {
    if (!Holds(id, t)) return BlockTree::Dropped::kNotHeld;
    if (t == kGpu && extra[id] > 0) {
      --extra[id];
      return BlockTree::Dropped::kCopy;
    }
    held[id] &= static_cast<uint8_t>(~(1u << t));
    return BlockTree::Dropped::kBlock;
  }
  size_t DropTier(int t) {
    size_t n = 0;
    for (auto& [i, bits] : held) {
      if (bits & (1u << t)) ++n;
      bits &= static_cast<uint8_t>(~(1u << t));
    }
    if (t == kGpu) extra.clear();
    return n;
  }
};

TEST(BlockTree, AGpuBlockStoredTwiceLeavesWithItsSecondRemoval) {
  // vLLM caches a recomputed block beside the copy it did not hit, announces both and removes
  // each when evicted: the block stays until the last copy goes. A host tier stores a hash once.
  BlockTree tree;
  AddChain(tree, Tier::kGpu, {1, 2});
  AddChain(tree, Tier::kGpu, {1, 2});  // The copies.
  AddChain(tree, Tier::kHost, {1, 2});
  AddChain(tree, Tier::kHost, {1, 2});
  kvindex::BlockHash h = 0;
  EXPECT_EQ(BlockTree::Dropped::kCopy, tree.Drop(2, Tier::kGpu, &h));
  EXPECT_EQ(tree.HashOf(2), 102u);
  EXPECT_EQ(tree.counts()[kGpu], 2u);
  EXPECT_EQ(BlockTree::Dropped::kBlock, tree.Drop(2, Tier::kGpu, &h));
  EXPECT_EQ(h, 102u);
  EXPECT_EQ(tree.counts()[kGpu], 1u);
  EXPECT_EQ(BlockTree::Dropped::kNotHeld, tree.Drop(2, Tier::kGpu, &h));
  EXPECT_EQ(BlockTree::Dropped::kBlock, tree.Drop(2, Tier::kHost, &h));
  EXPECT_EQ(BlockTree::Dropped::kNotHeld, tree.Drop(2, Tier::kHost, &h));
  // Dropping the tier drops every copy.
  std::vector<kvindex::BlockHash> dropped;
  tree.DropTier(Tier::kGpu, &dropped);
  EXPECT_EQ(dropped, std::vector<kvindex::BlockHash>{101});
  EXPECT_EQ(BlockTree::Dropped::kNotHeld, tree.Drop(1, Tier::kGpu, &h));
  EXPECT_TRUE(tree.exact());
}

TEST(BlockTree, EvictingLeavesKeepsEveryTierClosedAndAMiddleBlockOpensIt) {
  BlockTree tree;
  AddChain(tree, Tier::kGpu, {1, 2, 3});
  AddChain(tree, Tier::kGpu, {4, 5}, 2);  // A fork after block 2.
  kvindex::BlockHash h = 0;
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(5, Tier::kGpu, &h));  // A leaf, in any order.
  EXPECT_EQ(h, 105u);
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(3, Tier::kGpu, &h));
  EXPECT_EQ(tree.holes(kGpu), 0u);
  EXPECT_EQ(tree.holes(kAny), 0u);
  // Block 2 still has a held child (4): evicting it leaves 4 without its parent.
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(2, Tier::kGpu, &h));
  EXPECT_EQ(tree.holes(kGpu), 1u);
  EXPECT_EQ(tree.holes(kAny), 1u);
  // Stored again, it mends the hole.
  tree.Add(2, 1, 102, Tier::kGpu);
  EXPECT_EQ(tree.holes(kGpu), 0u);
  EXPECT_EQ(tree.holes(kAny), 0u);
  EXPECT_EQ(BlockTree::Dropped::kNotHeld, tree.Drop(3, Tier::kGpu, &h));  // Not held any more.
  EXPECT_TRUE(tree.exact());
  EXPECT_EQ(tree.counts()[kGpu], 3u);
}

TEST(BlockTree, AnyTierCountsAParentHeldInAnotherTier) {
  BlockTree tree;
  AddChain(tree, Tier::kGpu, {1, 2, 3});
  // Offloading the leaf: the host holds 3 but not its parent 2, which the GPU holds.
  tree.Add(3, 2, 103, Tier::kHost);
  EXPECT_EQ(tree.holes(kHost), 1u);
  EXPECT_EQ(tree.holes(kAny), 0u);
  kvindex::BlockHash h = 0;
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(3, Tier::kGpu, &h));
  EXPECT_EQ(tree.holes(kGpu), 0u);
  // Block 2 leaves the GPU, and no tier holds it: 3 (host) lacks its parent everywhere.
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(2, Tier::kGpu, &h));
  EXPECT_EQ(tree.holes(kGpu), 0u);
  EXPECT_EQ(tree.holes(kHost), 1u);
  EXPECT_EQ(tree.holes(kAny), 1u);
  tree.Add(2, 1, 102, Tier::kHost);
  EXPECT_EQ(tree.holes(kHost), 1u);  // 2's own parent is only on the GPU.
  EXPECT_EQ(tree.holes(kAny), 0u);
}

TEST(BlockTree, KeptParentsAreFreedWithTheirLastHeldChild) {
  BlockTree tree;
  AddChain(tree, Tier::kGpu, {1, 2, 3});
  kvindex::BlockHash h = 0;
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(2, Tier::kGpu, &h));
  EXPECT_EQ(tree.size(), 3u);  // 2 is kept: 3 names it as parent.
  EXPECT_FALSE(tree.HashOf(2).has_value());
  ASSERT_EQ(BlockTree::Dropped::kBlock, tree.Drop(3, Tier::kGpu, &h));
  EXPECT_EQ(tree.size(), 1u);
  std::vector<kvindex::BlockHash> dropped;
  tree.DropTier(Tier::kGpu, &dropped);
  EXPECT_EQ(dropped, std::vector<kvindex::BlockHash>{101});
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.holes(kGpu) + tree.holes(kAny), 0u);
}

TEST(BlockTree, AnIdReusedUnderAnotherParentIsNotTrusted) {
  BlockTree tree;
  AddChain(tree, Tier::kGpu, {1, 2, 3});
  tree.Add(3, 1, 103, Tier::kHost);  // 3's parent was 2.
  EXPECT_FALSE(tree.exact());
  tree.Clear();
  EXPECT_TRUE(tree.exact());
  tree.Add(7, 7, 107, Tier::kGpu);  // Its own parent.
  EXPECT_FALSE(tree.exact());
}

TEST(BlockTree, APrefixWithMoreChildrenThanItCountsIsNotTrusted) {
  BlockTree tree;
  tree.Add(1, std::nullopt, 101, Tier::kGpu);
  for (EngineBlockId id = 2; id < 2 + 65'535; ++id) tree.Add(id, 1, 100 + id, Tier::kGpu);
  EXPECT_TRUE(tree.exact());
  tree.Add(70'000, 1, 7, Tier::kGpu);
  EXPECT_FALSE(tree.exact());
}

// Random stores (a block only after a parent some tier holds, as the applier accepts them) and
// evictions of any block, in two tiers, on a fixed forest; after each step the holes equal a
// naive recount.
TEST(BlockTreeProperty, HolesEqualANaiveRecount) {
  std::mt19937_64 rng(20261205);
  constexpr int kIds = 48;
  std::vector<std::optional<EngineBlockId>> parent(kIds + 1);
  for (int i = 1; i <= kIds; ++i) {
    if (i > 3) parent[i] = std::uniform_int_distribution<int>(1, i - 1)(rng);
  }
  BlockTree tree;
  Model model;
  auto& held = model.held;
  auto holds = [&](EngineBlockId id, int view) { return model.Holds(id, view); };
  for (int step = 0; step < 20000; ++step) {
    const auto id = static_cast<EngineBlockId>(std::uniform_int_distribution<int>(1, kIds)(rng));
    const Tier tier = rng() % 2 == 0 ? Tier::kGpu : Tier::kHost;
    const int t = static_cast<int>(tier);
    const int op = static_cast<int>(rng() % 100);
    if (op < 50) {
      if (parent[id] && !holds(*parent[id], kAny)) continue;
      tree.Add(id, parent[id], 1000 + id, tier);
      model.Add(id, t);
    } else if (op < 99) {
      kvindex::BlockHash h = 0;
      ASSERT_EQ(tree.Drop(id, tier, &h), model.Drop(id, t)) << "step " << step;
    } else {
      std::vector<kvindex::BlockHash> dropped;
      tree.DropTier(tier, &dropped);
      ASSERT_EQ(dropped.size(), model.DropTier(t));
    }
    for (int view : {kGpu, kHost, kAny}) {
      uint64_t holes = 0;
      for (const auto& [i, bits] : held) {
        if (holds(i, view) && parent[i] && !holds(*parent[i], view)) ++holes;
      }
      ASSERT_EQ(tree.holes(view), holes) << "step " << step << " view " << view;
    }
    ASSERT_TRUE(tree.exact());
  }
  // Nothing is kept past need once every tier is dropped.
  std::vector<kvindex::BlockHash> dropped;
  tree.DropTier(Tier::kGpu, &dropped);
  tree.DropTier(Tier::kHost, &dropped);
  EXPECT_EQ(tree.size(), 0u);
}

// Stored runs (BlockStored's blocks, each the parent of the next) that grow the table while
// they are added, and removals of chain stretches leaf first and root first.
TEST(BlockTreeProperty, RunsKeepHolesEqualANaiveRecount) {
  std::mt19937_64 rng(20261206);
  constexpr int kChains = 6;
  constexpr int kLength = 40;
  auto id_of = [](int chain, int k) { return static_cast<EngineBlockId>(chain * 100 + k + 1); };
  // Chain c > 0 forks from chain c - 1 at its 6th block.
  auto parent_of = [&](int chain, int k) -> std::optional<EngineBlockId> {
    if (k > 0) return id_of(chain, k - 1);
    if (chain > 0) return id_of(chain - 1, 5);
    return std::nullopt;
  };
  BlockTree tree;
  Model model;
  auto& held = model.held;
  std::map<EngineBlockId, std::optional<EngineBlockId>> parents;
  auto holds = [&](EngineBlockId id, int view) { return model.Holds(id, view); };
  for (int step = 0; step < 6000; ++step) {
    if (step % 500 == 0) {  // from an empty table again, so that runs grow it
      tree.Clear();
      model = Model();
    }
    const int chain = static_cast<int>(rng() % kChains);
    const int k0 = static_cast<int>(rng() % kLength);
    const Tier tier = rng() % 2 == 0 ? Tier::kGpu : Tier::kHost;
    const int t = static_cast<int>(tier);
    const int op = static_cast<int>(rng() % 100);
    if (op < 45) {
      const std::optional<EngineBlockId> parent = parent_of(chain, k0);
      if (parent && !holds(*parent, kAny)) continue;
      const int k1 = std::min<int>(kLength, k0 + 1 + static_cast<int>(rng() % 30));
      std::vector<EngineBlockId> ids;
      std::vector<kvindex::BlockHash> hashes;
      for (int k = k0; k < k1; ++k) {
        ids.push_back(id_of(chain, k));
        hashes.push_back(1000 + ids.back());
        parents[ids.back()] = parent_of(chain, k);
        model.Add(ids.back(), t);
      }
      tree.AddRun(ids, parent, hashes, tier);
    } else if (op < 70) {
      const EngineBlockId id = id_of(chain, k0);
      kvindex::BlockHash h = 0;
      ASSERT_EQ(tree.Drop(id, tier, &h), model.Drop(id, t)) << "step " << step;
    } else if (op < 98) {  // a BlockRemoved: a stretch of a chain, leaf first or root first
      std::vector<EngineBlockId> ids;
      for (int k = k0; k >= 0 && k > k0 - 12; --k) ids.push_back(id_of(chain, k));
      if (rng() % 3 == 0) std::reverse(ids.begin(), ids.end());
      for (EngineBlockId id : ids) {
        kvindex::BlockHash h = 0;
        ASSERT_EQ(tree.Drop(id, tier, &h), model.Drop(id, t)) << "step " << step;
      }
    } else {
      std::vector<kvindex::BlockHash> dropped;
      tree.DropTier(tier, &dropped);
      ASSERT_EQ(dropped.size(), model.DropTier(t)) << "step " << step;
    }
    for (int view : {kGpu, kHost, kAny}) {
      uint64_t holes = 0;
      for (const auto& [i, bits] : held) {
        if (holds(i, view) && parents[i] && !holds(*parents[i], view)) ++holes;
      }
      ASSERT_EQ(tree.holes(view), holes) << "step " << step << " view " << view;
    }
    ASSERT_TRUE(tree.exact()) << "step " << step;
  }
}

}  // namespace
}  // namespace kvgate::kvevents
