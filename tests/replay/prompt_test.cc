#include "bench/replay/prompt.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"

namespace kvgate::replay {
namespace {

using ::testing::HasSubstr;

// Number of leading equal elements.
template <typename T>
size_t CommonPrefix(const T& a, const T& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// The kvindex block hashes the gateway computes for `body`.
std::vector<kvindex::BlockHash> GatewayBlocks(const std::string& body, kvindex::ApiKind api) {
  auto canonical = kvindex::CanonicalizeRequest(body, api);
  EXPECT_TRUE(canonical.ok()) << canonical.status();
  if (!canonical.ok()) return {};
  const uint64_t seed = kvindex::NamespaceSeed({canonical->model, "", ""});
  return kvindex::HashPrompt(canonical->prompts.at(0), seed);
}

TEST(BlockTextTest, IsDeterministicPrintableAndSized) {
  const std::string a = BlockText("ns", 7, 64);
  EXPECT_EQ(a.size(), 64u * kBytesPerToken);
  EXPECT_EQ(a, BlockText("ns", 7, 64));
  EXPECT_TRUE(
      std::all_of(a.begin(), a.end(), [](char c) { return c == ' ' || (c >= 'a' && c <= 'z'); }));
  EXPECT_NE(a, BlockText("ns", 8, 64));
  EXPECT_NE(a, BlockText("other", 7, 64));
  // Fewer tokens give a prefix of the full block.
  EXPECT_EQ(BlockText("ns", 7, 10), a.substr(0, 10 * kBytesPerToken));
}

TEST(MooncakePromptTest, SharedIdsShareBytesAndGatewayBlocks) {
  MooncakeRequest a{0, 1100, 4, {0, 1, 2}, 1};
  MooncakeRequest b{0, 1500, 4, {0, 1, 3}, 2};
  MooncakeRequest c{0, 1100, 4, {9, 1, 2}, 3};
  const std::string pa = MooncakePrompt(a), pb = MooncakePrompt(b), pc = MooncakePrompt(c);
  EXPECT_EQ(pa.size(), 1100u * kBytesPerToken);
  EXPECT_EQ(pb.size(), 1500u * kBytesPerToken);
  const size_t shared = 2 * kMooncakeBlockTokens * kBytesPerToken;
  EXPECT_EQ(pa.substr(0, shared), pb.substr(0, shared));
  EXPECT_NE(pa.substr(shared, 64), pb.substr(shared, 64));
  EXPECT_NE(pa.substr(0, 64), pc.substr(0, 64));

  BodyOptions options;
  const auto ba = GatewayBlocks(CompletionsBody(pa, 4, options), kvindex::ApiKind::kCompletions);
  const auto bb = GatewayBlocks(CompletionsBody(pb, 4, options), kvindex::ApiKind::kCompletions);
  const auto bc = GatewayBlocks(CompletionsBody(pc, 4, options), kvindex::ApiKind::kCompletions);
  ASSERT_FALSE(ba.empty());
  const size_t common = CommonPrefix(ba, bb);
  EXPECT_EQ(common, shared / kvindex::HashOptions().text_block_bytes);
  EXPECT_EQ(CommonPrefix(ba, bc), 0u);
}

TEST(BodyTest, CarriesSamplingAndStreamingFields) {
  BodyOptions options;
  options.model = "m1";
  options.max_output_tokens = 100;
  const std::string body = CompletionsBody("abc ", 700, options);
  EXPECT_THAT(body, HasSubstr(R"("model":"m1")"));
  EXPECT_THAT(body, HasSubstr(R"("max_tokens":100)"));
  EXPECT_THAT(body, HasSubstr(R"("ignore_eos":true)"));
  EXPECT_THAT(body, HasSubstr(R"("stream":true)"));
  EXPECT_THAT(body, HasSubstr(R"("stream_options":{"include_usage":true})"));
  EXPECT_THAT(CompletionsBody("abc ", 7, options), HasSubstr(R"("max_tokens":7)"));
  const std::string chat = ChatBody({{"user", "a\"b"}}, 3, options);
  EXPECT_THAT(chat, HasSubstr(R"("messages":[{"role":"user","content":"a\"b"}])"));
  EXPECT_TRUE(kvindex::CanonicalizeRequest(chat, kvindex::ApiKind::kChatCompletions).ok());
}

AgentRequest Turn(std::vector<uint64_t> ids) {
  AgentRequest r;
  r.in = ids.size() * kAgenticBlockTokens;
  r.out = 5;
  r.hash_ids = std::move(ids);
  return r;
}

TEST(AgentConversationTest, GrowsTurnByTurnWithTheActualAnswers) {
  AgentConversation conv("conv", 2, true);
  const auto m0 = conv.NextTurn(Turn({1, 2, 3, 4}));
  ASSERT_EQ(m0.size(), 2u);
  EXPECT_EQ(m0[0].role, "system");
  EXPECT_EQ(m0[0].content,
            BlockText(kSharedPrefixNamespace, 1, 64) + BlockText(kSharedPrefixNamespace, 2, 64));
  EXPECT_EQ(m0[1].role, "user");
  EXPECT_EQ(m0[1].content, BlockText("conv", 3, 64) + BlockText("conv", 4, 64));
  conv.SetAnswer("the answer");
  const auto m1 = conv.NextTurn(Turn({1, 2, 3, 4, 5}));
  ASSERT_EQ(m1.size(), 4u);
  EXPECT_EQ(m1[0].content, m0[0].content);
  EXPECT_EQ(m1[1].content, m0[1].content);
  EXPECT_EQ(m1[2].role, "assistant");
  EXPECT_EQ(m1[2].content, "the answer");
  EXPECT_EQ(m1[3].role, "user");
  EXPECT_EQ(m1[3].content, BlockText("conv", 5, 64));

  // The gateway sees turn 0's prompt as a prefix of turn 1's.
  BodyOptions options;
  const auto b0 = GatewayBlocks(ChatBody(m0, 5, options), kvindex::ApiKind::kChatCompletions);
  const auto b1 = GatewayBlocks(ChatBody(m1, 5, options), kvindex::ApiKind::kChatCompletions);
  ASSERT_GE(b0.size(), 8u);
  EXPECT_GE(CommonPrefix(b0, b1) + 1, b0.size());
}

TEST(AgentConversationTest, SharesThePrefixAcrossConversationsOnlyWhenAsked) {
  BodyOptions options;
  AgentConversation a("a", 2, true), b("b", 2, true);
  const auto ma = a.NextTurn(Turn({1, 2, 3}));
  const auto mb = b.NextTurn(Turn({1, 2, 3}));
  EXPECT_EQ(ma[0].content, mb[0].content);
  EXPECT_NE(ma[1].content, mb[1].content);  // Same ids, different conversations.
  const auto ba = GatewayBlocks(ChatBody(ma, 5, options), kvindex::ApiKind::kChatCompletions);
  const auto bb = GatewayBlocks(ChatBody(mb, 5, options), kvindex::ApiKind::kChatCompletions);
  const size_t common = CommonPrefix(ba, bb);
  EXPECT_GE(common, 2 * 64 * kBytesPerToken / 64 - 1);
  EXPECT_LT(common, ba.size());

  AgentConversation c("a", 2, false), d("b", 2, false);
  EXPECT_NE(c.NextTurn(Turn({1, 2, 3}))[0].content, d.NextTurn(Turn({1, 2, 3}))[0].content);
}

TEST(AgentConversationTest, RestartsWhenTheContextWasCompacted) {
  AgentConversation conv("conv", 1, true);
  conv.NextTurn(Turn({1, 2, 3}));
  conv.SetAnswer("x");
  const auto m = conv.NextTurn(Turn({1, 7, 8}));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].content, BlockText("conv", 7, 64) + BlockText("conv", 8, 64));
}

