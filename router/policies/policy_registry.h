// File: router/policies/policy_registry.h
// The one table of routing policies: each name with its factory. The config loader validates
// `routing.policy` and `routing.model_policies` against it (with the line of the offending
// key), and the gateway builds the policies of every published snapshot from it. Policies are
// built for the whole worker list of that snapshot, so per-set structures (consistent_hash's
// ring) exist before the first decision instead of being rebuilt inside Choose(). Stateless;
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "config/config.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

struct PolicyInfo {
  std::string_view name;
  RoutingPolicySharedPtr (*make)(const config::RoutingConfig& config,
                                 absl::Span<const WorkerIdentity> workers);
};

/// Every policy, in documentation order.
absl::Span<const PolicyInfo> Policies();
/// The entry for `name`, null when unknown.
const PolicyInfo* FindPolicy(std::string_view name);
/// "round_robin, random, ..." for error messages.
std::string PolicyNames();

/// The policies in force: a default and per-model overrides. Immutable once published.
struct PolicySet {
  RoutingPolicySharedPtr default_policy;
  absl::flat_hash_map<std::string, RoutingPolicySharedPtr> by_model;
  const RoutingPolicySharedPtr& For(std::string_view model) const;
  bool AnyUsesPrefixCache() const;
};
using PolicySetConstSharedPtr = std::shared_ptr<const PolicySet>;

/// Builds the policies of `config` for `workers`. @return kInvalidArgument naming an unknown
/// policy (the loader has normally rejected it already).
absl::StatusOr<PolicySetConstSharedPtr> MakePolicySet(const config::RoutingConfig& config,
                                                      absl::Span<const WorkerIdentity> workers);

}  // namespace kvgate::router
