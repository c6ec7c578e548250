// Streamed answers of the agents' APIs, recorded by hand from the documented shapes (with
// their `event:` lines), parsed into text, usage, response ids and errors.
#include "bench/replay/sse.h"
#include "gtest/gtest.h"

namespace kvgate::replay {
namespace {

// What the replayer takes from one stream.
struct Stream {
  std::string text;
  int tokens = 0;
  bool done = false;
  bool usage = false;
  uint64_t prompt = 0, completion = 0, cached = 0, store = 0;
  std::string error;
  std::string response_id;
};

// Feeds `bytes` in pieces of `piece` bytes and merges the events as the replayer does.
Stream ParseStream(StreamDialect dialect, std::string_view bytes, size_t piece) {
  SseSplitter splitter;
  StreamEventParser parser(dialect);
  Stream out;
  auto on_data = [&](std::string_view data) {
    StreamEvent ev;
    ASSERT_TRUE(parser.Parse(data, &ev)) << data;
    out.done = out.done || ev.done;
    if (ev.token) ++out.tokens;
    out.text += ev.content;
    if (ev.usage) {
      out.usage = true;
      if (ev.usage_fields & kUsagePrompt) out.prompt = ev.prompt_tokens;
      if (ev.usage_fields & kUsageCompletion) out.completion = ev.completion_tokens;
      if (ev.usage_fields & kUsageCached) out.cached = ev.cached_tokens;
      if (ev.usage_fields & kUsageStore) out.store = ev.store_tokens;
    }
    if (!ev.error.empty() && out.error.empty()) out.error = ev.error;
    if (!ev.response_id.empty()) out.response_id = ev.response_id;
  };
  for (size_t i = 0; i < bytes.size(); i += piece) splitter.Feed(bytes.substr(i, piece), on_data);
  splitter.Finish(on_data);
  return out;
}

constexpr std::string_view kAnthropicStream =
    "event: message_start\n"
    R"(data: {"type":"message_start","message":{"id":"msg_01","type":"message",)"
    R"("role":"assistant","model":"sim-model","content":[],"stop_reason":null,)"
    R"("usage":{"input_tokens":12,"cache_creation_input_tokens":30,)"
    R"("cache_read_input_tokens":200,"output_tokens":1}}})"
    "\n\n"
    "event: content_block_start\n"
    R"(data: {"type":"content_block_start","index":0,)"
    R"("content_block":{"type":"thinking","thinking":""}})"
    "\n\n"
    "event: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":0,)"
    R"("delta":{"type":"thinking_delta","thinking":"Let me look."}})"
    "\n\n"
    "event: content_block_stop\n"
    R"(data: {"type":"content_block_stop","index":0})"
    "\n\n"
    "event: ping\n"
    R"(data: {"type": "ping"})"
    "\n\n"
    "event: content_block_start\n"
    R"(data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"
    "\n\n"
    "event: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hel"}})"
    "\n\n"
    "event: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":1,)"
    R"("delta":{"type":"text_delta","text":"lo \"you\""}})"
    "\n\n"
    "event: content_block_stop\n"
    R"(data: {"type":"content_block_stop","index":1})"
    "\n\n"
    "event: message_delta\n"
    R"(data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},)"
    R"("usage":{"input_tokens":12,"cache_creation_input_tokens":30,)"
    R"("cache_read_input_tokens":200,"output_tokens":3,"kv_store_tokens":64}})"
    "\n\n"
    "event: message_stop\n"
    R"(data: {"type":"message_stop"})"
    "\n\n";

TEST(AnthropicStreamTest, TextThinkingAndTheLastUsage) {
  for (size_t piece : {size_t{1}, size_t{7}, kAnthropicStream.size()}) {
    const Stream s = ParseStream(StreamDialect::kAnthropic, kAnthropicStream, piece);
    EXPECT_EQ(s.text, "Hello \"you\"") << piece;
    EXPECT_EQ(s.tokens, 3);  // The thinking delta counts as a token (TTFT), not as text.
    EXPECT_TRUE(s.done);
    EXPECT_TRUE(s.usage);
    EXPECT_EQ(s.prompt, 242u);  // input + cache read + cache creation.
    EXPECT_EQ(s.cached, 200u);
    EXPECT_EQ(s.store, 64u);
    EXPECT_EQ(s.completion, 3u);
    EXPECT_EQ(s.error, "");
  }
}

