// File: router/policies/load_balancing_policies.h
// Cache-blind policies: round_robin, random, least_request, power_of_two. They ignore the
// prefix index and balance by weight or by the gateway's own in-flight counts. Thread-safe.
#pragma once

#include <atomic>

#include "router/policies/routing_policy.h"

namespace kvgate::router {

/// Cycles through the candidates; a worker of weight w gets w times the share of a worker of
/// weight 1, interleaved (a low-discrepancy walk over cumulative weights), not in runs.
class RoundRobinPolicy : public RoutingPolicy {
 public:
  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::string_view name() const override { return "round_robin"; }

 private:
  std::atomic<uint64_t> next_{0};
};

/// Picks at random, in proportion to weight.
class RandomPolicy : public RoutingPolicy {
 public:
  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::string_view name() const override { return "random"; }
};

/// Fewest in-flight requests per unit of weight; ties broken by the request's tie seed.
class LeastRequestPolicy : public RoutingPolicy {
 public:
  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::string_view name() const override { return "least_request"; }
};

/// Two distinct candidates drawn at random; the one with fewer in-flight requests wins.
class PowerOfTwoPolicy : public RoutingPolicy {
 public:
  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::string_view name() const override { return "power_of_two"; }
};

}  // namespace kvgate::router
