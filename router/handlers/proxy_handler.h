// File: router/handlers/proxy_handler.h
// The route handlers for the inference APIs: POST /v1/* (OpenAI chat and completions, Anthropic
// /v1/messages and count_tokens, OpenAI /v1/responses; anything else passes through) and the
// stored-response endpoints (GET/DELETE /v1/responses/{id}, .../cancel, .../input_items).
// Parse the body once (the routed APIs are validated — a 400 in the API's own error shape — and
// canonicalised when a policy in force uses the prefix cache), plan (404 for an unknown model,
// 503 when no worker is available; a Responses continuation goes to the worker that stored its
// previous response, or is a 404 naming the id), and hand the plan to the thread's dispatcher,
// which the caller passes in.
#pragma once

#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class Dispatcher;
class GatewayState;
class ThreadContext;

net::awaitable<void> HandleProxy(GatewayState& state, ThreadContext& tc, Exchange& ex,
                                 Dispatcher& dispatcher);

/// /v1/responses/{id}[/cancel|/input_items]: to the worker that stored the response.
net::awaitable<void> HandleStoredResponse(GatewayState& state, ThreadContext& tc, Exchange& ex,
                                          Dispatcher& dispatcher);

}  // namespace kvgate::router
