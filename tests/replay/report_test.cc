#include "bench/replay/report.h"

#include <cmath>

#include "bench/replay/prediction.h"
#include "bench/replay/sse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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

TEST(PredictionHeaderTest, ParsesEveryPartInAnyOrder) {
  TtftPrediction p;
  ASSERT_TRUE(ParsePredictionHeader(
      "queue=0.1000; ttft=1.2345;prefill=0.9000;host=0.0000;store=0.2000;decode=0.0100;"
      "kv_wait=0.0235;overhead=0.0110",
      &p));
  EXPECT_TRUE(p.present());
  EXPECT_DOUBLE_EQ(p.ttft_s, 1.2345);
  EXPECT_THAT(p.parts_s,
              ElementsAre(0.1, 0.9, 0.011, 0.0, 0.2, 0.01, 0.0235));  // kPredictionParts.
}

TEST(PredictionHeaderTest, MissingPartsStayUnknownAndUnknownKeysAreIgnored) {
  TtftPrediction p;
  ASSERT_TRUE(ParsePredictionHeader("policy=kvaware v2;ttft=2;queue=0.5;;", &p));
  EXPECT_DOUBLE_EQ(p.ttft_s, 2);
  EXPECT_DOUBLE_EQ(p.parts_s[0], 0.5);
  for (size_t k = 1; k < kPredictionParts.size(); ++k) EXPECT_TRUE(std::isnan(p.parts_s[k]));
}

TEST(PredictionHeaderTest, MalformedHeadersLeaveNoPrediction) {
  for (const char* bad :
       {"", "queue=0.1;prefill=0.2", "ttft", "ttft=", "ttft=abc", "ttft=-1", "ttft=inf", "ttft=nan",
        "ttft=1;ttft=2", "ttft=1;queue=x", "ttft=1;queue=0.1;queue=0.2", "ttft=1;junk"}) {
    TtftPrediction p;
    EXPECT_FALSE(ParsePredictionHeader(bad, &p)) << bad;
    EXPECT_FALSE(p.present()) << bad;
  }
}

TEST(PredictionSummaryTest, RelativeErrorsOfAHandMadeCase) {
  // Errors -0.5, 0, 1; the last two pairs have no prediction or no measured TTFT.
  std::vector<TtftPrediction> predicted(5);
  predicted[0].ttft_s = 1;
  predicted[0].parts_s[1] = 0.8;  // prefill
  predicted[1].ttft_s = 2;
  predicted[1].parts_s[1] = 1.2;
  predicted[2].ttft_s = 4;
  predicted[4].ttft_s = 3;
  const PredictionSummary s = SummarizePredictions(predicted, {2, 2, 2, 2, 0});
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.abs_error_p50, 0.5);
  EXPECT_DOUBLE_EQ(s.abs_error_p90, 1);
  EXPECT_NEAR(s.bias, 0.1667, 1e-4);
  EXPECT_DOUBLE_EQ(s.over_share, 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.under_share, 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.predicted_ttft_mean_s, 7.0 / 3);
  EXPECT_DOUBLE_EQ(s.actual_ttft_mean_s, 2);
  EXPECT_DOUBLE_EQ(s.part_means_s[1], 1.0);  // Over the two headers that had it.
  EXPECT_TRUE(std::isnan(s.part_means_s[0]));
  EXPECT_EQ(SummarizePredictions({}, {}).count, 0u);
}

