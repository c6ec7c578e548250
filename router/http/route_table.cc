#include "router/http/route_table.h"

#include "common/strings.h"
#include "router/http/response_writer.h"
#include "router/server/thread_context.h"

namespace kvgate::router {
namespace {

bool Matches(const Route& r, std::string_view path) {
  return r.prefix ? path.starts_with(r.path) : path == r.path;
}

// Compares without an early exit, so the time taken does not tell how much of a guess was
// right.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

class AdminTokenCheck : public PreHandler {
 public:
  // router::PreHandler
  net::awaitable<bool> Intercept(ThreadContext& tc, Exchange& ex, const Route& route) override {
    if (!route.admin) co_return false;
    const std::string& token = ex.snapshot->config->admin.token;
    if (token.empty()) co_return false;
    const std::string_view auth = ex.head.Find("authorization");
    if (auth.starts_with("Bearer ") && ConstantTimeEquals(auth.substr(7), token)) {
      co_return false;
    }
    co_await WriteError(tc, ex, 401, "admin token required", "authentication_error",
                        "invalid_admin_token");
    co_return true;
  }
};

}  // namespace

PreHandlerPtr MakeAdminTokenCheck() { return std::make_unique<AdminTokenCheck>(); }

RouteTable::RouteTable(std::vector<Route> routes, std::vector<std::string_view> admin_also,
                       bool separate_admin, std::vector<PreHandlerPtr> pre_handlers)
    : routes_(std::move(routes)),
      admin_also_(std::move(admin_also)),
      separate_admin_(separate_admin),
      pre_handlers_(std::move(pre_handlers)) {}

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
    if (co_await p->Intercept(tc, ex, *found)) co_return;
  }
  co_await found->handler(tc, ex);
}

}  // namespace kvgate::router
