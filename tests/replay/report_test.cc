#include "bench/replay/report.h"

#include "bench/replay/sse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SummarizeTest, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const LatencySummary s = Summarize(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p90, 90);
  EXPECT_EQ(s.p99, 99);
  EXPECT_EQ(Summarize({}).count, 0u);
  EXPECT_EQ(Summarize({3}).p99, 3);
}

RequestRecord Ok(std::string worker, uint64_t prompt, uint64_t cached) {
  RequestRecord r;
  r.status = 200;
  r.worker = std::move(worker);
  r.ttft_s = 0.1;
  r.e2e_s = 0.5;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.completion_tokens = 5;
  return r;
}

TEST(ReportTest, StoreLoadedTokensArePartOfTheCached) {
  RequestRecord a = Ok("w1", 1000, 900);
  a.store_tokens = 600;
  RequestRecord b = Ok("w2", 1000, 100);
  const Report r = BuildReport({a, b}, {}, 1.0);
  EXPECT_EQ(r.cached_tokens, 1000u);
  EXPECT_EQ(r.store_tokens, 600u);
  EXPECT_EQ(r.workers.at("w1").store_tokens, 600u);
  const std::string json = ReportToJson(r);
  EXPECT_THAT(json, HasSubstr(R"("cached_tokens":1000,"store_tokens":600)"));
  EXPECT_THAT(json, HasSubstr(R"("store_ratio":0.3)"));
  EXPECT_THAT(ReportToTable(r), HasSubstr("loaded from the KV store 600 (30.0% of prompt tokens)"));
}

TEST(ReportTest, CountsPerWorkerAndErrors) {
  RequestRecord failed;
  failed.status = 503;
  failed.error = "HTTP 503";
  failed.worker = "w1";
  RequestRecord transport;
  transport.error = "connect: refused";
  const Report r = BuildReport({Ok("w1", 100, 50), Ok("w2", 100, 0), failed, transport},
                               {{"w1", 2}, {"w2", 1}}, 2.0);
  EXPECT_EQ(r.requests, 4u);
  EXPECT_EQ(r.ok, 2u);
  EXPECT_EQ(r.errors, 2u);
  EXPECT_EQ(r.error_kinds.at("http_503"), 1u);
  EXPECT_EQ(r.error_kinds.at("transport"), 1u);
  EXPECT_EQ(r.prompt_tokens, 200u);
  EXPECT_EQ(r.cached_tokens, 50u);
  EXPECT_DOUBLE_EQ(r.cached_ratio(), 0.25);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s(), 5.0);
  EXPECT_EQ(r.workers.at("w1").requests, 2u);
  EXPECT_EQ(r.workers.at("w1").errors, 1u);
  EXPECT_EQ(r.workers.at("w1").max_concurrent, 2u);
  EXPECT_EQ(r.workers.at("w2").cached_tokens, 0u);
  EXPECT_DOUBLE_EQ(r.tpot.mean, 0.1);  // (0.5 - 0.1) / 4
  const std::string json = ReportToJson(r);
  EXPECT_THAT(json, HasSubstr(R"("totals":{"requests":4,"ok":2,"errors":2)"));
  EXPECT_THAT(json, HasSubstr(R"("w1":{"requests":2,"errors":1,"prompt_tokens":100)"));
  EXPECT_THAT(json, HasSubstr(R"("bounds":null)"));
  const std::string table = ReportToTable(r);
  EXPECT_THAT(table, HasSubstr("TTFT"));
  EXPECT_THAT(table, HasSubstr("http_503 1"));
}

TEST(SseTest, SplitsEventsAcrossReads) {
  SseSplitter splitter;
  std::vector<std::string> events;
  auto on = [&](std::string_view d) { events.emplace_back(d); };
  splitter.Feed("data: {\"a\":1}\n\nda", on);
  splitter.Feed("ta: [DONE]\r\n\r\n: comment\n\n", on);
  splitter.Finish(on);
  EXPECT_THAT(events, ElementsAre("{\"a\":1}", "[DONE]"));
}

TEST(SseTest, ParsesContentUsageAndErrors) {
  StreamEventParser parser;
  StreamEvent ev;
  ASSERT_TRUE(parser.Parse(R"({"choices":[{"index":0,"delta":{"content":"hi"}}]})", &ev));
  EXPECT_TRUE(ev.token);
  EXPECT_EQ(ev.content, "hi");
  ASSERT_TRUE(
      parser.Parse(R"({"choices":[{"text":"yo","finish_reason":null}],"usage":null})", &ev));
  EXPECT_EQ(ev.content, "yo");
  EXPECT_FALSE(ev.usage);
  ASSERT_TRUE(parser.Parse(R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,)"
                           R"("prompt_tokens_details":{"cached_tokens":8}}})",
                           &ev));
  EXPECT_FALSE(ev.token);
  EXPECT_TRUE(ev.usage);
  EXPECT_EQ(ev.prompt_tokens, 10u);
  EXPECT_EQ(ev.completion_tokens, 3u);
  EXPECT_EQ(ev.cached_tokens, 8u);
  ASSERT_TRUE(parser.Parse(R"({"error":{"message":"boom"}})", &ev));
  EXPECT_EQ(ev.error, "boom");
  ASSERT_TRUE(parser.Parse("[DONE]", &ev));
  EXPECT_TRUE(ev.done);
  EXPECT_FALSE(parser.Parse("not json", &ev));
}

}  // namespace
}  // namespace kvgate::replay
