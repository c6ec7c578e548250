// kvgate-sim's agent APIs, in process: Anthropic Messages (events, blocks, usage, errors,
// count_tokens) and OpenAI Responses (events, the response object, the per-worker store and
// its endpoints), and --convert-quirk.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "simdjson.h"
#include "tests/fakes/test_client.h"

namespace kvgate::sim {
namespace {

using ::testing::ElementsAre;
using testing::Fetch;
using ::testing::HasSubstr;
using testing::StreamingRequest;

// A parsed JSON document, read by JSON pointer ("/usage/input_tokens").
class Json {
 public:
  explicit Json(const std::string& text) : parser_(std::make_unique<simdjson::dom::parser>()) {
    ok_ = !parser_->parse(text).get(root_);
  }
  bool ok() const { return ok_; }
  bool Has(std::string_view ptr) const { return !root_.at_pointer(ptr).error(); }
  int64_t Int(std::string_view ptr) const {
    int64_t v = -1;
    return root_.at_pointer(ptr).get(v) ? -1 : v;
  }
  std::string Str(std::string_view ptr) const {
    std::string_view s;
    return root_.at_pointer(ptr).get(s) ? "<none>" : std::string(s);
  }
  bool IsNull(std::string_view ptr) const {
    simdjson::dom::element e;
    return !root_.at_pointer(ptr).get(e) && e.is_null();
  }
  size_t Size(std::string_view ptr) const {
    simdjson::dom::array a;
    return root_.at_pointer(ptr).get(a) ? 0 : a.size();
  }
  std::string Raw(std::string_view ptr) const {
    simdjson::dom::element e;
    return root_.at_pointer(ptr).get(e) ? "<none>" : simdjson::minify(e);
  }

 private:
  std::unique_ptr<simdjson::dom::parser> parser_;
  simdjson::dom::element root_;
  bool ok_ = false;
};

struct Event {
  std::string name;
  std::string data;
};

// `event: NAME\ndata: JSON\n\n` frames.
std::vector<Event> Events(const std::string& body) {
  std::vector<Event> out;
  for (size_t at = 0; at < body.size();) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      out.push_back({"<unterminated>", body.substr(at)});
      break;
    }
    const std::string frame = body.substr(at, end - at);
    at = end + 2;
    Event e;
    const size_t nl = frame.find('\n');
    if (frame.starts_with("event: ") && nl != std::string::npos &&
        frame.compare(nl + 1, 6, "data: ") == 0) {
      e.name = frame.substr(7, nl - 7);
      e.data = frame.substr(nl + 7);
    } else {
      e.name = "<bad frame>";
      e.data = frame;
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> Names(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events) out.push_back(e.name);
  return out;
}

const std::string kUser(600, 'q');  // 150 tokens of content: 9+ full blocks

std::string MessagesBody(bool stream, int max_tokens, const std::string& extra = "",
                         const std::string& user = kUser) {
  return common::StrCat(R"({"model":"sim-model","max_tokens":)", max_tokens,
                        R"(,"system":"You are terse.","messages":[{"role":"user","content":[)",
                        R"({"type":"text","text":")", user, R"("}]}],"stream":)",
                        stream ? "true" : "false", extra, "}");
}

// The chat request vLLM converts MessagesBody() into.
std::string ChatBody(const std::string& user = kUser) {
  return common::StrCat(R"({"model":"sim-model","max_tokens":4,"messages":[)",
                        R"({"role":"system","content":"You are terse."},)",
                        R"({"role":"user","content":")", user, R"("}]})");
}

std::string ResponsesBody(bool stream, int max_tokens, const std::string& extra = "",
                          const std::string& input = "\"" + kUser + "\"") {
  return common::StrCat(R"({"model":"sim-model","input":)", input, R"(,"max_output_tokens":)",
                        max_tokens, R"(,"stream":)", stream ? "true" : "false", extra, "}");
}

const std::string kTools =
    R"(,"tools":[{"name":"get_weather","description":"Weather.","input_schema":)"
    R"({"type":"object","properties":{"city":{"type":"string"}}}}])";
const std::string kFunctionTools =
    R"(,"tools":[{"type":"function","name":"get_weather","parameters":)"
    R"({"type":"object","properties":{"city":{"type":"string"}}}}])";

class AgentApiTest : public ::testing::Test {
 protected:
  void StartSim(ConvertQuirk quirk = ConvertQuirk::kNone, PdRole role = PdRole::kMixed,
                size_t store_entries = 4096) {
    SimOptions o;
    o.base_port = 0;
    o.workers = 2;
    o.time_scale = 0.01;
    o.profile.num_gpu_blocks = 512;
    o.convert_quirk = quirk;
    o.role = role;
    o.responses_store_entries = store_entries;
    o.engine_ttft_usage = engine_ttft_usage_;
    sim_ = std::make_unique<SimProcess>(o);
    ASSERT_TRUE(sim_->Start().ok());
    sim_->StartThread();
    port_ = sim_->ports()[0];
    other_port_ = sim_->ports()[1];
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }

