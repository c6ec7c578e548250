// RetryDispatcher against a fake upstream (tests/router/fakes): which worker each attempt goes
// to, when it retries (a failure before the client saw a byte), when it stops (a relayed
// response, a timeout, a bad response, a client that left, the attempt budget, no worker left)
// and what the client is answered. No sockets: the fake scripts each attempt's outcome.
#include "router/dispatch/retry_dispatcher.h"

#include <set>

#include "gtest/gtest.h"
#include "router/routing/parsed_request.h"
#include "router/routing/ttft_prediction.h"
#include "tests/router/fakes/fake_upstream_stage.h"
#include "tests/router/fakes/thread_harness.h"

namespace kvgate::router {
namespace {

using testing::FakeUpstreamStage;
using testing::ThreadHarness;

constexpr std::string_view kBody = R"({"model":"m","prompt":"hello"})";

// A plan over every worker of the harness's snapshot, as the proxy handler makes it.
struct Planned {
  ParsedRequest parsed;
  RoutePlan plan;
};
std::unique_ptr<Planned> PlanFor(ThreadHarness& h, Exchange& ex) {
  auto p = std::make_unique<Planned>();
  const Snapshot& s = *ex.snapshot;
  EXPECT_TRUE(
      ParseRequest(ex.body, ex.body_capacity, ApiEndpoint::kCompletions, false, "", &p->parsed)
          .ok());
  auto plan = h.state().planner.Plan(p->parsed, ex.head.path, s.workers, *s.policies,
                                     s.config->routing, SteadyClock::now());
  EXPECT_TRUE(plan.ok()) << plan.status();
  p->plan = *std::move(plan);
  return p;
}

RetryDispatcher MakeDispatcher(ThreadHarness& h, Upstream& upstream) {
  return RetryDispatcher(upstream, h.state().planner, h.state().metrics, /*seed=*/1);
}

// One request, planned as the proxy handler plans it, through a RetryDispatcher over
// `upstream`; the plan is kept alive beside the exchange.
std::pair<std::unique_ptr<Exchange>, std::unique_ptr<Planned>> DispatchOne(ThreadHarness& h,
                                                                           Upstream& upstream) {
  RetryDispatcher dispatcher = MakeDispatcher(h, upstream);
  auto ex = h.NewExchange("/v1/completions", std::string(kBody));
  auto p = PlanFor(h, *ex);
  h.Run(dispatcher.Dispatch(h.tc(), *ex, p->plan));
  return {std::move(ex), std::move(p)};
}

double RetriesCounted(ThreadHarness& h, std::string_view reason) {
  return h.state().metrics.Retries(reason).Value();
}

TEST(RetryDispatcherTest, RetriesFailedAttemptsOnOtherWorkersUntilOneRelays) {
  ThreadHarness h(3);
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kRetry, "stale connection reset", "upstream_reset");
  upstream.Then(AttemptOutcome::kRetry, "answered 503", "status_5xx");
  upstream.Then(AttemptOutcome::kRelayed);
  auto [ex, p] = DispatchOne(h, upstream);

  ASSERT_EQ(upstream.sent().size(), 3u);
  std::set<std::string> workers;
  for (const auto& c : upstream.sent()) workers.insert(c.worker);
  EXPECT_EQ(workers.size(), 3u) << "each retry goes to a worker not tried yet";
  EXPECT_FALSE(upstream.sent()[0].last);
  EXPECT_FALSE(upstream.sent()[1].last);
  EXPECT_TRUE(upstream.sent()[2].last) << "the third attempt is the last chance";
  EXPECT_EQ(ex->attempts, 3u);
  EXPECT_EQ(ex->response.status(), 200);
  EXPECT_EQ(ex->worker, upstream.sent()[2].worker);
  EXPECT_EQ(RetriesCounted(h, "upstream_reset"), 1);
  EXPECT_EQ(RetriesCounted(h, "status_5xx"), 1);
}

TEST(RetryDispatcherTest, GivesUpAfterTheAttemptBudgetWith503) {
  ThreadHarness h(3, [](config::Config& c) { c.retry.max_attempts = 2; });
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kRetry, "connection refused");
  upstream.Then(AttemptOutcome::kRetry, "connection refused again");
  upstream.Then(AttemptOutcome::kRelayed);  // never reached
  auto [ex, p] = DispatchOne(h, upstream);

