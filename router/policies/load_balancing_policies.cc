#include "router/policies/load_balancing_policies.h"

#include <cmath>

#include "router/policies/policy_util.h"

namespace kvgate::router {
namespace {

using policy_util::Mix;

double WeightOf(const Candidate& c) { return c.weight > 0 ? c.weight : 1e-9; }

// Position x in [0, total) on the cumulative weight line -> candidate index.
size_t PickByWeight(absl::Span<const Candidate> c, double x) {
  double acc = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    acc += WeightOf(c[i]);
    if (x < acc) return i;
  }
  return c.size() - 1;
}

double TotalWeight(absl::Span<const Candidate> c) {
  double t = 0;
  for (const auto& x : c) t += WeightOf(x);
  return t;
}

void FillLoadScores(absl::Span<const Candidate> c, std::vector<CandidateScore>* scores) {
  if (scores == nullptr) return;
  scores->assign(c.size(), {});
  for (size_t i = 0; i < c.size(); ++i) {
    (*scores)[i].score = static_cast<double>(c[i].load.in_flight);
  }
}

}  // namespace

size_t RoundRobinPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                                std::vector<CandidateScore>* scores) {
  FillLoadScores(c, scores);
  // Explain must not advance the rotation.
  const uint64_t tick = scores != nullptr ? next_.load(std::memory_order_relaxed)
                                          : next_.fetch_add(1, std::memory_order_relaxed);
  bool uniform = true;
  for (const auto& x : c) uniform &= WeightOf(x) == WeightOf(c[0]);
  if (uniform) return tick % c.size();
  const double x = std::fmod(static_cast<double>(tick) * 0.6180339887498949, 1.0) * TotalWeight(c);
  return PickByWeight(c, x);
}

size_t RandomPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                            std::vector<CandidateScore>* scores) {
  FillLoadScores(c, scores);
  const double u = static_cast<double>(Mix(request.tie_seed) >> 11) * 0x1.0p-53;
  return PickByWeight(c, u * TotalWeight(c));
}

size_t LeastRequestPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                                  std::vector<CandidateScore>* scores) {
  std::vector<double> load(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    load[i] = static_cast<double>(c[i].load.in_flight) / WeightOf(c[i]);
  }
  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i) (*scores)[i].score = load[i];
  }
  return policy_util::ArgMinWithTies(load, request.tie_seed);
}

size_t PowerOfTwoPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                                std::vector<CandidateScore>* scores) {
  FillLoadScores(c, scores);
  if (c.size() == 1) return 0;
  const uint64_t r = Mix(request.tie_seed);
  const size_t a = r % c.size();
  size_t b = (r >> 32) % (c.size() - 1);
  if (b >= a) ++b;
  if (scores != nullptr) {
    for (size_t i = 0; i < c.size(); ++i) {
      if (i != a && i != b) (*scores)[i].note = "not sampled";
    }
  }
  const int64_t la = c[a].load.in_flight;
  const int64_t lb = c[b].load.in_flight;
  if (la != lb) return la < lb ? a : b;
  return (r >> 63) ? a : b;
}

}  // namespace kvgate::router
