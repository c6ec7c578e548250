#include "router/policies/weighted_policy.h"

#include <algorithm>

#include "router/policies/policy_util.h"

namespace kvgate::router {

size_t WeightedPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                              std::vector<CandidateScore>* scores) {
  double qmin = c[0].engine.waiting;
  double qmax = c[0].engine.waiting;
  for (const auto& x : c) {
    qmin = std::min(qmin, x.engine.waiting);
    qmax = std::max(qmax, x.engine.waiting);
  }
  const double total_blocks = static_cast<double>(request.chain.size());
  std::vector<double> neg_total(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    // Leading blocks by the best tier holding them, weighted per tier.
    const double gpu = c[i].cached_blocks[0];
    const double host = std::max(0.0, static_cast<double>(c[i].cached_blocks[1]) - gpu);
    const double store = std::max(0.0, static_cast<double>(c[i].cached_blocks[2]) -
                                           std::max<double>(gpu, c[i].cached_blocks[1]));
    const double held = gpu + config_.host_tier_weight * host + config_.store_tier_weight * store;
    const double prefix = total_blocks > 0 ? std::clamp(held / total_blocks, 0.0, 1.0) : 0;
    const double queue = qmax == qmin ? 1.0 : (qmax - c[i].engine.waiting) / (qmax - qmin);
    const double kv = std::clamp(1.0 - c[i].engine.kv_usage, 0.0, 1.0);
    neg_total[i] = -(config_.prefix_weight * prefix + config_.queue_weight * queue +
                     config_.kv_utilization_weight * kv);
  }
  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i) (*scores)[i].score = -neg_total[i];
  }
  return policy_util::ArgMinWithTies(neg_total, request.tie_seed);
}

}  // namespace kvgate::router
