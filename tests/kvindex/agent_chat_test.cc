// The agents' APIs canonicalised as chat: the same conversation hashes to the same chain through
// chat, Anthropic Messages and OpenAI Responses; each API's own request details (billing header,
// moving cache_control, metadata) never reach the chain; the converter's chat body canonicalises
// to exactly the bytes the direct walk builds.
#include "kvindex/agent_chat.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"

namespace kvgate::kvindex {
namespace {

using ::testing::HasSubstr;

std::string Canonical(const std::string& body, ApiKind api) {
  auto r = CanonicalizeRequest(body, api);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << body;
  if (!r.ok() || r->prompts.empty()) return "";
  return r->prompts[0].bytes;
}

std::vector<BlockHash> Chain(const std::string& canonical) {
  std::vector<BlockHash> chain;
  HashPrompt({PromptKind::kChat, canonical, {}}, NamespaceSeed({"m", "", ""}), HashOptions{},
             &chain);
  return chain;
}

// What the converter's chat body canonicalises to (as chat).
std::string ViaChatBody(const std::string& body, ApiKind api) {
  AgentChatConverter converter;
  std::string chat;
  const absl::Status s = converter.ConvertToChatBody(body, api, &chat);
  EXPECT_TRUE(s.ok()) << s;
  return Canonical(chat, ApiKind::kChatCompletions);
}

constexpr char kTools[] =
    R"("tools":[{"type":"function","function":{"name":"Bash","description":"Run a command",
    "parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}])";

const std::string kChat = std::string(R"({"model":"m",)") + kTools + R"(,"messages":[
  {"role":"system","content":"You are a coding agent."},
  {"role":"user","content":"fix the build"},
  {"role":"assistant","content":"Looking.","tool_calls":[{"id":"t1","type":"function",
    "function":{"name":"Bash","arguments":"{\"command\": \"make\"}"}}]},
  {"role":"tool","tool_call_id":"t1","content":"error: x"},
  {"role":"user","content":"go on"}]})";

const std::string kMessages = R"({"model":"m","max_tokens":64,"stream":true,
  "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.3; cch=aa;"},
            {"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}],
  "tools":[{"name":"Bash","description":"Run a command","cache_control":{"type":"ephemeral"},
            "input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],
  "metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s-1\"}"},
  "context_management":{"edits":[]},
  "messages":[
  {"role":"user","content":[{"type":"text","text":"fix the build"}]},
  {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig"},
    {"type":"text","text":"Looking."},
    {"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make"}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"error: x"},
    {"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}]})";

const std::string kResponses = R"({"model":"m","stream":true,"store":false,
  "instructions":"You are a coding agent.","prompt_cache_key":"thread-1",
  "include":["reasoning.encrypted_content"],"client_metadata":{"a":"b"},
  "tools":[{"type":"function","name":"Bash","description":"Run a command",
    "parameters":{"type":"object","properties":{"command":{"type":"string"}}}}],
  "input":[
  {"type":"message","role":"user","content":[{"type":"input_text","text":"fix the build"}]},
  {"type":"reasoning","summary":[{"type":"summary_text","text":"hm"}]},
  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking."}]},
  {"type":"function_call","call_id":"t1","name":"Bash","arguments":"{\"command\": \"make\"}"},
  {"type":"function_call_output","call_id":"t1","output":"error: x"},
  {"role":"user","content":"go on"}]})";

TEST(AgentChatTest, OneConversationOneChainThroughEveryApi) {
  const std::string chat = Canonical(kChat, ApiKind::kChatCompletions);
  ASSERT_FALSE(chat.empty());
  EXPECT_EQ(Canonical(kMessages, ApiKind::kMessages), chat);
  EXPECT_EQ(Canonical(kResponses, ApiKind::kResponses), chat);
  EXPECT_EQ(Chain(Canonical(kMessages, ApiKind::kMessages)), Chain(chat));
}

TEST(AgentChatTest, ConvertedChatBodyCanonicalisesToTheSameBytes) {
  EXPECT_EQ(ViaChatBody(kMessages, ApiKind::kMessages), Canonical(kMessages, ApiKind::kMessages));
  EXPECT_EQ(ViaChatBody(kResponses, ApiKind::kResponses),
            Canonical(kResponses, ApiKind::kResponses));
}

// Blocks of types chat gives a meaning to (or "type" itself, which would repeat the key in
// {"type": T, T: payload}) stay opaque parts through the converter (a fuzzer found "type").
TEST(AgentChatTest, OpaqueBlocksNamedLikeChatFieldsConvertToTheSameBytes) {
  for (const std::string type :
       {"type", "input_text", "image_url", "input_audio", "video_url", "document"}) {
    const std::string messages =
        R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":")" + type +
        R"(","text":"t"},{"type":"text","text":"go"}]}]})";
    const std::string direct = Canonical(messages, ApiKind::kMessages);
    ASSERT_FALSE(direct.empty()) << type;
    EXPECT_EQ(ViaChatBody(messages, ApiKind::kMessages), direct) << type;
  }
}

