// File: router/dispatch/dispatcher.h
// The seam between a planned request and the attempts that serve it. The retry dispatcher
// (dispatch/retry_dispatcher.h) is today's mode: one worker per attempt, retried elsewhere
// when it fails before the client saw a byte. Prefill/decode disaggregation is another
// dispatcher (two workers per request). Thread-compatible: one per gateway thread.
#pragma once

#include <memory>

#include "net/asio.h"
#include "router/http/exchange.h"
#include "router/routing/route_planner.h"

namespace kvgate::router {

class ThreadContext;

class Dispatcher {
 public:
  virtual ~Dispatcher() = default;

  /// Serves `ex` with the workers `plan` allows and always answers the client: the relayed
  /// response, or a gateway error (503 when no worker could serve it, 504 on a timeout, 502
  /// for a response that cannot be relayed). Learns from every attempt through the planner.
  virtual net::awaitable<void> Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) = 0;
};
using DispatcherPtr = std::unique_ptr<Dispatcher>;

}  // namespace kvgate::router
