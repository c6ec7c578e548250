// File: router/upstream/relay.h
// The raw body relay: once a worker's response head is parsed, the client gets its head and
// then the body's bytes as they arrive — a chunked body to an HTTP/1.1 client as is, a
// Content-Length body as is — while a framing tracker (http/body_framing.h) finds the end and
// feeds the usage scanner in the same pass. Only where the two sides cannot share framing are
// bytes rewritten: a close-delimited body is chunked for an HTTP/1.1 client, a chunked body is
// de-chunked for an HTTP/1.0 one. Bytes move through the thread's scratch buffer: read from the
// worker, written to the client before anything else runs, and the worker is read again only
// when the client took them (backpressure; a stream waiting for its next event holds no
// buffer). Thread-compatible (the exchange's thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "net/asio.h"
#include "net/http1.h"
#include "net/upstream_pool.h"
#include "router/http/exchange.h"
#include "router/upstream/upstream.h"
#include "router/upstream/usage_scanner.h"

namespace kvgate::router {

class ThreadContext;

struct RelayResult {
  bool sent_head = false;  // false: nothing reached the client (`error` says why)
  bool complete = false;   // the whole body reached the client
  bool reusable = false;   // the worker connection may carry another request
  bool client_gone = false;
  std::string error;  // why the response could not be relayed or broke off
  // When the first body byte arrived from the worker (the framing's payload, not the chunk
  // sizes); unset when the body was empty.
  std::optional<SteadyClock::time_point> first_payload;
};

/// Relays the response whose head is `head` to the client. `body_start` holds body bytes read
/// together with the head (a view that must stay valid until the first suspension: it may
/// point into the thread's scratch). `upstream` is the worker connection (non-blocking; TLS or
/// plain).
/// With `worker` and `reservation` set, the reservation's prefill is released on `worker` when
/// the first body byte arrives.
struct PrefillRelease {
  Worker* worker = nullptr;
  Reservation* reservation = nullptr;
};
net::awaitable<RelayResult> RelayResponse(ThreadContext& tc, Exchange& ex,
                                          UpstreamConnection& upstream,
                                          const http1::ResponseHead& head,
                                          std::string_view body_start, UsageScanner& usage,
                                          PrefillRelease release = {});

/// The client-facing head for a relayed response (exposed for tests): the gateway's fields,
/// the worker's end-to-end fields, and the framing field of `kind` (see .cc).
enum class RelayMode : uint8_t {
  kNoBody,    // HEAD, 1xx, 204, 304
  kPass,      // the body's bytes as they are (Content-Length, chunked to 1.1, close to 1.0)
  kDechunk,   // chunked from the worker, payload only to an HTTP/1.0 client (then close)
  kChunkify,  // close-delimited from the worker, chunked to an HTTP/1.1 client
};
RelayMode RelayModeFor(const http1::ResponseHead& head, int client_version_minor);

}  // namespace kvgate::router
