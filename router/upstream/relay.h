// File: router/upstream/relay.h
// The raw body relay: once a worker's response head is parsed, the client gets its head and
// then the body's bytes as they arrive — a chunked body to an HTTP/1.1 client as is, a
// Content-Length body as is — while a framing tracker (http/body_framing.h) finds the end and
// feeds the usage scanner in the same pass. Only where the two sides cannot share framing are
// bytes rewritten: a close-delimited body is chunked for an HTTP/1.1 client, a chunked body is
// de-chunked for an HTTP/1.0 one. Bytes move through the thread's scratch buffer: read from the
// worker, written to the client before anything else runs, and the worker is read again only
// when the client took them (backpressure). A stream waiting for its next event waits in a
// read into its own ResponseWait buffer (4 KiB, from its first wait to its end): a readiness
// wait would cost an epoll_ctl each time. Thread-compatible (the exchange's thread).
#pragma once

#include <cstdint>
#include <memory>
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

/// Where a response's reads wait for the worker: a buffer allocated at the first wait (an
/// answer already there when read needs none; a stream holds it to its end), and whether the
/// last waited read drained the socket (then the next read waits at once). One page: a token
/// event is a few hundred bytes, and what a read leaves is read into the scratch at once, so a
/// larger buffer would only cost each waiting stream memory.
struct ResponseWait {
  static constexpr size_t kBytes = 4096;
  std::unique_ptr<char[]> bytes;
  bool drained = false;

  net::mutable_buffer buffer() {
    if (!bytes) bytes.reset(new char[kBytes]);
    return net::buffer(bytes.get(), kBytes);
  }
};

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
/// point into the thread's scratch or `wait`'s buffer). `upstream` is the worker connection
/// (non-blocking; TLS or plain); `wait`, the one the head was read with.
/// With `worker` and `reservation` set, the reservation's prefill is released on `worker` when
/// the first body byte arrives.
struct PrefillRelease {
  Worker* worker = nullptr;
  Reservation* reservation = nullptr;
};
net::awaitable<RelayResult> RelayResponse(ThreadContext& tc, Exchange& ex,
                                          UpstreamConnection& upstream,
                                          const http1::ResponseHead& head,
                                          std::string_view body_start, ResponseWait& wait,
                                          UsageScanner& usage, PrefillRelease release = {});

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
