#include "router/handlers/proxy_handler.h"

#include "common/strings.h"
#include "router/dispatch/dispatcher.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/routing/parsed_request.h"
#include "router/runtime/gateway_state.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

constexpr std::string_view kResponsesPrefix = "/v1/responses/";

net::awaitable<void> WriteNotFound(ThreadContext& tc, Exchange& ex, const absl::Status& status,
                                   std::string_view code) {
  co_await WriteError(tc, ex, 404, common::Sv(status.message()), "invalid_request_error", code);
}

// A stored response was made by the worker that answered: later requests naming its id go
// there.
void LearnResponsePin(GatewayState& state, const Exchange& ex) {
  if (ex.response_id.empty() || ex.worker_id < 0 || ex.response.status() < 200 ||
      ex.response.status() >= 300)
    return;
  const auto id = static_cast<uint32_t>(ex.worker_id);
  state.response_pins.Learn(ex.response_id, id, SteadyClock::now());
  for (const auto& w : ex.snapshot->workers) {
    if (w->id() == id) state.planner.cluster().Pinned(ex.response_id, *w);
  }
}

}  // namespace

net::awaitable<void> HandleProxy(GatewayState& state, ThreadContext& tc, Exchange& ex,
                                 Dispatcher& dispatcher) {
  if (ex.head.path.starts_with(kResponsesPrefix) && ex.head.path.ends_with("/cancel")) {
    co_await HandleStoredResponse(state, tc, ex, dispatcher);  // POST /v1/responses/{id}/cancel
    co_return;
  }
  const Snapshot& snapshot = *ex.snapshot;
  const config::RoutingConfig& routing = snapshot.config->routing;
  const ApiEndpoint endpoint = EndpointOf(ex.head.path);
  const bool read_json = endpoint != ApiEndpoint::kOther;
  ParsedRequest parsed;
  const absl::Status parse = ParseRequest(
      ex.body, ex.body_capacity, endpoint, read_json && snapshot.policies->AnyUsesPrefixCache(),
      routing.session_keys, [&ex](std::string_view name) { return ex.head.Find(name); }, &parsed);
  if (!parse.ok() && read_json) {
    co_await WriteError(tc, ex, 400, common::Sv(parse.message()), "invalid_request_error",
                        "invalid_json");
    co_return;
  }
  ex.model = parsed.model();
  const auto now = SteadyClock::now();
  auto plan =
      state.planner.Plan(parsed, ex.head.path, snapshot.workers, *snapshot.policies, routing, now);
  if (!plan.ok()) {
    if (plan.status().code() == absl::StatusCode::kNotFound) {
      co_await WriteError(tc, ex, 404, common::Sv(plan.status().message()), "invalid_request_error",
                          "model_not_found");
    } else {
      co_await WriteError(tc, ex, 503, common::Sv(plan.status().message()), "service_unavailable",
                          "no_healthy_worker");
    }
    co_return;
  }
  plan->learn = endpoint != ApiEndpoint::kCountTokens;
  if (endpoint == ApiEndpoint::kResponses && !parsed.json.previous_response_id.empty()) {
    // Only the worker that stored the previous response can continue it.
    const absl::Status pinned = RoutePlanner::PinToResponseOwner(
        *plan, state.response_pins, snapshot.workers, parsed.json.previous_response_id, now);
    if (!pinned.ok()) {
      co_await WriteNotFound(tc, ex, pinned, "response_not_found");
      co_return;
    }
  }
  co_await dispatcher.Dispatch(tc, ex, *plan);
  if (endpoint == ApiEndpoint::kResponses && parsed.json.store) LearnResponsePin(state, ex);
}

net::awaitable<void> HandleStoredResponse(GatewayState& state, ThreadContext& tc, Exchange& ex,
                                          Dispatcher& dispatcher) {
  const Snapshot& snapshot = *ex.snapshot;
  std::string id(ex.head.path.substr(kResponsesPrefix.size()));
  std::string rest;
  if (const size_t slash = id.find('/'); slash != std::string::npos) {
    rest = id.substr(slash);
    id.resize(slash);
  }
  const bool known_path =
      !id.empty() && (rest.empty() || rest == "/cancel" || rest == "/input_items");
  if (!known_path) {
    co_await WriteError(tc, ex, 404, common::StrCat("no route for ", ex.head.path),
                        "invalid_request_error", "not_found");
    co_return;
  }
  // A plan of every available worker, narrowed to the one that stored the response.
  ParsedRequest request;
  request.body = ex.body;
  RoutePlan plan;
  plan.request = &request;
  plan.endpoint = ex.head.path;
  plan.config = &snapshot.config->routing;
  plan.policy = snapshot.policies->For("");
  plan.learn = false;
  const auto now = SteadyClock::now();
  for (const auto& w : snapshot.workers) {
    if (w->IsAvailable(now)) plan.available.push_back(w.get());
  }
  const absl::Status pinned =
      RoutePlanner::PinToResponseOwner(plan, state.response_pins, snapshot.workers, id, now);
  if (!pinned.ok()) {
    co_await WriteNotFound(tc, ex, pinned, "response_not_found");
    co_return;
  }
  co_await dispatcher.Dispatch(tc, ex, plan);
  if (ex.head.method == http1::Method::kDelete && rest.empty() && ex.response.status() >= 200 &&
      ex.response.status() < 300) {
    state.response_pins.Forget(id);
    state.planner.cluster().Unpinned(id);
  }
}

}  // namespace kvgate::router