TEST(ReportTest, PredictionAndFloorInTheJsonTableAndRecords) {
  RequestRecord a = Ok("w1", 1000, 0);  // TTFT 0.1 s.
  ASSERT_TRUE(ParsePredictionHeader("ttft=0.15;queue=0.05;prefill=0.1", &a.prediction));
  a.compulsory_tokens = 1000;
  a.floor_s = 0.05;
  RequestRecord b = Ok("w1", 1000, 1000);
  b.compulsory_tokens = 0;
  b.floor_s = 0;
  RequestRecord failed;  // Neither error nor floor of a failed request counts.
  failed.error = "connect: refused";
  failed.floor_s = 1;
  failed.compulsory_tokens = 5000;
  failed.prediction.ttft_s = 9;
  Report r = BuildReport({a, b, failed}, {}, 1.0);
  r.floor.prefill_tokens_per_s = 20000;
  EXPECT_EQ(r.prediction.count, 1u);
  EXPECT_DOUBLE_EQ(r.prediction.bias, 0.5);
  ASSERT_TRUE(r.floor.computed);
  EXPECT_EQ(r.floor.count, 2u);
  EXPECT_EQ(r.floor.compulsory_tokens, 1000u);
  EXPECT_DOUBLE_EQ(r.floor.mean_s, 0.025);
  EXPECT_DOUBLE_EQ(r.floor.p99_s, 0.05);
  EXPECT_DOUBLE_EQ(r.floor.ttft_mean_above_s, 0.1 - 0.025);
  EXPECT_DOUBLE_EQ(r.floor.ttft_p99_above_s, 0.1 - 0.05);
  const std::string json = ReportToJson(r);
  EXPECT_THAT(json, HasSubstr(R"("prediction":{"count":1,"abs_error_p50":0.5,"abs_error_p90":0.5,)"
                              R"("bias":0.5,"over_share":1,"under_share":0,)"
                              R"("predicted_ttft_mean_s":0.15,"actual_ttft_mean_s":0.1,)"
                              R"("parts_mean_s":{"queue":0.05,"prefill":0.1,"overhead":null,)"
                              R"("host":null,)"));
  EXPECT_THAT(json, HasSubstr(R"("floor":{"prefill_tokens_per_s":20000,"count":2,)"
                              R"("compulsory_tokens":1000,"mean_s":0.025,"p99_s":0.05,)"
                              R"("ttft_mean_above_s":0.075,"ttft_p99_above_s":0.05})"));
  const std::string table = ReportToTable(r);
  EXPECT_THAT(table, HasSubstr("TTFT floor (compulsory prefill at 20000 tok/s, no queueing): "
                               "mean 25.00 ms  p99 50.00 ms; TTFT above it: mean 75.00 ms  p99 "
                               "50.00 ms"));
  EXPECT_THAT(table, HasSubstr("TTFT prediction (1 requests): |error| p50 50.0%  p90 50.0%  bias "
                               "+50.0%  over 100.0%  under 0.0%"));
  EXPECT_THAT(table, HasSubstr("mean predicted 150.00 ms (queue 50.00  prefill 100.00), "
                               "measured 100.00 ms"));
  const std::string records = RecordsToJsonl({a, RequestRecord{}});
  EXPECT_THAT(records, HasSubstr(R"("prediction":{"ttft":0.15,"queue":0.05,"prefill":0.1},)"
                                 R"("compulsory_tokens":1000,"floor_s":0.05,)"));
  EXPECT_THAT(records, HasSubstr(R"("prediction":null,"compulsory_tokens":null,"floor_s":null,)"));
  // Without predictions and --floor-prefill-rate, both sections are null and not in the table.
  const Report plain = BuildReport({Ok("w1", 10, 0)}, {}, 1.0);
  EXPECT_THAT(ReportToJson(plain), HasSubstr(R"("prediction":null,"floor":null})"));
  EXPECT_THAT(ReportToTable(plain), Not(HasSubstr("floor")));
  EXPECT_THAT(ReportToTable(plain), Not(HasSubstr("prediction")));
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

namespace kvgate::replay {
namespace {

TEST(CachedPredictionTest, ExactShareAndTokenErrorsOnAHandMadeRun) {
  // predicted / reported / prompt: exact, 16 over, 48 under, no header (skipped), exact.
  const auto s = SummarizeCachedPredictions({1024, 512, 0, -1, 64}, {1024, 496, 48, 7, 64},
                                            {2000, 1000, 100, 50, 100});
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.exact, 2u);
  EXPECT_EQ(s.over_tokens, 16u);
  EXPECT_EQ(s.under_tokens, 48u);
  EXPECT_EQ(s.abs_error_max, 48u);
  EXPECT_EQ(s.abs_error_p90, 48u);  // ceil(0.9 * 4) = 4th of {0, 0, 16, 48}
  EXPECT_DOUBLE_EQ(s.abs_error_mean, 16.0);
  EXPECT_DOUBLE_EQ(s.abs_error_share, 64.0 / 3200.0);
  EXPECT_EQ(SummarizeCachedPredictions({-1}, {5}, {9}).count, 0u);
}

// The engines' clocks: summarised over the requests that carried one, and less each one's floor
// where it had one; the records say null for a request without.
TEST(ReportTest, EngineClockTtftAndItsGapToTheFloor) {
  RequestRecord a = Ok("w1", 1000, 900);
  a.engine_ttft_s = 0.04;
  a.floor_s = 0.01;
  RequestRecord b = Ok("w2", 1000, 100);
  b.engine_ttft_s = 0.08;
  b.floor_s = 0.03;
  RequestRecord c = Ok("w2", 1000, 100);  // no engine figure: in neither summary
  c.floor_s = 0.02;
  const Report r = BuildReport({a, b, c}, {}, 1.0);
  EXPECT_EQ(r.engine_ttft.count, 2u);
  EXPECT_DOUBLE_EQ(r.engine_ttft.mean, 0.06);
  EXPECT_EQ(r.engine_above_floor.count, 2u);
  EXPECT_DOUBLE_EQ(r.engine_above_floor.mean, 0.04);
  EXPECT_EQ(r.ttft.count, 3u);
  const std::string json = ReportToJson(r);
  EXPECT_THAT(json, HasSubstr(R"("engine_ttft_s":{"count":2,"mean":0.06)"));
  EXPECT_THAT(json, HasSubstr(R"("engine_above_floor_s":{"count":2,"mean":0.04)"));
  const std::string lines = RecordsToJsonl({a, c});
  EXPECT_THAT(lines, HasSubstr(R"("engine_ttft_s":0.04)"));
  EXPECT_THAT(lines, HasSubstr(R"("engine_ttft_s":null)"));
  EXPECT_THAT(ReportToTable(r),
              HasSubstr("TTFT by the engines' clocks (2 requests): mean 60.00 ms"));
  // Without any: zero counts, and the table says nothing.
  const Report none = BuildReport({c}, {}, 1.0);
  EXPECT_EQ(none.engine_ttft.count, 0u);
  EXPECT_THAT(ReportToTable(none), ::testing::Not(HasSubstr("engines' clocks")));
}

}  // namespace
}  // namespace kvgate::replay
