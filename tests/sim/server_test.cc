// kvgate-sim's HTTP surface, in process: OpenAI responses and SSE, usage with cached tokens,
// metrics names, data-parallel ranks and injected faults.
#include "sim/server.h"

#include <regex>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/test_client.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using testing::Fetch;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::StreamingRequest;

// 600 bytes of chat content: 150+ tokens, so 9+ full blocks.
std::string Chat(bool stream, int max_tokens, bool usage = false, const std::string& text = "") {
  std::string content = text.empty() ? std::string(600, 'q') : text;
  return common::StrCat(R"({"model":"sim-model","messages":[{"role":"user","content":")", content,
                        R"("}],"max_tokens":)", max_tokens, R"(,"stream":)",
                        stream ? "true" : "false",
                        usage ? R"(,"stream_options":{"include_usage":true})" : "", "}");
}

class SimServerTest : public ::testing::Test {
 protected:
  void StartSim(uint32_t dp_size = 1) {
    SimOptions o;
    o.base_port = 0;
    o.time_scale = 0.01;
    o.dp_size = dp_size;
    o.profile.num_gpu_blocks = 256;
    sim_ = std::make_unique<SimProcess>(o);
    ASSERT_TRUE(sim_->Start().ok());
    sim_->StartThread();
    port_ = sim_->ports()[0];
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }
  std::unique_ptr<SimProcess> sim_;
  uint16_t port_ = 0;
};

int CachedTokens(const std::string& body) {
  std::smatch m;
  if (!std::regex_search(body, m, std::regex(R"re("cached_tokens":([0-9]+))re"))) return -1;
  return std::stoi(m[1]);
}

TEST_F(SimServerTest, NonStreamingChatIsDeterministicAndReportsCachedTokens) {
  StartSim();
  auto a = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 5), {{"x-request-id", "r1"}});
  ASSERT_EQ(a.status, 200) << a.body << a.error;
  EXPECT_EQ(a.Header("x-request-id"), "r1");
  EXPECT_THAT(a.body, HasSubstr(R"("id":"chatcmpl-r1","object":"chat.completion")"));
  EXPECT_THAT(a.body, HasSubstr(R"("finish_reason":"length")"));
  EXPECT_THAT(a.body, HasSubstr(R"("completion_tokens":5)"));
  EXPECT_EQ(CachedTokens(a.body), 0);
  auto b = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 5));
  ASSERT_EQ(b.status, 200);
  EXPECT_THAT(b.Header("x-request-id"), Not(""));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(a.body, m, std::regex(R"re("prompt_tokens":([0-9]+))re")));
  const int prompt = std::stoi(m[1]);
  EXPECT_EQ(CachedTokens(b.body), prompt / 16 * 16);  // Every full block.
  auto content = [](const std::string& body) { return body.substr(body.find("\"content\":"), 40); };
  EXPECT_EQ(content(a.body), content(b.body));
}

TEST_F(SimServerTest, StreamingChatFollowsVllmFraming) {
  StartSim();
  StreamingRequest s(port_, "/v1/chat/completions", Chat(true, 4, true), {{"x-request-id", "s1"}});
  ASSERT_TRUE(s.ReadHeader());
  EXPECT_EQ(s.status(), 200);
  EXPECT_THAT(s.Header("content-type"), HasSubstr("text/event-stream"));
  EXPECT_EQ(s.Header("x-request-id"), "s1");
  const std::string body = s.ReadAll();
  std::vector<std::string> events;
  for (size_t at = 0; at < body.size();) {
    const size_t end = body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << body;
    events.push_back(body.substr(at, end - at));
    at = end + 2;
  }
  ASSERT_EQ(events.size(), 1u + 4u + 1u + 1u) << body;  // role, 4 tokens, usage, [DONE]
  EXPECT_THAT(events[0], HasSubstr(R"("delta":{"role":"assistant","content":""})"));
  EXPECT_THAT(events[0], HasSubstr(R"("object":"chat.completion.chunk")"));
  for (int i = 1; i <= 3; ++i) EXPECT_THAT(events[i], HasSubstr(R"("finish_reason":null)"));
  EXPECT_THAT(events[4], HasSubstr(R"("finish_reason":"length")"));
  EXPECT_THAT(events[5], HasSubstr(R"("choices":[],"usage":{"prompt_tokens":)"));
  EXPECT_THAT(events[5], HasSubstr(R"("completion_tokens":4)"));
  EXPECT_EQ(events[6], "data: [DONE]");
  // Without include_usage there is no usage chunk.
  StreamingRequest t(port_, "/v1/chat/completions", Chat(true, 2));
  ASSERT_TRUE(t.ReadHeader());
  const std::string plain = t.ReadAll();
  EXPECT_THAT(plain, Not(HasSubstr("usage")));
  EXPECT_THAT(plain, HasSubstr("data: [DONE]\n\n"));
}

