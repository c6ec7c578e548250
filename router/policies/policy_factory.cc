#include "router/policies/policy_factory.h"

#include "router/policies/cache_aware_policy.h"
#include "router/policies/consistent_hash_policy.h"
#include "router/policies/cost_policy.h"
#include "router/policies/kvaware_policy.h"
#include "router/policies/load_balancing_policies.h"
#include "router/policies/weighted_policy.h"

namespace kvgate::router {

RoutingPolicySharedPtr MakeRoutingPolicy(std::string_view name,
                                         const config::RoutingConfig& config) {
  if (name == "round_robin") return std::make_shared<RoundRobinPolicy>();
  if (name == "random") return std::make_shared<RandomPolicy>();
  if (name == "least_request") return std::make_shared<LeastRequestPolicy>();
  if (name == "power_of_two") return std::make_shared<PowerOfTwoPolicy>();
  if (name == "consistent_hash")
    return std::make_shared<ConsistentHashPolicy>(config.consistent_hash);
  if (name == "cache_aware") return std::make_shared<CacheAwarePolicy>(config.cache_aware);
  if (name == "cost") return std::make_shared<CostPolicy>(config.cost);
  if (name == "weighted") return std::make_shared<WeightedPolicy>(config.weighted);
  if (name == "kvaware") return std::make_shared<KvAwarePolicy>(config.kvaware);
  return nullptr;
}

}  // namespace kvgate::router
