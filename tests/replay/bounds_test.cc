#include "bench/replay/bounds.h"

#include "bench/replay/floor.h"
#include "bench/replay/replayer.h"
#include "bench/replay/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::replay {
namespace {

BoundsRequest R(std::vector<uint64_t> keys, uint64_t input_tokens, uint32_t block_tokens = 10) {
  return BoundsRequest{std::move(keys), block_tokens, input_tokens};
}

TEST(IdealReuseTest, CountsTheLeadingRunOfSeenBlocks) {
  const auto result = IdealReuse({R({1, 2, 3}, 30), R({1, 2, 4}, 30), R({5, 2}, 20)});
  EXPECT_EQ(result.input_tokens, 80u);
  EXPECT_EQ(result.reused_tokens, 20u);  // Request 3 misses block 5 first, so 2 does not count.
  EXPECT_DOUBLE_EQ(result.ratio(), 0.25);
}

TEST(IdealReuseTest, CapsHitsAtTheInputLength) {
  const auto result = IdealReuse({R({1}, 5), R({1}, 5), R({1, 2}, 14), R({1, 2}, 14)});
  EXPECT_EQ(result.reused_tokens, 5u + 10u + 14u);
  EXPECT_EQ(IdealReuse({}).ratio(), 0.0);
}

TEST(PooledLruTest, EvictsTheLeastRecentlyUsedBlock) {
  // Capacity two blocks. After {1,2} and a hit on 1, block 2 is the LRU one; {3} evicts it.
  const std::vector<BoundsRequest> trace = {R({1, 2}, 20), R({1}, 10), R({3}, 10), R({1, 2}, 20)};
  const auto lru = PooledLruReuse(trace, 20);
  EXPECT_EQ(lru.reused_tokens, 10u + 10u);
  EXPECT_EQ(lru.input_tokens, 60u);
  // With room for everything it equals the ideal bound.
  EXPECT_EQ(PooledLruReuse(trace, 1000).reused_tokens, IdealReuse(trace).reused_tokens);
  EXPECT_EQ(PooledLruReuse(trace, 0).reused_tokens, 0u);
}

TEST(PooledLruTest, SmallCacheLosesARepeatedPrefix) {
  const std::vector<BoundsRequest> trace = {R({1, 2}, 20), R({3, 4}, 20), R({1, 2}, 20)};
  EXPECT_EQ(PooledLruReuse(trace, 20).reused_tokens, 0u);
  EXPECT_EQ(PooledLruReuse(trace, 40).reused_tokens, 20u);
}

TEST(MooncakeBoundsTest, UsesTimestampOrderAndPartialLastBlocks) {
  std::vector<MooncakeRequest> trace = {
      {100, 1024, 1, {7, 8}, 1}, {0, 600, 1, {7, 9}, 2},  // Sent first.
  };
  const auto requests = MooncakeBoundsRequests(trace);
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].input_tokens, 600u);
  const auto ideal = IdealReuse(requests);
  EXPECT_EQ(ideal.input_tokens, 1624u);
  EXPECT_EQ(ideal.reused_tokens, 512u);
}

AgentSession Session(std::string id, std::vector<std::vector<uint64_t>> turns) {
  AgentSession s;
  s.id = std::move(id);
  s.tool_tokens = 128;  // Two prefix blocks.
  double t = 0;
  for (auto& ids : turns) {
    AgentRequest r;
    r.t = t;
    r.api_time = 1;
    r.in = ids.size() * kAgenticBlockTokens;
    r.hash_ids = std::move(ids);
    s.requests.push_back(std::move(r));
    t += 2;
  }
  return s;
}

TEST(AgenticBoundsTest, SharedPrefixIsReusedAcrossConversations) {
  const AgentSession a = Session("a", {{1, 2, 3}, {1, 2, 3, 4}});
  const AgentSession b = Session("b", {{1, 2, 5}});
  std::vector<PlannedConversation> plan = {{&a, "a", 0}, {&b, "b", 10}};
  // a: 0 + 3 blocks; b: prefix blocks 1, 2 only when shared.
  EXPECT_EQ(IdealReuse(AgenticBoundsRequests(plan, true)).reused_tokens, (3 + 2) * 64u);
  EXPECT_EQ(IdealReuse(AgenticBoundsRequests(plan, false)).reused_tokens, 3 * 64u);
}

TEST(AgenticBoundsTest, OrdersByAbsoluteStartIncludingSubagents) {
  AgentSession a = Session("a", {{1, 2, 3}, {1, 2, 3, 4}});  // Turns at t=0 and t=2.
  AgentSession sub = Session("a/s", {{3, 9}});
  sub.tool_tokens = 0;
  sub.t = 1;  // Between the parent's turns; its block 3 is the parent's block 3.
  a.subagents.push_back(sub);
  const auto requests = AgenticBoundsRequests({{&a, "a", 0}}, true);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].block_keys.size(), 2u);  // The sub-agent's turn comes second.
  EXPECT_EQ(requests[1].block_keys[0], requests[0].block_keys[2]);
}

