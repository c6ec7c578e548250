// File: router/routing/route_planner.h
// Where a routing decision is made, in three steps that the proxy and /admin/explain share:
//   Plan      the workers that may serve a parsed request (available, serving its model), the
//             policy in force and the prompt's block chain — hashed once per request; token
//             chains for precise mode once per engine block size, on first use;
//   Decide    one attempt: match the prefix indexes, snapshot every candidate's values, then,
//             under the decision lock, read the reserved loads, ask the policy and reserve the
//             chosen worker (so the next decision on any thread sees it);
//   Learn     the approximate index learns the prompt (and precise mode guesses it): at once,
//             or, for the proxy, once the request is written to the worker;
//   Complete  the attempt ended: release the reservation, learn the prefill rate, reconcile
//             the prediction with the engine's reported cached tokens; an attempt the worker
//             did not serve unlearns what Learn taught.
// Lock order: decision_mu_ is a leaf. Nothing under it takes another lock (loads are atomics,
// policies are lock-free by contract); index shard locks and Worker::mu_ are taken only before
// or after it. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "config/config.h"
#include "kvindex/group_imitation.h"
#include "kvindex/prefix_index.h"
#include "router/fleet/worker.h"
#include "router/policies/policy_registry.h"
#include "router/policies/routing_policy.h"
#include "router/precise/precise_mode.h"
#include "router/routing/cluster_sink.h"
#include "router/routing/parsed_request.h"
#include "router/routing/response_pins.h"
#include "router/routing/store_load_rate.h"

namespace kvgate::router {

/// One request ready to route: who may serve it and its prefix chain. The caller keeps the
/// workers alive while the plan is used (the gateway holds its snapshot for the request).
struct RoutePlan {
  const ParsedRequest* request = nullptr;
  std::string_view endpoint;  // path, for policies and explain
  const config::RoutingConfig* config = nullptr;
  RoutingPolicySharedPtr policy;
  absl::InlinedVector<Worker*, 16> available;  // in snapshot order
  std::vector<kvindex::BlockHash> chain;       // empty when not hashed
  uint32_t prompt_tokens = 0;
  bool hashed = false;
  std::vector<uint32_t> tokens;  // precise mode: the prompt's token ids as engines see them
  // Precise mode: token-mode chains per engine block size, built on first use.
  std::vector<std::pair<uint32_t, std::vector<kvindex::BlockHash>>> token_chains;
  std::vector<uint32_t> tried;  // worker ids already attempted (retries go elsewhere)
  // false: the request leaves no trace in the fleet's caches or the rates kvgate learns
  // (count_tokens, reads of stored responses): nothing is inserted or reconciled.
  bool learn = true;
  // Set by the dispatcher: Decide leaves what the decision teaches the indexes to Learn(),
  // which it calls once the request is written to the worker. That work (an agent's 300K-token
  // chain walked in the approximate index, ~1 ms) then overlaps the worker's prefill instead of
  // adding to the client's wait.
  bool learn_when_sent = false;
  std::string pinned_response;  // the stored response that fixes the worker ("" none)
};

/// One decision, with what explain shows and what completion needs.
struct Decision {
  Worker* worker = nullptr;
  size_t index = 0;  // into candidates
  std::vector<Candidate> candidates;
  std::vector<CandidateScore> scores;    // filled for explain only
  std::vector<uint32_t> precise_blocks;  // per candidate: leading engine blocks matched
  Reservation reservation;               // what Decide reserved (released by Complete)
  int64_t predicted_cached_tokens = 0;   // in the chosen worker's GPU tier
  int64_t predicted_store_tokens = 0;    // beyond its GPU and host tiers, from a store
  int64_t queue_tokens_at_dispatch = 0;
  int dp_rank = -1;                         // the DP rank to name in X-data-parallel-rank, -1 none
  std::optional<TtftParts> predicted_ttft;  // the policy's, for the chosen worker (kvaware)
  // Approximate learning done at commit: the chain's blocks from `learned_from` on were
  // inserted for the worker, and are taken back when the attempt did not run (Complete).
  bool learned = false;
  size_t learned_from = 0;
  // Committed, and its learning not done yet (RoutePlan::learn_when_sent): Learn() does it.
  bool learn_pending = false;
};

/// How an attempt ended.
struct RouteOutcome {
  bool success = false;  // a response was relayed to the client
  // Relayed, but an error (4xx/5xx) or a stage that failed: the worker did not compute the
  // prompt. Then, as when nothing was relayed (a reset, a timeout, a stage never sent), what
  // Decide learned is unlearned.
  bool error_answer = false;
  int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens, -1 if absent
  // usage's prompt and generated tokens, -1 if absent: a hybrid worker's decode checkpoints
  // and window blocks (approximate mode imitates them, GroupImitation::LearnOutput).
  int64_t prompt_tokens = -1;
  int64_t output_tokens = -1;
  // Request fully read from the client -> the first body byte of a streamed answer (vLLM and
  // SGLang send it with the first token; the head comes before the prefill), or a P/D
  // prefill's whole answer; -1 when unknown (a whole answer's arrival includes its decode).
  double ttft_seconds = -1;
};

/// What Complete compared, for the prediction metrics (recorded by the caller's thread).
struct Prediction {
  bool compared = false;  // cached tokens compared
  int64_t predicted_tokens = 0;
  int64_t actual_tokens = 0;
  bool ttft_compared = false;  // time to first token compared
  double predicted_ttft_s = 0;
  double actual_ttft_s = 0;
};

class RoutePlanner {
 public:
  /// `precise` (may be null: approximate only) must outlive the planner.
  RoutePlanner(const config::RoutingConfig& config, PreciseMode* precise = nullptr);

