// File: router/dispatch/proxy_handler.h
// The route handler for the OpenAI API (POST /v1/*): parse the body once (chat and
// completions are validated — 400 for malformed JSON — and canonicalised when a policy in
// force uses the prefix cache; other endpoints pass through), plan (404 for an unknown model,
// 503 when no worker is available), and hand the plan to the thread's dispatcher.
#pragma once

#include "router/http/exchange.h"
#include "router/internal/asio.h"

namespace kvgate::router {

class ThreadContext;

net::awaitable<void> HandleProxy(ThreadContext& tc, Exchange& ex);

}  // namespace kvgate::router
