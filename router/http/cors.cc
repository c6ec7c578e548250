#include "router/http/cors.h"

#include <algorithm>

#include "common/strings.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"

namespace kvgate::router {

net::awaitable<bool> ApplyCors(ThreadContext& tc, Exchange& ex) {
  const config::CorsConfig& cors = tc.config().cors;
  const std::string_view origin = ex.head.Find("origin");
  if (!cors.enabled() || origin.empty()) co_return false;
  const bool allowed = std::any_of(
      cors.allowed_origins.begin(), cors.allowed_origins.end(),
      [origin](const std::string& o) { return o == "*" || http1::EqualsIgnoreCase(o, origin); });
  if (allowed) ex.cors_origin.assign(origin);
  const bool preflight =
      ex.head.method == http1::Method::kOptions && ex.head.Has("access-control-request-method");
  if (!preflight) co_return false;
  if (!allowed) {
    co_await WriteError(tc, ex, 403, common::StrCat("origin ", origin, " is not allowed"),
                        "invalid_request_error", "origin_not_allowed");
    co_return true;
  }
  const std::string headers = common::StrCat(
      "access-control-allow-methods: GET, POST, DELETE, OPTIONS\r\n"
      "access-control-allow-headers: ",
      common::StrJoin(cors.allowed_headers, ", "), "\r\naccess-control-max-age: ", cors.max_age_s,
      "\r\n");
  co_await WriteResponse(tc, ex, 200, "text/plain", {}, headers);
  co_return true;
}

}  // namespace kvgate::router
