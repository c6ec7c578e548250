// The replayer through the agents' APIs, against a scripted server that answers as Anthropic
// and OpenAI Responses servers stream: paths, headers, chained responses, the report's API.
#include <algorithm>
#include <atomic>
#include <cctype>

#include "bench/replay/cli.h"
#include "bench/replay/replayer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/fakes/scripted_upstream.h"
#include "tests/replay/test_paths.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::replay {
namespace {

using ::kvgate::testing::Script;
using ::kvgate::testing::ScriptedUpstream;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Sse(const std::string& events) {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
         std::to_string(events.size()) + "\r\n\r\n" + events;
}

std::string Event(const std::string& name, const std::string& data) {
  return "event: " + name + "\ndata: " + data + "\n\n";
}

// Two text deltas; 100 prompt tokens of which 64 read from the cache, 2 output tokens.
Script AnthropicAnswer() {
  std::string s = Event("message_start",
                        R"({"type":"message_start","message":{"id":"msg_1","usage":)"
                        R"({"input_tokens":36,"cache_read_input_tokens":64,"output_tokens":1}}})");
  for (const char* tok : {"tok0 ", "tok1 "}) {
    s +=
        Event("content_block_delta", std::string(R"({"type":"content_block_delta","index":0,)") +
                                         R"("delta":{"type":"text_delta","text":")" + tok + "\"}}");
  }
  s += Event("message_delta",
             R"({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":)"
             R"({"input_tokens":36,"cache_read_input_tokens":64,)"
             R"("cache_creation_input_tokens":0,"output_tokens":2}})");
  s += Event("message_stop", R"({"type":"message_stop"})");
  return {{Sse(s)}};
}

Script ResponsesAnswer(const std::string& id) {
  const std::string head = R"({"id":")" + id + "\"";
  std::string s = Event("response.created", R"({"type":"response.created","response":)" + head +
                                                R"(,"status":"in_progress","usage":null}})");
  for (const char* tok : {"tok0 ", "tok1 "}) {
    s += Event("response.output_text.delta",
               std::string(R"({"type":"response.output_text.delta","delta":")") + tok + "\"}");
  }
  s += Event("response.completed",
             R"({"type":"response.completed","response":)" + head +
                 R"(,"status":"completed","usage":{"input_tokens":100,)"
                 R"("input_tokens_details":{"cached_tokens":64},"output_tokens":2}}})");
  return {{Sse(s)}};
}

std::string Body(const std::string& request) {
  return request.substr(request.find("\r\n\r\n") + 4);
}

