// The gateway in-process with kvaware and the other policies (explain, session stickiness,
// admin pages), and a client that stops reading a gigabyte stream.
#include <unistd.h>

#include <map>
#include <set>
#include <vector>

#include "common/strings.h"
#include "tests/integration/gateway_fixture.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

class KvAwareGatewayTest : public GatewayTest {
 protected:
  static config::AdminConfig Admin(std::string listen, std::string token) {
    config::AdminConfig a;
    a.listen = std::move(listen);
    a.token = std::move(token);
    return a;
  }
  void StartFleet(int n, const std::string& policy,
                  config::AdminConfig admin = Admin("", kAdminToken)) {
    auto c = BaseConfig();
    c.routing.policy = policy;
    c.admin = admin;
    for (int i = 0; i < n; ++i) AddTestWorker(c, AddFake().url());
    StartGateway(c);
  }

  // One series of the gateway's /metrics; -1 when absent.
  double Metric(const std::string& series) {
    const std::string text = gateway_->MetricsText();
    const size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
  }
  static std::string Body(int session, int turn) {
    std::string content = common::StrCat("session ", session, " ");
    content.append(4000, static_cast<char>('a' + session % 26));
    for (int t = 0; t < turn; ++t) content += common::StrCat(" turn ", t, std::string(800, 'x'));
    return common::StrCat(R"({"model":"fake-model","messages":[{"role":"user","content":")",
                          content, R"("}]})");
  }
};

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string JsonString(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  const size_t p = json.find(k);
  if (p == std::string::npos) return "";
  return json.substr(p + k.size(), json.find('"', p + k.size()) - p - k.size());
}

TEST_F(KvAwareGatewayTest, ExplainMatchesTheProxyDecision) {
  StartFleet(4, "kvaware");
  for (int i = 0; i < 24; ++i) {
    const std::string body = Body(i % 5, i / 5);
    const HttpResponse e = AdminFetch(port_, "POST", "/admin/explain", body);
    ASSERT_EQ(e.status, 200) << e.body;
    EXPECT_THAT(e.body, HasSubstr(R"("candidates":[)"));
    EXPECT_THAT(e.body, HasSubstr(R"("predicted_ttft_s":)"));
    const std::string chosen = JsonString(e.body, "chosen");
    const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("x-kvgate-worker"), chosen) << "request " << i << ": " << e.body;
  }
}

TEST_F(KvAwareGatewayTest, LaterTurnsOfASessionStayOnItsWorker) {
  StartFleet(4, "kvaware");
  std::map<int, std::string> home;
  for (int turn = 0; turn < 3; ++turn) {
    for (int s = 0; s < 8; ++s) {
      const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", Body(s, turn));
      ASSERT_EQ(r.status, 200);
      if (turn == 0) {
        home[s] = r.Header("x-kvgate-worker");
      } else {
        EXPECT_EQ(r.Header("x-kvgate-worker"), home[s]) << "session " << s << " turn " << turn;
      }
    }
  }
  std::set<std::string> used;
  for (const auto& [s, w] : home) used.insert(w);
  EXPECT_GE(used.size(), 3u);  // sessions spread
}

