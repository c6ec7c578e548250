// File: router/route_planner.h
// Where a routing decision is made: hashes the prompt, matches it against the prefix index,
// builds the candidates, asks the policy, reserves the chosen worker's load (all under one
// decision lock, so the next decision on any thread sees it), and afterwards learns what the
// worker now holds and how wrong the prediction was. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "config/config.h"
#include "kvindex/prefix_index.h"
#include "router/metrics.h"
#include "router/precise_mode.h"
#include "router/routing_policy.h"

namespace kvgate::router {

/// The routing view of a request body: its prefix chain and size.
struct PreparedPrompt {
  std::vector<kvindex::BlockHash> chain;
  uint32_t prompt_tokens = 0;
  bool hashed = false;  // false: the body could not be canonicalised (routed without cache data)
  // Precise mode: the prompt's token ids as the engines see them (empty when no worker has
  // kv_events, or the model has no tokenizer, or the request carries a cache_salt).
  std::vector<uint32_t> tokens;
};

/// The policies in force: a default and per-model overrides. Immutable once published.
struct PolicySet {
  RoutingPolicySharedPtr default_policy;
  absl::flat_hash_map<std::string, RoutingPolicySharedPtr> by_model;
  const RoutingPolicySharedPtr& For(std::string_view model) const;
  bool AnyUsesPrefixCache() const;
};
using PolicySetConstSharedPtr = std::shared_ptr<const PolicySet>;

/// Builds the policies of `config`. @return kInvalidArgument naming an unknown policy.
absl::StatusOr<PolicySetConstSharedPtr> MakePolicySet(const config::RoutingConfig& config);

/// One decision, with what explain shows and what completion needs.
struct Decision {
  size_t index = 0;
  Worker* worker = nullptr;
  std::vector<Candidate> candidates;
  std::vector<CandidateScore> scores;  // filled for explain only
  std::string policy;
  Reservation reservation;  // what Commit reserved (released by the proxy)
  int64_t predicted_cached_tokens = 0;
  int64_t queue_tokens_at_dispatch = 0;
  // Precise mode, per candidate: matched from the engines' events (else approximate), and the
  // DP rank holding the most (-1: none chosen). The proxy sends the chosen worker's rank.
  std::vector<bool> precise;
  std::vector<int> dp_ranks;
  std::vector<uint32_t> precise_blocks;  // leading engine blocks matched (any tier)
  int dp_rank = -1;
  std::vector<std::pair<uint32_t, std::vector<kvindex::BlockHash>>> token_chains;  // by block size
};

class RoutePlanner {
 public:
  /// `precise` (may be null: approximate only) must outlive the planner.
  RoutePlanner(const config::RoutingConfig& config, RouterMetrics& metrics,
               PreciseMode* precise = nullptr);

  /// Canonicalises and hashes `body` when the policy for `model` uses the prefix cache.
  /// `capacity` is the body buffer's capacity: with simdjson padding available the body is not
  /// copied.
  PreparedPrompt Prepare(std::string_view body, size_t capacity, bool chat, std::string_view model,
                         const PolicySet& policies, const config::RoutingConfig& config) const;

  /// The available workers that serve `model`, in snapshot order. `*any_serves` tells whether
  /// some worker (available or not) serves it.
  static std::vector<Worker*> Available(const WorkerSet& workers, std::string_view model,
                                        SteadyClock::time_point now, bool* any_serves);

  /// Decides among `available` (non-empty). With `commit` the chosen worker's load is reserved
  /// and the prompt inserted for it (approximate learning); without, nothing changes (explain),
  /// and `scores` are filled.
  Decision Decide(RouteRequest& request, absl::Span<Worker* const> available,
                  const PolicySet& policies, const config::RoutingConfig& config, bool commit);

  /// The request routed by `decision` ended: reconciles the prediction with the worker's
  /// reported cached tokens, learns its prefill rate, informs the policy.
  void Complete(const RouteRequest& request, Decision& decision, const RouteOutcome& outcome,
                const PolicySet& policies, const config::RoutingConfig& config);

  /// Sets a worker's capacity in the index (tokens -> blocks). Thread-safe.
  void SetCapacity(const Worker& worker, uint64_t tokens, uint32_t block_tokens);
  /// Forgets a removed worker.
  void RemoveWorker(const Worker& worker);

  const kvindex::PrefixIndex& index() const { return index_; }
  kvindex::PrefixIndex& index() { return index_; }

  static kvindex::Holder HolderOf(const Worker& worker) { return {worker.id(), 0}; }

 private:
  // Records, at the point where a routed prompt leaves what the fleet has cached, which block
  // followed; a prefix that was continued in two different ways is a shared prefix.
  // Returns whether `parent` is such a fork point (before recording `child`).
  bool SeenFork(kvindex::BlockHash parent) const;
  // Overrides the approximate matches of verified precise-mode candidates with the engines'
  // own view (best DP rank), counting route-time speculative blocks not yet confirmed.
  void MatchPrecise(const RouteRequest& request, const config::RoutingConfig& config,
                    Decision& d) const;
  void RecordContinuation(kvindex::BlockHash parent, kvindex::BlockHash child);

  kvindex::PrefixIndex index_;
  RouterMetrics& metrics_;
  PreciseMode* const precise_;
  std::mutex decision_mu_;  // one decision (choose + reserve) at a time
  std::atomic<uint64_t> epoch_{0};
  // parent block -> first child seen, or kForked once a second one was seen. Bounded: cleared
  // when it reaches kMaxForkEntries (it relearns within a few requests per prefix).
  absl::flat_hash_map<kvindex::BlockHash, kvindex::BlockHash> continuations_;
};

}  // namespace kvgate::router
