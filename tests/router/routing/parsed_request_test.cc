// The single parse of a request body: fields, validation and the canonical prompt in one pass.
#include "router/routing/parsed_request.h"

#include <map>

#include "config/config.h"
#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

absl::StatusOr<ParsedRequest> Parse(const std::string& body,
                                    ApiEndpoint endpoint = ApiEndpoint::kOther,
                                    bool build_prompt = false, std::string_view session = "") {
  ParsedRequest p;
  absl::Status s = ParseRequest(body, body.size(), endpoint, build_prompt, session, &p);
  if (!s.ok()) return s;
  return p;
}

TEST(ParsedRequest, ExtractsModelStreamUser) {
  auto i = Parse(
      R"({"messages":[{"role":"user","content":"x"}],"model":"m\u00e9","stream":true,"user":"u1"})");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->model(), "m\xc3\xa9");
  EXPECT_TRUE(i->json.stream);
  EXPECT_EQ(i->json.user, "u1");
  EXPECT_EQ(i->session_key, "u1");
}

TEST(ParsedRequest, DefaultsWhenAbsent) {
  auto i = Parse(R"({"prompt":"hi","stream":null})");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->model(), "");
  EXPECT_FALSE(i->json.stream);
}

TEST(ParsedRequest, RejectsMalformedJson) {
  for (const char* bad :
       {"", "not json", "{", R"({"model":)", R"({"model":"m",})", R"({"a":[1,,2]})",
        R"({"a":{"b":tru}})", "[1,2]", R"({"model":"m"} trailing)", R"({"a":"\x"})"}) {
    for (ApiEndpoint e :
         {ApiEndpoint::kOther, ApiEndpoint::kChatCompletions, ApiEndpoint::kCompletions}) {
      EXPECT_FALSE(Parse(bad, e, true).ok()) << bad;
    }
  }
}

TEST(ParsedRequest, MalformedJsonInsideMessagesIsStillAnError) {
  // Fields the canonicaliser reads and fields it skips are both validated.
  EXPECT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x","extra":[1,,2]}]})",
                     ApiEndpoint::kChatCompletions, true)
                   .ok());
  EXPECT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],"temperature":tru})",
                     ApiEndpoint::kChatCompletions, true)
                   .ok());
}

TEST(ParsedRequest, RejectsWrongFieldTypes) {
  EXPECT_FALSE(Parse(R"({"model":3})").ok());
  EXPECT_FALSE(Parse(R"({"stream":"yes"})").ok());
}

TEST(ParsedRequest, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '[');
  deep = R"({"a":)" + deep;
  EXPECT_FALSE(Parse(deep).ok());
}

TEST(ParsedRequest, BuildsTheCanonicalPromptInTheSamePass) {
  auto p = Parse(R"({"model":"m","messages":[{"role":"user","content":"hello"}]})",
                 ApiEndpoint::kChatCompletions, true);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->has_prompt());
  EXPECT_NE(p->json.prompts[0].bytes.find("hello"), std::string::npos);
  auto blind = Parse(R"({"model":"m","messages":[{"role":"user","content":"hello"}]})",
                     ApiEndpoint::kChatCompletions, false);
  ASSERT_TRUE(blind.ok());
  EXPECT_FALSE(blind->has_prompt());  // cache-blind policies: validated, not canonicalised
}

TEST(ParsedRequest, APromptKvgateCannotCanonicaliseIsNotAnError) {
  // Valid JSON whose schema the worker will judge: routed without cache data.
  for (const char* body : {R"({"model":"m"})", R"({"model":"m","messages":[{"content":5}]})",
                           R"({"messages":[{"content":[{"text":"no type"}]}],"model":"m"})"}) {
    auto p = Parse(body, ApiEndpoint::kChatCompletions, true);
    ASSERT_TRUE(p.ok()) << body << ": " << p.status();
    EXPECT_FALSE(p->has_prompt()) << body;
    EXPECT_FALSE(p->json.prompt_error.empty()) << body;
    EXPECT_EQ(p->model(), "m") << body;  // fields after the problem are still read
  }
}