  // The prompt tokens (P) of a request on `path`, from its usage.
  int64_t PromptTokens(const std::string& path, const std::string& body) {
    auto r = Fetch(port_, "POST", path, body);
    Json j(r.body);
    EXPECT_EQ(r.status, 200) << r.body;
    if (path == "/v1/chat/completions") return j.Int("/usage/prompt_tokens");
    if (path == "/v1/responses") return j.Int("/usage/input_tokens");
    return j.Int("/usage/input_tokens") + j.Int("/usage/cache_read_input_tokens");
  }

  bool engine_ttft_usage_ = false;  // set before StartSim
  std::unique_ptr<SimProcess> sim_;
  uint16_t port_ = 0;
  uint16_t other_port_ = 0;
};

// ------------------------------------------------------------------------------------------
// Anthropic Messages.

TEST_F(AgentApiTest, MessagesStreamFollowsAnthropicEventsAndReportsCachedTokens) {
  StartSim();
  int64_t first_cached = -1;
  for (int turn = 0; turn < 2; ++turn) {
    StreamingRequest s(port_, "/v1/messages?beta=true", MessagesBody(true, 5),
                       {{"x-request-id", "m" + std::to_string(turn)}});
    ASSERT_TRUE(s.ReadHeader());
    EXPECT_EQ(s.status(), 200);
    EXPECT_THAT(s.Header("content-type"), HasSubstr("text/event-stream"));
    const std::string body = s.ReadAll();
    EXPECT_THAT(body, ::testing::Not(HasSubstr("[DONE]")));
    const auto events = Events(body);
    std::vector<std::string> want = {"message_start", "ping", "content_block_start"};
    want.insert(want.end(), 5, "content_block_delta");
    want.insert(want.end(), {"content_block_stop", "message_delta", "message_stop"});
    ASSERT_EQ(Names(events), want) << body;
    Json start(events[0].data);
    EXPECT_EQ(start.Str("/type"), "message_start");
    EXPECT_EQ(start.Str("/message/id"), "chatcmpl-m" + std::to_string(turn));
    EXPECT_EQ(start.Str("/message/type"), "message");
    EXPECT_EQ(start.Str("/message/role"), "assistant");
    EXPECT_EQ(start.Size("/message/content"), 0u);
    EXPECT_EQ(start.Str("/message/model"), "sim-model");
    EXPECT_TRUE(start.IsNull("/message/stop_reason"));
    EXPECT_TRUE(start.IsNull("/message/stop_sequence"));
    EXPECT_EQ(start.Int("/message/usage/output_tokens"), 0);
    EXPECT_EQ(start.Raw("/message/usage"),
              common::StrCat(R"({"input_tokens":)", start.Int("/message/usage/input_tokens"),
                             R"(,"output_tokens":0})"));
    const int64_t prompt = start.Int("/message/usage/input_tokens");
    EXPECT_EQ(events[1].data, R"({"type":"ping"})");
    Json block(events[2].data);
    EXPECT_EQ(block.Raw("/content_block"), R"({"type":"text","text":""})");
    EXPECT_EQ(block.Int("/index"), 0);
    std::string text;
    for (int i = 3; i < 8; ++i) {
      Json d(events[i].data);
      EXPECT_EQ(d.Int("/index"), 0);
      EXPECT_EQ(d.Str("/delta/type"), "text_delta");
      text += d.Str("/delta/text");
    }
    EXPECT_EQ(text.size(), 20u);  // 5 tokens of 4 bytes
    EXPECT_EQ(Json(events[8].data).Raw(""), R"({"type":"content_block_stop","index":0})");
    Json delta(events[9].data);
    EXPECT_EQ(delta.Raw("/delta"), R"({"stop_reason":"max_tokens","stop_sequence":null})");
    const int64_t cached = delta.Int("/usage/cache_read_input_tokens");
    EXPECT_EQ(delta.Raw("/usage"),
              common::StrCat(R"({"input_tokens":)", prompt - cached,
                             R"(,"output_tokens":5,"cache_read_input_tokens":)", cached,
                             R"(,"cache_creation_input_tokens":0})"));
    EXPECT_EQ(events[10].data, R"({"type":"message_stop"})");
    if (turn == 0) {
      first_cached = cached;
      EXPECT_EQ(cached, 0);
    } else {
      EXPECT_GT(cached, first_cached);
      EXPECT_EQ(cached, prompt / 16 * 16 - (prompt % 16 == 0 ? 16 : 0));
    }
  }
}

TEST_F(AgentApiTest, MessagesNonStreamedShape) {
  StartSim();
  auto r = Fetch(port_, "POST", "/v1/messages", MessagesBody(false, 4), {{"x-request-id", "n1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("x-request-id"), "n1");
  Json j(r.body);
  ASSERT_TRUE(j.ok()) << r.body;
  EXPECT_EQ(j.Str("/id"), "chatcmpl-n1");
  EXPECT_EQ(j.Str("/type"), "message");
  EXPECT_EQ(j.Str("/role"), "assistant");
  EXPECT_EQ(j.Str("/model"), "sim-model");
  ASSERT_EQ(j.Size("/content"), 1u);
  EXPECT_EQ(j.Str("/content/0/type"), "text");
  EXPECT_EQ(j.Str("/content/0/text").size(), 16u);
  EXPECT_EQ(j.Str("/stop_reason"), "max_tokens");
  EXPECT_FALSE(j.Has("/stop_sequence"));  // null, so omitted (exclude_none)
  EXPECT_EQ(j.Int("/usage/output_tokens"), 4);
  EXPECT_EQ(j.Int("/usage/cache_creation_input_tokens"), 0);
  EXPECT_GT(j.Int("/usage/input_tokens"), 100);
  EXPECT_EQ(j.Int("/usage/cache_read_input_tokens"), 0);
}

TEST_F(AgentApiTest, MessagesThinkingBlockComesFirst) {
  StartSim();
  // Streamed, adaptive: min(8, 16 / 4) = 4 thinking tokens, then the text.
  StreamingRequest s(port_, "/v1/messages",
                     MessagesBody(true, 16, R"(,"thinking":{"type":"adaptive"})"));
  ASSERT_TRUE(s.ReadHeader());
  const auto events = Events(s.ReadAll());
  std::vector<std::string> want = {"message_start", "ping", "content_block_start"};
  want.insert(want.end(), 4 + 1, "content_block_delta");  // 4 thinking + the signature
  want.insert(want.end(), {"content_block_stop", "content_block_start"});
  want.insert(want.end(), 12, "content_block_delta");
  want.insert(want.end(), {"content_block_stop", "message_delta", "message_stop"});
  ASSERT_EQ(Names(events), want);
  EXPECT_EQ(Json(events[2].data).Raw("/content_block"), R"({"type":"thinking","thinking":""})");
  EXPECT_EQ(Json(events[3].data).Str("/delta/type"), "thinking_delta");
  Json signature(events[7].data);
  EXPECT_EQ(signature.Str("/delta/type"), "signature_delta");
  EXPECT_EQ(signature.Str("/delta/signature").size(), 32u);
  EXPECT_EQ(signature.Int("/index"), 0);
  EXPECT_EQ(Json(events[8].data).Int("/index"), 0);
  Json text(events[9].data);
  EXPECT_EQ(text.Raw("/content_block"), R"({"type":"text","text":""})");
  EXPECT_EQ(text.Int("/index"), 1);
  EXPECT_EQ(Json(events[10].data).Str("/delta/type"), "text_delta");
  EXPECT_EQ(Json(events[10].data).Int("/index"), 1);
  EXPECT_EQ(Json(events[22].data).Int("/index"), 1);

  // Non-streamed, enabled: 8 thinking tokens with a signature, then the text.
  auto r =
      Fetch(port_, "POST", "/v1/messages",
            MessagesBody(false, 1100, R"(,"thinking":{"type":"enabled","budget_tokens":1024})"));
  ASSERT_EQ(r.status, 200) << r.body;
  Json j(r.body);
  ASSERT_EQ(j.Size("/content"), 2u);
  EXPECT_EQ(j.Str("/content/0/type"), "thinking");
  EXPECT_EQ(j.Str("/content/0/thinking").size(), 32u);
  EXPECT_EQ(j.Str("/content/0/signature").size(), 32u);
  EXPECT_EQ(j.Str("/content/1/type"), "text");
  EXPECT_EQ(j.Str("/content/1/text").size(), (1100u - 8u) * 4u);
  EXPECT_EQ(j.Int("/usage/output_tokens"), 1100);
  // vLLM's validation: budget_tokens >= 1024 and below max_tokens.
  auto bad =
      Fetch(port_, "POST", "/v1/messages",
            MessagesBody(false, 64, R"(,"thinking":{"type":"enabled","budget_tokens":1024})"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Json(bad.body).Str("/error/type"), "invalid_request_error");
}

TEST_F(AgentApiTest, MessagesForcedToolUse) {
  StartSim();
  auto r = Fetch(port_, "POST", "/v1/messages",
                 MessagesBody(false, 6, kTools + R"(,"tool_choice":{"type":"any"})"));
  ASSERT_EQ(r.status, 200) << r.body;
  Json j(r.body);
  ASSERT_EQ(j.Size("/content"), 1u);
  EXPECT_EQ(j.Str("/content/0/type"), "tool_use");
  EXPECT_THAT(j.Str("/content/0/id"), ::testing::StartsWith("toolu_sim_"));
  EXPECT_EQ(j.Str("/content/0/name"), "get_weather");
  EXPECT_EQ(j.Str("/content/0/input/text").size(), 24u);
  EXPECT_EQ(j.Str("/stop_reason"), "tool_use");
  // Without a forcing tool_choice: text.
  auto a = Fetch(port_, "POST", "/v1/messages",
                 MessagesBody(false, 2, kTools + R"(,"tool_choice":{"type":"auto"})"));
  EXPECT_EQ(Json(a.body).Str("/content/0/type"), "text");
  EXPECT_EQ(Json(a.body).Str("/stop_reason"), "max_tokens");

  StreamingRequest s(
      port_, "/v1/messages",
      MessagesBody(true, 3, kTools + R"(,"tool_choice":{"type":"tool","name":"x"})"));
  ASSERT_TRUE(s.ReadHeader());
  const auto events = Events(s.ReadAll());
  ASSERT_THAT(Names(events),
              ElementsAre("message_start", "ping", "content_block_start", "content_block_delta",
                          "content_block_delta", "content_block_delta", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"));
  Json start(events[2].data);
  EXPECT_EQ(start.Str("/content_block/type"), "tool_use");
  EXPECT_EQ(start.Str("/content_block/name"), "x");
  EXPECT_EQ(start.Raw("/content_block/input"), "{}");
  std::string partial;
  for (int i = 3; i < 7; ++i) {
    Json d(events[i].data);
    EXPECT_EQ(d.Str("/delta/type"), "input_json_delta");
    partial += d.Str("/delta/partial_json");
  }
  Json input(partial);
  ASSERT_TRUE(input.ok()) << partial;
  EXPECT_EQ(input.Str("/text").size(), 12u);
  EXPECT_EQ(Json(events[8].data).Str("/delta/stop_reason"), "tool_use");
}

TEST_F(AgentApiTest, CountTokensIsThePromptOfTheSameRequest) {
  StartSim();
  const std::string body = MessagesBody(false, 3, kTools);
  const int64_t prompt = PromptTokens("/v1/messages", body);
  auto c = Fetch(port_, "POST", "/v1/messages/count_tokens", body);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.body,
            common::StrCat(R"({"input_tokens":)", prompt,
                           R"(,"context_management":{"original_input_tokens":)", prompt, "}}"));
  // count_tokens needs no max_tokens and changes no cache.
  const std::string no_max =
      R"({"model":"sim-model","messages":[{"role":"user","content":"a new prompt, never seen"}]})";
  ASSERT_EQ(Fetch(port_, "POST", "/v1/messages/count_tokens", no_max).status, 200);
  const std::string blocks = Fetch(port_, "GET", "/debug/blocks").body;
  ASSERT_EQ(Fetch(port_, "POST", "/v1/messages/count_tokens", no_max).status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/debug/blocks").body, blocks);
}

TEST_F(AgentApiTest, MessagesAndTheEquivalentChatHaveTheSamePrompt) {
  StartSim();
  EXPECT_EQ(PromptTokens("/v1/messages", MessagesBody(false, 2, "", "hello there")),
            PromptTokens("/v1/chat/completions", ChatBody("hello there")));
  EXPECT_EQ(PromptTokens("/v1/messages", MessagesBody(false, 2)),
            PromptTokens("/v1/chat/completions", ChatBody()));
}

// --engine-ttft-usage: every API's usage says when the engine's clock had the first token, a
// part of the client's wait (bench/compare's engine-clock column); without it, vLLM's shape.
TEST_F(AgentApiTest, EngineTtftInEveryApisUsageWhenAsked) {
  engine_ttft_usage_ = true;
  StartSim();
  const std::pair<const char*, std::string> requests[] = {
      {"/v1/chat/completions", ChatBody()},
      {"/v1/messages", MessagesBody(false, 2)},
      {"/v1/responses", ResponsesBody(false, 2)}};
  for (const auto& [path, body] : requests) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = Fetch(port_, "POST", path, body);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.status, 200) << r.body;
    simdjson::dom::parser parser;
    double engine = -1;
    ASSERT_FALSE(parser.parse(r.body).at_pointer("/usage/kv_engine_ttft_s").get(engine))
        << path << ": " << r.body;
    // At least one step's fixed time (6.5 ms simulated at 0.01 real s a simulated s), and no
    // more than the client waited.
    EXPECT_GE(engine, 0.0065 * 0.01 * 0.99) << path;
    EXPECT_LE(engine, wall) << path;
  }
}

TEST_F(AgentApiTest, MessagesErrorsHaveAnthropicShape) {
  StartSim();
  auto expect_error = [&](const testing::HttpResponse& r, int status, const std::string& type) {
    EXPECT_EQ(r.status, status) << r.body;
    Json j(r.body);
    EXPECT_EQ(j.Str("/type"), "error") << r.body;
    EXPECT_EQ(j.Str("/error/type"), type) << r.body;
    EXPECT_NE(j.Str("/error/message"), "<none>") << r.body;
  };
  expect_error(Fetch(port_, "POST", "/v1/messages", "{not json"), 400, "invalid_request_error");
  expect_error(Fetch(port_, "POST", "/v1/messages",
                     R"({"model":"sim-model","messages":[{"role":"user","content":"x"}]})"),
               400, "invalid_request_error");  // no max_tokens
  auto document =
      Fetch(port_, "POST", "/v1/messages",
            R"({"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":[)"
            R"({"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"}},)"
            R"({"type":"text","text":"summarise"}]}]})");
  expect_error(document, 400, "invalid_request_error");
  EXPECT_THAT(document.body, HasSubstr("document"));
  expect_error(
      Fetch(port_, "POST", "/v1/messages",
            R"({"model":"nope","max_tokens":2,"messages":[{"role":"user","content":"x"}]})"),
      404, "not_found_error");
  expect_error(
      Fetch(port_, "POST", "/v1/messages", MessagesBody(false, 2), {{"x-sim-fault", "error"}}), 500,
      "api_error");
  expect_error(Fetch(port_, "POST", "/v1/messages/count_tokens", "[]"), 400,
               "invalid_request_error");
}

// ------------------------------------------------------------------------------------------
// OpenAI Responses.

TEST_F(AgentApiTest, ResponsesStreamEventsAndSequenceNumbers) {
  StartSim();
  StreamingRequest s(port_, "/v1/responses", ResponsesBody(true, 4), {{"x-request-id", "s1"}});
  ASSERT_TRUE(s.ReadHeader());
  EXPECT_THAT(s.Header("content-type"), HasSubstr("text/event-stream"));
  const std::string body = s.ReadAll();
  EXPECT_THAT(body, ::testing::Not(HasSubstr("[DONE]")));
  const auto events = Events(body);
  std::vector<std::string> want = {"response.created", "response.in_progress",
                                   "response.output_item.added", "response.content_part.added"};
  want.insert(want.end(), 4, "response.output_text.delta");
  want.insert(want.end(), {"response.output_text.done", "response.content_part.done",
                           "response.output_item.done", "response.completed"});
  ASSERT_EQ(Names(events), want) << body;
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    Json j(events[i].data);
    ASSERT_TRUE(j.ok()) << events[i].data;
    EXPECT_EQ(j.Str("/type"), events[i].name);
    EXPECT_EQ(j.Int("/sequence_number"), static_cast<int64_t>(i));
    if (events[i].name == "response.output_text.delta") text += j.Str("/delta");
  }
  Json created(events[0].data);
  EXPECT_EQ(created.Str("/response/id"), "resp_s1");
  EXPECT_EQ(created.Str("/response/status"), "in_progress");
  EXPECT_EQ(created.Size("/response/output"), 0u);
  EXPECT_TRUE(created.IsNull("/response/usage"));
  Json added(events[2].data);
  EXPECT_EQ(added.Str("/item/type"), "message");
  EXPECT_EQ(added.Str("/item/status"), "in_progress");
  EXPECT_EQ(Json(events[8].data).Str("/text"), text);
  EXPECT_EQ(Json(events[9].data).Str("/part/text"), text);
  EXPECT_EQ(Json(events[10].data).Str("/item/content/0/text"), text);
  Json done(events[11].data);
  EXPECT_EQ(done.Str("/response/status"), "incomplete");  // finish_reason length, as vLLM
  EXPECT_EQ(done.Str("/response/incomplete_details/reason"), "max_output_tokens");
  EXPECT_EQ(done.Str("/response/output/0/content/0/text"), text);
  EXPECT_EQ(done.Int("/response/usage/output_tokens"), 4);
  EXPECT_EQ(done.Int("/response/usage/total_tokens"), done.Int("/response/usage/input_tokens") + 4);
}

TEST_F(AgentApiTest, ResponsesNonStreamedShape) {
  StartSim();
  auto r = Fetch(port_, "POST", "/v1/responses",
                 ResponsesBody(false, 3, R"(,"instructions":"Be brief.","metadata":{"k":"v"})"),
                 {{"x-request-id", "n1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json j(r.body);
  ASSERT_TRUE(j.ok());
  for (const char* key : {"id",
                          "created_at",
                          "incomplete_details",
                          "instructions",
                          "metadata",
                          "model",
                          "object",
                          "output",
                          "parallel_tool_calls",
                          "temperature",
                          "tool_choice",
                          "tools",
                          "top_p",
                          "background",
                          "max_output_tokens",
                          "max_tool_calls",
                          "previous_response_id",
                          "prompt",
                          "reasoning",
                          "service_tier",
                          "status",
                          "text",
                          "top_logprobs",
                          "truncation",
                          "usage",
                          "user",
                          "store"}) {
    EXPECT_TRUE(j.Has(std::string("/") + key)) << key;
  }
  EXPECT_EQ(j.Str("/id"), "resp_n1");
  EXPECT_EQ(j.Str("/object"), "response");
  EXPECT_EQ(j.Str("/instructions"), "Be brief.");
  EXPECT_EQ(j.Raw("/metadata"), R"({"k":"v"})");
  EXPECT_EQ(j.Int("/max_output_tokens"), 3);
  EXPECT_TRUE(j.IsNull("/previous_response_id"));
  EXPECT_EQ(j.Raw("/background"), "false");
  EXPECT_EQ(j.Raw("/store"), "true");
  ASSERT_EQ(j.Size("/output"), 1u);
  EXPECT_THAT(j.Str("/output/0/id"), ::testing::StartsWith("msg_"));
  EXPECT_EQ(j.Str("/output/0/type"), "message");
  EXPECT_EQ(j.Str("/output/0/role"), "assistant");
  EXPECT_EQ(j.Str("/output/0/status"), "completed");
  EXPECT_EQ(j.Str("/output/0/content/0/type"), "output_text");
  EXPECT_EQ(j.Str("/output/0/content/0/text").size(), 12u);
  EXPECT_EQ(j.Raw("/output/0/content/0/annotations"), "[]");
  const int64_t prompt = j.Int("/usage/input_tokens");
  EXPECT_EQ(j.Raw("/usage"),
            common::StrCat(R"({"input_tokens":)", prompt,
                           R"(,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,)",
                           R"("output_tokens_details":{"reasoning_tokens":0},"total_tokens":)",
                           prompt + 3, "}"));
  // The prompt is the chat of the instructions and the input.
  EXPECT_EQ(prompt, PromptTokens("/v1/chat/completions",
                                 common::StrCat(R"({"messages":[{"role":"system","content":)",
                                                R"("Be brief."},{"role":"user","content":")", kUser,
                                                R"("}]})")));
}

TEST_F(AgentApiTest, ResponsesForcedFunctionCall) {
  StartSim();
  auto r = Fetch(port_, "POST", "/v1/responses",
                 ResponsesBody(false, 3, kFunctionTools + R"(,"tool_choice":"required")"));
  ASSERT_EQ(r.status, 200) << r.body;
  Json j(r.body);
  EXPECT_EQ(j.Str("/output/0/type"), "function_call");
  EXPECT_EQ(j.Str("/output/0/name"), "get_weather");
  EXPECT_THAT(j.Str("/output/0/call_id"), ::testing::StartsWith("call_"));
  Json args(j.Str("/output/0/arguments"));
  ASSERT_TRUE(args.ok()) << j.Str("/output/0/arguments");
  EXPECT_EQ(args.Str("/text").size(), 12u);

  StreamingRequest s(
      port_, "/v1/responses",
      ResponsesBody(true, 2, kFunctionTools + R"(,"tool_choice":{"type":"function","name":"f"})"));
  ASSERT_TRUE(s.ReadHeader());
  const auto events = Events(s.ReadAll());
  ASSERT_THAT(
      Names(events),
      ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                  "response.function_call_arguments.delta",
                  "response.function_call_arguments.delta",
                  "response.function_call_arguments.delta", "response.function_call_arguments.done",
                  "response.output_item.done", "response.completed"));
  std::string arguments;
  for (int i = 3; i < 6; ++i) arguments += Json(events[i].data).Str("/delta");
  EXPECT_EQ(Json(events[6].data).Str("/arguments"), arguments);
  EXPECT_EQ(Json(events[6].data).Str("/name"), "f");
  EXPECT_TRUE(Json(arguments).ok()) << arguments;
  EXPECT_EQ(Json(events[8].data).Str("/response/output/0/arguments"), arguments);
}

TEST_F(AgentApiTest, ResponsesStoreContinuesOnTheSameWorkerOnly) {
  StartSim();
  auto first =
      Fetch(port_, "POST", "/v1/responses",
            ResponsesBody(false, 4, R"(,"instructions":"Be brief.")"), {{"x-request-id", "t1"}});
  ASSERT_EQ(first.status, 200) << first.body;
  Json one(first.body);
  const std::string answer = one.Str("/output/0/content/0/text");
  const int64_t p1 = one.Int("/usage/input_tokens");
  auto second = Fetch(
      port_, "POST", "/v1/responses",
      ResponsesBody(true, 2, R"(,"previous_response_id":"resp_t1","instructions":"Be brief.")",
                    R"([{"role":"user","content":"and then?"}])"),
      {{"x-request-id", "t2"}});
  ASSERT_EQ(second.status, 200) << second.body;
  const auto events = Events(second.body);
  ASSERT_FALSE(events.empty());
  Json two(events.back().data);
  EXPECT_EQ(two.Str("/response/previous_response_id"), "resp_t1");
  const int64_t p2 = two.Int("/response/usage/input_tokens");
  const int64_t cached = two.Int("/response/usage/input_tokens_details/cached_tokens");
  // vLLM's prompt: the new instructions, the stored input without its system message, the
  // output as an assistant message, the new input.
  EXPECT_GT(cached, p1 / 16 * 16 - 16);  // the first turn's prompt
  EXPECT_EQ(p2,
            PromptTokens("/v1/chat/completions",
                         common::StrCat(R"({"messages":[{"role":"system","content":"Be brief."},)",
                                        R"({"role":"user","content":")", kUser,
                                        R"("},{"role":"assistant","content":")", answer,
                                        R"("},{"role":"user","content":"and then?"}]})")));
  EXPECT_GT(p2, p1);
  // A third turn chains through the second (streamed responses are stored too).
  auto third = Fetch(
      port_, "POST", "/v1/responses",
      ResponsesBody(false, 2, R"(,"previous_response_id":"resp_t2","instructions":"Be brief.")",
                    R"("more")"));
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_GE(Json(third.body).Int("/usage/input_tokens_details/cached_tokens"), p2 / 16 * 16 - 16);
  EXPECT_EQ(Json(third.body).Int("/usage/input_tokens"),
            PromptTokens("/v1/chat/completions",
                         common::StrCat(R"({"messages":[{"role":"system","content":"Be brief."},)",
                                        R"({"role":"user","content":")", kUser,
                                        R"("},{"role":"assistant","content":")", answer,
                                        R"("},{"role":"user","content":"and then?"},)",
                                        R"({"role":"assistant","content":")",
                                        two.Str("/response/output/0/content/0/text"),
                                        R"("},{"role":"user","content":"more"}]})")));
  // Another worker of the same process does not know it.
  auto elsewhere = Fetch(other_port_, "POST", "/v1/responses",
                         ResponsesBody(false, 2, R"(,"previous_response_id":"resp_t1")", R"("x")"));
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_EQ(elsewhere.body, R"({"error":{"message":"Response with id 'resp_t1' not found.",)"
                            R"("type":"invalid_request_error","param":"response_id","code":404}})");
  // store: false is not kept.
  ASSERT_EQ(Fetch(port_, "POST", "/v1/responses", ResponsesBody(false, 2, R"(,"store":false)"),
                  {{"x-request-id", "t4"}})
                .status,
            200);
  EXPECT_EQ(Fetch(port_, "GET", "/v1/responses/resp_t4").status, 404);
}