// Issue 31: a long chat session's later turns are parsed without the messages its earlier turns
// had (kvindex/prefix_reuse.h); the property test there proves the result equals a full pass.
// Here: the gateway uses it, counts it in /metrics, and serves every turn.
TEST_F(KvAwareGatewayTest, LongChatSessionsAreParsedOnlyWhereTheyGrew) {
  StartFleet(2, "kvaware");
  const double hits = Metric("kvgate_prefix_reuse_hits_total");
  const double skipped = Metric("kvgate_prefix_reuse_skipped_bytes_total");
  ASSERT_GE(hits, 0);
  constexpr int kSessions = 3, kTurns = 4;
  std::vector<std::string> messages(kSessions);
  for (int s = 0; s < kSessions; ++s) {
    messages[s] = common::StrCat(R"({"role":"system","content":"session )", s, " ",
                                 std::string(70000, static_cast<char>('a' + s)), R"("})");
  }
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int s = 0; s < kSessions; ++s) {
      messages[s] += common::StrCat(R"(,{"role":"user","content":"turn )", turn,
                                    R"( \n\"quoted\" )", std::string(3000, 'q'), R"("})");
      const std::string body =
          common::StrCat(R"({"model":"fake-model","messages":[)", messages[s], "]}");
      const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      messages[s] += R"(,{"role":"assistant","content":"done"})";
    }
  }
  // Every turn after the first found its session's earlier messages: 70 KB and more each.
  EXPECT_GE(Metric("kvgate_prefix_reuse_hits_total") - hits, kSessions * (kTurns - 1));
  EXPECT_GE(Metric("kvgate_prefix_reuse_skipped_bytes_total") - skipped,
            kSessions * (kTurns - 1) * 70000.0);
  EXPECT_GT(Metric("kvgate_prefix_reuse_cache_bytes"), 0);
}

// The same for the agents' own APIs: Messages (Claude Code) and Responses (Codex) bodies, whose
// system prompt is a field before the conversation and whose messages are reused where their
// conversion is final.
TEST_F(KvAwareGatewayTest, LongAgentSessionsAreParsedOnlyWhereTheyGrew) {
  StartFleet(2, "kvaware");
  struct Api {
    std::string path, head, user, assistant;
  };
  const std::string big(70000, 'p');
  const std::vector<Api> apis = {
      {"/v1/messages",
       R"({"model":"fake-model","max_tokens":16,"system":")" + big +
           R"(","messages":[{"role":"user","content":"start"})",
       R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"%s"}]})",
       R"({"role":"assistant","content":[{"type":"text","text":"ok"},)"
       R"({"type":"tool_use","id":"t","name":"Read","input":{"p":1}}]})"},
      {"/v1/responses",
       R"({"model":"fake-model","instructions":")" + big +
           R"(","input":[{"role":"user","content":"start"})",
       R"({"type":"function_call_output","call_id":"c%d","output":"%s"})",
       R"({"type":"function_call","call_id":"c","name":"shell","arguments":"{}"})"},
  };
  constexpr int kSessions = 3, kTurns = 4;
  for (const Api& api : apis) {
    const double hits = Metric("kvgate_prefix_reuse_hits_total");
    const double skipped = Metric("kvgate_prefix_reuse_skipped_bytes_total");
    ASSERT_GE(hits, 0);
    std::vector<std::string> conversation(kSessions, api.head);
    for (int turn = 0; turn < kTurns; ++turn) {
      for (int s = 0; s < kSessions; ++s) {
        std::string user = api.user;
        user.replace(user.find("%d"), 2, std::to_string(turn));
        user.replace(user.find("%s"), 2, common::StrCat("session ", s, std::string(3000, 'q')));
        conversation[s] += "," + user;
        const HttpResponse r = Fetch(port_, "POST", api.path, conversation[s] + "]}");
        ASSERT_EQ(r.status, 200) << api.path << ": " << r.body;
        conversation[s] += "," + api.assistant;
      }
    }
    // Every turn after the first found its session's earlier messages: 3 KB and more each.
    EXPECT_GE(Metric("kvgate_prefix_reuse_hits_total") - hits, kSessions * (kTurns - 1))
        << api.path;
    EXPECT_GE(Metric("kvgate_prefix_reuse_skipped_bytes_total") - skipped,
              kSessions * (kTurns - 1) * 3000.0)
        << api.path;
  }
}

