// File: router/handlers/admin.h
// The admin API: POST /admin/explain (what routing would decide for a request body, without
// forwarding it: the same Plan and Decide the proxy runs) and GET /admin/workers (health, load,
// engine metrics and prefix-index state per worker). The JSON builders do no I/O and are
// thread-safe; the handlers run on the route table.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "net/asio.h"
#include "router/http/exchange.h"
#include "router/runtime/gateway_state.h"

namespace kvgate::router {

class ThreadContext;

/// Explains the decision for `body` sent to `path` ("/v1/chat/completions", "/v1/completions",
/// "/v1/messages", "/v1/messages/count_tokens" or "/v1/responses"), read with the request's
/// own headers (`header`: the session-key headers). `body` is followed by
/// `capacity - body.size()` readable bytes (simdjson padding; copied if fewer).
/// @return kInvalidArgument for a malformed body, kNotFound for an unknown model or an
///         unknown previous_response_id, kUnavailable when no worker is available.
absl::StatusOr<std::string> ExplainJson(GatewayState& state, const Snapshot& snapshot,
                                        std::string_view body, size_t capacity,
                                        std::string_view path, HeaderLookup header);

/// GET /admin/workers; `block_ids` (?blocks=1) adds the engine's id of every block each
/// precise-mode worker holds, per DP rank and tier.
std::string WorkersJson(const GatewayState& state, bool block_ids = false);

/// Route handlers.
net::awaitable<void> HandleAdminWorkers(GatewayState& state, ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleAdminExplain(GatewayState& state, ThreadContext& tc, Exchange& ex);
/// GET /admin/cluster: the replica sync's state (peers, lag, messages lost; docs/scale-out.md).
net::awaitable<void> HandleAdminCluster(GatewayState& state, ThreadContext& tc, Exchange& ex);
/// POST /admin/drain {"worker": URL, "draining": true|false}: a draining worker gets no new
/// requests and finishes its in-flight ones (sessions move; with a store they load their KV).
net::awaitable<void> HandleAdminDrain(GatewayState& state, ThreadContext& tc, Exchange& ex);

}  // namespace kvgate::router
