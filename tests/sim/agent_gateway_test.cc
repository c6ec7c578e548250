// The agents' own APIs through the kvgate binary in front of in-process kvgate-sim workers:
// Anthropic Messages sessions stay on the worker that holds their prefix, stored OpenAI
// Responses are reachable only on the worker that stored them (404 naming the id elsewhere),
// each API's errors come in its own shape, count_tokens teaches the index nothing, and the
// metrics say which API a request used.
#include <regex>
#include <set>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "tests/fakes/test_client.h"
#include "tests/sim/sim_test_util.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using ::testing::HasSubstr;

class AgentGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = testing::TestBinary("kvgate");
    if (binary_.empty()) GTEST_SKIP() << "kvgate binary not built (set KVGATE_GATEWAY_BIN)";
    sim_ = StartTwoWorkerSim();
    ASSERT_NE(sim_, nullptr);
    std::string workers;
    for (uint16_t p : sim_->ports())
      common::StrAppend(&workers, "  - url: http://127.0.0.1:", p, "\n");
    const std::string config = testing::WriteTempFile(
        "kvgate.yaml", common::StrCat("listen: \"127.0.0.1:0\"\nthreads: 1\n",
                                      "admin: {token: ", testing::kAdminToken, "}\n",
                                      "limits: {max_body_bytes: 1048576}\n",
                                      "routing: {policy: kvaware}\nworkers:\n", workers));
    gateway_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{binary_, "--config", config});
    port_ = gateway_->Port();
    ASSERT_NE(port_, 0) << gateway_->Log();
    ASSERT_TRUE(
        testing::WaitFor([&] { return testing::Fetch(port_, "GET", "/ready").status == 200; }));
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }

  std::string Url(size_t i) const { return common::StrCat("http://127.0.0.1:", sim_->ports()[i]); }

  std::string binary_;
  std::unique_ptr<SimProcess> sim_;
  std::unique_ptr<testing::ChildProcess> gateway_;
  uint16_t port_ = 0;
};

// A Claude Code-like Messages body for turn `turns` of session `session`: system blocks with a
// per-session billing block, a tool, and the cache_control marker on the last block only.
std::string MessagesBody(const std::string& session, int turns) {
  std::string messages;
  for (int t = 0; t < turns; ++t) {
    const bool last = t + 1 == turns;
    const std::string marker = last ? R"(,"cache_control":{"type":"ephemeral"})" : "";
    if (t > 0) {
      common::StrAppend(&messages, R"(,{"role":"assistant","content":[{"type":"text","text":"ok )",
                        t, R"("},{"type":"tool_use","id":"toolu_)", t,
                        R"(","name":"Bash","input":{"command":"ls"}}]},)",
                        R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_)",
                        t, R"(","content":")", Words("r" + std::to_string(t) + "w", 60), "\"",
                        marker, "}]}");
    } else {
      common::StrAppend(&messages, R"({"role":"user","content":[{"type":"text","text":")",
                        Words(session + "q", 80), "\"", marker, "}]}");
    }
  }
  return common::StrCat(
      R"({"model":"sim-model","max_tokens":4,"system":[{"type":"text","text":)",
      R"("x-anthropic-billing-header: cc_version=2.1.1; cch=)", session, R"(;"},)",
      R"({"type":"text","text":")", Words("sys", 200), R"("}],)",
      R"("tools":[{"name":"Bash","description":"Run","input_schema":{"type":"object"}}],)",
      R"("metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\")", session, R"(\"}"},)",
      R"("messages":[)", messages, "]}");
}

