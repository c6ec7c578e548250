#include "router/policies/cost_policy.h"

#include <algorithm>
#include <cmath>

#include "router/policies/policy_util.h"

namespace kvgate::router {

double CostPolicy::Cost(const RouteRequest& r, const Candidate& c) const {
  const double bt = r.block_tokens > 0 ? r.block_tokens : 16;
  const double prompt_blocks = std::ceil(r.prompt_tokens / bt);
  const double gpu = c.cached_blocks[0];
  const double host = std::max(0.0, static_cast<double>(c.cached_blocks[1]) - gpu);
  const double store = std::max(0.0, static_cast<double>(c.cached_blocks[2]) -
                                         std::max(gpu, static_cast<double>(c.cached_blocks[1])));
  const double active_prefill_blocks = static_cast<double>(c.load.pending_prefill_tokens) / bt;
  const double adjusted =
      std::max(active_prefill_blocks + prompt_blocks - config_.overlap_score_credit * gpu -
                   config_.host_cache_hit_weight * host - config_.store_cache_hit_weight * store,
               0.0);
  const double decode_blocks = static_cast<double>(c.load.active_kv_blocks) + prompt_blocks;
  return config_.prefill_load_scale * adjusted + decode_blocks;
}

size_t CostPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                          std::vector<CandidateScore>* scores) {
  std::vector<double> cost(c.size());
  for (size_t i = 0; i < c.size(); ++i) cost[i] = Cost(request, c[i]);
  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i) (*scores)[i].score = cost[i];
  }
  return policy_util::ArgMinWithTies(cost, request.tie_seed);
}

}  // namespace kvgate::router