TEST(AnthropicStreamTest, AnOutputOnlyMessageDeltaKeepsTheStartsPromptCounts) {
  const std::string stream =
      "event: message_start\n"
      R"(data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":5,)"
      R"("cache_read_input_tokens":64,"output_tokens":0}}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}})"
      "\n\n"
      "event: message_delta\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},)"
      R"("usage":{"output_tokens":1}})"
      "\n\n";
  const Stream s = ParseStream(StreamDialect::kAnthropic, stream, stream.size());
  EXPECT_EQ(s.prompt, 69u);
  EXPECT_EQ(s.cached, 64u);
  EXPECT_EQ(s.completion, 1u);
  EXPECT_FALSE(s.done);  // No message_stop.
}

TEST(AnthropicStreamTest, ErrorsAsEventsAndBodies) {
  const std::string stream =
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}})"
      "\n\n"
      "event: error\n"
      R"(data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"
      "\n\n";
  EXPECT_EQ(ParseStream(StreamDialect::kAnthropic, stream, 5).error, "Overloaded");
  EXPECT_EQ(ParseStream(StreamDialect::kAnthropic,
                        "data: {\"error\":{\"message\":\"boom\",\"type\":\"x\"}}\n\n", 100)
                .error,
            "boom");
  StreamEventParser parser(StreamDialect::kAnthropic);
  StreamEvent ev;
  EXPECT_FALSE(parser.Parse("not json", &ev));
  ASSERT_TRUE(parser.Parse(R"({"type":"error"})", &ev));
  EXPECT_EQ(ev.error, "error event");
}

constexpr std::string_view kResponsesStream =
    "event: response.created\n"
    R"(data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_abc",)"
    R"("object":"response","status":"in_progress","output":[],"usage":null}})"
    "\n\n"
    "event: response.in_progress\n"
    R"(data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_abc",)"
    R"("object":"response","status":"in_progress","usage":null}})"
    "\n\n"
    "event: response.output_item.added\n"
    R"(data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,)"
    R"("item":{"id":"msg_1","type":"message","role":"assistant","content":[]}})"
    "\n\n"
    "event: response.content_part.added\n"
    R"(data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1",)"
    R"("output_index":0,"content_index":0,"part":{"type":"output_text","text":""}})"
    "\n\n"
    "event: response.output_text.delta\n"
    R"(data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1",)"
    R"("output_index":0,"content_index":0,"delta":"Hi"})"
    "\n\n"
    "event: response.output_text.delta\n"
    R"(data: {"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1",)"
    R"("output_index":0,"content_index":0,"delta":" there"})"
    "\n\n"
    "event: response.output_text.done\n"
    R"(data: {"type":"response.output_text.done","sequence_number":6,"item_id":"msg_1",)"
    R"("output_index":0,"content_index":0,"text":"Hi there"})"
    "\n\n"
    "event: response.completed\n"
    R"(data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_abc",)"
    R"("object":"response","status":"completed","usage":{"input_tokens":300,)"
    R"("input_tokens_details":{"cached_tokens":256,"kv_store_tokens":128},)"
    R"("output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":302}}})"
    "\n\n";

TEST(ResponsesStreamTest, TextUsageAndTheResponseId) {
  for (size_t piece : {size_t{1}, size_t{13}, kResponsesStream.size()}) {
    const Stream s = ParseStream(StreamDialect::kResponses, kResponsesStream, piece);
    EXPECT_EQ(s.text, "Hi there") << piece;
    EXPECT_EQ(s.tokens, 2);  // The .done event repeats the text: not a token.
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.response_id, "resp_abc");
    EXPECT_EQ(s.prompt, 300u);
    EXPECT_EQ(s.cached, 256u);
    EXPECT_EQ(s.store, 128u);
    EXPECT_EQ(s.completion, 2u);
    EXPECT_EQ(s.error, "");
  }
}

