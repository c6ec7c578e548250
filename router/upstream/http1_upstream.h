// File: router/upstream/http1_upstream.h
// HTTP/1.1 to a worker over TCP: a pooled keep-alive connection (or a new one), the request
// head and the body as received in one gathered write (the body is not copied), the response
// head read and parsed, then the raw body relay (upstream/relay.h). A pooled connection the
// worker closed meanwhile is retried once on a fresh connection to the same worker, and does
// not count against the worker. Thread-compatible: one per gateway thread.
#pragma once

#include "router/upstream/upstream.h"

namespace kvgate::router {

class RouterMetrics;
class UpstreamPool;

class Http1Upstream : public Upstream {
 public:
  /// `pool`: the thread's keep-alive connections to workers; `metrics`: where TLS failures to
  /// workers are counted. Both outlive the upstream.
  Http1Upstream(UpstreamPool& pool, RouterMetrics& metrics) : pool_(pool), metrics_(metrics) {}

  // router::Upstream
  net::awaitable<AttemptResult> Send(ThreadContext& tc, Exchange& ex,
                                     const UpstreamAttempt& attempt) override;
  net::awaitable<FetchResult> Fetch(ThreadContext& tc, const Exchange& ex,
                                    const UpstreamAttempt& attempt,
                                    std::chrono::milliseconds timeout, uint64_t max_body_bytes,
                                    FetchControl& control) override;

 private:
  UpstreamPool& pool_;
  RouterMetrics& metrics_;
};

/// Appends the request head kvgate sends to `worker` for `ex` (exposed for tests): the
/// client's method and normalised target, Host set to the worker, the client's end-to-end
/// fields (hop-by-hop ones, and those its Connection field names, dropped), the request id,
/// the DP rank when `dp_rank` >= 0, and the Content-Length of the body the attempt sends.
void AppendUpstreamHead(const Exchange& ex, const UpstreamAttempt& attempt, std::string* out);

}  // namespace kvgate::router
