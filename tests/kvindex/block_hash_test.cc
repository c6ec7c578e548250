#include "kvindex/block_hash.h"

#include <vector>

#include "gtest/gtest.h"
#include "xxhash.h"

namespace kvgate::kvindex {
namespace {

TEST(BlockHashTest, NamespacesDiffer) {
  const uint64_t a = NamespaceSeed({"m", "", ""});
  EXPECT_EQ(a, NamespaceSeed({"m", "", ""}));
  EXPECT_NE(a, NamespaceSeed({"m2", "", ""}));
  EXPECT_NE(a, NamespaceSeed({"m", "lora", ""}));
  EXPECT_NE(a, NamespaceSeed({"m", "", "salt"}));
  // Separators are unambiguous.
  EXPECT_NE(NamespaceSeed({"ab", "c", ""}), NamespaceSeed({"a", "bc", ""}));
  EXPECT_NE(RootSeed(a, PromptKind::kChat), RootSeed(a, PromptKind::kText));
}

TEST(BlockHashTest, OnlyFullBlocksAndChained) {
  const std::string text(64 * 3 + 10, 'q');
  std::vector<BlockHash> h;
  HashTextBlocks(text, 42, 64, &h);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], XXH3_64bits_withSeed(text.data(), 64, 42));
  EXPECT_EQ(h[1], XXH3_64bits_withSeed(text.data() + 64, 64, h[0]));
  EXPECT_NE(h[1], h[2]);  // Same bytes, different position.
  h.clear();
  HashTextBlocks(text.substr(0, 63), 42, 64, &h);
  EXPECT_TRUE(h.empty());
}

TEST(BlockHashTest, TokenModeIsLittleEndianUint32AndResumable) {
  std::vector<uint32_t> tokens(40);
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = i * 2654435761u;
  }
  std::vector<BlockHash> all;
  HashTokenBlocks(tokens, 7, 16, &all);
  ASSERT_EQ(all.size(), 2u);
  unsigned char bytes[64];
  for (int i = 0; i < 16; ++i) {
    for (int b = 0; b < 4; ++b) {
      bytes[i * 4 + b] = static_cast<unsigned char>(tokens[i] >> (8 * b));
    }
  }
  EXPECT_EQ(all[0], XXH3_64bits_withSeed(bytes, 64, 7));
  // An event applier can continue a chain from a known parent hash.
  std::vector<BlockHash> tail;
  HashTokenBlocks(absl::MakeSpan(tokens).subspan(16), all[0], 16, &tail);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0], all[1]);
}

TEST(BlockHashTest, HashPromptPicksMode) {
  CanonicalPrompt p;
  p.kind = PromptKind::kTokens;
  p.tokens.assign(32, 5);
  HashOptions o;
  EXPECT_EQ(HashPrompt(p, 1, o).size(), 2u);
  o.token_block_tokens = 8;
  EXPECT_EQ(HashPrompt(p, 1, o).size(), 4u);
  p.kind = PromptKind::kText;
  p.bytes.assign(130, 'a');
  EXPECT_EQ(HashPrompt(p, 1, o).size(), 2u);
}

}  // namespace
}  // namespace kvgate::kvindex
