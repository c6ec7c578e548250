// The BPE word cache: what it returns, that a repeated working set stays resident beside a
// stream of one-off words, and that its memory stays under two generations.
#include "tokenizer/hf_word_cache.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvgate::tokenizer::hf {
namespace {

std::vector<uint32_t> IdsOf(size_t i) { return {static_cast<uint32_t>(i), 7, 9}; }

TEST(WordCacheTest, ReturnsWhatWasInsertedAndAppendsNothingOnAMiss) {
  WordCache cache;
  std::vector<uint32_t> out = {1};
  EXPECT_FALSE(cache.Find("hello", &out));
  EXPECT_EQ(out, std::vector<uint32_t>{1});
  cache.Insert("hello", IdsOf(5));
  cache.Insert("hell", IdsOf(6));  // a prefix of another word is its own entry
  EXPECT_TRUE(cache.Find("hello", &out));
  EXPECT_EQ(out, (std::vector<uint32_t>{1, 5, 7, 9}));
  out.clear();
  EXPECT_TRUE(cache.Find("hell", &out));
  EXPECT_EQ(out, IdsOf(6));
  EXPECT_FALSE(cache.Find("hello!", &out));
  EXPECT_FALSE(cache.Find("", &out));
  cache.Insert("", {});
  EXPECT_TRUE(cache.Find("", &out));
  EXPECT_EQ(out, IdsOf(6));
}

// 40 hot words asked for on every pass, each pass also bringing 40 words never seen again, with
// room for 100 words a generation (what a pass touches fits in one): from the second pass on
// every hot word must hit. It fails when the cache is cleared at its limit (the policy before)
// or when a hit in the old generation is not carried into the young one.
TEST(WordCacheTest, AWorkingSetStaysBesideOneOffWords) {
  WordCache cache(
      WordCache::Limits{.words_per_generation = 100, .arena_bytes_per_generation = 1 << 20});
  size_t one_off = 0;
  for (int pass = 0; pass < 6; ++pass) {
    size_t hits = 0;
    for (size_t i = 0; i < 40; ++i) {
      const std::string hot = "hot" + std::to_string(i);
      std::vector<uint32_t> out;
      if (cache.Find(hot, &out)) {
        ++hits;
        EXPECT_EQ(out, IdsOf(i)) << hot;
      } else {
        cache.Insert(hot, IdsOf(i));
      }
      const std::string cold = "cold" + std::to_string(one_off++);
      EXPECT_FALSE(cache.Find(cold, &out));
      cache.Insert(cold, IdsOf(one_off));
    }
    EXPECT_EQ(hits, pass == 0 ? 0u : 40u) << "pass " << pass;
    EXPECT_LE(cache.words(), 200u);
  }
}

TEST(WordCacheTest, MemoryStaysUnderTwoGenerations) {
  const WordCache::Limits limits{.words_per_generation = 1000, .arena_bytes_per_generation = 4096};
  WordCache cache(limits);
  for (size_t i = 0; i < 5000; ++i) {
    cache.Insert("a word of some length, number " + std::to_string(i), IdsOf(i));
    ASSERT_LE(cache.arena_bytes(), 2 * limits.arena_bytes_per_generation);
    ASSERT_LE(cache.words(), 2 * limits.words_per_generation);
  }
  // The newest words are still there; a record larger than a generation is not kept.
  std::vector<uint32_t> out;
  EXPECT_TRUE(cache.Find("a word of some length, number 4999", &out));
  EXPECT_EQ(out, IdsOf(4999));
  const std::string huge(8192, 'x');
  cache.Insert(huge, IdsOf(1));
  EXPECT_FALSE(cache.Find(huge, &out));
  EXPECT_LE(cache.arena_bytes(), 2 * limits.arena_bytes_per_generation);
}

}  // namespace
}  // namespace kvgate::tokenizer::hf
