#include "router/dispatch/retry_dispatcher.h"

#include <algorithm>
#include <random>

#include "absl/cleanup/cleanup.h"
#include "common/strings.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/routing/ttft_prediction.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

net::awaitable<void> Backoff(std::minstd_rand& rng, const config::RetryConfig& retry,
                             uint32_t attempt) {
  double ms = static_cast<double>(retry.backoff_base_ms) *
              static_cast<double>(1u << std::min(attempt, 10u));
  ms = std::min(ms, static_cast<double>(retry.backoff_max_ms));
  std::uniform_real_distribution<double> jitter(1.0 - retry.jitter, 1.0 + retry.jitter);
  ms *= jitter(rng);
  if (ms < 1) co_return;
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  co_await timer.async_wait(kNoThrow);
}

}  // namespace

void RecordPrediction(const WorkerSeries& s, const Prediction& p) {
  if (p.ttft_compared) {
    s.ttft_error->Observe(TtftPredictionError(p.predicted_ttft_s, p.actual_ttft_s).abs_relative);
    s.ttft_predicted->Increment(p.predicted_ttft_s);
    s.ttft_observed->Increment(p.actual_ttft_s);
  }
  if (!p.compared) return;
  s.predicted->Increment(static_cast<double>(p.predicted_tokens));
  s.actual->Increment(static_cast<double>(p.actual_tokens));
  if (p.predicted_tokens > p.actual_tokens) {
    s.over->Increment(static_cast<double>(p.predicted_tokens - p.actual_tokens));
  } else if (p.actual_tokens > p.predicted_tokens) {
    s.under->Increment(static_cast<double>(p.actual_tokens - p.predicted_tokens));
  }
}

net::awaitable<void> RetryDispatcher::Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) {
  co_await Serve(tc, ex, plan, Options{});
}

net::awaitable<RetryDispatcher::Result> RetryDispatcher::Serve(ThreadContext& tc, Exchange& ex,
                                                               RoutePlan& plan, Options o) {
  const config::Config& cfg = *ex.snapshot->config;
  RoutePlanner& planner = planner_;
  WatchForDisconnect(ex.conn);
  absl::Cleanup disarm = [&ex] { DisarmDisconnectWatch(ex.conn); };

  Result result;
  plan.learn_when_sent = true;  // Decide's learning waits for the write (Learn below)
  const uint32_t max_attempts = o.retry ? std::max(1u, cfg.retry.max_attempts) : 1u;
  for (uint32_t attempt = 0; attempt < max_attempts; ++attempt) {
    // `first`'s worker is among `tried` already.
    const size_t untried = plan.available.size() - plan.tried.size() + (o.first ? 1 : 0);
    if (untried == 0) break;
    if (attempt > 0) co_await Backoff(rng_, cfg.retry, attempt - 1);
    if (ex.conn.client_gone) {
      if (o.first) planner.Complete(plan, *o.first, RouteOutcome{});
      break;
    }
    Decision d = o.first ? *std::move(o.first)
                         : planner.Decide(plan, attempt, /*commit=*/true, SteadyClock::now());
    o.first.reset();
    Worker& worker = *d.worker;
    UpstreamAttempt a;
    a.worker = &worker;
    a.dp_rank = d.dp_rank;
    a.last = attempt + 1 == max_attempts || untried == 1;
    a.body = o.body;
    a.request_id = o.request_id;
    a.reservation = &d.reservation;
    ex.attempts = attempt + 1;
    ex.prediction.clear();
    ex.predicted_cached_tokens = -1;
    if (plan.config->kvaware.prediction_header) {
      if (d.predicted_ttft) ex.prediction = PredictionHeader(*d.predicted_ttft);
      if (plan.policy->UsesPrefixCache() && !plan.chain.empty()) {
        ex.predicted_cached_tokens = d.predicted_cached_tokens + d.predicted_store_tokens;
      }
    }
    const auto learn = [&] { planner.Learn(plan, d, SteadyClock::now()); };
    const absl::FunctionRef<void()> on_sent(learn);
    a.on_sent = &on_sent;
    const AttemptResult r = co_await upstream_.Send(tc, ex, a);

    const WorkerSeries& series = tc.ForWorker(worker.id(), worker.name());
    if (r.ttfb_seconds >= 0) {
      result.got_head = true;
      ex.ttfb_seconds = r.ttfb_seconds;
      series.ttfb->Observe(r.ttfb_seconds);
    }
    if (r.ttft_seconds >= 0) series.ttft->Observe(r.ttft_seconds);
    ex.cached_tokens = r.cached_tokens;
    ex.prompt_tokens = r.prompt_tokens;
    ex.response_id = r.response_id;
    RouteOutcome outcome;
    outcome.success = r.outcome == AttemptOutcome::kRelayed;
    outcome.error_answer = ex.response.status() < 200 || ex.response.status() >= 300;
    if (o.learn && plan.learn) {
      outcome.cached_tokens = r.cached_tokens;
      outcome.prompt_tokens = r.prompt_tokens;
      outcome.output_tokens = r.output_tokens;
      // What kvaware predicts and learns is the client's wait: its own time before the send
      // counts (0.76 ms a request on average in the agentic replay on 2 cores, 10% of a short
      // prompt's TTFT there: issue 30).
      outcome.ttft_seconds =
          r.ttft_since_read_seconds >= 0 ? r.ttft_since_read_seconds : r.ttft_seconds;
    }
    RecordPrediction(series, planner.Complete(plan, d, outcome));

    switch (r.outcome) {
      case AttemptOutcome::kRelayed:
        result.answered = true;
        co_return result;
      case AttemptOutcome::kClientGone:
        RecordClientGone(ex);
        spdlog::info("request {}: {}", ex.request_id, r.reason);
        result.answered = true;
        co_return result;
      case AttemptOutcome::kTimeout:
        ex.worker = worker.name();
        ex.worker_id = worker.id();
        co_await WriteError(tc, ex, 504, r.reason, "timeout", "upstream_timeout");
        result.answered = true;
        co_return result;
      case AttemptOutcome::kBadResponse:
        ex.worker = worker.name();
        ex.worker_id = worker.id();
        spdlog::warn("request {}: {}", ex.request_id, r.reason);
        co_await WriteError(tc, ex, 502, r.reason, "upstream_error", "bad_upstream_response");
        result.answered = true;
        co_return result;
      case AttemptOutcome::kRetry:
        break;
    }
    result.last_error = r.reason;
    spdlog::warn("request {}: attempt {} on {} failed: {}", ex.request_id, attempt + 1,
                 worker.name(), r.reason);
    if (attempt + 1 < max_attempts && plan.tried.size() < plan.available.size()) {
      metrics_.Retries(r.metric_reason).Increment();
    }
  }
  if (o.first) planner.Complete(plan, *o.first, RouteOutcome{});
  if (ex.conn.client_gone) {
    RecordClientGone(ex);
    result.answered = true;
    co_return result;
  }
  if (!o.answer_unavailable) co_return result;
  co_await WriteError(tc, ex, 503,
                      common::StrCat("no worker could serve the request after ", ex.attempts,
                                     " attempt(s); last error: ", result.last_error),
                      "service_unavailable", "upstream_unavailable");
  result.answered = true;
  co_return result;
}

}  // namespace kvgate::router
