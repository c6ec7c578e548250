#include "router/dispatch/proxy_handler.h"

#include "common/strings.h"
#include "router/dispatch/dispatcher.h"
#include "router/http/response_writer.h"
#include "router/routing/parsed_request.h"
#include "router/server/thread_context.h"

namespace kvgate::router {

net::awaitable<void> HandleProxy(ThreadContext& tc, Exchange& ex) {
  const Snapshot& snapshot = *ex.snapshot;
  const ApiEndpoint endpoint = EndpointOf(ex.head.path);
  const bool openai_json = endpoint != ApiEndpoint::kOther;
  ParsedRequest parsed;
  const absl::Status parse = ParseRequest(ex.body, ex.body_capacity, endpoint,
                                          openai_json && snapshot.policies->AnyUsesPrefixCache(),
                                          ex.head.Find("x-session-id"), &parsed);
  if (!parse.ok() && openai_json) {
    co_await WriteError(tc, ex, 400, common::Sv(parse.message()), "invalid_request_error",
                        "invalid_json");
    co_return;
  }
  ex.model = parsed.model();
  auto plan = tc.state.planner.Plan(parsed, ex.head.path, snapshot.workers, *snapshot.policies,
                                    snapshot.config->routing, SteadyClock::now());
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
  co_await tc.dispatcher->Dispatch(tc, ex, *plan);
}

}  // namespace kvgate::router