  ASSERT_EQ(upstream.sent().size(), 2u);
  EXPECT_TRUE(upstream.sent()[1].last) << "the budget's last attempt relays a 5xx";
  EXPECT_EQ(ex->response.status(), 503);
  EXPECT_EQ(ex->attempts, 2u);
  // The retry after the first failure is counted; none after the last.
  EXPECT_EQ(RetriesCounted(h, "connect_error"), 1);
}

TEST(RetryDispatcherTest, StopsWhenNoWorkerIsLeftToTry) {
  ThreadHarness h(2, [](config::Config& c) { c.retry.max_attempts = 5; });
  FakeUpstreamStage upstream;
  for (int i = 0; i < 5; ++i) upstream.Then(AttemptOutcome::kRetry);
  auto [ex, p] = DispatchOne(h, upstream);

  ASSERT_EQ(upstream.sent().size(), 2u) << "a worker is not tried twice";
  EXPECT_NE(upstream.sent()[0].worker, upstream.sent()[1].worker);
  EXPECT_TRUE(upstream.sent()[1].last) << "the only worker left is the last chance";
  EXPECT_EQ(ex->response.status(), 503);
}

TEST(RetryDispatcherTest, ATimeoutIsAnswered504WithoutRetry) {
  ThreadHarness h(3);
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kTimeout, "w did not answer");
  auto [ex, p] = DispatchOne(h, upstream);

  EXPECT_EQ(upstream.sent().size(), 1u);
  EXPECT_EQ(ex->response.status(), 504);
  EXPECT_EQ(ex->worker, upstream.sent()[0].worker) << "the error names the worker";
}

TEST(RetryDispatcherTest, ABadResponseIsAnswered502WithoutRetry) {
  ThreadHarness h(3);
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kBadResponse, "not HTTP");
  auto [ex, p] = DispatchOne(h, upstream);

  EXPECT_EQ(upstream.sent().size(), 1u);
  EXPECT_EQ(ex->response.status(), 502);
}

TEST(RetryDispatcherTest, AClientThatLeftIsRecorded499AndTheConnectionCloses) {
  ThreadHarness h(3);
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kClientGone, "client disconnected");
  RetryDispatcher dispatcher = MakeDispatcher(h, upstream);
  auto ex = h.NewExchange("/v1/completions", std::string(kBody));
  auto p = PlanFor(h, *ex);
  ASSERT_TRUE(ex->response.keep_alive());
  h.Run(dispatcher.Dispatch(h.tc(), *ex, p->plan));

  EXPECT_EQ(upstream.sent().size(), 1u);
  EXPECT_EQ(ex->response.status(), 499);
  EXPECT_FALSE(ex->response.keep_alive());
}

TEST(RetryDispatcherTest, ServeWithoutRetryMakesOneAttemptAndCanLeaveTheAnswerToItsCaller) {
  ThreadHarness h(3);
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kRetry, "refused");
  RetryDispatcher dispatcher = MakeDispatcher(h, upstream);
  auto ex = h.NewExchange("/v1/completions", std::string(kBody));
  auto p = PlanFor(h, *ex);
  const std::string body = "rewritten";
  RetryDispatcher::Options o;
  o.retry = false;
  o.answer_unavailable = false;
  o.body = &body;
  o.request_id = "shared-id";
  RetryDispatcher::Result r;
  h.Run(
      [&]() -> net::awaitable<void> { r = co_await dispatcher.Serve(h.tc(), *ex, p->plan, o); }());

  ASSERT_EQ(upstream.sent().size(), 1u);
  EXPECT_TRUE(upstream.sent()[0].last);
  EXPECT_EQ(upstream.sent()[0].body, "rewritten");
  EXPECT_EQ(upstream.sent()[0].request_id, "shared-id");
  EXPECT_FALSE(r.answered);
  EXPECT_EQ(r.last_error, "refused");
  EXPECT_EQ(ex->response.status(), 0) << "nothing was written to the client";
}