TEST_F(AgentApiTest, ResponsesStoreIsBoundedAndChainsOutliveTheirEntries) {
  StartSim(ConvertQuirk::kNone, PdRole::kMixed, /*store_entries=*/2);
  const std::string system = R"(,"instructions":"Be brief.")";
  std::string chat = R"({"messages":[{"role":"system","content":"Be brief."})";
  std::string previous;
  for (const char* id : {"c1", "c2", "c3"}) {
    const std::string extra =
        previous.empty() ? system : system + R"(,"previous_response_id":")" + previous + "\"";
    auto r = Fetch(port_, "POST", "/v1/responses", ResponsesBody(false, 2, extra, R"("a")"),
                   {{"x-request-id", id}});
    ASSERT_EQ(r.status, 200) << r.body;
    common::StrAppend(&chat, R"(,{"role":"user","content":"a"},{"role":"assistant","content":")",
                      Json(r.body).Str("/output/0/content/0/text"), "\"}");
    previous = common::StrCat("resp_", id);
  }
  // Two entries: c1 went first, and c2 is deleted; c3 still continues the chain c1, c2, c3.
  EXPECT_EQ(Fetch(port_, "GET", "/v1/responses/resp_c1").status, 404);
  EXPECT_EQ(Fetch(port_, "GET", "/v1/responses/resp_c2").status, 200);
  ASSERT_EQ(Fetch(port_, "DELETE", "/v1/responses/resp_c2").status, 200);
  auto c4 =
      Fetch(port_, "POST", "/v1/responses",
            ResponsesBody(false, 2, system + R"(,"previous_response_id":"resp_c3")", R"("c")"));
  ASSERT_EQ(c4.status, 200) << c4.body;
  EXPECT_EQ(Json(c4.body).Int("/usage/input_tokens"),
            PromptTokens("/v1/chat/completions", chat + R"(,{"role":"user","content":"c"}]})"));
}

