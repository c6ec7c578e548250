// File: router/handlers/local_endpoints.h
// Endpoints the gateway answers itself: /health (liveness), /ready (a worker can take
// traffic and the gateway is not draining), /metrics (Prometheus text), /version and
// /v1/models (the union of the workers' models) and /v1/models/{id}. Each reads the gateway's state
// it is given. Thread-compatible (the exchange's thread).
#pragma once

#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class GatewayState;
class ThreadContext;

net::awaitable<void> HandleHealth(GatewayState& state, ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleReady(GatewayState& state, ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleMetrics(GatewayState& state, ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleModels(GatewayState& state, ThreadContext& tc, Exchange& ex);
/// GET /v1/models/{id} (the OpenAI SDKs' models.retrieve): the model when a worker serves it
/// (the id percent-decoded: ids have slashes), else a 404 model_not_found.
net::awaitable<void> HandleModel(GatewayState& state, ThreadContext& tc, Exchange& ex);
/// GET /version: {"version", "commit"} (public, like /health).
net::awaitable<void> HandleVersion(GatewayState& state, ThreadContext& tc, Exchange& ex);

}  // namespace kvgate::router