// A number token the parser refuses inside chat_template_kwargs (which the converter copies,
// and the canonical walk only validates) is invalid for both, not copied as spelt (a fuzzer
// found `{"k":0"object"}`).
TEST(AgentChatTest, MalformedNumberInTemplateKwargsIsInvalidForBothWalks) {
  for (const ApiKind api : {ApiKind::kResponses, ApiKind::kMessages}) {
    const std::string main = api == ApiKind::kResponses
                                 ? R"("input":"hello")"
                                 : R"("messages":[{"role":"user","content":"hi"}])";
    for (const std::string number : {R"(0"object")", "1.e", "-", "01x"}) {
      const std::string body =
          R"({"model":"m","chat_template_kwargs":{"k":)" + number + "}," + main + "}";
      EXPECT_FALSE(CanonicalizeRequest(body, api).ok()) << body;
      AgentChatConverter converter;
      std::string chat;
      EXPECT_FALSE(converter.ConvertToChatBody(body, api, &chat).ok()) << body << " -> " << chat;
    }
  }
}

// The same in a tool's schema, which the canonical walk keeps (found by the fuzzers: `0750.0`
// in an input_schema, `0"shell"` as a tool's name).
TEST(AgentChatTest, MalformedNumberInAToolIsInvalidForBothWalks) {
  for (const std::string number : {"0750.0", R"(0"shell")"}) {
    const std::string messages =
        R"({"model":"m","max_tokens":5,"tools":[{"name":"Bash","input_schema":{"minimum":)" +
        number + R"(}}],"messages":[{"role":"user","content":"hi"}]})";
    const std::string responses =
        R"({"model":"m","tools":[{"type":"function","name":"f","parameters":{"minimum":)" + number +
        R"(}}],"input":"hi"})";
    for (const auto& [body, api] :
         {std::pair{messages, ApiKind::kMessages}, std::pair{responses, ApiKind::kResponses}}) {
      EXPECT_FALSE(CanonicalizeRequest(body, api).ok()) << body;
      AgentChatConverter converter;
      std::string chat;
      EXPECT_FALSE(converter.ConvertToChatBody(body, api, &chat).ok()) << body << " -> " << chat;
    }
  }
}

TEST(AgentChatTest, BillingHeaderCacheControlAndMetadataNeverReachTheChain) {
  std::string other = kMessages;
  auto replace = [&other](std::string_view from, std::string_view to) {
    const size_t at = other.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    other.replace(at, from.size(), to);
  };
  replace("cc_version=2.1.3; cch=aa;", "cc_version=2.1.9; cch=ff00;");  // another session
  replace("\"session_id\\\":\\\"s-1\\\"", "\"session_id\\\":\\\"s-2\\\"");
  // The marker moves from the last block to none.
  replace(R"("text":"go on","cache_control":{"type":"ephemeral"})", R"("text":"go on")");
  EXPECT_EQ(Canonical(other, ApiKind::kMessages), Canonical(kMessages, ApiKind::kMessages));
}

