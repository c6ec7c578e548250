// File: router/routing_policy.h
// The seam between the proxy and the decision of which worker serves a request. Policies see
// only available candidates (healthy, breaker closed, serving the model) and never do I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/types/span.h"
#include "router/worker.h"

namespace kvgate::router {

/// What a policy may know about a request. Views stay valid for the duration of Choose().
struct RouteRequest {
  std::string_view endpoint;     // "/v1/chat/completions", ...
  std::string_view model;        // empty when the body names none
  std::string_view session_key;  // x-session-id header, else the body's "user"; may be empty
  std::string_view body;         // the request body exactly as received
  uint32_t attempt = 0;          // 0 for the first try, then one per retry
};

/// How a routed request ended, for policies that learn.
struct RouteOutcome {
  bool success = false;           // a response was relayed to the client
  int status = 0;                 // upstream HTTP status, 0 when none arrived
  int64_t cached_tokens = -1;     // usage.prompt_tokens_details.cached_tokens, -1 if absent
  int64_t prompt_tokens = -1;     // usage.prompt_tokens, -1 if absent
  double ttfb_seconds = 0;        // request written -> first response byte
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;

  /// Picks one of `candidates` (never empty) for `request`. Called concurrently from every
  /// gateway thread: implementations are thread-safe and must not block.
  virtual Worker* Choose(const RouteRequest& request, absl::Span<Worker* const> candidates) = 0;

  /// Reports how a request routed to `worker` ended. Default: nothing to learn.
  virtual void OnComplete(const RouteRequest& request, Worker& worker,
                          const RouteOutcome& outcome) {}

  /// The configured name ("round_robin", ...).
  virtual std::string_view name() const = 0;
};

using RoutingPolicySharedPtr = std::shared_ptr<RoutingPolicy>;

}  // namespace kvgate::router