TEST_F(AgentGatewayTest, AMessagesSessionStaysWithItsCache) {
  std::set<std::string> workers;
  for (int turn = 1; turn <= 4; ++turn) {
    auto r =
        testing::Fetch(port_, "POST", "/v1/messages?beta=true", MessagesBody("s1", turn),
                       {{"anthropic-version", "2023-06-01"}, {"X-Claude-Code-Session-Id", "s1"}});
    ASSERT_EQ(r.status, 200) << r.body << gateway_->Log();
    workers.insert(r.Header("x-kvgate-worker"));
    EXPECT_EQ(StringField(r.body, "type"), "message");
    if (turn > 1) EXPECT_GT(Field(r.body, "cache_read_input_tokens"), 100) << turn << r.body;
  }
  EXPECT_EQ(workers.size(), 1u);  // every follow-up on the session's worker
  // Explain reads the same headers: the Claude Code session header is the key.
  auto e = testing::AdminFetch(
      port_, "POST", "/admin/explain", MessagesBody("s1", 5),
      {{"x-kvgate-endpoint", "/v1/messages"}, {"X-Claude-Code-Session-Id", "s1"}});
  ASSERT_EQ(e.status, 200) << e.body;
  EXPECT_THAT(e.body, HasSubstr(R"("api":"messages")"));
  EXPECT_THAT(e.body, HasSubstr(R"("session":{"source":"x-claude-code-session-id","key":"s1"})"));
  EXPECT_EQ(StringField(e.body, "chosen"), *workers.begin());
  // Without the header, metadata.user_id's session_id.
  e = testing::AdminFetch(port_, "POST", "/admin/explain", MessagesBody("s1", 5),
                          {{"x-kvgate-endpoint", "/v1/messages"}});
  EXPECT_THAT(e.body, HasSubstr(R"("session":{"source":"metadata.user_id","key":"s1"})"));
  // A streamed turn: the Anthropic event sequence comes through as the worker sent it.
  testing::StreamingRequest s(port_, "/v1/messages",
                              MessagesBody("s1", 5).insert(1, R"("stream":true,)"));
  ASSERT_TRUE(s.ReadHeader());
  ASSERT_EQ(s.status(), 200);
  EXPECT_EQ(s.Header("x-kvgate-worker"), *workers.begin());
  const std::string events = s.ReadAll();
  EXPECT_THAT(events, HasSubstr("event: message_start"));
  EXPECT_THAT(events, HasSubstr("event: message_stop"));
  // The access log's usage counts came from the Anthropic usage: kvgate's metrics compare them.
  const std::string metrics = testing::Fetch(port_, "GET", "/metrics").body;
  EXPECT_THAT(metrics, HasSubstr(R"(kvgate_http_requests_total{api="messages",code="200",)"
                                 R"(endpoint="/v1/messages",worker=")"));
  EXPECT_THAT(metrics, HasSubstr(R"(kvgate_http_request_duration_seconds_count{api="messages",)"
                                 R"(endpoint="/v1/messages"})"));
  EXPECT_THAT(metrics, HasSubstr("kvgate_prefix_prediction_actual_tokens_total{worker="));
}

TEST_F(AgentGatewayTest, StoredResponsesStayOnTheirWorker) {
  // Instructions do not carry over a previous_response_id (vLLM): every turn sends them.
  const std::string instructions = common::StrCat(R"("instructions":")", Words("inst", 100), "\",");
  const std::string first =
      common::StrCat(R"({"model":"sim-model","max_output_tokens":4,)", instructions, R"("input":")",
                     Words("task", 60), R"("})");
  auto r1 = testing::Fetch(port_, "POST", "/v1/responses", first);
  ASSERT_EQ(r1.status, 200) << r1.body << gateway_->Log();
  const std::string owner = r1.Header("x-kvgate-worker");
  std::string id = StringField(r1.body, "id");
  ASSERT_THAT(id, ::testing::StartsWith("resp_"));
  const std::string first_id = id;
  for (int turn = 2; turn <= 3; ++turn) {
    const std::string next = common::StrCat(
        R"({"model":"sim-model","max_output_tokens":4,)", instructions,
        R"("previous_response_id":")", id, R"(","stream":)", turn == 3 ? "true" : "false",
        R"(,"input":[{"role":"user","content":")", Words("more", 20), R"("}]})");
    auto e = testing::AdminFetch(port_, "POST", "/admin/explain", next,
                                 {{"x-kvgate-endpoint", "/v1/responses"}});
    ASSERT_EQ(e.status, 200) << e.body;
    EXPECT_THAT(e.body, HasSubstr(common::StrCat(R"("pinned_to_response":{"response_id":")", id,
                                                 R"(","worker":")", owner, "\"")));
    auto r = testing::Fetch(port_, "POST", "/v1/responses", next);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Header("x-kvgate-worker"), owner) << turn;
    id = StringField(r.body, "id");
    ASSERT_FALSE(id.empty()) << r.body;
    EXPECT_GT(Field(r.body, "cached_tokens"), 0) << r.body;  // the history is the owner's cache
  }
  // The stored-response endpoints reach the owner.
  for (const std::string target : {"/v1/responses/" + id, "/v1/responses/" + id + "/input_items"}) {
    auto g = testing::Fetch(port_, "GET", target);
    EXPECT_EQ(g.status, 200) << target << g.body;
    EXPECT_EQ(g.Header("x-kvgate-worker"), owner);
  }
  auto c = testing::Fetch(port_, "POST", "/v1/responses/" + id + "/cancel", "{}");
  EXPECT_EQ(c.status, 400) << c.body;  // the worker's own answer: a finished response
  EXPECT_EQ(c.Header("x-kvgate-worker"), owner);
  auto d = testing::Fetch(port_, "DELETE", "/v1/responses/" + id);
  EXPECT_EQ(d.status, 200) << d.body;
  auto gone = testing::Fetch(port_, "GET", "/v1/responses/" + id);
  EXPECT_EQ(gone.status, 404);
  EXPECT_THAT(gone.body, HasSubstr(common::StrCat("Response with id '", id, "' not found")));
  EXPECT_EQ(gone.Header("x-kvgate-worker"), "");  // no worker was asked
  // Unknown ids: a 404 in OpenAI's shape, never another worker's answer.
  auto unknown = testing::Fetch(port_, "POST", "/v1/responses",
                                R"({"model":"sim-model","previous_response_id":"resp_nope",)"
                                R"("input":"x","max_output_tokens":2})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_THAT(unknown.body, HasSubstr(R"({"error":{"message":"Response with id 'resp_nope')"));
  // The owner drained: its responses are out of reach, named.
  auto drain =
      testing::AdminFetch(port_, "POST", "/admin/drain",
                          common::StrCat(R"({"worker":")", owner, R"(","draining":true})"));
  ASSERT_EQ(drain.status, 200) << drain.body;
  auto orphan = testing::Fetch(port_, "POST", "/v1/responses",
                               common::StrCat(R"({"model":"sim-model","previous_response_id":")",
                                              first_id, R"(","input":"x","max_output_tokens":2})"));
  EXPECT_EQ(orphan.status, 404) << orphan.body;
  EXPECT_THAT(orphan.body, HasSubstr(first_id));
  EXPECT_THAT(orphan.body, HasSubstr("is draining"));
  EXPECT_EQ(testing::HeldReservations(port_), "");
}