// kvaware's prediction for the chosen worker goes out in x-kvgate-prediction (when configured)
// and, once the stream's first token came, into the error histogram and the bias counters.
TEST(RetryDispatcherTest, KvawarePredictionReachesTheHeadAndTheErrorHistogram) {
  ThreadHarness h(2, [](config::Config& c) {
    c.routing.policy = "kvaware";
    c.routing.kvaware.prediction_header = true;
    c.routing.kvaware.prefill_tokens_per_second = 100;
    c.routing.kvaware.decode_interference_seconds = 0;
  });
  FakeUpstreamStage upstream;
  AttemptResult relayed;
  relayed.outcome = AttemptOutcome::kRelayed;
  relayed.ttfb_seconds = 0.001;
  upstream.ThenResult(relayed);
  RetryDispatcher dispatcher = MakeDispatcher(h, upstream);
  auto ex = h.NewExchange("/v1/completions", std::string(kBody));
  auto p = PlanFor(h, *ex);
  const double tokens = p->plan.prompt_tokens;
  ASSERT_GT(tokens, 0);
  h.Run(dispatcher.Dispatch(h.tc(), *ex, p->plan));
  ASSERT_EQ(upstream.sent().size(), 1u);
  // Nothing cached, nothing queued: the whole prompt at the configured 100 tokens/s.
  const std::string expected = PredictionHeader(TtftParts{.prefill = tokens / 100});
  EXPECT_NE(upstream.sent()[0].head.find("x-kvgate-prediction: " + expected + "\r\n"),
            std::string::npos)
      << upstream.sent()[0].head;
  auto histogram = [&] {
    const auto family = h.state().metrics.ttft_error.Collect();
    return family.metric.empty() ? prometheus::ClientMetric::Histogram{}
                                 : family.metric[0].histogram;
  };
  EXPECT_EQ(histogram().sample_count, 0u) << "no first token observed: nothing compared";

  // Observed twice the prediction: |error| 0.5, bias counters in seconds.
  relayed.ttft_seconds = 2 * tokens / 100;
  upstream.ThenResult(relayed);
  auto ex2 = h.NewExchange("/v1/completions", std::string(kBody));
  auto p2 = PlanFor(h, *ex2);
  h.Run(dispatcher.Dispatch(h.tc(), *ex2, p2->plan));
  ASSERT_EQ(upstream.sent().size(), 2u);
  const auto hist = histogram();
  EXPECT_EQ(hist.sample_count, 1u);
  EXPECT_NEAR(hist.sample_sum, 0.5, 0.01);  // the prediction may now include the first's queue
  double predicted = 0, observed = 0;
  for (const auto& m : h.state().metrics.ttft_predicted.Collect().metric)
    predicted += m.counter.value;
  for (const auto& m : h.state().metrics.ttft_observed.Collect().metric)
    observed += m.counter.value;
  EXPECT_DOUBLE_EQ(observed, 2 * tokens / 100);
  EXPECT_NEAR(predicted, tokens / 100, 0.01 * tokens / 100);
}

TEST(RetryDispatcherTest, NoPredictionHeaderUnlessConfigured) {
  ThreadHarness h(2, [](config::Config& c) { c.routing.policy = "kvaware"; });
  FakeUpstreamStage upstream;
  upstream.Then(AttemptOutcome::kRelayed);
  auto [ex, p] = DispatchOne(h, upstream);
  ASSERT_EQ(upstream.sent().size(), 1u);
  EXPECT_EQ(upstream.sent()[0].head.find("x-kvgate-prediction"), std::string::npos);
  EXPECT_NE(upstream.sent()[0].head.find("x-kvgate-worker: "), std::string::npos);
}

}  // namespace
}  // namespace kvgate::router
