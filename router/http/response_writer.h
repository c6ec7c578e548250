// File: router/http/response_writer.h
// The one place that writes response heads to clients: it sets the exchange's status and
// decides whether the connection stays open (the client's wish, unless the gateway is
// draining, the request's framing forces a close, or the response cannot be delimited), so
// every other stage only says what happened. Responses the gateway makes itself (local
// endpoints, OpenAI-style errors) are written here whole; a relayed response gets its head
// from here and its body from the relay. HEAD requests get heads without bodies. Errors are
// logged with the request id. Thread-compatible (the exchange's thread).
#pragma once

#include <string>
#include <string_view>

#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class ThreadContext;

/// The reason phrase of `status` ("OK", "Bad Gateway", ...).
std::string_view ReasonPhrase(int status);

/// Takes the client's keep-alive wish from the parsed request head (the session, once per
/// request); later responses may only narrow it.
void StartResponse(Exchange& ex);

/// Marks the exchange's connection to close after this response (framing errors, a stream
/// that broke off).
void CloseAfterResponse(Exchange& ex);

/// The client left before it got an answer: recorded as 499 (nginx's "client closed
/// request"), and the connection closes.
void RecordClientGone(Exchange& ex);

/// A relayed response broke off after its head: what the client effectively got is a 502,
/// and the connection closes (the only honest signal left).
void RecordBrokenRelay(Exchange& ex);

/// Counts `bytes` of a relayed response body as sent to the client.
void CountBodyBytes(Exchange& ex, uint64_t bytes);

/// Writes a whole response; `extra_headers` are whole "name: value\r\n" lines.
/// @return false when the client is gone.
net::awaitable<bool> WriteResponse(ThreadContext& tc, Exchange& ex, int status,
                                   std::string_view content_type, std::string_view body,
                                   std::string_view extra_headers = {});

/// Writes an OpenAI-style JSON error and logs it (at info; not with `log` false, for errors an
/// attacker can repeat at will, which their caller logs rate-limited instead).
net::awaitable<bool> WriteError(ThreadContext& tc, Exchange& ex, int status,
                                std::string_view message, std::string_view type,
                                std::string_view code, std::string_view extra_headers = {},
                                bool log = true);

/// Starts a relayed response: records `status`, decides keep-alive (`delimited`: the body's
/// end can be told to the client without closing), and appends the status line and the
/// gateway's own fields (x-request-id, x-kvgate-worker, connection) to `out`. The
/// caller appends the worker's end-to-end fields, its framing field and the empty line.
void BeginRelayedHead(ThreadContext& tc, Exchange& ex, int status, std::string_view reason,
                      bool delimited, std::string* out);

}  // namespace kvgate::router
