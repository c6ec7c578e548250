// Body shapes of the agents' APIs over a three-turn conversation: Anthropic Messages as Claude
// Code sends it, OpenAI Responses as Codex CLI sends it (stateless and stored).
#include "bench/replay/agent_bodies.h"

#include <map>
#include <memory>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"

namespace kvgate::replay {
namespace {

namespace dom = simdjson::dom;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::string_view kMarker = R"(,"cache_control":{"type":"ephemeral"})";

// A parsed body; keeps its parser (and so the document) alive.
struct Json {
  explicit Json(const std::string& text) {
    const auto error = parser.parse(text).get(root);
    EXPECT_FALSE(error) << simdjson::error_message(error) << "\n" << text.substr(0, 400);
  }
  dom::element operator[](std::string_view pointer) const {
    dom::element e;
    EXPECT_FALSE(root.at_pointer(pointer).get(e)) << pointer;
    return e;
  }
  bool Has(std::string_view pointer) const {
    dom::element e;
    return !root.at_pointer(pointer).get(e);
  }
  std::string Str(std::string_view pointer) const {
    std::string_view s;
    EXPECT_FALSE((*this)[pointer].get(s)) << pointer;
    return std::string(s);
  }
  uint64_t U64(std::string_view pointer) const {
    uint64_t v = 0;
    EXPECT_FALSE((*this)[pointer].get(v)) << pointer;
    return v;
  }
  bool Bool(std::string_view pointer) const {
    bool v = false;
    EXPECT_FALSE((*this)[pointer].get(v)) << pointer;
    return v;
  }
  dom::parser parser;
  dom::element root;
};

// For a dom::element or a simdjson_result of one.
template <typename Element>
std::vector<dom::element> Items(Element array) {
  std::vector<dom::element> out;
  dom::array a;
  EXPECT_FALSE(std::move(array).get(a));
  for (dom::element e : a) out.push_back(e);
  return out;
}

template <typename Element>
std::string Str(Element e, std::string_view key) {
  std::string_view s;
  EXPECT_FALSE(e[key].get(s)) << key;
  return std::string(s);
}

template <typename Element>
bool Has(Element e, std::string_view key) {
  return e[key].error() == simdjson::SUCCESS;
}

AgentRequest Turn(std::vector<uint64_t> ids) {
  AgentRequest r;
  r.in = ids.size() * kAgenticBlockTokens;
  r.out = 700;
  r.hash_ids = std::move(ids);
  return r;
}

// The histories of three turns: prefix blocks 1-3 (so the system text splits in two), then
// one new block a turn; the answers hold characters JSON must escape.
std::vector<std::vector<ChatMessage>> ThreeTurns(std::string ns = "conv") {
  AgentConversation conv(std::move(ns), 3, true);
  std::vector<std::vector<ChatMessage>> turns;
  turns.push_back(conv.NextTurn(Turn({1, 2, 3, 4})));
  conv.SetAnswer("first \"answer\"\n");
  turns.push_back(conv.NextTurn(Turn({1, 2, 3, 4, 5})));
  conv.SetAnswer("second answer");
  turns.push_back(conv.NextTurn(Turn({1, 2, 3, 4, 5, 6})));
  return turns;
}

// The `"messages":[...]` part of a Messages body, without the cache_control markers.
std::string MessagesArrayUnmarked(const std::string& body) {
  const size_t begin = body.find("\"messages\":[");
  const size_t end = body.find("],\"system\":[");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  std::string out = body.substr(begin, end - begin);
  for (size_t at; (at = out.find(kMarker)) != std::string::npos;) out.erase(at, kMarker.size());
  return out;
}

size_t Count(const std::string& text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ApiNameTest, RoundTrips) {
  for (Api api : {Api::kCompletions, Api::kChat, Api::kMessages, Api::kResponses}) {
    Api parsed = Api::kDefault;
    ASSERT_TRUE(ParseApi(ApiName(api), &parsed)) << ApiName(api);
    EXPECT_EQ(parsed, api);
  }
  Api api = Api::kChat;
  EXPECT_FALSE(ParseApi("default", &api));
  EXPECT_FALSE(ParseApi("anthropic", &api));
}

TEST(AgentIdentityTest, IsStablePerSessionAndDiffersAcrossSessions) {
  const AgentIdentity a = MakeAgentIdentity("conv_a", "conv_a");
  const AgentIdentity sub = MakeAgentIdentity("conv_a", "conv_a#1/agent_001");
  const AgentIdentity b = MakeAgentIdentity("conv_b", "conv_b");
  EXPECT_EQ(a.session_id, MakeAgentIdentity("conv_a", "conv_a").session_id);
  EXPECT_EQ(a.session_id.size(), 36u);
  EXPECT_EQ(a.session_id[14], '4');
  EXPECT_EQ(a.device_id.size(), 64u);
  EXPECT_NE(a.session_id, b.session_id);
  EXPECT_NE(a.billing, b.billing);
  EXPECT_NE(a.device_id, b.device_id);
  EXPECT_THAT(a.billing, StartsWith("x-anthropic-billing-header: cc_version=2.1."));
  EXPECT_THAT(a.billing, HasSubstr("; cc_entrypoint=cli; cch="));
  // A sub-agent is in its root's Claude Code session, on its own thread and call ids.
  EXPECT_EQ(sub.session_id, a.session_id);
  EXPECT_EQ(sub.billing, a.billing);
  EXPECT_NE(sub.thread_id, a.thread_id);
  EXPECT_EQ(sub.call_tag, "conv_a_1_agent_001");
}

TEST(MessagesBodyTest, IsShapedAsClaudeCodeSendsIt) {
  const auto turns = ThreeTurns();
  const AgentIdentity id = MakeAgentIdentity("conv", "conv");
  BodyOptions options;
  options.model = "m1";
  const std::string body = MessagesBody(turns[2], 700, id, options);
  const Json json(body);
  EXPECT_EQ(json.Str("/model"), "m1");
  EXPECT_EQ(json.U64("/max_tokens"), 512u);  // Capped by max_output_tokens.
  EXPECT_TRUE(json.Bool("/stream"));
  EXPECT_FALSE(json.Has("/thinking"));
  EXPECT_EQ(json.Str("/context_management/edits/0/type"), "clear_thinking_20251015");
  EXPECT_EQ(json.Str("/context_management/edits/0/keep"), "all");

  // System: the billing block, then the prefix text in two blocks, the second marked.
  const auto system = Items(json["/system"]);
  ASSERT_EQ(system.size(), 3u);
  EXPECT_EQ(Str(system[0], "text"), id.billing);
  EXPECT_EQ(Str(system[1], "text") + Str(system[2], "text"), turns[2][0].content);
  EXPECT_EQ(Str(system[1], "text"), BlockText(kSharedPrefixNamespace, 1, 64));
  EXPECT_FALSE(Has(system[1], "cache_control"));
  EXPECT_EQ(Str(system[2]["cache_control"], "type"), "ephemeral");

  const auto tools = Items(json["/tools"]);
  ASSERT_EQ(tools.size(), 8u);
  std::vector<std::string> names;
  for (auto t : tools) {
    names.push_back(Str(t, "name"));
    EXPECT_FALSE(Str(t, "description").empty());
    EXPECT_EQ(Str(t["input_schema"], "type"), "object");
  }
  EXPECT_THAT(names,
              ElementsAre("Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite", "Task"));

  // metadata.user_id is a JSON string holding the device and this session.
  const Json user(json.Str("/metadata/user_id"));
  EXPECT_EQ(user.Str("/device_id"), id.device_id);
  EXPECT_EQ(user.Str("/account_uuid"), "");
  EXPECT_EQ(user.Str("/session_id"), id.session_id);

  options.thinking = true;
  const Json thinking(MessagesBody(turns[2], 700, id, options));
  EXPECT_EQ(thinking.Str("/thinking/type"), "enabled");
  EXPECT_EQ(thinking.U64("/thinking/budget_tokens"), 1024u);
}

TEST(MessagesBodyTest, TurnsAreToolCallsWithPairedIds) {
  const auto turns = ThreeTurns();
  const AgentIdentity id = MakeAgentIdentity("conv", "conv");
  const Json json(MessagesBody(turns[2], 5, id, BodyOptions()));
  const auto messages = Items(json["/messages"]);
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_EQ(Str(messages[0], "role"), "user");
  EXPECT_EQ(Str(messages[0]["content"].at(0), "type"), "text");
  EXPECT_EQ(Str(messages[0]["content"].at(0), "text"), turns[2][1].content);
  std::set<std::string> ids;
  for (size_t k = 1; k <= 2; ++k) {
    const dom::element assistant = messages[2 * k - 1];
    const dom::element result = messages[2 * k];
    EXPECT_EQ(Str(assistant, "role"), "assistant");
    const auto blocks = Items(assistant["content"]);
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(Str(blocks[0], "type"), "text");
    EXPECT_EQ(Str(blocks[0], "text"), turns[2][2 * k].content);  // The answer, verbatim.
    EXPECT_EQ(Str(blocks[1], "type"), "tool_use");
    EXPECT_EQ(Str(blocks[1], "name"), "Bash");
    EXPECT_FALSE(Str(blocks[1]["input"], "command").empty());
    const std::string tool_id = Str(blocks[1], "id");
    EXPECT_EQ(tool_id, "toolu_conv_" + std::to_string(k));
    EXPECT_TRUE(ids.insert(tool_id).second);
    EXPECT_EQ(Str(result, "role"), "user");
    const auto results = Items(result["content"]);
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(Str(results[0], "type"), "tool_result");
    EXPECT_EQ(Str(results[0], "tool_use_id"), tool_id);
    EXPECT_EQ(Str(results[0], "content"), turns[2][2 * k + 1].content);  // The new blocks.
  }
}

TEST(MessagesBodyTest, CacheControlMovesToTheNewestBlockAndHistoryStaysByteIdentical) {
  const auto turns = ThreeTurns();
  const AgentIdentity id = MakeAgentIdentity("conv", "conv");
  std::vector<std::string> bodies;
  for (const auto& t : turns) bodies.push_back(MessagesBody(t, 5, id, BodyOptions()));
  for (size_t k = 0; k < bodies.size(); ++k) {
    // One marker in the messages (the last block of the last message), one in the system.
    const std::string& body = bodies[k];
    EXPECT_EQ(Count(body, kMarker), 2u) << k;
    const size_t system = body.find("],\"system\":[");
    EXPECT_EQ(body.find(kMarker), system - 3 - kMarker.size()) << k;  // Then "}]}".
    const Json json(body);
    const auto messages = Items(json["/messages"]);
    for (size_t i = 0; i < messages.size(); ++i) {
      const auto blocks = Items(messages[i]["content"]);
      for (size_t b = 0; b < blocks.size(); ++b) {
        const bool last = i + 1 == messages.size() && b + 1 == blocks.size();
        EXPECT_EQ(Has(blocks[b], "cache_control"), last) << k << i << b;
      }
    }
    if (k == 0) continue;
    // The earlier messages are what was sent before, apart from the moved marker.
    std::string before = MessagesArrayUnmarked(bodies[k - 1]);
    std::string now = MessagesArrayUnmarked(body);
    EXPECT_THAT(now, StartsWith(before + ",")) << k;
    // And everything after the messages is identical.
    EXPECT_EQ(bodies[k - 1].substr(bodies[k - 1].find("],\"system\":[")),
              body.substr(body.find("],\"system\":[")));
  }
}

TEST(MessagesBodyTest, BillingBlockIsPerSessionAndEmptyAnswersDropTheirText) {
  AgentConversation conv("conv", 3, true);
  const auto first = conv.NextTurn(Turn({1, 2, 3, 4}));
  const Json a(MessagesBody(first, 5, MakeAgentIdentity("s1", "s1"), BodyOptions()));
  const Json b(MessagesBody(first, 5, MakeAgentIdentity("s2", "s2"), BodyOptions()));
  EXPECT_NE(a.Str("/system/0/text"), b.Str("/system/0/text"));
  EXPECT_EQ(a.Str("/system/1/text"), b.Str("/system/1/text"));
  EXPECT_EQ(a.Str("/system/2/text"), b.Str("/system/2/text"));

  conv.SetAnswer("");  // The request failed.
  const Json next(MessagesBody(conv.NextTurn(Turn({1, 2, 3, 4, 5})), 5,
                               MakeAgentIdentity("s1", "s1"), BodyOptions()));
  const auto blocks = Items(next["/messages/1/content"]);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(Str(blocks[0], "type"), "tool_use");
}

TEST(MessagesBodyTest, CompactionRestartsTheHistory) {
  AgentConversation conv("conv", 1, true);
  AgentClient client(Api::kMessages, MakeAgentIdentity("conv", "conv"), BodyOptions());
  client.NextTurn(conv.NextTurn(Turn({1, 2, 3})), 5);
  conv.SetAnswer("x");
  client.NextTurn(conv.NextTurn(Turn({1, 2, 3, 4})), 5);
  conv.SetAnswer("y");
  const Json json(client.NextTurn(conv.NextTurn(Turn({1, 7, 8})), 5).body);
  const auto messages = Items(json["/messages"]);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(Str(messages[0]["content"].at(0), "type"), "text");
  EXPECT_EQ(Str(messages[0]["content"].at(0), "text"),
            BlockText("conv", 7, 64) + BlockText("conv", 8, 64));
  EXPECT_EQ(Str(messages[0]["content"].at(0)["cache_control"], "type"), "ephemeral");
}

TEST(AgentClientTest, MessagesRequestsCarryClaudeCodeHeaders) {
  const auto turns = ThreeTurns();
  const AgentIdentity id = MakeAgentIdentity("conv", "conv");
  AgentClient client(Api::kMessages, id, BodyOptions());
  const ApiRequest r = client.NextTurn(turns[0], 5);
  EXPECT_EQ(r.path, "/v1/messages");
  std::map<std::string, std::string> headers(r.headers.begin(), r.headers.end());
  EXPECT_EQ(headers["anthropic-version"], "2023-06-01");
  EXPECT_FALSE(headers["anthropic-beta"].empty());
  EXPECT_EQ(headers["X-Claude-Code-Session-Id"], id.session_id);
  EXPECT_EQ(r.body, MessagesBody(turns[0], 5, id, BodyOptions()));
}

TEST(AgentClientTest, ChatIsTheChatBodyAsBefore) {
  const auto turns = ThreeTurns();
  AgentClient client(Api::kChat, MakeAgentIdentity("conv", "conv"), BodyOptions());
  for (const auto& t : turns) {
    const ApiRequest r = client.NextTurn(t, 5);
    EXPECT_EQ(r.path, "/v1/chat/completions");
    EXPECT_TRUE(r.headers.empty());
    EXPECT_EQ(r.body, ChatBody(t, 5, BodyOptions()));
  }
}

TEST(ResponsesBodyTest, IsShapedAsCodexSendsIt) {
  const auto turns = ThreeTurns();
  const AgentIdentity id = MakeAgentIdentity("conv", "conv");
  BodyOptions options;
  options.max_output_tokens = 0;
  const std::string body = ResponsesBody(turns[0], 300, id, options, "");
  const Json json(body);
  EXPECT_EQ(json.Str("/model"), "sim-model");
  EXPECT_EQ(json.Str("/instructions"), turns[0][0].content);
  EXPECT_FALSE(json.Bool("/store"));
  EXPECT_TRUE(json.Bool("/stream"));
  EXPECT_FALSE(json.Has("/previous_response_id"));
  EXPECT_EQ(json.U64("/max_output_tokens"), 300u);
  EXPECT_EQ(json.Str("/prompt_cache_key"), id.thread_id);
  EXPECT_EQ(json.Str("/include/0"), "reasoning.encrypted_content");
  EXPECT_TRUE(json.Has("/client_metadata"));
  const auto tools = Items(json["/tools"]);
  ASSERT_EQ(tools.size(), 6u);
  EXPECT_EQ(Str(tools[0], "name"), "shell");
  for (auto t : tools) {
    EXPECT_EQ(Str(t, "type"), "function");
    EXPECT_EQ(Str(t["parameters"], "type"), "object");
    bool strict = true;
    EXPECT_FALSE(t["strict"].get(strict));
    EXPECT_FALSE(strict);
  }
  const auto input = Items(json["/input"]);
  ASSERT_EQ(input.size(), 2u);
  EXPECT_EQ(Str(input[0], "role"), "developer");
  EXPECT_EQ(Str(input[0]["content"].at(0), "type"), "input_text");
  EXPECT_EQ(Str(input[1], "role"), "user");
  EXPECT_EQ(Str(input[1]["content"].at(0), "text"), turns[0][1].content);
  // No reasoning items: vLLM refuses encrypted_content it did not produce.
  EXPECT_EQ(Count(body, "encrypted_content"), 1u);  // The "include" entry.
  EXPECT_THAT(body, Not(HasSubstr(R"("type":"reasoning")")));
}

TEST(ResponsesBodyTest, InputGrowsByExactlyTheNewItems) {
  const auto turns = ThreeTurns();
  const AgentIdentity id = MakeAgentIdentity("conv", "conv");
  std::vector<std::vector<std::string>> inputs;
  for (const auto& t : turns) {
    const Json json(ResponsesBody(t, 5, id, BodyOptions(), ""));
    EXPECT_EQ(json.Str("/prompt_cache_key"), id.thread_id);
    inputs.emplace_back();
    for (auto item : Items(json["/input"])) inputs.back().push_back(simdjson::to_string(item));
  }
  for (size_t k = 1; k < inputs.size(); ++k) {
    ASSERT_EQ(inputs[k].size(), inputs[k - 1].size() + 3) << k;
    for (size_t i = 0; i < inputs[k - 1].size(); ++i) EXPECT_EQ(inputs[k][i], inputs[k - 1][i]);
    const Json answer(inputs[k][inputs[k].size() - 3]);
    const Json call(inputs[k][inputs[k].size() - 2]);
    const Json output(inputs[k].back());
    EXPECT_EQ(answer.Str("/type"), "message");
    EXPECT_EQ(answer.Str("/role"), "assistant");
    EXPECT_EQ(answer.Str("/content/0/type"), "output_text");
    EXPECT_EQ(answer.Str("/content/0/text"), turns[k][2 * k].content);
    EXPECT_EQ(call.Str("/type"), "function_call");
    EXPECT_EQ(call.Str("/name"), "shell");
    EXPECT_EQ(call.Str("/call_id"), "call_conv_" + std::to_string(k));
    const Json arguments(call.Str("/arguments"));
    EXPECT_EQ(arguments.Str("/command/0"), "bash");
    EXPECT_EQ(arguments.Str("/command/1"), "-lc");
    EXPECT_EQ(output.Str("/type"), "function_call_output");
    EXPECT_EQ(output.Str("/call_id"), call.Str("/call_id"));
    EXPECT_EQ(output.Str("/output"), turns[k][2 * k + 1].content);
  }
}

TEST(ResponsesBodyTest, StoreModeSendsOnlyTheNewItemsAfterThePreviousResponse) {
  const auto turns = ThreeTurns();
  BodyOptions options;
  options.responses_store = true;
  AgentClient client(Api::kResponses, MakeAgentIdentity("conv", "conv"), options);
  const ApiRequest first = client.NextTurn(turns[0], 5);
  EXPECT_EQ(first.path, "/v1/responses");
  const Json j0(first.body);
  EXPECT_TRUE(j0.Bool("/store"));
  EXPECT_FALSE(j0.Has("/previous_response_id"));
  EXPECT_EQ(Items(j0["/input"]).size(), 2u);

  client.SetResponseId("resp_1");
  const Json j1(client.NextTurn(turns[1], 5).body);
  EXPECT_TRUE(j1.Bool("/store"));
  EXPECT_EQ(j1.Str("/previous_response_id"), "resp_1");
  EXPECT_EQ(j1.Str("/instructions"), turns[1][0].content);  // Not inherited: sent again.
  const auto items = Items(j1["/input"]);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(Str(items[0], "type"), "function_call");
  EXPECT_EQ(Str(items[1], "type"), "function_call_output");
  EXPECT_EQ(Str(items[1], "call_id"), Str(items[0], "call_id"));
  EXPECT_EQ(Str(items[1], "output"), turns[1][3].content);
  // The same items as the stateless body's last two.
  const Json full(ResponsesBody(turns[1], 5, client.identity(), BodyOptions(), ""));
  const auto all = Items(full["/input"]);
  EXPECT_EQ(simdjson::to_string(items[0]), simdjson::to_string(all[all.size() - 2]));
  EXPECT_EQ(simdjson::to_string(items[1]), simdjson::to_string(all.back()));

  // Turn 2 failed (no id): turn 3 starts a new chain with the whole input.
  const Json j2(client.NextTurn(turns[2], 5).body);
  EXPECT_TRUE(j2.Bool("/store"));
  EXPECT_FALSE(j2.Has("/previous_response_id"));
  EXPECT_EQ(Items(j2["/input"]).size(), 8u);
}

TEST(SingleTurnRequestTest, PicksThePathPerApi) {
  BodyOptions options;
  EXPECT_EQ(SingleTurnRequest(Api::kCompletions, "abc ", 3, options, "m/0").body,
            CompletionsBody("abc ", 3, options));
  EXPECT_EQ(SingleTurnRequest(Api::kChat, "abc ", 3, options, "m/0").body,
            ChatBody({{"user", "abc "}}, 3, options));
  const ApiRequest messages = SingleTurnRequest(Api::kMessages, "abc ", 3, options, "m/0");
  EXPECT_EQ(messages.path, "/v1/messages");
  const Json m(messages.body);
  EXPECT_EQ(Items(m["/system"]).size(), 1u);  // No prefix: only the billing block.
  EXPECT_EQ(m.Str("/messages/0/content/0/text"), "abc ");
  const ApiRequest responses = SingleTurnRequest(Api::kResponses, "abc ", 3, options, "m/0");
  EXPECT_EQ(responses.path, "/v1/responses");
  EXPECT_EQ(Json(responses.body).Str("/input/1/content/0/text"), "abc ");
}

}  // namespace
}  // namespace kvgate::replay