TEST(ResponsesStreamTest, IncompleteIsASuccessAndFailedAnError) {
  const std::string incomplete =
      "event: response.incomplete\n"
      R"(data: {"type":"response.incomplete","response":{"id":"resp_1","status":"incomplete",)"
      R"("incomplete_details":{"reason":"max_output_tokens"},)"
      R"("usage":{"input_tokens":10,"output_tokens":4}}})"
      "\n\n";
  const Stream s = ParseStream(StreamDialect::kResponses, incomplete, 9);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.prompt, 10u);
  EXPECT_EQ(s.completion, 4u);
  EXPECT_EQ(s.cached, 0u);

  const std::string failed =
      "event: response.failed\n"
      R"(data: {"type":"response.failed","response":{"id":"resp_2","status":"failed",)"
      R"("error":{"code":"server_error","message":"engine died"},"usage":null}})"
      "\n\n";
  EXPECT_EQ(ParseStream(StreamDialect::kResponses, failed, 100).error, "engine died");
  const std::string error_event =
      "event: error\n"
      R"(data: {"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null})"
      "\n\n";
  EXPECT_EQ(ParseStream(StreamDialect::kResponses, error_event, 100).error, "slow down");
  EXPECT_EQ(ParseStream(StreamDialect::kResponses,
                        "data: {\"error\":{\"message\":\"boom\",\"code\":null}}\n\n", 100)
                .error,
            "boom");
}

TEST(OpenAiStreamTest, UsageCarriesEveryCount) {
  StreamEventParser parser;
  StreamEvent ev;
  ASSERT_TRUE(
      parser.Parse(R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3}})", &ev));
  EXPECT_EQ(ev.usage_fields, kUsageAll);  // Absent details overwrite to 0, as before.
  EXPECT_EQ(ev.cached_tokens, 0u);
}

// kvgate-sim --engine-ttft-usage: each dialect's usage carries the engine-clock TTFT; a value
// that is not a non-negative number is ignored, and without it the event has none.
TEST(EngineTtftTest, EveryDialectsUsageCarriesIt) {
  const std::pair<StreamDialect, std::string> with[] = {
      {StreamDialect::kOpenAi,
       R"({"id":"c","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1,)"
       R"("prompt_tokens_details":{"cached_tokens":0},"kv_engine_ttft_s":0.0125}})"},
      {StreamDialect::kAnthropic, R"({"type":"message_delta","delta":{"stop_reason":"max_tokens"},)"
                                  R"("usage":{"output_tokens":3,"kv_engine_ttft_s":0.0125}})"},
      {StreamDialect::kResponses,
       R"({"type":"response.completed","response":{"id":"r","status":"completed",)"
       R"("usage":{"input_tokens":5,"output_tokens":2,"kv_engine_ttft_s":0.0125}}})"}};
  for (const auto& [dialect, data] : with) {
    StreamEventParser parser(dialect);
    StreamEvent ev;
    ASSERT_TRUE(parser.Parse(data, &ev)) << data;
    EXPECT_TRUE(ev.usage) << data;
    EXPECT_TRUE(ev.usage_fields & kUsageEngineTtft) << data;
    EXPECT_DOUBLE_EQ(ev.engine_ttft_s, 0.0125) << data;
  }
  for (const char* value : {"-1", "\"soon\"", "null"}) {
    StreamEventParser parser(StreamDialect::kOpenAi);
    StreamEvent ev;
    ASSERT_TRUE(parser.Parse(
        std::string(R"({"usage":{"prompt_tokens":1,"kv_engine_ttft_s":)") + value + "}}", &ev));
    EXPECT_FALSE(ev.usage_fields & kUsageEngineTtft) << value;
    EXPECT_EQ(ev.engine_ttft_s, -1) << value;
  }
  StreamEventParser anthropic(StreamDialect::kAnthropic);
  StreamEvent ev;
  ASSERT_TRUE(anthropic.Parse(R"({"type":"message_delta","usage":{"output_tokens":3}})", &ev));
  EXPECT_FALSE(ev.usage_fields & kUsageEngineTtft);
  EXPECT_EQ(ev.engine_ttft_s, -1);
}

}  // namespace
}  // namespace kvgate::replay