// Issue 33: a request that failed on every worker (500s) left each of them, in the index, holding
// the whole prompt, and the next requests were routed on that belief. Only a worker that served
// the prompt (2xx) holds it; what a failed attempt taught is unlearned.
TEST_F(KvAwareGatewayTest, FailedAttemptsTeachTheIndexNothing) {
  StartFleet(2, "kvaware");
  for (size_t i = 0; i < fakes_.size(); ++i) fakes_[i]->set_force_status(500);
  const std::string body = Body(3, 2);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", body).status, 500);
  const HttpResponse e = AdminFetch(port_, "POST", "/admin/explain", body);
  ASSERT_EQ(e.status, 200) << e.body;
  EXPECT_THAT(e.body, Not(HasSubstr(R"("matched_tokens":{"gpu":1)")));
  EXPECT_EQ(CountOf(e.body, R"("matched_tokens":{"gpu":0,)"), 2u) << e.body;
  // Served once, the prompt is held by the worker that served it, and only by it.
  for (size_t i = 0; i < fakes_.size(); ++i) fakes_[i]->set_force_status(0);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", body).status, 200);
  const HttpResponse after = AdminFetch(port_, "POST", "/admin/explain", body);
  EXPECT_EQ(CountOf(after.body, R"("matched_tokens":{"gpu":0,)"), 1u) << after.body;
}

TEST_F(KvAwareGatewayTest, AdminWorkersShowsIndexAndLoad) {
  StartFleet(2, "kvaware");
  ASSERT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Body(1, 0)).status, 200);
  const HttpResponse w = AdminFetch(port_, "GET", "/admin/workers");
  ASSERT_EQ(w.status, 200);
  EXPECT_THAT(w.body, HasSubstr(R"("healthy":true)"));
  EXPECT_THAT(w.body, HasSubstr(R"("load":{"in_flight":0)"));
  EXPECT_THAT(w.body, HasSubstr(R"("blocks":{"gpu":)"));
  EXPECT_THAT(w.body, HasSubstr(R"("distinct_blocks":)"));
}

TEST_F(KvAwareGatewayTest, ExplainRejectsBadInput) {
  StartFleet(1, "kvaware");
  ExpectOpenAiError(AdminFetch(port_, "POST", "/admin/explain", "{nope"), 400);
  ExpectOpenAiError(AdminFetch(port_, "GET", "/admin/explain"), 405);
}

TEST_F(KvAwareGatewayTest, SeparateAdminListenerWithToken) {
  StartFleet(1, "kvaware", Admin("127.0.0.1:0", "s3cret"));
  const uint16_t admin = gateway_->admin_port();
  ASSERT_NE(admin, 0);
  ExpectOpenAiError(Fetch(port_, "GET", "/admin/workers"), 404);  // not on the main listener
  ExpectOpenAiError(Fetch(admin, "GET", "/admin/workers"), 401);
  EXPECT_EQ(Fetch(admin, "GET", "/admin/workers", "", {{"Authorization", "Bearer s3cret"}}).status,
            200);
  ExpectOpenAiError(Fetch(admin, "POST", "/v1/chat/completions", Body(0, 0)), 404);
  EXPECT_EQ(Fetch(admin, "GET", "/metrics").status, 200);
}

TEST_F(KvAwareGatewayTest, EveryPolicyServesTraffic) {
  for (const char* p : {"round_robin", "random", "least_request", "power_of_two", "consistent_hash",
                        "cache_aware", "cost", "weighted", "kvaware"}) {
    fakes_.clear();
    if (gateway_) gateway_->Stop();
    StartFleet(3, p);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", Body(i, 0)).status, 200) << p;
    }
  }
}

}  // namespace
}  // namespace kvgate::testing

