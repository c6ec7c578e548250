#include "router/policies/policy_registry.h"

#include "common/strings.h"
#include "router/policies/cache_aware_policy.h"
#include "router/policies/consistent_hash_policy.h"
#include "router/policies/cost_policy.h"
#include "router/policies/kvaware_policy.h"
#include "router/policies/load_balancing_policies.h"
#include "router/policies/weighted_policy.h"

namespace kvgate::router {
namespace {

using Workers = absl::Span<const WorkerIdentity>;

template <typename P>
RoutingPolicySharedPtr Plain(const config::RoutingConfig&, Workers) {
  return std::make_shared<P>();
}

constexpr PolicyInfo kPolicies[] = {
    {"round_robin", &Plain<RoundRobinPolicy>},
    {"random", &Plain<RandomPolicy>},
    {"least_request", &Plain<LeastRequestPolicy>},
    {"power_of_two", &Plain<PowerOfTwoPolicy>},
    {"consistent_hash",
     [](const config::RoutingConfig& c, Workers w) -> RoutingPolicySharedPtr {
       return std::make_shared<ConsistentHashPolicy>(c.consistent_hash, w);
     }},
    {"cache_aware",
     [](const config::RoutingConfig& c, Workers) -> RoutingPolicySharedPtr {
       return std::make_shared<CacheAwarePolicy>(c.cache_aware);
     }},
    {"cost",
     [](const config::RoutingConfig& c, Workers) -> RoutingPolicySharedPtr {
       return std::make_shared<CostPolicy>(c.cost);
     }},
    {"weighted",
     [](const config::RoutingConfig& c, Workers) -> RoutingPolicySharedPtr {
       return std::make_shared<WeightedPolicy>(c.weighted);
     }},
    {"kvaware",
     [](const config::RoutingConfig& c, Workers) -> RoutingPolicySharedPtr {
       return std::make_shared<KvAwarePolicy>(c.kvaware);
     }},
};

}  // namespace

absl::Span<const PolicyInfo> Policies() { return kPolicies; }

const PolicyInfo* FindPolicy(std::string_view name) {
  for (const PolicyInfo& p : kPolicies) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string PolicyNames() {
  std::string out;
  for (const PolicyInfo& p : kPolicies) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

const RoutingPolicySharedPtr& PolicySet::For(std::string_view model) const {
  if (!by_model.empty()) {
    auto it = by_model.find(absl::string_view(model.data(), model.size()));
    if (it != by_model.end()) return it->second;
  }
  return default_policy;
}

bool PolicySet::AnyUsesPrefixCache() const {
  if (default_policy->UsesPrefixCache()) return true;
  for (const auto& [_, p] : by_model) {
    if (p->UsesPrefixCache()) return true;
  }
  return false;
}

absl::StatusOr<PolicySetConstSharedPtr> MakePolicySet(const config::RoutingConfig& config,
                                                      absl::Span<const WorkerIdentity> workers) {
  auto make = [&](std::string_view name,
                  std::string_view key) -> absl::StatusOr<RoutingPolicySharedPtr> {
    const PolicyInfo* info = FindPolicy(name);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          common::StrCat(key, ": unknown policy '", name, "' (known: ", PolicyNames(), ")"));
    }
    return info->make(config, workers);
  };
  auto set = std::make_shared<PolicySet>();
  auto def = make(config.policy, "routing.policy");
  if (!def.ok()) return def.status();
  set->default_policy = *std::move(def);
  for (const auto& [model, name] : config.model_policies) {
    auto p = make(name, common::StrCat("routing.model_policies.", model));
    if (!p.ok()) return p.status();
    set->by_model[model] = *std::move(p);
  }
  return PolicySetConstSharedPtr(std::move(set));
}

}  // namespace kvgate::router