std::string LowerHead(const std::string& request) {
  std::string head = request.substr(0, request.find("\r\n\r\n"));
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return head;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

ReplayOptions Options(const std::string& target, Api api) {
  ReplayOptions o;
  o.target = target;
  o.api = api;
  o.progress = 0;
  o.request_timeout_s = 20;
  return o;
}

AgentSession Conversation(std::string id, int turns) {
  AgentSession s;
  s.id = std::move(id);
  s.tool_tokens = 128;
  std::vector<uint64_t> ids = {1, 2};
  for (int k = 0; k < turns; ++k) {
    ids.push_back(ids.size() + 1);
    AgentRequest r;
    r.in = ids.size() * kAgenticBlockTokens;
    r.out = 2;
    r.hash_ids = ids;
    s.requests.push_back(std::move(r));
  }
  return s;
}

TEST(AgentReplayTest, MessagesAsClaudeCode) {
  ScriptedUpstream server([](const std::string&) { return AnthropicAnswer(); });
  AgentSession parent = Conversation("c", 3);
  AgentSession sub = Conversation("c/agent_1", 1);
  parent.subagents.push_back(sub);
  auto result = RunAgentic({parent}, Options(server.url(), Api::kMessages));
  ASSERT_TRUE(result.ok()) << result.status();
  const Report& r = result->report;
  EXPECT_EQ(r.api, "messages");
  EXPECT_EQ(r.requests, 4u);
  ASSERT_EQ(r.ok, 4u) << result->records[0].error;
  EXPECT_EQ(r.prompt_tokens, 400u);
  EXPECT_EQ(r.cached_tokens, 256u);
  EXPECT_EQ(r.completion_tokens, 8u);
  EXPECT_EQ(r.ttft.count, 4u);
  EXPECT_THAT(ReportToJson(r), HasSubstr(R"("mode":"closed-loop","api":"messages")"));
  EXPECT_THAT(ReportToTable(r), HasSubstr("(closed-loop, api messages)"));

  const std::string session = Lower(MakeAgentIdentity("c", "c").session_id);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 4u);
  std::string last_parent;
  for (const auto& req : requests) {
    EXPECT_THAT(req, StartsWith("POST /v1/messages HTTP/1.1\r\n"));
    const std::string head = LowerHead(req);
    EXPECT_THAT(head, HasSubstr("\r\nanthropic-version: 2023-06-01"));
    EXPECT_THAT(head, HasSubstr("\r\nanthropic-beta: "));
    // The sub-agent is in its parent's session.
    EXPECT_THAT(head, HasSubstr("\r\nx-claude-code-session-id: " + session));
    if (Body(req).find("toolu_c_2") != std::string::npos) last_parent = Body(req);
  }
  // The last turn carries both answers as text blocks before their tool calls.
  const std::string answer = R"({"type":"text","text":"tok0 tok1 "},{"type":"tool_use")";
  const size_t first = last_parent.find(answer);
  ASSERT_NE(first, std::string::npos) << last_parent.substr(0, 300);
  EXPECT_NE(last_parent.find(answer, first + 1), std::string::npos);
  EXPECT_THAT(last_parent, HasSubstr(R"("tool_use_id":"toolu_c_2")"));
}

TEST(AgentReplayTest, ResponsesStoreChainsTurnsByResponseId) {
  std::atomic<int> n{0};
  ScriptedUpstream server(
      [&](const std::string&) { return ResponsesAnswer("resp_" + std::to_string(++n)); });
  ReplayOptions o = Options(server.url(), Api::kResponses);
  o.body.responses_store = true;
  auto result = RunAgentic({Conversation("c", 3)}, o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.ok, 3u);
  EXPECT_EQ(result->report.api, "responses");
  EXPECT_TRUE(result->report.responses_store);
  EXPECT_EQ(result->report.cached_tokens, 192u);
  EXPECT_THAT(ReportToJson(result->report), HasSubstr(R"("responses_store":true)"));
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_THAT(requests[0], StartsWith("POST /v1/responses HTTP/1.1\r\n"));
  EXPECT_THAT(Body(requests[0]), Not(HasSubstr("previous_response_id")));
  EXPECT_THAT(Body(requests[1]), HasSubstr(R"("previous_response_id":"resp_1")"));
  EXPECT_THAT(Body(requests[2]), HasSubstr(R"("previous_response_id":"resp_2")"));
  // Chained turns carry no earlier answer: the server stored it.
  EXPECT_THAT(Body(requests[2]), Not(HasSubstr("tok0 tok1")));
  EXPECT_THAT(LowerHead(requests[0]),
              HasSubstr("\r\nsession_id: " + MakeAgentIdentity("c", "c").thread_id));
}

