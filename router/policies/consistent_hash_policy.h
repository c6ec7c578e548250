// File: router/policies/consistent_hash_policy.h
// Session affinity by consistent hashing: the session key (x-session-id header, else the body's
// "user", else the body itself) is placed on a ring of `virtual_nodes` points per worker.
// Bounded-load variant (Mirrokni et al.; SMG's prefix_hash): walk clockwise past workers whose
// in-flight count would exceed `bounded_load_factor` × the fair share. Thread-compatible (state
// is used under the gateway's decision lock).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "config/config.h"
#include "router/routing_policy.h"

namespace kvgate::router {

class ConsistentHashPolicy : public RoutingPolicy {
 public:
  explicit ConsistentHashPolicy(const config::ConsistentHashPolicyConfig& config)
      : config_(config) {}

  // router::RoutingPolicy
  size_t Choose(const RouteRequest& request, absl::Span<const Candidate> candidates,
                std::vector<CandidateScore>* scores) override;
  std::string_view name() const override { return "consistent_hash"; }

  /// The ring position of a key (exposed for tests).
  static uint64_t KeyHash(std::string_view key);

 private:
  void Rebuild(absl::Span<const Candidate> candidates);

  const config::ConsistentHashPolicyConfig config_;
  std::vector<uint32_t> ring_ids_;                   // worker ids the ring was built for
  std::vector<std::pair<uint64_t, uint32_t>> ring_;  // (point, worker id), sorted
};

}  // namespace kvgate::router