TEST_F(SimServerTest, CompletionsTextAndTokenPrompts) {
  StartSim();
  auto a = Fetch(port_, "POST", "/v1/completions",
                 R"({"model":"sim-model","prompt":"abcdefgh","max_tokens":3})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_THAT(a.body, HasSubstr(R"("object":"text_completion")"));
  EXPECT_THAT(a.body, HasSubstr(R"("prompt_tokens":2,)"));  // 8 bytes = 2 tokens.
  auto b = Fetch(port_, "POST", "/v1/completions",
                 R"({"prompt":[1,2,3,4,5],"max_completion_tokens":2,"stream":true})");
  ASSERT_EQ(b.status, 200);
  EXPECT_THAT(b.body, HasSubstr(R"("object":"text_completion")"));
  EXPECT_THAT(b.body, HasSubstr("data: [DONE]"));
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", R"({"prompt":"x","model":"nope"})").status,
            404);
  EXPECT_EQ(
      Fetch(port_, "POST", "/v1/completions", R"({"prompt":"x","max_tokens":999999999})").status,
      400);
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", "not json").status, 400);
}

TEST_F(SimServerTest, ModelsHealthAndMetrics) {
  StartSim();
  auto models = Fetch(port_, "GET", "/v1/models");
  EXPECT_EQ(models.status, 200);
  EXPECT_THAT(models.body, HasSubstr(R"("id":"sim-model")"));
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 2)).status, 200);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 2)).status, 200);
  const std::string m = Fetch(port_, "GET", "/metrics").body;
  for (const char* name :
       {"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
        "vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{",
        "vllm:time_to_first_token_seconds_bucket{", "vllm:time_to_first_token_seconds_count{",
        "vllm:generation_tokens_total{", "num_gpu_blocks=\"256\""}) {
    EXPECT_THAT(m, HasSubstr(name)) << name;
  }
  EXPECT_THAT(m, HasSubstr("vllm:request_success_total{engine=\"0\",model_name=\"sim-model\","
                           "finished_reason=\"length\"} 2"));
  std::smatch hit;
  ASSERT_TRUE(
      std::regex_search(m, hit, std::regex(R"(vllm:prefix_cache_hits_total\{[^}]*\} (\d+))")));
  EXPECT_GT(std::stoi(hit[1]), 0);
}

TEST_F(SimServerTest, DataParallelRankHeaderPicksTheEngine) {
  StartSim(2);
  ASSERT_EQ(
      Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 2), {{"x-data-parallel-rank", "1"}})
          .status,
      200);
  const std::string m = Fetch(port_, "GET", "/metrics").body;
  EXPECT_THAT(m, HasSubstr(R"(vllm:generation_tokens_total{engine="1",model_name="sim-model"} 2)"));
  EXPECT_THAT(m, HasSubstr(R"(vllm:generation_tokens_total{engine="0",model_name="sim-model"} 0)"));
  EXPECT_EQ(
      Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 2), {{"x-data-parallel-rank", "2"}})
          .status,
      400);
}

TEST_F(SimServerTest, InjectedFaults) {
  StartSim();
  auto e = Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 2), {{"x-sim-fault", "error"}});
  EXPECT_EQ(e.status, 500);
  EXPECT_THAT(e.body, HasSubstr("\"error\""));
  StreamingRequest s(port_, "/v1/chat/completions", Chat(true, 8), {{"x-sim-fault", "close-mid"}});
  ASSERT_TRUE(s.ReadHeader());
  const std::string cut = s.ReadAll(std::chrono::seconds(10));
  EXPECT_THAT(cut, Not(HasSubstr("[DONE]")));
  // The server is still healthy afterwards.
  EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 2)).status, 200);
}

TEST_F(SimServerTest, ResetPrefixCacheForgetsBlocks) {
  StartSim();
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 1)).status, 200);
  // Not ContainsRegex: libonig's POSIX regex symbols (kvindex/CMakeLists.txt) hang it under ASan.
  const std::string blocks = Fetch(port_, "GET", "/debug/blocks").body;
  EXPECT_THAT(blocks, HasSubstr(R"("GPU":[)"));
  EXPECT_THAT(blocks, ::testing::Not(HasSubstr(R"("GPU":[])")));
  EXPECT_EQ(Fetch(port_, "POST", "/reset_prefix_cache").status, 200);
  EXPECT_THAT(Fetch(port_, "GET", "/debug/blocks").body, HasSubstr(R"("GPU":[])"));
  EXPECT_EQ(CachedTokens(Fetch(port_, "POST", "/v1/chat/completions", Chat(false, 1)).body), 0);
}

}  // namespace
}  // namespace kvgate::sim
