#include "bench/replay/trace.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/replay/test_paths.h"

namespace kvgate::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(MooncakeTraceTest, ParsesEveryLineAndKeepsLineNumbers) {
  auto trace = LoadMooncakeFile(Fixture("tiny.jsonl"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 5u);
  EXPECT_EQ((*trace)[0].timestamp_ms, 0);
  EXPECT_EQ((*trace)[0].input_length, 1100u);
  EXPECT_EQ((*trace)[0].output_length, 4u);
  EXPECT_THAT((*trace)[0].hash_ids, ElementsAre(0, 1, 2));
  EXPECT_EQ((*trace)[1].line, 2);
  EXPECT_EQ((*trace)[2].line, 4);  // Line 3 is blank.
  EXPECT_EQ((*trace)[4].timestamp_ms, 400);
}

TEST(MooncakeTraceTest, ReportsMalformedLinesWithLineNumbers) {
  auto trace = LoadMooncakeFile(Fixture("bad.jsonl"));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(trace.status().message());
  EXPECT_THAT(message, HasSubstr("3 malformed line(s)"));
  EXPECT_THAT(message, HasSubstr("bad.jsonl:2:"));
  EXPECT_THAT(message, HasSubstr("bad.jsonl:4: input_length is not a count"));
  EXPECT_THAT(message, HasSubstr("bad.jsonl:5: missing input_length"));
  EXPECT_THAT(message, Not(HasSubstr("bad.jsonl:1:")));
  EXPECT_THAT(message, Not(HasSubstr("bad.jsonl:3:")));
}

TEST(MooncakeTraceTest, RejectsNonObjects) {
  auto trace = ParseMooncakeJsonl("[1,2]\n", "x.jsonl");
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(std::string(trace.status().message()), HasSubstr("x.jsonl:1: not a JSON object"));
}

TEST(AgentTraceTest, ParsesTurnsAndSubagents) {
  auto sessions = LoadAgentSessions(Fixture("agentic/conv_a.json"));
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 1u);
  const AgentSession& s = (*sessions)[0];
  EXPECT_EQ(s.id, "conv_a");
  EXPECT_EQ(s.PrefixBlocks(), 2u);  // (100 + 28) / 64
  ASSERT_EQ(s.requests.size(), 3u);
  EXPECT_EQ(s.requests[1].t, 1.0);
  EXPECT_EQ(s.requests[1].in, 330u);
  EXPECT_EQ(s.requests[1].out, 3u);
  EXPECT_EQ(s.requests[1].think_time, 0.5);
  EXPECT_THAT(s.requests[1].hash_ids, ElementsAre(1, 2, 3, 4, 5));
  ASSERT_EQ(s.subagents.size(), 1u);
  const AgentSession& sub = s.subagents[0];
  EXPECT_EQ(sub.id, "conv_a/agent_001");
  EXPECT_EQ(sub.t, 0.6);
  EXPECT_EQ(sub.PrefixBlocks(), 2u);
  ASSERT_EQ(sub.requests.size(), 2u);
  EXPECT_THAT(sub.requests[1].hash_ids, ElementsAre(50, 51, 52, 53));
  EXPECT_EQ(s.TotalRequests(), 5u);
}

TEST(AgentTraceTest, LoadsADirectoryInNameOrder) {
  auto sessions = LoadAgentSessions(Fixture("agentic"));
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 2u);
  EXPECT_EQ((*sessions)[0].id, "conv_a");
  EXPECT_EQ((*sessions)[1].id, "conv_b");
  EXPECT_EQ((*sessions)[1].requests.size(), 2u);  // type "s" entries are turns too.
}

TEST(AgentTraceTest, NamesTheBadField) {
  auto sessions = LoadAgentSessions(Fixture("bad_agentic.json"));
  ASSERT_FALSE(sessions.ok());
  EXPECT_THAT(std::string(sessions.status().message()),
              HasSubstr("requests[1].hash_ids: not an array"));
  auto truncated = ParseAgentSession(R"({"id":"x","requests":[{"t":0,"in":1,)", "t.json");
  EXPECT_FALSE(truncated.ok());
  auto no_ids = ParseAgentSession(R"({"id":"x","requests":[{"t":0,"in":1,"out":1}]})", "n.json");
  ASSERT_FALSE(no_ids.ok());
  EXPECT_THAT(std::string(no_ids.status().message()), HasSubstr("requests[0]: missing hash_ids"));
}

TEST(AgentTraceTest, ParsesARealTrace) {
  const std::string path = BenchData("agentic/trace_0277.json");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto sessions = LoadAgentSessions(path);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  const AgentSession& s = (*sessions)[0];
  EXPECT_EQ(s.id, "trace_0277");
  EXPECT_EQ(s.requests.size(), 9u);
  ASSERT_EQ(s.subagents.size(), 4u);
  EXPECT_EQ(s.subagents[0].id, "trace_0277/agent_001");
  EXPECT_EQ(s.subagents[0].PrefixBlocks(), (7401u + 1022u) / 64u);
  EXPECT_EQ(s.subagents[0].requests.size(), 4u);
}

TEST(TracePathTest, JsonlIsMooncake) {
  EXPECT_TRUE(IsMooncakePath("a/b.jsonl"));
  EXPECT_FALSE(IsMooncakePath("a/b.json"));
  EXPECT_FALSE(IsMooncakePath("a/dir"));
}

}  // namespace
}  // namespace kvgate::replay
