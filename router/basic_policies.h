// File: router/basic_policies.h
// Cache-blind policies: round_robin and least_request. Both thread-safe and lock-free.
#pragma once

#include <atomic>

#include "router/routing_policy.h"

namespace kvgate::router {

/// Cycles through the candidates; a worker of weight w gets w times the share of a worker of
/// weight 1 (interleaved, not in runs).
class RoundRobinPolicy : public RoutingPolicy {
 public:
  // router::RoutingPolicy
  Worker* Choose(const RouteRequest& request, absl::Span<Worker* const> candidates) override;
  std::string_view name() const override { return "round_robin"; }

 private:
  std::atomic<uint64_t> next_{0};
};

/// Picks the candidate with the fewest in-flight requests per unit of weight; ties are broken
/// at random so that simultaneous decisions on different threads spread out.
class LeastRequestPolicy : public RoutingPolicy {
 public:
  // router::RoutingPolicy
  Worker* Choose(const RouteRequest& request, absl::Span<Worker* const> candidates) override;
  std::string_view name() const override { return "least_request"; }
};

/// Builds the policy named `name` (config key routing.policy); null for unknown names.
RoutingPolicySharedPtr MakeRoutingPolicy(std::string_view name);

}  // namespace kvgate::router