TEST_F(AgentApiTest, ResponsesGetDeleteCancelAndInputItems) {
  StartSim();
  const std::string input =
      R"([{"role":"user","content":"first"},{"type":"message","role":"user","content":)"
      R"([{"type":"input_text","text":"second"}]}])";
  auto created = Fetch(port_, "POST", "/v1/responses", ResponsesBody(false, 2, "", input),
                       {{"x-request-id", "g1"}});
  ASSERT_EQ(created.status, 200) << created.body;
  auto got = Fetch(port_, "GET", "/v1/responses/resp_g1");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, created.body);
  EXPECT_EQ(Fetch(other_port_, "GET", "/v1/responses/resp_g1").status, 404);

  auto items = Fetch(port_, "GET", "/v1/responses/resp_g1/input_items");
  ASSERT_EQ(items.status, 200) << items.body;
  Json list(items.body);
  EXPECT_EQ(list.Str("/object"), "list");
  ASSERT_EQ(list.Size("/data"), 2u);
  // Newest first by default, as the OpenAI API; each item has an id.
  EXPECT_EQ(list.Str("/data/0/content/0/text"), "second");
  EXPECT_EQ(list.Str("/data/1/content/0/type"), "input_text");
  EXPECT_EQ(list.Str("/data/1/content/0/text"), "first");
  EXPECT_EQ(list.Str("/data/1/type"), "message");
  EXPECT_EQ(list.Str("/first_id"), list.Str("/data/0/id"));
  EXPECT_EQ(list.Str("/last_id"), list.Str("/data/1/id"));
  EXPECT_NE(list.Str("/data/0/id"), list.Str("/data/1/id"));
  EXPECT_EQ(list.Raw("/has_more"), "false");
  Json asc(Fetch(port_, "GET", "/v1/responses/resp_g1/input_items?order=asc&limit=1").body);
  EXPECT_EQ(asc.Str("/data/0/content/0/text"), "first");
  EXPECT_EQ(asc.Raw("/has_more"), "true");

  auto cancel = Fetch(port_, "POST", "/v1/responses/resp_g1/cancel");
  EXPECT_EQ(cancel.status, 400);
  EXPECT_EQ(Json(cancel.body).Str("/error/message"), "Cannot cancel a synchronous response.");
  EXPECT_EQ(Fetch(port_, "POST", "/v1/responses/resp_nope/cancel").status, 404);

  auto deleted = Fetch(port_, "DELETE", "/v1/responses/resp_g1");
  EXPECT_EQ(deleted.status, 200);
  EXPECT_EQ(deleted.body, R"({"id":"resp_g1","object":"response","deleted":true})");
  auto gone = Fetch(port_, "GET", "/v1/responses/resp_g1");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(Json(gone.body).Str("/error/param"), "response_id");
  EXPECT_EQ(Fetch(port_, "DELETE", "/v1/responses/resp_g1").status, 404);
}