TEST(AgentChatTest, ANewTurnNeverChangesEarlierBlocks) {
  // Turn k+1 = turn k without its cache_control marker, plus an assistant turn and a new user
  // turn carrying the marker.
  std::string next = kMessages;
  const std::string last =
      R"({"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}]})";
  const size_t at = next.find(last);
  ASSERT_NE(at, std::string::npos);
  next.replace(at, last.size(), R"({"type":"text","text":"go on"}]},
    {"role":"assistant","content":[{"type":"text","text":"Done."},
      {"type":"tool_use","id":"t2","name":"Bash","input":{"command":"make test"}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t2",
      "content":[{"type":"text","text":"ok"}],"cache_control":{"type":"ephemeral"}}]}]})");
  const std::vector<BlockHash> before = Chain(Canonical(kMessages, ApiKind::kMessages));
  const std::vector<BlockHash> after = Chain(Canonical(next, ApiKind::kMessages));
  ASSERT_GT(after.size(), before.size());
  ASSERT_FALSE(before.empty());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
}

TEST(AgentChatTest, ToolUseInputIsPythonJsonDumps) {
  const std::string body = R"({"model":"m","max_tokens":1,"messages":[{"role":"assistant",
    "content":[{"type":"tool_use","id":"t","name":"f","input":{"a": 1, "b": [1.5, 2e20, 1e-5,
    0.1, 1e16, 123456789012345678.0, 5e-324, 0.0001, -0.0], "c": "\u00e9\n\"x\"\\\u0001\u007f",
    "d": null, "e": true, "f": {}, "g": "\ud83d\ude00", "h": 100.0, "i": -0,
    "j": 12345678901234567890123, "k": [], "l": 1E2, "m": 3.14159}}]}]})";
  ConvertedChat chat;
  AgentChatConverter converter;
  ASSERT_TRUE(converter.Convert(body, ApiKind::kMessages, &chat).ok());
  ASSERT_EQ(chat.messages.size(), 1u);
  // python3 -c 'import json; print(json.dumps(json.dumps(json.loads(INPUT))))'
  EXPECT_THAT(chat.messages[0],
              HasSubstr(R"("arguments":"{\"a\": 1, \"b\": [1.5, 2e+20, 1e-05, 0.1, 1e+16, )"
                        R"(1.2345678901234568e+17, 5e-324, 0.0001, -0.0], \"c\": \"\\u00e9\\n\\\")"
                        R"(x\\\"\\\\\\u0001\\u007f\", \"d\": null, \"e\": true, \"f\": {}, \"g\": )"
                        R"(\"\\ud83d\\ude00\", \"h\": 100.0, \"i\": 0, \"j\": )"
                        R"(12345678901234567890123, \"k\": [], \"l\": 100.0, \"m\": 3.14159}")"));
}

TEST(AgentChatTest, MessagesConversionFollowsVllm) {
  const std::string body = R"({"model":"m","max_tokens":8,
    "system":"Be brief.",
    "tools":[{"name":"t","input_schema":{"properties":{}}},{"type":"web_search_20250305","name":"web"}],
    "messages":[
      {"role":"system","content":"Leading inline."},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""},
        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"QUJD"}}]},
      {"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"t","input":{}}]},
      {"role":"system","content":"Between use and result."},
      {"role":"user","content":[{"type":"text","text":"late text"},
        {"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"l1"},
          {"type":"text","text":"l2"},{"type":"image","source":{"type":"url","url":"http://i"}}]}]},
      {"role":"assistant","content":[{"type":"redacted_thinking","data":"x"},
        {"type":"thinking","thinking":"t1"},{"type":"thinking","thinking":"t2"}]}]})";
  ConvertedChat chat;
  AgentChatConverter converter;
  ASSERT_TRUE(converter.Convert(body, ApiKind::kMessages, &chat).ok());
  EXPECT_THAT(chat.roles, ::testing::ElementsAre("system", "user", "assistant", "tool", "user",
                                                 "user", "system", "assistant"));
  EXPECT_EQ(chat.messages[0], R"({"role":"system","content":"Be brief.\n\nLeading inline."})");
  EXPECT_EQ(chat.messages[1],
            R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url",)"
            R"("image_url":{"url":"data:image/png;base64,QUJD"}}]})");
  EXPECT_EQ(chat.messages[2],
            R"({"role":"assistant","tool_calls":[{"id":"u1","type":"function","function":)"
            R"({"name":"t","arguments":"{}"}}]})");
  EXPECT_EQ(chat.messages[3], R"({"role":"tool","content":"l1\nl2","tool_call_id":"u1"})");
  EXPECT_EQ(chat.messages[4],
            R"({"role":"user","content":[{"type":"image_url","image_url":{"url":"http://i"}}]})");
  EXPECT_EQ(chat.messages[5], R"({"role":"user","content":"late text"})");
  EXPECT_EQ(chat.messages[6], R"({"role":"system","content":"Between use and result."})");
  EXPECT_EQ(chat.messages[7], R"({"role":"assistant","reasoning":"t1t2"})");
  // The schema without "type" is completed; the server tool is left out (and named).
  EXPECT_EQ(chat.tools,
            R"([{"type":"function","function":{"name":"t","parameters":{"properties": {}, )"
            R"("type": "object"}}}])");
  EXPECT_THAT(chat.unsupported, HasSubstr("'web' has no input_schema"));
  EXPECT_EQ(ViaChatBody(body, ApiKind::kMessages), Canonical(body, ApiKind::kMessages));
}

