// File: router/upstream/upstream.h
// The seam between a dispatcher and the wire to one worker: send the exchange's request to the
// worker an attempt names and relay its answer to the client. HTTP/1.1 over TCP with a
// keep-alive pool is the implementation today (upstream/http1_upstream.h); TLS to workers and
// other upstream kinds plug in here. Thread-compatible: one per gateway thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "net/asio.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class ThreadContext;
class Worker;
struct Reservation;

/// One try on one worker.
struct UpstreamAttempt {
  Worker* worker = nullptr;
  int dp_rank = -1;   // sent as X-data-parallel-rank when >= 0 and the worker has DP ranks
  bool last = false;  // a 5xx on the last attempt is relayed rather than retried
  // P/D stages send a rewritten body and the id both stages share (reference/protocols.md §4).
  const std::string* body = nullptr;  // null: the client's body
  std::string_view request_id;        // X-Request-Id; empty: the exchange's id
  // The decision's reservation on `worker`: its prefill part ends with the answer's first body
  // byte (the queue a later request waits behind is prefill, not decode). Null: none.
  Reservation* reservation = nullptr;
  // Called once the request is written to the worker, which is computing by then: work that
  // must come before the answer but need not delay the send (RoutePlanner::Learn). Null: none.
  const absl::FunctionRef<void()>* on_sent = nullptr;
};

enum class AttemptOutcome : uint8_t {
  kRelayed,      // the worker's response reached the client (complete or broken off)
  kRetry,        // nothing reached the client: another worker may serve the request
  kTimeout,      // the worker did not answer in time; nothing reached the client
  kBadResponse,  // the worker's response cannot be relayed; nothing reached the client
  kClientGone,   // the client disconnected
};

struct AttemptResult {
  AttemptOutcome outcome = AttemptOutcome::kRetry;
  std::string reason;              // for logs and the client's error message
  std::string_view metric_reason;  // kvgate_upstream_retries_total{reason}
  double ttfb_seconds = -1;        // request written -> response head; -1 if none
  // Request written -> the first body byte of an event stream (see RouteOutcome); -1 if none.
  double ttft_seconds = -1;
  // Request fully read from the client -> the same byte: what the client waited for its first
  // token, kvgate's own routing and forwarding included; -1 if none.
  double ttft_since_read_seconds = -1;
  int64_t cached_tokens = -1;  // from the relayed response's usage, -1 if absent
  int64_t prompt_tokens = -1;
  int64_t output_tokens = -1;  // the tokens it generated, -1 if absent
  std::string response_id;     // POST /v1/responses: the response's id ("" when none came)
};

/// A whole response read into memory (a P/D prefill stage, whose answer the client never sees).
struct FetchResult {
  bool answered = false;  // a complete response arrived (any status)
  bool timed_out = false;
  bool cancelled = false;  // by FetchControl::Cancel or the client's disconnect
  int status = 0;
  std::string body;    // de-chunked
  std::string reason;  // why nothing complete arrived
  double seconds = 0;  // request written -> response complete
};

/// Lets the dispatcher end a fetch running beside another stage. The client's disconnect
/// cancels it too (ClientConnection::side_upstream), unless `outlive_client`. Thread-compatible
/// (the exchange's thread).
struct FetchControl {
  tcp::socket* socket = nullptr;  // while the fetch has one
  bool cancelled = false;
  bool outlive_client = false;  // the client's disconnect does not end this fetch
  void Cancel() {
    cancelled = true;
    if (socket != nullptr) {
      error_code ignored;
      socket->cancel(ignored);
    }
  }
};

class Upstream {
 public:
  virtual ~Upstream() = default;

  /// Sends the exchange's request to `attempt.worker` and, when it answers, relays the
  /// response to the client through the response writer. Never writes an error response
  /// itself: outcomes other than kRelayed leave the client untouched for the dispatcher.
  virtual net::awaitable<AttemptResult> Send(ThreadContext& tc, Exchange& ex,
                                             const UpstreamAttempt& attempt) = 0;

  /// Sends the exchange's request (with the attempt's body and id) to `attempt.worker` and
  /// reads the whole response, at most `max_body_bytes`, within `timeout`. The client is not
  /// touched. May run beside Send() on the same exchange.
  virtual net::awaitable<FetchResult> Fetch(ThreadContext& tc, const Exchange& ex,
                                            const UpstreamAttempt& attempt,
                                            std::chrono::milliseconds timeout,
                                            uint64_t max_body_bytes, FetchControl& control) = 0;
};
using UpstreamPtr = std::unique_ptr<Upstream>;

}  // namespace kvgate::router
