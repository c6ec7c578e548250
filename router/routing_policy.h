// File: router/routing_policy.h
// The seam between the proxy and the decision of which worker serves a request. Policies see
// only available candidates (healthy, breaker closed, serving the model), each with what the
// prefix index says it holds and the load on it; they never do I/O. See docs/routing.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "kvindex/types.h"
#include "router/worker.h"

namespace kvgate::router {

/// What a policy may know about a request. Views stay valid for the duration of Choose().
struct RouteRequest {
  std::string_view endpoint;     // "/v1/chat/completions", ...
  std::string_view model;        // empty when the body names none
  std::string_view session_key;  // x-session-id header, else the body's "user"; may be empty
  std::string_view body;         // the request body exactly as received
  uint32_t attempt = 0;          // 0 for the first try, then one per retry
  absl::Span<const kvindex::BlockHash> chain;  // prompt blocks; empty when not hashed
  absl::Span<const uint32_t> tokens;           // precise mode: the prompt's token ids
  uint32_t prompt_tokens = 0;                  // estimated prompt length in tokens
  uint32_t block_tokens = 16;                  // tokens per chain block
  uint64_t tie_seed = 0;  // varies per decision: ties never resolve alike for a burst
  // True when the deepest cached match of this prompt ends at a fork point: earlier requests
  // continued that prefix in different ways (a shared system prompt, a common tool block), so
  // the match is shared context rather than one session's own history.
  bool match_is_shared_prefix = false;
  SteadyClock::time_point now{};
};

/// One available worker as the policy sees it.
struct Candidate {
  Worker* worker = nullptr;
  uint32_t cached_blocks[kvindex::kNumTiers] = {0, 0, 0};  // leading blocks held, per tier
  uint32_t cached_any_blocks = 0;  // leading blocks held in at least one tier
  LoadSnapshot load;               // the gateway's own reservations
  EngineStats engine;              // last scrape of the worker's metrics
};

/// Per-candidate explanation filled when asked (POST /admin/explain).
struct CandidateScore {
  double score = 0;              // the policy's own figure (see docs/routing.md per policy)
  double predicted_ttft_s = -1;  // kvaware only
  bool eligible = true;          // false: filtered out before scoring (e.g. over load bound)
  std::string note;
};

/// How a routed request ended, for policies that learn.
struct RouteOutcome {
  bool success = false;                  // a response was relayed to the client
  int status = 0;                        // upstream HTTP status, 0 when none arrived
  int64_t cached_tokens = -1;            // usage.prompt_tokens_details.cached_tokens, -1 if absent
  int64_t prompt_tokens = -1;            // usage.prompt_tokens, -1 if absent
  double ttfb_seconds = -1;              // request written -> first response byte; -1 if none
  int64_t predicted_cached_tokens = 0;   // what the index predicted at decision time
  int64_t queue_tokens_at_dispatch = 0;  // pending prefill tokens ahead of this request
  int64_t uncached_tokens = 0;           // this request's reserved prefill tokens
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;

  /// Picks one of `candidates` (never empty) and returns its index. When `scores` is not null
  /// it is resized to candidates.size() and filled. Called under the gateway's decision lock
  /// (one decision at a time, reservations applied before the next), so implementations may
  /// keep unsynchronised state but must not block.
  virtual size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                        std::vector<CandidateScore>* scores) = 0;

  /// True when the policy reads `cached_blocks`: the gateway then hashes prompts and learns.
  virtual bool UsesPrefixCache() const { return false; }

  /// Reports how a request routed to `worker` ended. Called without the decision lock, from
  /// any thread. Default: nothing to learn.
  virtual void OnComplete(Worker& worker, const RouteOutcome& outcome) {}

  /// The configured name ("round_robin", ...).
  virtual std::string_view name() const = 0;
};

using RoutingPolicySharedPtr = std::shared_ptr<RoutingPolicy>;

}  // namespace kvgate::router