TEST(AgentReplayTest, AnUnknownPreviousResponseIsAnErrorOfThatRequest) {
  std::atomic<int> n{0};
  ScriptedUpstream server([&](const std::string& request) -> Script {
    if (Body(request).find("previous_response_id") != std::string::npos) {
      const std::string body =
          R"({"error":{"message":"Previous response with id 'resp_1' not found.",)"
          R"("type":"invalid_request_error","param":"previous_response_id",)"
          R"("code":"previous_response_not_found"}})";
      return {{"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body}};
    }
    return ResponsesAnswer("resp_" + std::to_string(++n));
  });
  ReplayOptions o = Options(server.url(), Api::kResponses);
  o.body.responses_store = true;
  auto result = RunAgentic({Conversation("c", 3)}, o);
  ASSERT_TRUE(result.ok()) << result.status();
  const Report& r = result->report;
  EXPECT_EQ(r.requests, 3u);
  EXPECT_EQ(r.errors, 1u);
  EXPECT_EQ(r.error_kinds.at("http_404"), 1u);
  EXPECT_THAT(result->records[1].error, HasSubstr("previous_response_not_found"));
  // The failed turn left no id to chain to: the next one resends the whole input.
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_THAT(Body(requests[2]), Not(HasSubstr("previous_response_id")));
  EXPECT_THAT(Body(requests[2]), HasSubstr(R"("role":"developer")"));
}

TEST(AgentReplayTest, MooncakeRequestsAsSingleTurns) {
  ScriptedUpstream server([](const std::string&) { return AnthropicAnswer(); });
  ReplayOptions o = Options(server.url(), Api::kMessages);
  o.trace = Fixture("tiny.jsonl");
  o.speedup = 100;
  auto result = RunReplay(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.api, "messages");
  EXPECT_EQ(result->report.ok, 5u);
  for (const auto& req : server.requests()) {
    EXPECT_THAT(req, StartsWith("POST /v1/messages HTTP/1.1\r\n"));
  }
}

TEST(AgentReplayTest, DefaultApiIsReported) {
  EXPECT_EQ(std::string(ApiName(Api::kDefault)), "default");
  ScriptedUpstream server([](const std::string&) { return AnthropicAnswer(); });
  ReplayOptions o = Options(server.url(), Api::kDefault);
  o.max_requests = 1;
  o.trace = Fixture("tiny.jsonl");
  auto mooncake = RunReplay(o);
  ASSERT_TRUE(mooncake.ok());
  EXPECT_EQ(mooncake->report.api, "completions");
  o.trace = Fixture("agentic");
  auto agentic = RunReplay(o);
  ASSERT_TRUE(agentic.ok());
  EXPECT_EQ(agentic->report.api, "chat");
}

// A chat stream of one token, with `head` (header lines) in the response head.
Script ChatAnswer(const std::string& head) {
  const std::string s =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok0 \"}}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":1}}\n\n"
      "data: [DONE]\n\n";
  return {{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + head +
           "Content-Length: " + std::to_string(s.size()) + "\r\n\r\n" + s}};
}

