// File: router/handlers/local_endpoints.h
// Endpoints the gateway answers itself: /health (liveness), /ready (a worker can take
// traffic and the gateway is not draining), /metrics (Prometheus text), /version and
// /v1/models (the union of the workers' models). Thread-compatible (the exchange's thread).
#pragma once

#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class ThreadContext;

net::awaitable<void> HandleHealth(ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleReady(ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleMetrics(ThreadContext& tc, Exchange& ex);
net::awaitable<void> HandleModels(ThreadContext& tc, Exchange& ex);
/// GET /version: {"version", "commit"} (public, like /health).
net::awaitable<void> HandleVersion(ThreadContext& tc, Exchange& ex);

}  // namespace kvgate::router
