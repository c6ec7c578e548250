#include "sim/tokens.h"

#include <cctype>

#include "gtest/gtest.h"

namespace kvgate::sim {
namespace {

TEST(BytesToTokens4, LittleEndianGroupsAndZeroPaddedTail) {
  EXPECT_TRUE(BytesToTokens4("").empty());
  EXPECT_EQ(BytesToTokens4("abcd"), (std::vector<uint32_t>{0x64636261}));
  EXPECT_EQ(BytesToTokens4("abcdefg"), (std::vector<uint32_t>{0x64636261, 0x00676665}));
  EXPECT_EQ(BytesToTokens4(std::string("\xff\x00\x01", 3)), (std::vector<uint32_t>{0x000100ff}));
  std::vector<uint32_t> out = {7};
  AppendBytesToTokens4("e", &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{7, 0x65}));
}

TEST(BlockHashes, ChainedOverFullBlocksOnly) {
  std::vector<uint32_t> tokens(40);
  for (uint32_t i = 0; i < 40; ++i) tokens[i] = i + 1;
  const uint64_t root = RootBlockHash("sim-model");
  EXPECT_NE(root, RootBlockHash("other-model"));
  std::vector<uint64_t> h;
  AppendBlockHashes(root, tokens, 16, 0, &h);
  ASSERT_EQ(h.size(), 2u);  // The 8-token tail is not a block.
  EXPECT_EQ(h[0], ChainBlockHash(root, absl::MakeConstSpan(tokens).first(16)));
  EXPECT_EQ(h[1], ChainBlockHash(h[0], absl::MakeConstSpan(tokens).subspan(16, 16)));
  // Same second block after a different first block: a different hash (the chain).
  std::vector<uint32_t> other = tokens;
  other[0] = 99;
  std::vector<uint64_t> h2;
  AppendBlockHashes(root, other, 16, 0, &h2);
  EXPECT_NE(h2[1], h[1]);
  // Resuming from block 1 gives the same tail.
  std::vector<uint64_t> tail;
  AppendBlockHashes(h[0], tokens, 16, 1, &tail);
  EXPECT_EQ(tail, (std::vector<uint64_t>{h[1]}));
}

TEST(OutputToken, DeterministicPrintableFourBytes) {
  for (uint32_t pos = 0; pos < 100; ++pos) {
    const uint32_t t = OutputToken(1, 2, pos);
    EXPECT_EQ(t, OutputToken(1, 2, pos));
    const std::string text = TokenText(t);
    ASSERT_EQ(text.size(), 4u);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::islower(static_cast<unsigned char>(text[i])));
    EXPECT_EQ(text[3], ' ');
    EXPECT_EQ(BytesToTokens4(text), (std::vector<uint32_t>{t}));  // Text maps back to the token.
  }
  EXPECT_NE(OutputToken(1, 2, 0), OutputToken(2, 2, 0));
}

}  // namespace
}  // namespace kvgate::sim
