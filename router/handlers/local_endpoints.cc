#include "router/handlers/local_endpoints.h"

#include "common/build_info.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"

namespace kvgate::router {

net::awaitable<void> HandleHealth(ThreadContext& tc, Exchange& ex) {
  co_await WriteResponse(tc, ex, 200, "application/json", R"({"status":"ok"})");
}

net::awaitable<void> HandleReady(ThreadContext& tc, Exchange& ex) {
  if (tc.state.draining.load() || tc.state.shutting_down.load()) {
    co_await WriteError(tc, ex, 503, "gateway is draining", "service_unavailable", "draining");
  } else if (!tc.state.AnyWorkerAvailable()) {
    co_await WriteError(tc, ex, 503, "no healthy worker available", "service_unavailable",
                        "no_healthy_worker");
  } else {
    co_await WriteResponse(tc, ex, 200, "application/json", R"({"status":"ready"})");
  }
}

net::awaitable<void> HandleMetrics(ThreadContext& tc, Exchange& ex) {
  const std::string text = tc.state.MetricsText();
  co_await WriteResponse(tc, ex, 200, "text/plain; version=0.0.4; charset=utf-8", text);
}

net::awaitable<void> HandleVersion(ThreadContext& tc, Exchange& ex) {
  co_await WriteResponse(tc, ex, 200, "application/json", common::VersionJson());
}

net::awaitable<void> HandleModels(ThreadContext& tc, Exchange& ex) {
  const auto models = tc.state.models_json();
  co_await WriteResponse(tc, ex, 200, "application/json", *models);
}

}  // namespace kvgate::router
