// File: router/policies/cost_policy.h
// NVIDIA Dynamo's linear KV-router cost (reference/peers.md §5.1), temperature 0:
//   adjusted_prefill = max(active_prefill_blocks + prompt_blocks
//                          - overlap_score_credit × gpu_overlap
//                          - host_cache_hit_weight × host_overlap
//                          - store_cache_hit_weight × store_overlap, 0)
//   cost = prefill_load_scale × adjusted_prefill + decode_blocks
// where active_prefill_blocks are the gateway's pending prefill tokens in blocks and
// decode_blocks the KV blocks of the worker's active requests plus this one. Lowest cost wins.
// host/store overlaps count only blocks beyond the faster tiers. Thread-safe (stateless).
#pragma once

#include "config/config.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

class CostPolicy : public RoutingPolicy {
 public:
  explicit CostPolicy(const config::CostPolicyConfig& config) : config_(config) {}

  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  bool UsesPrefixCache() const override { return true; }
  std::string_view name() const override { return "cost"; }

  /// The cost of one candidate (exposed for tests and explain).
  double Cost(const RouteRequest& request, const Candidate& candidate) const;

 private:
  const config::CostPolicyConfig config_;
};

}  // namespace kvgate::router
