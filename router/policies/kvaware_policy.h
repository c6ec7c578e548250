// File: router/policies/kvaware_policy.h
// kvgate's default: send each request where it will see its first token soonest, without
// hot-spotting. For every candidate it predicts
//   ttft = pending_prefill_tokens / rate - prefill_busy_s     (queue ahead, reserved by the
//   gateway, less what the engine did of its first prefill)
//        + uncached_tokens / rate                             (this prompt's recompute)
//        + host_extra / host_rate + store_extra / store_rate  (loading cached KV instead)
//        + decode_interference_seconds × active_decode
//        + kv_full_wait_seconds when the prompt does not fit beside the running requests' KV
// with store_rate learned from TTFTs of requests that loaded from a store (StoreLoadRate),
// and `rate` the worker's prefill throughput learned from observed TTFTs. A cached prefix
// shorter than min_match_tokens does not count. The score adds a long-horizon balance term,
// balance_weight × (recent_work - mean recent_work) / rate, where recent_work decays with
// balance_half_life_ms: sessions come back, so the work a worker was recently given predicts
// its future queue; this spreads sessions that share only a system prompt. Candidates whose
// in-flight count reached the fair share plus spill_bound are skipped (unless all are), so a
// hot prefix spills to other workers — which then hold it too — instead of pinning one. One
// over the bound still competes when it beats every eligible candidate by more than the
// prompt's whole recompute, which no cache hit alone can save: only a queue elsewhere can.
// A session's own worker keeps it unless its predicted TTFT is worse than the best other by
// more than affinity_margin_seconds (moving a session costs its later turns their cache). A
// candidate that must load host or store KV is also charged load_delay_weight × the load time ×
// its in-flight requests (in the score and in that comparison, not in the prediction): the
// engine loads before the step runs, so everything running there waits for it too.
// Open lanes: in a burst, a request placed on one of the open_lanes share of workers with the
// shortest queues is charged lane_weight × what it adds to that queue, up to the first queue
// outside them, so long prompts go behind long queues and short ones still find a short one.
// Thread-safe (stateless: it reads only the candidates' values).
#pragma once

#include "config/config.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

class KvAwarePolicy : public RoutingPolicy {
 public:
  explicit KvAwarePolicy(const config::KvAwarePolicyConfig& config) : config_(config) {}

  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::optional<TtftParts> Predict(const RouteRequest& request,
                                   absl::Span<const Candidate> candidates,
                                   size_t chosen) const override;
  bool UsesPrefixCache() const override { return true; }
  std::string_view name() const override { return "kvaware"; }

  /// Predicted time to first token of `request` on `candidate`, in seconds.
  double PredictTtft(const RouteRequest& request, const Candidate& candidate) const;
  /// Same with the candidate's prefill rate (tokens/s) given.
  double PredictTtft(const RouteRequest& request, const Candidate& candidate, double rate) const;
  /// The same prediction term by term.
  TtftParts PredictParts(const RouteRequest& request, const Candidate& candidate,
                         double rate) const;
  /// The rate assumed for a worker whose own was never observed: the observed ones' mean (with
  /// the configured guess instead, one fast observation would make every unobserved worker
  /// look slow and never get the traffic that would correct it), else the configured guess.
  double FleetRate(absl::Span<const Candidate> candidates) const;
  /// Likewise the overhead of a worker whose own line is not fitted yet: the fitted ones' mean.
  double FleetOverhead(absl::Span<const Candidate> candidates) const;

 private:
  void AddLaneCost(absl::Span<const double> queue, absl::Span<const double> added,
                   std::vector<double>* score) const;

  const config::KvAwarePolicyConfig config_;
};

}  // namespace kvgate::router
