// File: router/http/route_table.h
// Which handler serves a request: routes by normalised path (exact, or a prefix) and method,
// per listener, with a chain of pre-handlers that run before the route's handler and may
// answer instead: the admin token check, API keys, admission control.
// A path that matches with another method is a 405, anything else a 404, both as OpenAI
// errors. Built once per gateway thread at start; immutable after.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class ThreadContext;

/// A route's handler. One that uses a stage of a layer above (the proxy's dispatcher) has it
/// bound in when the thread's table is built, rather than finding it through the context.
using RouteHandler = std::function<net::awaitable<void>(ThreadContext& tc, Exchange& ex)>;

/// Method sets, by http1::Method bit.
constexpr uint32_t MethodBit(http1::Method m) { return 1u << static_cast<int>(m); }
inline constexpr uint32_t kGetOrHead =
    MethodBit(http1::Method::kGet) | MethodBit(http1::Method::kHead);
inline constexpr uint32_t kPost = MethodBit(http1::Method::kPost);
inline constexpr uint32_t kDelete = MethodBit(http1::Method::kDelete);

struct Route {
  std::string path;  // exact, or with `prefix` every path that starts with it
  bool prefix = false;
  uint32_t methods = 0;
  RouteHandler handler;
  bool admin = false;    // an admin endpoint (behind the admin listener and token)
  bool limited = false;  // an inference endpoint: rate limits and the concurrency cap apply
};

/// A pre-handler's answer in place of the route's handler: an OpenAI-style error.
struct Refusal {
  int status = 0;
  std::string message;
  std::string type;
  std::string code;
  std::string extra_headers;  // whole "name: value\r\n" lines
  bool log = true;            // false: the pre-handler logged it itself (rate-limited)
};

/// Runs before a route's handler. Check decides without suspending, so a request that passes
/// costs no coroutine frame (one allocation and several resumptions a pre-handler): kPass lets
/// it on, kRefuse answers `*refusal` (the table writes it). One that must wait (the admission
/// queue) returns kWait, and Wait then runs; it returns true when it answered the request.
class PreHandler {
 public:
  enum class Verdict { kPass, kRefuse, kWait };
  virtual ~PreHandler() = default;
  virtual Verdict Check(ThreadContext& tc, Exchange& ex, const Route& route, Refusal* refusal) = 0;
  virtual net::awaitable<bool> Wait(ThreadContext& tc, Exchange& ex, const Route& route);
};
using PreHandlerPtr = std::unique_ptr<PreHandler>;

class RouteTable {
 public:
  /// `routes` in match order (exact routes before the prefixes that contain them).
  /// `separate_admin`: admin routes are served only on the admin listener, which serves only
  /// them and the routes listed in `admin_also` (by path).
  RouteTable(std::vector<Route> routes, std::vector<std::string_view> admin_also,
             bool separate_admin, std::vector<PreHandlerPtr> pre_handlers);

  /// Finds the route for `ex` and runs the pre-handlers and the handler (or answers 404/405).
  /// On a connection accepted beyond max_connections only probes (/health, /ready, /metrics)
  /// are served, one per connection; anything else gets a 503.
  net::awaitable<void> Serve(ThreadContext& tc, Exchange& ex) const;

 private:
  bool Visible(const Route& r, bool admin_listener) const;

  std::vector<Route> routes_;
  std::vector<std::string_view> admin_also_;
  bool separate_admin_;
  std::vector<PreHandlerPtr> pre_handlers_;
};

}  // namespace kvgate::router
