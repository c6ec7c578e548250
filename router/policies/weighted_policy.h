// File: router/policies/weighted_policy.h
// llm-d EPP's default scheduling profile (reference/peers.md §4.1-4.2): weighted sum of
// prefix-cache score (matched/total blocks, weight 3), queue score (min-max normalised waiting
// queue from the workers' scraped metrics, weight 2; all equal -> 1) and KV-utilisation score
// (1 - kv_cache_usage_perc, weight 2); max-score picker with seeded random ties. Like llm-d it
// reads queue and KV usage from scrapes, not from the gateway's own reservations (see
// docs/routing.md for what that means under bursts). Thread-safe (stateless).
#pragma once

#include "config/config.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

class WeightedPolicy : public RoutingPolicy {
 public:
  explicit WeightedPolicy(const config::WeightedPolicyConfig& config) : config_(config) {}

  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  bool UsesPrefixCache() const override { return true; }
  std::string_view name() const override { return "weighted"; }

 private:
  const config::WeightedPolicyConfig config_;
};

}  // namespace kvgate::router