TEST(AgentChatTest, SystemBlocksJoinWithoutSeparatorAndDropTheBillingHeader) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"q"}],
    "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1"},
              {"type":"text","text":"A."},{"type":"text","text":" B."}]})";
  ConvertedChat chat;
  AgentChatConverter converter;
  ASSERT_TRUE(converter.Convert(body, ApiKind::kMessages, &chat).ok());
  EXPECT_EQ(chat.messages[0], R"({"role":"system","content":"A. B."})");
  // Only the billing header: no system message at all.
  const std::string only = R"({"model":"m","messages":[{"role":"user","content":"q"}],
    "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1"}]})";
  ASSERT_TRUE(converter.Convert(only, ApiKind::kMessages, &chat).ok());
  EXPECT_THAT(chat.roles, ::testing::ElementsAre("user"));
}

TEST(AgentChatTest, ResponsesConversionFollowsVllm) {
  const std::string body = R"({"model":"m","instructions":"I.","input":[
    {"type":"message","role":"developer","content":[{"type":"input_text","text":"d"}]},
    {"type":"reasoning","content":[{"type":"reasoning_text","text":"r"}],"encrypted_content":"e"},
    {"type":"function_call","call_id":"c1","name":"ls","namespace":"fs","arguments":"{}"},
    {"type":"function_call","call_id":"c2","name":"cat","arguments":"{\"p\":1}"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"x"},
      {"type":"output_text","text":"ignored"}]},
    {"type":"custom_tool_call","call_id":"c3","name":"apply_patch","input":"*** patch"},
    {"type":"custom_tool_call_output","call_id":"c3","output":"done"},
    {"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"o"}]}],
    "tools":[{"type":"web_search"},{"type":"function","name":"ls","parameters":{},"strict":true}]})";
  ConvertedChat chat;
  AgentChatConverter converter;
  ASSERT_TRUE(converter.Convert(body, ApiKind::kResponses, &chat).ok());
  EXPECT_THAT(chat.roles,
              ::testing::ElementsAre("system", "developer", "assistant", "tool", "tool"));
  EXPECT_EQ(chat.messages[2],
            R"({"role":"assistant","content":"x","tool_calls":[{"id":"c1","type":"function",)"
            R"("function":{"name":"fs__ls","arguments":"{}"}},{"id":"c2","type":"function",)"
            R"("function":{"name":"cat","arguments":"{\"p\":1}"}},{"id":"c3","type":"function",)"
            R"("function":{"name":"apply_patch","arguments":"*** patch"}}],"reasoning":"r"})");
  EXPECT_EQ(chat.tools,
            R"([{"type":"function","function":{"name":"ls","parameters":{},"strict":true}}])");
  EXPECT_EQ(chat.unsupported, "Encrypted content is not supported.");
  EXPECT_EQ(ViaChatBody(body, ApiKind::kResponses), Canonical(body, ApiKind::kResponses));
}

