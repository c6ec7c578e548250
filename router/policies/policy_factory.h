// File: router/policies/policy_factory.h
// Builds routing policies by their configured name (routing.policy). Thread-safe.
#pragma once

#include <string_view>

#include "config/config.h"
#include "router/routing_policy.h"

namespace kvgate::router {

/// The policy named `name` with its knobs from `config`; null for unknown names.
RoutingPolicySharedPtr MakeRoutingPolicy(std::string_view name,
                                         const config::RoutingConfig& config = {});

}  // namespace kvgate::router
