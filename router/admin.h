// File: router/admin.h
// The admin API's answers, as JSON text: POST /admin/explain (what routing would decide for a
// request body, without forwarding it) and GET /admin/workers (health, load, engine metrics and
// prefix-index state per worker). No I/O; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "router/gateway_state.h"

namespace kvgate::router {

/// Explains the decision for `body` sent to `path` ("/v1/chat/completions" or
/// "/v1/completions"); `session_key` as the proxy would take it (x-session-id header, else the
/// body's "user"). The body may gain capacity (padding) but is not modified.
/// @return kInvalidArgument for a malformed body, kNotFound for an unknown model,
///         kUnavailable when no worker is available.
absl::StatusOr<std::string> ExplainJson(GatewayState& state, std::string& body,
                                        std::string_view path, std::string_view session_key);

/// GET /admin/workers; `block_ids` (?blocks=1) adds the engine's id of every block each
/// precise-mode worker holds, per DP rank and tier.
std::string WorkersJson(const GatewayState& state, bool block_ids = false);

}  // namespace kvgate::router