TEST(AgentReplayTest, ReadsThePredictionHeaderAndCountsTheFloor) {
  std::atomic<int> n{0};
  ScriptedUpstream server([&](const std::string&) {
    switch (n++) {
      case 0:
        return ChatAnswer("x-kvgate-prediction: ttft=0.5;queue=0.1;prefill=0.4;new=7\r\n");
      case 1:
        return ChatAnswer("X-Kvgate-Prediction: queue=0.1\r\n");  // Malformed: no ttft.
      default:
        return ChatAnswer("");
    }
  });
  // One conversation at a time: a's two turns, then b's, whose blocks 1, 2 are the shared prefix.
  ReplayOptions o = Options(server.url(), Api::kChat);
  o.conversations = 1;
  o.floor_prefill_rate = 64000;
  auto result = RunAgentic({Conversation("a", 2), Conversation("b", 1)}, o);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& records = result->records;
  ASSERT_EQ(records.size(), 3u);
  EXPECT_DOUBLE_EQ(records[0].prediction.ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(records[0].prediction.parts_s[1], 0.4);
  EXPECT_FALSE(records[1].prediction.present());
  EXPECT_FALSE(records[2].prediction.present());
  EXPECT_EQ(result->report.prediction.count, 1u);
  EXPECT_EQ(records[0].compulsory_tokens, 3 * 64u);
  EXPECT_EQ(records[1].compulsory_tokens, 64u);
  EXPECT_EQ(records[2].conversation, "b");
  EXPECT_EQ(records[2].compulsory_tokens, 64u);  // Only its own block 3.
  EXPECT_DOUBLE_EQ(records[2].floor_s, 0.001);
  EXPECT_EQ(result->report.floor.compulsory_tokens, 5 * 64u);
}

TEST(CliTest, FloorPrefillRate) {
  auto parsed = ParseCommandLine(
      {"--target", "http://h:1", "--trace", "t.json", "--floor-prefill-rate", "285714"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->replay.floor_prefill_rate, 285714);
  EXPECT_EQ(
      ParseCommandLine({"--target", "http://h:1", "--trace", "t.json"})->replay.floor_prefill_rate,
      0);
  EXPECT_FALSE(ParseCommandLine(
                   {"--target", "http://h:1", "--trace", "t.json", "--floor-prefill-rate", "-1"})
                   .ok());
  auto steps =
      ParseCommandLine({"--target", "http://h:1", "--trace", "t.json", "--floor-step-seconds",
                        "0.000325", "--floor-step-tokens", "8192"});
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_DOUBLE_EQ(steps->replay.floor_step_s, 0.000325);
  EXPECT_EQ(steps->replay.floor_step_tokens, 8192u);
  EXPECT_FALSE(ParseCommandLine({"--target", "http://h:1", "--trace", "t.json",
                                 "--floor-step-tokens", "4294967296"})
                   .ok());
}

TEST(CliTest, ApiFlags) {
  const std::vector<std::string> base = {"--target", "http://h:1", "--trace", "t.json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return ParseCommandLine(args);
  };
  auto plain = with({});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->replay.api, Api::kDefault);
  auto messages = with({"--api", "messages", "--thinking"});
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->replay.api, Api::kMessages);
  EXPECT_TRUE(messages->replay.body.thinking);
  auto store = with({"--api=responses", "--responses-store"});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->replay.api, Api::kResponses);
  EXPECT_TRUE(store->replay.body.responses_store);
  ASSERT_TRUE(with({"--api", "completions"}).ok());
  ASSERT_TRUE(with({"--api", "chat"}).ok());
  EXPECT_THAT(std::string(with({"--api", "anthropic"}).status().message()), HasSubstr("--api"));
  EXPECT_THAT(std::string(with({"--thinking"}).status().message()),
              HasSubstr("--thinking: needs --api messages"));
  EXPECT_THAT(std::string(with({"--api", "messages", "--responses-store"}).status().message()),
              HasSubstr("--responses-store: needs --api responses"));
}

TEST(AgentReplayBinaryTest, ReportsTheApi) {
  std::atomic<int> n{0};
  ScriptedUpstream server(
      [&](const std::string&) { return ResponsesAnswer("resp_" + std::to_string(++n)); });
  const std::string report = kvgate::testing::WriteTempFile("agent_report.json", "");
  kvgate::testing::ChildProcess p({BinDir() + "/kvgate-replay", "--target", server.url(), "--trace",
                                   Fixture("agentic"), "--speedup", "100", "--api", "responses",
                                   "--responses-store", "--report", report});
  ASSERT_EQ(p.Wait(), 0) << p.Log();
  EXPECT_THAT(p.Log(), HasSubstr("api responses with store"));
  auto json = ReadFileToString(report);
  ASSERT_TRUE(json.ok());
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_FALSE(parser.parse(*json).get(doc));
  std::string_view api;
  ASSERT_FALSE(doc["api"].get(api));
  EXPECT_EQ(api, "responses");
  uint64_t errors = 1;
  ASSERT_FALSE(doc.at_pointer("/totals/errors").get(errors));
  EXPECT_EQ(errors, 0u);
}

}  // namespace
}  // namespace kvgate::replay
