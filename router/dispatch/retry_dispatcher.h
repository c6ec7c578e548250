// File: router/dispatch/retry_dispatcher.h
// Today's dispatch mode: decide, send to the chosen worker, and when the attempt fails before
// the client saw a byte (connect error, reset, a 5xx that is not the last chance) back off
// with jitter and decide again among the workers not tried yet, up to retry.max_attempts. The
// client's disconnect is watched for the whole dispatch (one async_wait, no coroutine), and
// stops the worker's generation. Thread-compatible: one per gateway thread.
#pragma once

#include "router/dispatch/dispatcher.h"
#include "router/upstream/upstream.h"

namespace kvgate::router {

class RetryDispatcher : public Dispatcher {
 public:
  /// `upstream` must outlive the dispatcher.
  explicit RetryDispatcher(Upstream& upstream) : upstream_(upstream) {}

  // router::Dispatcher
  net::awaitable<void> Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) override;

 private:
  Upstream& upstream_;
};

}  // namespace kvgate::router
