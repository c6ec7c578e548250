// File: router/policies/cache_aware_policy.h
// SGLang router's cache_aware rule, with its CLI defaults (reference/peers.md §1.2): when load
// is imbalanced (max-min > balance_abs_threshold and max > min × balance_rel_threshold) go to
// the least-loaded worker; otherwise to the worker with the longest cached prefix if its match
// rate exceeds cache_threshold, else to the least-loaded worker. Load is the gateway's in-flight
// count. Deviation: the match is measured in prefix blocks of the canonical prompt rather than
// in characters of space-joined message text. Thread-safe (stateless).
#pragma once

#include "config/config.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

class CacheAwarePolicy : public RoutingPolicy {
 public:
  explicit CacheAwarePolicy(const config::CacheAwarePolicyConfig& config) : config_(config) {}

  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  bool UsesPrefixCache() const override { return true; }
  std::string_view name() const override { return "cache_aware"; }

 private:
  const config::CacheAwarePolicyConfig config_;
};

}  // namespace kvgate::router
