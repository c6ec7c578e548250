// File: router/policies/routing_policy.h
// The seam between the planner and the decision of which worker serves a request. Policies see
// values only: each candidate is a snapshot of one available worker (healthy, breaker closed,
// serving the model) with what the prefix index says it holds, the load the gateway reserved
// on it, its learned prefill rate and its scraped engine signals. They never touch a worker,
// take a lock or do I/O, so they build and test without Beast, ZeroMQ or Prometheus
// (target kvgate_policies). See docs/routing.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "kvindex/types.h"
#include "router/policies/engine_stats.h"

namespace kvgate::router {

using SteadyClock = std::chrono::steady_clock;

/// Load the gateway itself placed on a worker, reserved at decision time (before the next
/// decision on any thread), so that a burst never sees stale numbers.
struct LoadSnapshot {
  int64_t in_flight = 0;               // requests outstanding
  int64_t pending_prefill_tokens = 0;  // uncached prompt tokens not yet answered (first byte)
  int64_t active_decode = 0;           // requests past admission, until completion
  int64_t active_kv_blocks = 0;  // prompt blocks of outstanding requests (Dynamo's decode load)
};

/// A worker's identity as policies know it: stable id (the kvindex holder), canonical URL and
/// configured weight. The set a policy is built for is the whole published worker list.
struct WorkerIdentity {
  uint32_t id = 0;
  std::string name;
  double weight = 1.0;
};

/// What a policy may know about a request. Views stay valid for the duration of Choose().
struct RouteRequest {
  std::string_view endpoint;     // "/v1/chat/completions", ...
  std::string_view model;        // empty when the body names none
  std::string_view session_key;  // x-session-id header, else the body's "user"; may be empty
  std::string_view body;         // the request body exactly as received
  uint32_t attempt = 0;          // 0 for the first try, then one per retry
  absl::Span<const kvindex::BlockHash> chain;  // prompt blocks; empty when not hashed
  uint32_t prompt_tokens = 0;                  // estimated prompt length in tokens
  uint32_t block_tokens = 16;                  // tokens per chain block
  uint64_t tie_seed = 0;  // varies per decision: ties never resolve alike for a burst
  // True when the deepest cached match of this prompt ends at a fork point: earlier requests
  // continued that prefix in different ways (a shared system prompt, a common tool block), so
  // the match is shared context rather than one session's own history.
  bool match_is_shared_prefix = false;
  // Loading a store's KV into a worker: learned from TTFTs, else the configured figure.
  double store_tokens_per_second = 0;
  SteadyClock::time_point now{};
};

/// One available worker as the policy sees it: plain values, read before the decision (the
/// load under the decision lock, since reservations are made under it).
struct Candidate {
  uint32_t worker_id = 0;
  std::string_view name;  // canonical URL, valid during Choose
  double weight = 1.0;
  uint32_t cached_blocks[kvindex::kNumTiers] = {0, 0, 0};  // leading blocks held, per tier
  uint32_t cached_any_blocks = 0;  // leading blocks held in at least one tier
  LoadSnapshot load;               // the gateway's own reservations
  // Seconds the engine has been on the first of load.pending_prefill_tokens (of this replica's
  // reservations): that part of the queue is done (Worker::PrefillBusySeconds).
  double prefill_busy_s = 0;
  EngineStats engine;       // last scrape of the worker's metrics
  double prefill_rate = 0;  // token-equivalents/s learned from observed TTFTs; 0 = not observed
  double prefill_overhead_s = 0;  // what every TTFT costs here beside the prefill (learned)
  double recent_work = 0;         // decayed prompt tokens routed here (kvaware's balance term)
  bool precise = false;           // cached_blocks come from the engine's own KV events
  int dp_rank = -1;               // precise mode: the DP rank holding the most, -1 none
};

/// The prefill work of `uncached` tokens after `cached` ones, in token-equivalents: attention
/// makes a token cost more the longer the context before it, by `context_factor` of a
/// context-free token's cost per context token (routing.kvaware.prefill_context_factor).
inline double PrefillWork(double uncached, double cached, double context_factor) {
  return uncached * (1 + context_factor * (cached + uncached / 2));
}

/// Per-candidate explanation filled when asked (POST /admin/explain).
/// kvaware's predicted TTFT of one candidate, term by term (seconds; explain shows them).
struct TtftParts {
  double queue = 0;       // the prefill queued ahead of this request
  double prefill = 0;     // the uncached tokens, recomputed
  double overhead = 0;    // what the worker's TTFTs cost beside their prefill (learned)
  double host_load = 0;   // tokens in the worker's host tier, loaded
  double store_load = 0;  // tokens loadable from a store
  double decode_interference = 0;
  double kv_wait = 0;  // waiting for KV room beside the running requests
  double total() const {
    return queue + prefill + overhead + host_load + store_load + decode_interference + kv_wait;
  }
};

struct CandidateScore {
  double score = 0;              // the policy's own figure (see docs/routing.md per policy)
  double predicted_ttft_s = -1;  // kvaware only
  TtftParts ttft_parts;          // kvaware only
  bool eligible = true;          // false: filtered out before scoring (e.g. over load bound)
  std::string note;
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;

  /// Picks one of `candidates` (never empty) and returns its index. When `scores` is not null
  /// it is resized to candidates.size() and filled. Called under the planner's decision lock
  /// (one decision at a time, reservations applied before the next), so implementations may
  /// keep unsynchronised state but must not block.
  virtual size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                        std::vector<CandidateScore>* scores) = 0;

  /// The policy's predicted time to first token of `request` on candidates[chosen], term by
  /// term, as Choose() saw it; nullopt for a policy that predicts none. The gateway compares it
  /// with the TTFT it observes (kvgate_ttft_prediction_error_ratio).
  virtual std::optional<TtftParts> Predict(const RouteRequest& /*request*/,
                                           absl::Span<const Candidate> /*candidates*/,
                                           size_t /*chosen*/) const {
    return std::nullopt;
  }

  /// True when the policy reads `cached_blocks`: the gateway then hashes prompts and learns.
  virtual bool UsesPrefixCache() const { return false; }

  /// The configured name ("round_robin", ...).
  virtual std::string_view name() const = 0;
};

using RoutingPolicySharedPtr = std::shared_ptr<RoutingPolicy>;

}  // namespace kvgate::router
