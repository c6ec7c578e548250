// File: router/policies/consistent_hash_policy.h
// Session affinity by consistent hashing: the session key (x-session-id header, else the body's
// "user", else the body itself) is placed on a ring of `virtual_nodes` points per worker.
// Bounded-load variant (Mirrokni et al.; SMG's prefix_hash): walk clockwise past workers whose
// in-flight count would exceed `bounded_load_factor` × the fair share. The ring is built once
// for the published worker set; workers that are not candidates (unhealthy, other model) are
// walked past, which places their keys exactly where a ring without them would. Thread-safe
// (immutable after construction).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "config/config.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

class ConsistentHashPolicy : public RoutingPolicy {
 public:
  ConsistentHashPolicy(const config::ConsistentHashPolicyConfig& config,
                       absl::Span<const WorkerIdentity> workers);

  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::string_view name() const override { return "consistent_hash"; }

  /// The ring position of a key (exposed for tests).
  static uint64_t KeyHash(std::string_view key);

 private:
  const config::ConsistentHashPolicyConfig config_;
  std::vector<std::pair<uint64_t, uint32_t>> ring_;  // (point, worker id), sorted
};

}  // namespace kvgate::router
