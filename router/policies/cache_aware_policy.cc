#include "router/policies/cache_aware_policy.h"

#include <algorithm>

#include "router/policies/policy_util.h"

namespace kvgate::router {

size_t CacheAwarePolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                                std::vector<CandidateScore>* scores) {
  std::vector<double> load(c.size());
  int64_t max_load = c[0].load.in_flight;
  int64_t min_load = c[0].load.in_flight;
  for (size_t i = 0; i < c.size(); ++i) {
    load[i] = static_cast<double>(c[i].load.in_flight);
    max_load = std::max(max_load, c[i].load.in_flight);
    min_load = std::min(min_load, c[i].load.in_flight);
  }
  const size_t least_loaded = policy_util::ArgMinWithTies(load, request.tie_seed);
  const bool imbalanced =
      max_load - min_load > static_cast<int64_t>(config_.balance_abs_threshold) &&
      static_cast<double>(max_load) > static_cast<double>(min_load) * config_.balance_rel_threshold;

  // Longest cached prefix; ties go to the less loaded worker, then to the tie seed.
  std::vector<double> neg_match(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    neg_match[i] = -static_cast<double>(c[i].cached_blocks[0]) * 1e6 + load[i];
  }
  const size_t best = policy_util::ArgMinWithTies(neg_match, request.tie_seed);
  const double matched = static_cast<double>(c[best].cached_blocks[0]) * request.block_tokens;
  const double rate = request.prompt_tokens > 0 ? matched / request.prompt_tokens : 0;

  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i) {
      (*scores)[i].score = request.prompt_tokens > 0
                               ? static_cast<double>(c[i].cached_blocks[0]) * request.block_tokens /
                                     request.prompt_tokens
                               : 0;
    }
    (*scores)[least_loaded].note = imbalanced ? "imbalanced: least loaded" : "least loaded";
  }
  if (imbalanced) return least_loaded;
  if (rate > config_.cache_threshold) return best;  // strict '>', as SGLang
  return least_loaded;
}

}  // namespace kvgate::router