namespace kvgate::testing {
namespace {

// True once the worker's streamed bytes have stopped growing for three polls in a row (the
// socket buffers on both sides are full), within 30 s.
bool WaitForBackpressure(FakeUpstream& f) {
  uint64_t last = 0;
  int stable = 0;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (stable < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(100ms);
    const uint64_t now = f.streamed_bytes();
    stable = now == last && now > 0 ? stable + 1 : 0;
    last = now;
  }
  return stable == 3;
}

// A client that stops reading a 1 GiB stream: the relay reads from the worker only as fast as
// the client drains, so the gateway's memory stays bounded while others keep being served.
TEST_F(GatewayTest, ClientThatStopsReadingAGigabyteStreamHoldsBoundedMemory) {
  FakeUpstream& f = StartWithOneFake(FakeUpstream::Options{.threads = 2});
  const uint64_t rss_before = ProcessRssBytes(::getpid());
  const uint64_t heap_before = HeapInUseBytes();
  StreamingRequest slow(port_, "/v1/chat/completions", ChatBody(true),
                        {{"x-fake-chunks", "131072"}, {"x-fake-chunk-bytes", "8192"}});  // 1 GiB
  ASSERT_TRUE(slow.ReadHeader());
  // Let the stream run into backpressure: the worker's bytes stop growing once the socket
  // buffers on both sides are full.
  ASSERT_TRUE(WaitForBackpressure(f))
      << "the worker never stopped: " << f.streamed_bytes() << " bytes";
  const uint64_t rss_stalled = ProcessRssBytes(::getpid());
  const uint64_t heap_stalled = HeapInUseBytes();
  // What left the worker is what the kernel's socket buffers hold, not the stream.
  EXPECT_LT(f.streamed_bytes(), 64ull << 20) << f.streamed_bytes();
  // Live heap, not RSS: a sanitizer's quarantine keeps every freed chunk resident for a while.
  EXPECT_LT(heap_stalled, heap_before + (16ull << 20))
      << "live heap grew from " << heap_before << " to " << heap_stalled;
  if (!UnderSanitizerAllocator()) {
    EXPECT_LT(rss_stalled, rss_before + (48ull << 20))
        << "RSS grew from " << rss_before << " to " << rss_stalled;
  }
  std::printf(
      "1 GiB stream, client not reading: worker stopped after %llu MiB; live heap %+lld KiB, "
      "RSS %+lld KiB\n",
      static_cast<unsigned long long>(f.streamed_bytes() >> 20),
      (static_cast<long long>(heap_stalled) - static_cast<long long>(heap_before)) / 1024,
      (static_cast<long long>(rss_stalled) - static_cast<long long>(rss_before)) / 1024);
  // Other clients on the same gateway thread keep flowing.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", ChatBody(false), {}, 5s).status, 200);
    StreamingRequest s(port_, "/v1/chat/completions", ChatBody(true), {{"x-fake-chunks", "3"}});
    ASSERT_TRUE(s.ReadHeader(5s));
    EXPECT_THAT(s.ReadAll(5s), HasSubstr("[DONE]"));
  }
  slow.Close();
  EXPECT_TRUE(WaitFor([&] { return f.cancelled() >= 1; }, 10s));
}

// The same stalled client, then reading on: every byte the worker sent arrives, in order. A
// write the client's socket takes only in part keeps its rest (the relay writes at once and
// waits only for what is left).
TEST_F(GatewayTest, AClientThatStallsAndReadsOnGetsEveryByteOfAStream) {
  FakeUpstream& f = StartWithOneFake(FakeUpstream::Options{.threads = 2});
  constexpr int kEvents = 4096;  // 4096 x 16 KiB = 64 MiB: more than the socket buffers hold
  StreamingRequest slow(
      port_, "/v1/chat/completions", ChatBody(true),
      {{"x-fake-chunks", std::to_string(kEvents)}, {"x-fake-chunk-bytes", "16384"}});
  ASSERT_TRUE(slow.ReadHeader());
  ASSERT_TRUE(WaitForBackpressure(f))
      << "the worker never stopped: " << f.streamed_bytes() << " bytes";
  const std::string body = slow.ReadAll(60s);
  size_t pos = 0;
  for (int i = 0; i < kEvents; ++i) {
    const std::string content = "\"content\":\"tok" + std::to_string(i) + " ";
    const size_t at = body.find(content, pos);
    ASSERT_NE(at, std::string::npos) << "event " << i << " missing or out of order";
    const size_t x = at + content.size();
    const size_t end = body.find('"', x);
    ASSERT_NE(end, std::string::npos);
    ASSERT_EQ(end - x + content.size() - 11, 16384u) << "event " << i << " lost bytes";
    pos = end;
  }
  EXPECT_THAT(body.substr(pos), HasSubstr("data: [DONE]"));
}

}  // namespace
}  // namespace kvgate::testing