TEST(AgentChatTest, ParseReadsTheSessionHints) {
  Canonicalizer c;
  CanonicalRequest out;
  const std::string messages = kMessages;
  ASSERT_TRUE(c.Parse(messages, 0, ApiKind::kMessages, true, &out).ok());
  EXPECT_EQ(out.model, "m");
  EXPECT_TRUE(out.stream);
  EXPECT_EQ(SessionIdOfUserId(out.metadata_user_id), "s-1");
  EXPECT_EQ(SessionIdOfUserId("user_abc_account__session_x"), "user_abc_account__session_x");
  const std::string responses = R"({"model":"m","input":"hi","previous_response_id":"resp_1",
    "conversation":{"id":"conv_9"},"store":false,"prompt_cache_key":"k","user":"u"})";
  ASSERT_TRUE(c.Parse(responses, 0, ApiKind::kResponses, false, &out).ok());
  EXPECT_EQ(out.previous_response_id, "resp_1");
  EXPECT_EQ(out.conversation, "conv_9");
  EXPECT_FALSE(out.store);
  EXPECT_EQ(out.prompt_cache_key, "k");
  EXPECT_EQ(out.user, "u");
  EXPECT_TRUE(out.prompts.empty());
}

TEST(AgentChatTest, BadInputIsAnErrorOrAPromptError) {
  Canonicalizer c;
  CanonicalRequest out;
  // Errors: malformed anywhere, wrong top-level types.
  for (const std::string bad : {R"({"model":"m","messages":{}})", R"({"model":1,"messages":[]})",
                                R"({"model":"m","messages":[],"x":[1,}")",
                                "{\"model\":\"m\",\"messages\":[],\"x\":\"\xff\"}"}) {
    EXPECT_FALSE(c.Parse(bad, 0, ApiKind::kMessages, true, &out).ok()) << bad;
  }
  for (const std::string bad : {R"({"model":"m","input":5})", R"({"model":"m","input":{}})"}) {
    EXPECT_FALSE(c.Parse(bad, 0, ApiKind::kResponses, true, &out).ok()) << bad;
  }
  // Valid JSON whose conversation cannot be read: routed without cache data.
  for (const std::string odd : {R"({"model":"m","messages":[{"content":"no role"}]})",
                                R"({"model":"m","messages":[{"role":"user","content":[5]}]})",
                                R"({"model":"m","messages":[{"role":"bot","content":"x"}]})"}) {
    ASSERT_TRUE(c.Parse(odd, 0, ApiKind::kMessages, true, &out).ok()) << odd;
    EXPECT_FALSE(out.prompt_error.empty()) << odd;
    EXPECT_TRUE(out.prompts.empty());
  }
  // Deep nesting in a tool input: past the canonical depth limit, a prompt error.
  std::string deep =
      R"({"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use",)"
      R"("id":"t","name":"f","input":)";
  for (int i = 0; i < 100; ++i) deep += "{\"a\":";
  deep += "1";
  for (int i = 0; i < 100; ++i) deep += "}";
  deep += "}]}]}";
  ASSERT_TRUE(c.Parse(deep, 0, ApiKind::kMessages, true, &out).ok());
  EXPECT_THAT(out.prompt_error, HasSubstr("too deep"));
}

TEST(AgentChatTest, TenThousandBlocks) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":[)";
  for (int i = 0; i < 10000; ++i) {
    if (i > 0) body += ",";
    body += R"({"type":"text","text":"block )" + std::to_string(i) + "\"}";
  }
  body += "]}]}";
  const std::string canonical = Canonical(body, ApiKind::kMessages);
  EXPECT_THAT(canonical, HasSubstr("block 9999"));
  EXPECT_EQ(ViaChatBody(body, ApiKind::kMessages), canonical);
}

}  // namespace
}  // namespace kvgate::kvindex
