// File: router/upstream/upstream.h
// The seam between a dispatcher and the wire to one worker: send the exchange's request to the
// worker an attempt names and relay its answer to the client. HTTP/1.1 over TCP with a
// keep-alive pool is the implementation today (upstream/http1_upstream.h); TLS to workers and
// other upstream kinds plug in here. Thread-compatible: one per gateway thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "router/http/exchange.h"
#include "router/internal/asio.h"

namespace kvgate::router {

class ThreadContext;
class Worker;

/// One try on one worker.
struct UpstreamAttempt {
  Worker* worker = nullptr;
  int dp_rank = -1;   // sent as X-data-parallel-rank when >= 0 and the worker has DP ranks
  bool last = false;  // a 5xx on the last attempt is relayed rather than retried
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
  int64_t cached_tokens = -1;      // from the relayed response's usage, -1 if absent
  int64_t prompt_tokens = -1;
};

class Upstream {
 public:
  virtual ~Upstream() = default;

  /// Sends the exchange's request to `attempt.worker` and, when it answers, relays the
  /// response to the client through the response writer. Never writes an error response
  /// itself: outcomes other than kRelayed leave the client untouched for the dispatcher.
  virtual net::awaitable<AttemptResult> Send(ThreadContext& tc, Exchange& ex,
                                             const UpstreamAttempt& attempt) = 0;
};
using UpstreamPtr = std::unique_ptr<Upstream>;

}  // namespace kvgate::router
