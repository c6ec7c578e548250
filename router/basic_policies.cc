#include "router/basic_policies.h"

#include <cmath>
#include <random>

namespace kvgate::router {
namespace {

std::minstd_rand& ThreadRng() {
  thread_local std::minstd_rand rng{std::random_device{}()};
  return rng;
}

}  // namespace

Worker* RoundRobinPolicy::Choose(const RouteRequest& request,
                                 absl::Span<Worker* const> candidates) {
  const uint64_t tick = next_.fetch_add(1, std::memory_order_relaxed);
  double total = 0;
  bool uniform = true;
  for (Worker* w : candidates) {
    total += w->config().weight;
    uniform &= w->config().weight == candidates[0]->config().weight;
  }
  if (uniform || total <= 0) return candidates[tick % candidates.size()];
  // Weighted: a low-discrepancy walk over the cumulative weights (golden-ratio sequence), so
  // the choices interleave and each worker's share converges to its weight.
  const double x = std::fmod(static_cast<double>(tick) * 0.6180339887498949, 1.0) * total;
  double acc = 0;
  for (Worker* w : candidates) {
    acc += w->config().weight;
    if (x < acc) return w;
  }
  return candidates.back();
}

Worker* LeastRequestPolicy::Choose(const RouteRequest& request,
                                   absl::Span<Worker* const> candidates) {
  Worker* best = nullptr;
  double best_load = 0;
  uint32_t ties = 0;
  for (Worker* w : candidates) {
    const double weight = w->config().weight > 0 ? w->config().weight : 1e-9;
    const double load = static_cast<double>(w->in_flight()) / weight;
    if (best == nullptr || load < best_load) {
      best = w;
      best_load = load;
      ties = 1;
    } else if (load == best_load) {
      // Reservoir sampling over the tied set: each tie is equally likely.
      ++ties;
      if (std::uniform_int_distribution<uint32_t>(0, ties - 1)(ThreadRng()) == 0) best = w;
    }
  }
  return best;
}

RoutingPolicySharedPtr MakeRoutingPolicy(std::string_view name) {
  if (name == "round_robin") return std::make_shared<RoundRobinPolicy>();
  if (name == "least_request") return std::make_shared<LeastRequestPolicy>();
  return nullptr;
}

}  // namespace kvgate::router
