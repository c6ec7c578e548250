// File: router/dispatch/retry_dispatcher.h
// Today's dispatch mode: decide, send to the chosen worker, and when the attempt fails before
// the client saw a byte (connect error, reset, a 5xx that is not the last chance) back off
// with jitter and decide again among the workers not tried yet, up to retry.max_attempts. The
// client's disconnect is watched for the whole dispatch (one async_wait, no coroutine), and
// stops the worker's generation. Thread-compatible: one per gateway thread.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "router/dispatch/dispatcher.h"
#include "router/upstream/upstream.h"

namespace kvgate::router {

class RouterMetrics;
struct WorkerSeries;

/// The prediction metrics of one completed attempt, in this thread's shard.
void RecordPrediction(const WorkerSeries& series, const Prediction& p);

class RetryDispatcher : public Dispatcher {
 public:
  /// `upstream` sends the attempts, `planner` decides and learns from them, `metrics` counts
  /// retries; all outlive the dispatcher. `seed` seeds the backoff jitter.
  RetryDispatcher(Upstream& upstream, RoutePlanner& planner, RouterMetrics& metrics, uint32_t seed)
      : upstream_(upstream), planner_(planner), metrics_(metrics), rng_(seed) {}

  // router::Dispatcher
  net::awaitable<void> Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) override;

  /// How Serve() deviates from Dispatch(): the P/D dispatcher's decode stage.
  struct Options {
    std::optional<Decision> first;      // a committed decision on the plan: the first attempt's
    const std::string* body = nullptr;  // sent instead of the client's body
    std::string_view request_id;        // X-Request-Id instead of the exchange's
    bool retry = true;  // false: one attempt (the worker is named in a KV rendezvous)
    bool learn = true;  // false: TTFT and cached tokens are not this worker's own prefill
    bool answer_unavailable = true;  // false: when no attempt got an answer, say so, write nothing
  };
  struct Result {
    bool answered = false;   // the client got a response (relayed or an error) or is gone
    bool got_head = false;   // some worker's response head arrived (a decode pulled its KV)
    std::string last_error;  // of the last failed attempt
  };
  net::awaitable<Result> Serve(ThreadContext& tc, Exchange& ex, RoutePlan& plan, Options options);

 private:
  Upstream& upstream_;
  RoutePlanner& planner_;
  RouterMetrics& metrics_;
  std::minstd_rand rng_;
};

}  // namespace kvgate::router