TEST_F(AgentApiTest, ResponsesErrorsHaveOpenAiShape) {
  StartSim();
  auto bad = Fetch(port_, "POST", "/v1/responses", R"({"model":"sim-model"})");  // no input
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(Json(bad.body).Str("/error/message"), "<none>");
  auto encrypted = Fetch(port_, "POST", "/v1/responses",
                         R"({"input":[{"type":"reasoning","summary":[],"encrypted_content":"xyz"},)"
                         R"({"role":"user","content":"hi"}]})");
  EXPECT_EQ(encrypted.status, 400) << encrypted.body;
  auto model = Fetch(port_, "POST", "/v1/responses", R"({"model":"nope","input":"hi"})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(Json(model.body).Str("/error/type"), "NotFoundError");
}

// vLLM's Anthropic layer carries kv_transfer_params (a prefill answers with them, at the top
// level); Responses requests on a P/D worker are served whole.
TEST_F(AgentApiTest, MessagesCarryPdParamsResponsesAreServedWhole) {
  StartSim(ConvertQuirk::kNone, PdRole::kPrefill);
  auto r = Fetch(port_, "POST", "/v1/messages",
                 MessagesBody(false, 5, R"(,"kv_transfer_params":{"do_remote_decode":true})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json(r.body).Int("/usage/output_tokens"), 5);
  EXPECT_TRUE(Json(r.body).Has("/kv_transfer_params")) << r.body;
  auto responses = Fetch(port_, "POST", "/v1/responses",
                         R"({"model":"sim-model","input":"hi","max_output_tokens":3,)"
                         R"("kv_transfer_params":{"do_remote_decode":true}})");
  ASSERT_EQ(responses.status, 200) << responses.body;
  EXPECT_FALSE(Json(responses.body).Has("/kv_transfer_params"));
}

TEST_F(AgentApiTest, ConvertQuirkChangesOnlyThatApisPrompt) {
  StartSim(ConvertQuirk::kMessages);
  const int64_t chat = PromptTokens("/v1/chat/completions", ChatBody());
  EXPECT_GT(PromptTokens("/v1/messages", MessagesBody(false, 2)), chat);
  const std::string count =
      Fetch(port_, "POST", "/v1/messages/count_tokens", MessagesBody(false, 2)).body;
  EXPECT_GT(Json(count).Int("/input_tokens"), chat);
  const std::string chat_user =
      common::StrCat(R"({"messages":[{"role":"user","content":")", kUser, R"("}]})");
  EXPECT_EQ(PromptTokens("/v1/responses", ResponsesBody(false, 2)),
            PromptTokens("/v1/chat/completions", chat_user));
  sim_->Stop();
  StartSim(ConvertQuirk::kResponses);
  EXPECT_GT(PromptTokens("/v1/responses", ResponsesBody(false, 2)),
            PromptTokens("/v1/chat/completions", chat_user));
  EXPECT_EQ(PromptTokens("/v1/messages", MessagesBody(false, 2)),
            PromptTokens("/v1/chat/completions", ChatBody()));
}

TEST(AgentApiCli, StoreEntriesAndConvertQuirkFlags) {
  const char* args[] = {"kvgate-sim", "--responses-store-entries", "7",
                        "--convert-quirk=responses"};
  auto o = ParseSimCli(4, args);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->responses_store_entries, 7u);
  EXPECT_EQ(o->convert_quirk, ConvertQuirk::kResponses);
  const char* defaults[] = {"kvgate-sim"};
  EXPECT_EQ(ParseSimCli(1, defaults)->responses_store_entries, 4096u);
  EXPECT_EQ(ParseSimCli(1, defaults)->convert_quirk, ConvertQuirk::kNone);
  const char* bad[] = {"kvgate-sim", "--convert-quirk", "chat"};
  EXPECT_FALSE(ParseSimCli(3, bad).ok());
  EXPECT_THAT(SimUsage(), HasSubstr("--convert-quirk"));
}

}  // namespace
}  // namespace kvgate::sim
