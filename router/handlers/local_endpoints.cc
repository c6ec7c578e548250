#include "router/handlers/local_endpoints.h"

#include "common/build_info.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/runtime/gateway_state.h"

namespace kvgate::router {

net::awaitable<void> HandleHealth(GatewayState&, ThreadContext& tc, Exchange& ex) {
  co_await WriteResponse(tc, ex, 200, "application/json", R"({"status":"ok"})");
}

net::awaitable<void> HandleReady(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  if (state.draining.load() || state.shutting_down.load()) {
    co_await WriteError(tc, ex, 503, "gateway is draining", "service_unavailable", "draining");
  } else if (!state.AnyWorkerAvailable()) {
    co_await WriteError(tc, ex, 503, "no healthy worker available", "service_unavailable",
                        "no_healthy_worker");
  } else {
    co_await WriteResponse(tc, ex, 200, "application/json", R"({"status":"ready"})");
  }
}

net::awaitable<void> HandleMetrics(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  const std::string text = state.MetricsText();
  co_await WriteResponse(tc, ex, 200, "text/plain; version=0.0.4; charset=utf-8", text);
}

net::awaitable<void> HandleVersion(GatewayState&, ThreadContext& tc, Exchange& ex) {
  co_await WriteResponse(tc, ex, 200, "application/json", common::VersionJson());
}

net::awaitable<void> HandleModels(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  const auto models = state.models_json();
  co_await WriteResponse(tc, ex, 200, "application/json", *models);
}

}  // namespace kvgate::router