TEST(ParsedRequest, SessionHeaderWinsOverUser) {
  auto p = Parse(R"({"user":"u"})", ApiEndpoint::kOther, false, "header-session");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->session_key, "header-session");
}

TEST(ParsedRequest, BodyContentUnchanged) {
  std::string body = R"({"model":"m","x":[1,2,{"y":"z"}]})";
  const std::string copy = body;
  ASSERT_TRUE(Parse(body).ok());
  EXPECT_EQ(body, copy);
}

// routing.session_keys: the first source present wins, headers and body fields alike.
TEST(ParsedRequest, SessionKeySources) {
  const std::vector<std::string> keys = config::RoutingConfig().session_keys;
  std::map<std::string, std::string> headers;
  auto lookup = [&headers](std::string_view name) -> std::string_view {
    auto it = headers.find(std::string(name));
    return it == headers.end() ? std::string_view() : std::string_view(it->second);
  };
  const std::string messages =
      R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"}],)"
      R"("metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"cc-1\"}"}})";
  ParsedRequest p;
  ASSERT_TRUE(
      ParseRequest(messages, messages.size(), ApiEndpoint::kMessages, true, keys, lookup, &p).ok());
  EXPECT_EQ(p.session_key, "cc-1");
  EXPECT_EQ(p.session_source, "metadata.user_id");
  headers["x-claude-code-session-id"] = "cc-header";
  ASSERT_TRUE(
      ParseRequest(messages, messages.size(), ApiEndpoint::kMessages, true, keys, lookup, &p).ok());
  EXPECT_EQ(p.session_key, "cc-header");
  EXPECT_EQ(p.session_source, "x-claude-code-session-id");
  headers.clear();
  const std::string responses =
      R"({"model":"m","input":"q","prompt_cache_key":"thread-7","previous_response_id":"r",)"
      R"("user":"u"})";
  ASSERT_TRUE(
      ParseRequest(responses, responses.size(), ApiEndpoint::kResponses, true, keys, lookup, &p)
          .ok());
  EXPECT_EQ(p.session_key, "thread-7");
  EXPECT_EQ(p.session_source, "prompt_cache_key");
  // A configured order: user first.
  const std::vector<std::string> user_first = {"user", "prompt_cache_key"};
  ASSERT_TRUE(ParseRequest(responses, responses.size(), ApiEndpoint::kResponses, true, user_first,
                           lookup, &p)
                  .ok());
  EXPECT_EQ(p.session_key, "u");
  // Nothing present: no key.
  const std::string bare = R"({"model":"m","input":"q"})";
  ASSERT_TRUE(
      ParseRequest(bare, bare.size(), ApiEndpoint::kResponses, true, keys, lookup, &p).ok());
  EXPECT_EQ(p.session_key, "");
  EXPECT_EQ(p.session_source, "");
}

TEST(ParsedRequest, AgentEndpoints) {
  EXPECT_EQ(EndpointOf("/v1/messages"), ApiEndpoint::kMessages);
  EXPECT_EQ(EndpointOf("/v1/messages/count_tokens"), ApiEndpoint::kCountTokens);
  EXPECT_EQ(EndpointOf("/v1/responses"), ApiEndpoint::kResponses);
  EXPECT_EQ(EndpointOf("/v1/responses/resp_1"), ApiEndpoint::kOther);
  EXPECT_EQ(ApiName(ApiEndpoint::kCountTokens), "messages");
  // The agents' APIs are validated like chat: wrong types are errors.
  EXPECT_FALSE(Parse(R"({"model":"m","input":7})", ApiEndpoint::kResponses, true).ok());
  EXPECT_FALSE(Parse(R"({"model":"m","messages":"x"})", ApiEndpoint::kMessages, false).ok());
  auto p = Parse(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"}]})",
                 ApiEndpoint::kCountTokens, true);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->has_prompt());
}

}  // namespace
}  // namespace kvgate::router
