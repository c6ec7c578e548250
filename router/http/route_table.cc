#include "router/http/route_table.h"

#include "common/strings.h"
#include "router/http/cors.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"

namespace kvgate::router {
namespace {

bool Matches(const Route& r, std::string_view path) {
  return r.prefix ? path.starts_with(r.path) : path == r.path;
}

}  // namespace

RouteTable::RouteTable(std::vector<Route> routes, std::vector<std::string_view> admin_also,
                       bool separate_admin, std::vector<PreHandlerPtr> pre_handlers)
    : routes_(std::move(routes)),
      admin_also_(std::move(admin_also)),
      separate_admin_(separate_admin),
      pre_handlers_(std::move(pre_handlers)) {}

net::awaitable<bool> PreHandler::Wait(ThreadContext&, Exchange&, const Route&) { co_return false; }

bool RouteTable::Visible(const Route& r, bool admin_listener) const {
  if (!separate_admin_) return true;
  if (r.admin) return admin_listener;
  if (!admin_listener) return true;
  for (std::string_view p : admin_also_) {
    if (p == r.path) return true;
  }
  return false;
}

net::awaitable<void> RouteTable::Serve(ThreadContext& tc, Exchange& ex) const {
  const std::string_view path = ex.head.path;
  // A reserve place serves one probe: kept alive, it would be a place no other probe gets.
  if (ex.conn.reserve) CloseAfterResponse(ex);
  if (ex.conn.reserve && path != "/health" && path != "/ready" && path != "/metrics") {
    co_await WriteError(tc, ex, 503, "too many connections; only probes are served on this one",
                        "service_unavailable", "too_many_connections", "retry-after: 1\r\n");
    co_return;
  }
  // A browser's preflight is answered here. Only with CORS on: a coroutine frame a request.
  if (tc.config().cors.enabled() && co_await ApplyCors(tc, ex)) co_return;
  const bool admin_listener = ex.conn.admin_listener;
  const uint32_t method = MethodBit(ex.head.method);
  const Route* found = nullptr;
  bool path_known = false;
  for (const Route& r : routes_) {
    if (!Matches(r, path) || !Visible(r, admin_listener)) continue;
    path_known = true;
    if ((r.methods & method) != 0) {
      found = &r;
      break;
    }
  }
  if (found == nullptr) {
    if (path_known) {
      co_await WriteError(
          tc, ex, 405, common::StrCat("method ", ex.head.method_text, " is not allowed on ", path),
          "invalid_request_error", "method_not_allowed");
    } else if (admin_listener && separate_admin_) {
      co_await WriteError(tc, ex, 404,
                          "the admin listener serves /admin/*, /health, /ready and /metrics",
                          "invalid_request_error", "not_found");
    } else {
      co_await WriteError(tc, ex, 404, common::StrCat("no route for ", path),
                          "invalid_request_error", "not_found");
    }
    co_return;
  }
  for (const PreHandlerPtr& p : pre_handlers_) {
    Refusal refusal;
    switch (p->Check(tc, ex, *found, &refusal)) {
      case PreHandler::Verdict::kPass:
        continue;
      case PreHandler::Verdict::kWait:
        if (co_await p->Wait(tc, ex, *found)) co_return;
        continue;
      case PreHandler::Verdict::kRefuse:
        co_await WriteError(tc, ex, refusal.status, refusal.message, refusal.type, refusal.code,
                            refusal.extra_headers, refusal.log);
        co_return;
    }
  }
  co_await found->handler(tc, ex);
}

}  // namespace kvgate::router
