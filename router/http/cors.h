// File: router/http/cors.h
// Cross-origin requests from browsers (config `cors`, vLLM's --allowed-origins): an allowed
// Origin is named back on every answer (the response writer adds it, for relayed answers too,
// in place of a worker's own), and a preflight (OPTIONS with Access-Control-Request-Method) is
// answered here, before routing, without reaching a worker or a pre-handler (a browser sends
// no credentials on a preflight). Thread-compatible (the exchange's thread).
#pragma once

#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class ThreadContext;

/// With `cors` configured: records an allowed Origin on `ex` and answers a preflight.
/// @return true when it answered the request (a preflight, allowed or not).
net::awaitable<bool> ApplyCors(ThreadContext& tc, Exchange& ex);

}  // namespace kvgate::router