TEST_F(AgentGatewayTest, ErrorsInEachApisShape) {
  for (const std::string path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    auto r = testing::Fetch(port_, "POST", path, R"({"model":"sim-model","messages":{})");
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_THAT(r.body, HasSubstr(R"({"type":"error","error":{"type":"invalid_request_error",)"));
  }
  auto wrong =
      testing::Fetch(port_, "POST", "/v1/messages", R"({"model":"sim-model","messages":5})");
  EXPECT_EQ(wrong.status, 400);
  EXPECT_THAT(wrong.body, HasSubstr("'messages' must be an array"));
  auto big = testing::Fetch(port_, "POST", "/v1/messages", std::string(2 << 20, ' '));
  EXPECT_EQ(big.status, 413);
  EXPECT_THAT(big.body, HasSubstr(R"("type":"request_too_large")"));
  auto bad_utf8 = testing::Fetch(port_, "POST", "/v1/messages",
                                 "{\"model\":\"sim-model\",\"messages\":[],\"x\":\"\xff\"}");
  EXPECT_EQ(bad_utf8.status, 400);
  EXPECT_THAT(bad_utf8.body, HasSubstr(R"("type":"error")"));
  auto input = testing::Fetch(port_, "POST", "/v1/responses", R"({"model":"sim-model","input":5})");
  EXPECT_EQ(input.status, 400);
  EXPECT_THAT(input.body, HasSubstr(R"({"error":{"message":"'input' must be a string)"));
  auto model = testing::Fetch(port_, "POST", "/v1/messages",
                              R"({"model":"nope","max_tokens":1,"messages":[]})");
  EXPECT_EQ(model.status, 404);
  EXPECT_THAT(model.body, HasSubstr(R"("type":"not_found_error")"));
  // 10,000 content blocks: parsed and routed.
  std::string blocks;
  for (int i = 0; i < 10000; ++i)
    common::StrAppend(&blocks, i ? "," : "", R"({"type":"text","text":"b)", i, "\"}");
  auto many = testing::Fetch(
      port_, "POST", "/v1/messages/count_tokens",
      common::StrCat(R"({"model":"sim-model","messages":[{"role":"user","content":[)", blocks,
                     "]}]}"));
  EXPECT_EQ(many.status, 200) << many.body;
  // Still serving.
  EXPECT_EQ(testing::Fetch(port_, "GET", "/ready").status, 200);
}

TEST_F(AgentGatewayTest, CountTokensTeachesTheIndexNothing) {
  const std::string body = MessagesBody("count", 1);
  const auto matched = [&] {
    auto e = testing::AdminFetch(port_, "POST", "/admin/explain", body,
                                 {{"x-kvgate-endpoint", "/v1/messages"}});
    int64_t best = 0;
    std::smatch m;
    std::string rest = e.body;
    const std::regex gpu("\"matched_tokens\":\\{\"gpu\":([0-9]+)");
    while (std::regex_search(rest, m, gpu)) {
      best = std::max<int64_t>(best, std::stoll(m[1]));
      rest = m.suffix();
    }
    return best;
  };
  auto c = testing::Fetch(port_, "POST", "/v1/messages/count_tokens", body);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_GT(Field(c.body, "input_tokens"), 100);
  EXPECT_EQ(matched(), 0);  // counted, not learned
  auto e = testing::AdminFetch(port_, "POST", "/admin/explain", body,
                               {{"x-kvgate-endpoint", "/v1/messages/count_tokens"}});
  EXPECT_THAT(e.body, HasSubstr(R"("learns":false)"));
  ASSERT_EQ(testing::Fetch(port_, "POST", "/v1/messages", body).status, 200);
  EXPECT_GT(matched(), 100);  // a real request is
  EXPECT_EQ(testing::HeldReservations(port_), "");
}

}  // namespace
}  // namespace kvgate::sim
