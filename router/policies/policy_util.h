// File: router/policies/policy_util.h
// Helpers shared by routing policies: seeded tie-breaking and fair-share arithmetic.
// Stateless; thread-safe.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router::policy_util {

/// splitmix64: a well-mixed 64-bit value from any seed.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Index of the smallest `values[i]` among `eligible` ones (all when empty). Values within
/// `rel_tol` of the minimum are ties, resolved by `tie_seed`, so the same state does not send a
/// whole burst to the same worker. Returns 0 when nothing is eligible.
inline size_t ArgMinWithTies(absl::Span<const double> values, uint64_t tie_seed,
                             double rel_tol = 1e-9, const std::vector<bool>* eligible = nullptr) {
  double best = 0;
  bool found = false;
  for (size_t i = 0; i < values.size(); ++i) {
    if (eligible != nullptr && !(*eligible)[i]) continue;
    if (!found || values[i] < best) best = values[i];
    found = true;
  }
  if (!found) return 0;
  const double tol = std::abs(best) * rel_tol + 1e-12;
  std::vector<size_t> tied;
  for (size_t i = 0; i < values.size(); ++i) {
    if (eligible != nullptr && !(*eligible)[i]) continue;
    if (values[i] <= best + tol) tied.push_back(i);
  }
  return tied[Mix(tie_seed) % tied.size()];
}

/// Sum of in-flight requests over candidates.
inline int64_t TotalInFlight(absl::Span<const Candidate> c) {
  int64_t t = 0;
  for (const auto& x : c) t += x.load.in_flight;
  return t;
}

/// The in-flight count a candidate may have before it takes one more request: the fair share
/// of all requests including the new one, times `factor`, plus `slack`.
inline int64_t LoadBound(absl::Span<const Candidate> c, double factor, int64_t slack) {
  const double fair = static_cast<double>(TotalInFlight(c) + 1) / static_cast<double>(c.size());
  return static_cast<int64_t>(std::ceil(fair * factor)) + slack;
}

}  // namespace kvgate::router::policy_util
