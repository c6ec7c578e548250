#include "router/handlers/local_endpoints.h"

#include "common/build_info.h"
#include "common/json_util.h"
#include "common/strings.h"
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

namespace {

// "%2F" -> "/": the SDKs send a model id with slashes as they are or percent-encoded.
std::string PercentDecoded(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

net::awaitable<void> HandleModel(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  const std::string id =
      PercentDecoded(ex.head.path.substr(std::string_view("/v1/models/").size()));
  bool served = false;
  for (const auto& w : state.snapshot()->workers) {
    for (const std::string& m : w->Models()) served |= (m == id);
  }
  if (!served) {
    co_await WriteError(tc, ex, 404,
                        common::StrCat("The model '", id, "' does not exist on any worker"),
                        "invalid_request_error", "model_not_found", {}, /*log=*/false);
    co_return;
  }
  std::string json = R"({"id":)";
  common::AppendJsonString(json, id);
  json += R"(,"object":"model","created":0,"owned_by":"kvgate"})";
  co_await WriteResponse(tc, ex, 200, "application/json", json);
}

}  // namespace kvgate::router