// A session that rewrites the end of its history keeps the rest: the messages before the one
// holding the first changed block stay as sent (answers included), so the gateway and the
// engines see the same prefix up to that block; later answers go with the change.
TEST(AgentConversationTest, KeepsTheHistoryUpToTheFirstChangedBlock) {
  AgentConversation conv("conv", 1, true);
  conv.NextTurn(Turn({1, 2, 3}));
  conv.SetAnswer("a");
  const auto m1 = conv.NextTurn(Turn({1, 2, 3, 4, 5}));
  ASSERT_EQ(m1.size(), 4u);
  conv.SetAnswer("b");
  const auto m2 = conv.NextTurn(Turn({1, 2, 3, 4, 9, 10}));  // block 5 changed
  ASSERT_EQ(m2.size(), 4u);
  EXPECT_EQ(m2[0].content, m1[0].content);
  EXPECT_EQ(m2[1].content, m1[1].content);
  EXPECT_EQ(m2[2].role, "assistant");
  EXPECT_EQ(m2[2].content, "a");
  EXPECT_EQ(m2[3].role, "user");
  EXPECT_EQ(m2[3].content,
            BlockText("conv", 4, 64) + BlockText("conv", 9, 64) + BlockText("conv", 10, 64));
  // The gateway's blocks agree up to the changed one.
  BodyOptions options;
  const auto b1 = GatewayBlocks(ChatBody(m1, 5, options), kvindex::ApiKind::kChatCompletions);
  const auto b2 = GatewayBlocks(ChatBody(m2, 5, options), kvindex::ApiKind::kChatCompletions);
  const size_t through_block_4 =
      ChatBody(m2, 5, options).find(BlockText("conv", 9, 64)) / 64;  // gateway blocks of 64 B
  EXPECT_GE(CommonPrefix(b1, b2) + 2, through_block_4);
  // It goes on from there; a change inside the first user message keeps only the system one.
  conv.SetAnswer("c");
  const auto m3 = conv.NextTurn(Turn({1, 2, 3, 4, 9, 10, 11}));
  ASSERT_EQ(m3.size(), 6u);
  EXPECT_EQ(m3[4].content, "c");
  conv.SetAnswer("d");
  const auto m4 = conv.NextTurn(Turn({1, 2, 8, 4, 9}));
  ASSERT_EQ(m4.size(), 2u);
  EXPECT_EQ(m4[0].content, m1[0].content);
  EXPECT_EQ(m4[1].content, BlockText("conv", 2, 64) + BlockText("conv", 8, 64) +
                               BlockText("conv", 4, 64) + BlockText("conv", 9, 64));
  // A turn that ends earlier than the last one keeps what it still sends.
  conv.SetAnswer("e");
  conv.NextTurn(Turn({1, 2, 8, 4, 9, 12}));
  const auto m5 = conv.NextTurn(Turn({1, 2, 8}));
  ASSERT_EQ(m5.size(), 2u);
  EXPECT_EQ(m5[1].content, BlockText("conv", 2, 64) + BlockText("conv", 8, 64));
}

}  // namespace
}  // namespace kvgate::replay
