// File: router/fleet/metrics.h
// The gateway's Prometheus metrics (kvgate_* names with units). Three kinds, by how often they
// change:
//  - request-path counters and histograms: sharded by gateway thread (ShardedFamily), written
//    without locks, merged at scrape;
//  - per-worker state (in flight, health, errors, engine signals, prediction accuracy): read
//    from the workers at scrape time, so nothing on the request path calls Prometheus;
//  - rare events (retries, reloads) and other subsystems' families: the injected registry.
// There is no global registry. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "router/fleet/sharded_metrics.h"
#include "router/fleet/worker.h"

namespace kvgate::router {

/// Process-wide values rendered with the metrics.
struct ProcessGauges {
  int64_t open_connections = 0;
  int64_t admission_running = 0;  // inference requests holding a place under the cap
  int64_t admission_queued = 0;
  uint64_t index_errors = 0;  // prefix-index updates refused
  // Long chat bodies parsed without the messages an earlier body had (kvindex/prefix_reuse.h).
  uint64_t prefix_reuse_hits = 0;
  uint64_t prefix_reuse_misses = 0;
  uint64_t prefix_reuse_skipped_bytes = 0;
  uint64_t prefix_reuse_late_tools = 0;
  uint64_t prefix_reuse_cache_bytes = 0;
};

class RouterMetrics {
 public:
  /// `shards`: the number of gateway threads (each writes its own shard).
  RouterMetrics(prometheus::Registry& registry, size_t shards);

  // Request path, sharded. Label order as listed.
  ShardedFamily requests;               // kvgate_http_requests_total{endpoint,code,worker}
  ShardedFamily request_duration;       // kvgate_http_request_duration_seconds{endpoint}
  ShardedFamily router_overhead;        // kvgate_router_overhead_seconds
  ShardedFamily ttfb;                   // kvgate_upstream_time_to_first_byte_seconds{worker}
  ShardedFamily ttft;                   // kvgate_upstream_time_to_first_token_seconds{worker}
  ShardedFamily ttft_error;             // kvgate_ttft_prediction_error_ratio{worker}
  ShardedFamily ttft_predicted;         // kvgate_ttft_predicted_seconds_total{worker}
  ShardedFamily ttft_observed;          // kvgate_ttft_observed_seconds_total{worker}
  ShardedFamily predicted_tokens;       // kvgate_prefix_prediction_predicted_tokens_total{worker}
  ShardedFamily actual_tokens;          // kvgate_prefix_prediction_actual_tokens_total{worker}
  ShardedFamily overestimated_tokens;   // ..._overestimated_tokens_total{worker}
  ShardedFamily underestimated_tokens;  // ..._underestimated_tokens_total{worker}
  // Prefill/decode disaggregation (router/dispatch/pd_dispatcher.h).
  ShardedFamily pd_decisions;      // kvgate_pd_decisions_total{protocol,decision}
  ShardedFamily pd_stage;          // kvgate_pd_stage_seconds{stage}: prefill, decode_first_token
  ShardedFamily pd_failures;       // kvgate_pd_failures_total{stage}
  ShardedFamily pd_releases;       // kvgate_pd_held_block_releases_total{result}
  ShardedFamily pd_client_fields;  // kvgate_pd_client_transfer_fields_dropped_total
  // kvgate_pd_transfer_params_rejected_total{field}: a prefill's params named someone else.
  ShardedFamily pd_transfer_rejected;

  prometheus::Counter& Retries(std::string_view reason);
  prometheus::Counter& AuthFailures(std::string_view reason);  // missing, invalid, throttled
  prometheus::Counter& RateLimited(std::string_view limit);    // requests, tokens
  // queue_full, queue_timeout, client_share
  prometheus::Counter& AdmissionRejected(std::string_view reason);
  prometheus::Counter& ConfigReloads(bool ok);                     // result="success" or "rejected"
  prometheus::Counter& TlsHandshakeErrors(std::string_view side);  // client, worker
  /// Addresses a discovery source named and kvgate refused (router/discovery/address_policy.h),
  /// once per refusal while it lasts: reason unspecified, loopback, link_local, metadata,
  /// network, port, malformed.
  prometheus::Counter& DiscoveryRefused(std::string_view source, std::string_view reason);
  /// Idle client connections closed to make room for new ones in a full connection table.
  prometheus::Counter& ConnectionsReaped() { return connections_reaped_; }
  /// Not sharded (a mutex per call): callers cache the counter (ThreadContext::ApiKeySeries).
  prometheus::Counter& ApiKeyRequests(std::string_view key, int code);

  /// The text exposition of everything: `registry` (this object's and other subsystems'
  /// families), the sharded families and the per-worker gauges of `workers` (series of workers
  /// no longer configured are left out).
  std::string Render(prometheus::Registry& registry, const WorkerList& workers,
                     const ProcessGauges& process) const;

 private:
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Family<prometheus::Counter>& auth_failures_;
  prometheus::Family<prometheus::Counter>& rate_limited_;
  prometheus::Family<prometheus::Counter>& admission_rejected_;
  prometheus::Family<prometheus::Counter>& api_key_requests_;
  prometheus::Family<prometheus::Counter>& tls_handshake_errors_;
  prometheus::Family<prometheus::Counter>& discovery_refused_;
  prometheus::Counter& connections_reaped_;
};

}  // namespace kvgate::router