  /// The plan for `request` on `workers` under `policies`.
  /// @return kNotFound when no worker serves the model, kUnavailable when none is available.
  absl::StatusOr<RoutePlan> Plan(const ParsedRequest& request, std::string_view endpoint,
                                 const WorkerList& workers, const PolicySet& policies,
                                 const config::RoutingConfig& config,
                                 SteadyClock::time_point now) const;

  /// Restricts `plan` to the worker that stored `response_id` (an OpenAI Responses
  /// continuation, or /v1/responses/{id}*): it alone holds the response.
  /// @return kNotFound, naming the id, when no pin is known or its worker left the fleet, is
  ///         unavailable (draining, unhealthy) or does not serve the request's model.
  static absl::Status PinToResponseOwner(RoutePlan& plan, ResponsePins& pins,
                                         const WorkerList& workers, std::string_view response_id,
                                         SteadyClock::time_point now);

  /// Decides among the plan's workers not yet tried (at least one must remain). With `commit`
  /// the chosen worker's load is reserved and the prompt learned (with `plan.learn_when_sent`,
  /// left to Learn); without, nothing changes (explain) and `scores` are filled.
  Decision Decide(RoutePlan& plan, uint32_t attempt, bool commit, SteadyClock::time_point now);

  /// What a committed decision teaches: the approximate index (and its group imitation, and the
  /// other replicas) that the worker will hold the prompt, and in precise mode the chosen rank's
  /// route-time guesses. Once per decision; a no-op when Decide did it already.
  void Learn(RoutePlan& plan, Decision& decision, SteadyClock::time_point now);

  /// The attempt routed by `decision` ended (any way): releases its reservation and learns.
  Prediction Complete(const RoutePlan& plan, Decision& decision, const RouteOutcome& outcome);

  /// Sets a worker's capacity in the index (tokens -> blocks).
  void SetCapacity(const Worker& worker, uint64_t tokens, uint32_t block_tokens);
  /// Sets a hybrid worker's groups beside full attention for approximate mode (empty: none).
  /// Chunk sizes are converted to blocks of `block_tokens` (routing.block_tokens).
  void SetGroups(const Worker& worker, absl::Span<const config::KvGroupConfig> groups,
                 uint32_t block_tokens);
  /// Forgets a removed worker.
  void RemoveWorker(const Worker& worker);

  const kvindex::PrefixIndex& index() const { return index_; }
  /// Approximate mode's imitation of hybrid workers' other groups (admin).
  const kvindex::GroupImitation& groups() const { return groups_; }
  kvindex::PrefixIndex& index() { return index_; }
  /// Index updates refused (kvgate_index_errors_total); each is also logged.
  uint64_t index_errors() const { return index_errors_.load(std::memory_order_relaxed); }

  static kvindex::Holder HolderOf(const Worker& worker) { return {worker.id(), 0}; }

  /// Where decisions are told to the other replicas (router/cluster/); NoClusterSink() until
  /// set. Set before the gateway's threads start; `sink` must outlive the planner's use.
  void SetClusterSink(ClusterSink* sink) { sink_.store(sink, std::memory_order_release); }
  ClusterSink& cluster() const { return *sink_.load(std::memory_order_acquire); }

  /// The store tier's load rate as learned from TTFTs (admin, kvaware).
  const StoreLoadRate& store_rate() const { return store_rate_; }

 private:
  // Records, at the point where a routed prompt leaves what the fleet has cached, which block
  // followed; a prefix that was continued in two different ways is a shared prefix.
  bool SeenFork(kvindex::BlockHash parent) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(decision_mu_);
  void RecordContinuation(kvindex::BlockHash parent, kvindex::BlockHash child)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(decision_mu_);
  /// The token chain of the plan's prompt in `block_size` blocks, built once per plan.
  static const std::vector<kvindex::BlockHash>& TokenChainFor(RoutePlan& plan, uint32_t block_size);
  /// Raises every candidate's store tier to what the configured stores that are up hold of the
  /// prompt.
  void MatchStores(RoutePlan& plan, absl::Span<Worker* const> workers, Decision& d) const;
  // Overrides the approximate matches of verified precise-mode candidates with the engines'
  // own view (best DP rank), counting route-time speculative blocks not yet confirmed.
  void MatchPrecise(RoutePlan& plan, SteadyClock::time_point now, absl::Span<Worker* const> workers,
                    Decision& d) const;
  // Counts and logs an index update the index refused (e.g. more holders than it has slots).
  void IndexError(const absl::Status& status, const Worker& worker);

  kvindex::PrefixIndex index_;
  kvindex::GroupImitation groups_;  // hybrid workers' other groups, approximately
  PreciseMode* const precise_;
  std::atomic<ClusterSink*> sink_{&NoClusterSink()};
  std::atomic<uint64_t> index_errors_{0};
  StoreLoadRate store_rate_;
  common::Mutex decision_mu_;  // one decision (choose + reserve) at a time; a leaf lock
  std::atomic<uint64_t> epoch_{0};
  // parent block -> first child seen, or kForked once a second one was seen. Bounded: cleared
  // when it reaches kMaxForkEntries (it relearns within a few requests per prefix).
  absl::flat_hash_map<kvindex::BlockHash, kvindex::BlockHash> continuations_
      ABSL_GUARDED_BY(decision_mu_);
};

}  // namespace kvgate::router
