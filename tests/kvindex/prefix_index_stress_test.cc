// Concurrent Match / Insert / Remove / Clear stress; run under TSan (tsan preset) as well.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kvindex/prefix_index.h"

namespace kvgate::kvindex {
namespace {

std::vector<BlockHash> Chain(uint64_t conversation, size_t n) {
  std::vector<BlockHash> c(n);
  uint64_t h = 77;
  for (size_t i = 0; i < n; ++i) {
    // The first 32 blocks are shared by every conversation (system prompt + tools).
    const uint64_t v = i < 32 ? 1 : conversation + 2;
    h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 31;
    c[i] = h;
  }
  return c;
}

TEST(PrefixIndexStressTest, ConcurrentMatchInsertRemove) {
  PrefixIndexOptions options;
  options.num_shards = 16;
  options.default_capacity_blocks = 2000;
  options.max_memory_bytes = 20000 * PrefixIndex::kBudgetBytesPerResidency;
  PrefixIndex index(options);
  constexpr int kHolders = 16;
  constexpr int kReaders = 3;
  constexpr int kWriters = 3;
  constexpr int kWriterOps = 1500;
  std::atomic<int> writers_left{kWriters};
  std::atomic<uint64_t> matches{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (int op = 0; op < kWriterOps; ++op) {
        const Holder h{static_cast<uint32_t>(rng() % kHolders), 0};
        const Tier t = static_cast<Tier>(rng() % 3);
        const auto chain = Chain(rng() % 50, 32 + rng() % 200);
        switch (rng() % 10) {
          case 0:
            index.Remove(
                h, std::vector<BlockHash>(chain.begin() + rng() % chain.size(), chain.end()), t);
            break;
          case 1:
            index.Remove(h, {chain[rng() % chain.size()]}, t);
            break;
          case 2:
            if (rng() % 20 == 0) {
              index.ClearHolder(h);
            }
            break;
          case 3:
            (void)index.SetCapacity(h, t, 500 + rng() % 2000);
            break;
          case 4:
            index.Touch(h, chain, t);
            break;
          default:
            ASSERT_TRUE(index.Insert(h, chain, t).ok());
        }
        if (op % 500 == 0) {
          (void)index.Stats();
        }
      }
      writers_left.fetch_sub(1);
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(100 + r);
      std::vector<MatchResult> out;
      std::vector<Holder> eligible;
      for (int i = 0; i < kHolders; ++i) {
        eligible.push_back(Holder{static_cast<uint32_t>(i), 0});
      }
      while (writers_left.load() > 0) {
        const auto chain = Chain(rng() % 50, 32 + rng() % 400);
        index.Match(chain, r == 0 ? absl::Span<const Holder>() : eligible, &out);
        for (const MatchResult& m : out) {
          for (uint32_t b : m.blocks) {
            ASSERT_LE(b, chain.size());
          }
          ASSERT_LE(m.any_tier_blocks, chain.size());
        }
        matches.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_GT(matches.load(), 0u);
  const IndexStats stats = index.Stats();
  EXPECT_LE(stats.residencies, stats.max_residencies);
  // After the storm, a quiescent index answers exactly like a linear walk.
  for (uint64_t conv = 0; conv < 50; ++conv) {
    const auto chain = Chain(conv, 300);
    for (const MatchResult& m : index.Match(chain)) {
      for (int t = 0; t < kNumTiers; ++t) {
        // Blocks [0, n) held, block n not held: check with single-block matches.
        const uint32_t n = m.blocks[t];
        if (n > 0) {
          auto r = index.Match(absl::MakeSpan(chain).first(n), {m.holder});
          EXPECT_EQ(r[0].blocks[t], n);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvgate::kvindex