TEST(CompulsoryTokensTest, TwoConversationsShareThePrefixAsTheBoundsDo) {
  const AgentSession a = Session("a", {{1, 2, 3}, {1, 2, 3, 4}});
  const AgentSession b = Session("b", {{1, 2, 5}});  // Ids 1, 2 are a's too (prefix blocks).
  for (const bool share : {true, false}) {
    CompulsoryTokens compulsory;
    auto add = [&](const AgentSession& s, size_t turn) {
      return compulsory.Add(AgenticFloorRequest(s.requests[turn], s.id, s.PrefixBlocks(), share));
    };
    EXPECT_EQ(add(a, 0), 3 * 64u);
    EXPECT_EQ(add(a, 1), 64u);                             // Only block 4 is new.
    EXPECT_EQ(add(b, 0), (share ? 1 : 3) * 64u) << share;  // a's prefix, only when shared.
    EXPECT_EQ(add(b, 0), 0u);                              // Sent again: all of it could be cached.
  }
}

TEST(FloorTest, CompulsoryTokensPayForTheContextBeforeThemAndTheirSteps) {
  EXPECT_DOUBLE_EQ(FloorSeconds({1000, 0, 0, 0}, 10000, 10000), 10.0);  // a flat rate
  EXPECT_EQ(FloorSeconds({0, 1.43e-5, 0.5, 8192}, 10000, 10000), 0);    // no rate: no floor
  // A 300K-token first turn at 1.43e-5 a context token: each costs 1 + 1.43e-5 x 150K = 3.1x.
  const FloorModel attention{14286, 1.43e-5, 0, 0};
  EXPECT_NEAR(FloorSeconds(attention, 300000, 300000), 300000 * (1 + 1.43e-5 * 150000) / 14286,
              1e-9);
  // A follow-up's 2,000 new tokens after a 98,000-token history attend to all of it.
  EXPECT_NEAR(FloorSeconds(attention, 2000, 100000), 2000 * (1 + 1.43e-5 * 99000) / 14286, 1e-9);
  EXPECT_NEAR(FloorSeconds(attention, 2000, 1000), FloorSeconds(attention, 2000, 2000), 1e-12);
  EXPECT_EQ(FloorSeconds(attention, 0, 100000), 0);
  // Steps: one per 8,192-token chunk, and one for a prompt with nothing left to compute.
  const FloorModel steps{14286, 0, 0.25, 8192};
  EXPECT_NEAR(FloorSeconds(steps, 0, 5000), 0.25, 1e-12);
  EXPECT_NEAR(FloorSeconds(steps, 8192, 8192), 8192.0 / 14286 + 0.25, 1e-12);
  EXPECT_NEAR(FloorSeconds(steps, 8193, 8193), 8193.0 / 14286 + 0.5, 1e-12);
  EXPECT_NEAR(FloorSeconds({14286, 0, 0.25, 0}, 20000, 20000), 20000.0 / 14286 + 0.25, 1e-12);
}

TEST(CompulsoryTokensTest, PrefixSemanticsAndTails) {
  CompulsoryTokens compulsory;
  EXPECT_EQ(compulsory.Add(R({1, 2}, 20)), 20u);
  EXPECT_EQ(compulsory.Add(R({5, 2}, 20)), 20u);  // Block 2 after a new block is recomputed.
  EXPECT_EQ(compulsory.Add(R({1, 2}, 15)), 0u);   // A partial last block of known blocks.
  EXPECT_EQ(compulsory.Add(R({1, 2}, 27)), 7u);   // Tokens beyond the hashed blocks.
  // Mooncake prompts carry their tail beyond the hashed blocks: compulsory every time.
  const MooncakeRequest m = {0, 1100, 1, {7, 8}, 1};
  EXPECT_EQ(compulsory.Add(MooncakeBoundsRequest(m)), 1100u);
  EXPECT_EQ(compulsory.Add(MooncakeBoundsRequest(m)), 1100u - 1024u);
  // Agentic prompts carry the hashed blocks only: the trace's unhashed tail is not sent.
  AgentRequest turn;
  turn.in = 2 * 64 + 40;
  turn.hash_ids = {1, 2};
  const BoundsRequest sent = AgenticFloorRequest(turn, "c", 0, true);
  EXPECT_EQ(sent.input_tokens, 128u);
  EXPECT_EQ(compulsory.Add(sent), 128u);
  EXPECT_EQ(compulsory.Add(sent), 0u);
}

TEST(PlanTest, SlotsTakeTheNextConversationWhenOneEnds) {
  std::vector<AgentSession> sessions = {Session("a", {{1}, {1, 2}}), Session("b", {{1}}),
                                        Session("c", {{1}})};
  ReplayOptions options;
  options.conversations = 2;
  const auto plan = PlanConversations(sessions, options);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].start_s, 0);
  EXPECT_EQ(plan[1].start_s, 0);
  EXPECT_EQ(plan[2].ns, "c");
  EXPECT_EQ(plan[2].start_s, 1);  // b's slot frees at 0 + 1 (api_time), before a's at 3.
  options.max_conversations = 4;
  const auto repeated = PlanConversations(sessions, options);
  ASSERT_EQ(repeated.size(), 4u);
  EXPECT_EQ(repeated[3].ns, "a#1");
}

}  // namespace
}  // namespace kvgate::replay
