#include "router/fleet/metrics.h"

#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "common/assert.h"
#include "common/strings.h"
#include "prometheus/text_serializer.h"

namespace kvgate::router {
namespace {

using prometheus::BuildCounter;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Type = ShardedFamily::Type;

// Latency buckets from 1 ms to 10 min: LLM requests span prefill of a few tokens to long
// generations.
std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   30,    60,   120, 300,  600};
}

// The gateway's own cost per request is microseconds: 5 us to 100 ms.
std::vector<double> OverheadBuckets() {
  return {0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
          0.001,    0.0025,  0.005,    0.01,    0.025,  0.1};
}

// Relative prediction errors: 5% steps to 40%, then coarser up to 10x.
std::vector<double> ErrorBuckets() {
  return {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10};
}

MetricFamily PerWorker(std::string name, std::string help, MetricType type,
                       const WorkerList& workers, double (*value)(const Worker&)) {
  MetricFamily f{std::move(name), std::move(help), type, {}};
  for (const auto& w : workers) {
    ClientMetric m;
    m.label.push_back({"worker", w->name()});
    if (type == MetricType::Counter) {
      m.counter.value = value(*w);
    } else {
      m.gauge.value = value(*w);
    }
    f.metric.push_back(std::move(m));
  }
  return f;
}

MetricFamily Single(std::string name, std::string help, MetricType type, double v) {
  MetricFamily f{std::move(name), std::move(help), type, {}};
  ClientMetric m;
  if (type == MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace

RouterMetrics::RouterMetrics(prometheus::Registry& r, size_t shards)
    : requests(
          "kvgate_http_requests_total",
          "Requests answered by the gateway, by endpoint (and its API), status code and worker",
          Type::kCounter, {"endpoint", "api", "code", "worker"}, {}, shards),
      request_duration("kvgate_http_request_duration_seconds",
                       "End-to-end latency: request fully read to last byte written",
                       Type::kHistogram, {"endpoint", "api"}, LatencyBuckets(), shards),
      router_overhead("kvgate_router_overhead_seconds",
                      "Request fully read until its first byte is written upstream",
                      Type::kHistogram, {}, OverheadBuckets(), shards),
      ttfb("kvgate_upstream_time_to_first_byte_seconds",
           "Request written to a worker until its first response byte", Type::kHistogram,
           {"worker"}, LatencyBuckets(), shards),
      ttft("kvgate_upstream_time_to_first_token_seconds",
           "Request written to a worker until the first event of its streamed answer (the "
           "first token; the head comes before the prefill)",
           Type::kHistogram, {"worker"}, LatencyBuckets(), shards),
      ttft_error("kvgate_ttft_prediction_error_ratio",
                 "|predicted - observed| / observed time to first token of kvaware-routed "
                 "streamed answers",
                 Type::kHistogram, {"worker"}, ErrorBuckets(), shards),
      ttft_predicted("kvgate_ttft_predicted_seconds_total",
                     "Predicted time to first token, summed over the compared requests (with "
                     "kvgate_ttft_observed_seconds_total: the bias)",
                     Type::kCounter, {"worker"}, {}, shards),
      ttft_observed("kvgate_ttft_observed_seconds_total",
                    "Observed time to first token, summed over the compared requests",
                    Type::kCounter, {"worker"}, {}, shards),
      predicted_tokens("kvgate_prefix_prediction_predicted_tokens_total",
                       "Prompt tokens the prefix index predicted cached on the chosen worker",
                       Type::kCounter, {"worker"}, {}, shards),
      actual_tokens("kvgate_prefix_prediction_actual_tokens_total",
                    "Cached prompt tokens the worker reported (usage.prompt_tokens_details)",
                    Type::kCounter, {"worker"}, {}, shards),
      overestimated_tokens("kvgate_prefix_prediction_overestimated_tokens_total",
                           "Predicted cached tokens the worker did not have", Type::kCounter,
                           {"worker"}, {}, shards),
      underestimated_tokens("kvgate_prefix_prediction_underestimated_tokens_total",
                            "Cached tokens the worker had beyond the prediction", Type::kCounter,
                            {"worker"}, {}, shards),
      pd_decisions("kvgate_pd_decisions_total",
                   "P/D requests by how they were served: disaggregated, skipped_cached (the "
                   "decode worker held the prompt), skipped_no_prefill, fallback_mixed, "
                   "unavailable",
                   Type::kCounter, {"protocol", "decision"}, {}, shards),
      pd_stage("kvgate_pd_stage_seconds",
               "P/D stage latency: prefill (request to its whole response) and "
               "decode_first_token (decode request to its first byte, KV transfer included)",
               Type::kHistogram, {"stage"}, LatencyBuckets(), shards),
      pd_failures("kvgate_pd_failures_total", "P/D stages that failed, by stage", Type::kCounter,
                  {"stage"}, {}, shards),
      pd_releases("kvgate_pd_held_block_releases_total",
                  "Requests sent to free the KV a prefill worker held for a decode that failed",
                  Type::kCounter, {"result"}, {}, shards),
      pd_client_fields("kvgate_pd_client_transfer_fields_dropped_total",
                       "P/D requests whose own kv_transfer_params or bootstrap fields were "
                       "dropped before any worker saw them",
                       Type::kCounter, {}, {}, shards),
      pd_transfer_rejected("kvgate_pd_transfer_params_rejected_total",
                           "P/D requests failed because the kv_transfer_params their prefill "
                           "worker returned named another host, port or engine, by field",
                           Type::kCounter, {"field"}, {}, shards),
      retries_(BuildCounter()
                   .Name("kvgate_upstream_retries_total")
                   .Help("Requests retried on another worker, by reason")
                   .Register(r)),
      reloads_(BuildCounter()
                   .Name("kvgate_config_reloads_total")
                   .Help("Configuration reloads, by result")
                   .Register(r)),
      auth_failures_(BuildCounter()
                         .Name("kvgate_auth_failures_total")
                         .Help("Requests refused for a missing or invalid API key (401), or "
                               "throttled after too many of them from one address (429)")
                         .Register(r)),
      rate_limited_(BuildCounter()
                        .Name("kvgate_rate_limited_total")
                        .Help("Requests refused with 429, by the limit they hit")
                        .Register(r)),
      admission_rejected_(
          BuildCounter()
              .Name("kvgate_admission_rejected_total")
              .Help("Requests refused by the concurrency cap's queue (503; client_share: 429)")
              .Register(r)),
      api_key_requests_(BuildCounter()
                            .Name("kvgate_api_key_requests_total")
                            .Help("Requests that presented a valid API key, by status and key name "
                                  "(\"redacted\" unless auth.key_names_in_metrics)")
                            .Register(r)),
      tls_handshake_errors_(BuildCounter()
                                .Name("kvgate_tls_handshake_errors_total")
                                .Help("TLS handshakes that failed, by side (client, worker)")
                                .Register(r)),
      discovery_refused_(BuildCounter()
                             .Name("kvgate_discovery_refused_total")
                             .Help("Worker addresses a discovery source named that kvgate "
                                   "refused, by source and reason, once per refusal")
                             .Register(r)),
      connections_reaped_(
          BuildCounter()
              .Name("kvgate_http_idle_connections_reaped_total")
              .Help("Idle client connections closed to make room for a new connection when "
                    "limits.max_connections were open")
              .Register(r)
              .Add({})) {}

prometheus::Counter& RouterMetrics::DiscoveryRefused(std::string_view source,
                                                     std::string_view reason) {
  return discovery_refused_.Add({{"source", std::string(source)}, {"reason", std::string(reason)}});
}

prometheus::Counter& RouterMetrics::ApiKeyRequests(std::string_view key, int code) {
  return api_key_requests_.Add({{"key", std::string(key)}, {"code", std::to_string(code)}});
}

prometheus::Counter& RouterMetrics::TlsHandshakeErrors(std::string_view side) {
  return tls_handshake_errors_.Add({{"side", std::string(side)}});
}

prometheus::Counter& RouterMetrics::AuthFailures(std::string_view reason) {
  return auth_failures_.Add({{"reason", std::string(reason)}});
}

prometheus::Counter& RouterMetrics::RateLimited(std::string_view limit) {
  return rate_limited_.Add({{"limit", std::string(limit)}});
}

prometheus::Counter& RouterMetrics::AdmissionRejected(std::string_view reason) {
  return admission_rejected_.Add({{"reason", std::string(reason)}});
}

prometheus::Counter& RouterMetrics::Retries(std::string_view reason) {
  return retries_.Add({{"reason", std::string(reason)}});
}

prometheus::Counter& RouterMetrics::ConfigReloads(bool ok) {
  return reloads_.Add({{"result", ok ? "success" : "rejected"}});
}

std::string RouterMetrics::Render(prometheus::Registry& registry, const WorkerList& workers,
                                  const ProcessGauges& process) const {
  std::vector<MetricFamily> families = registry.Collect();
  absl::flat_hash_set<std::string> names;
  for (const auto& w : workers) names.insert(w->name());
  // Per-worker series of a worker a reload removed disappear, as Prometheus expects.
  auto current_worker = [&](size_t label) {
    return [&names, label](absl::Span<const std::string> v) {
      return v[label].empty() || names.contains(v[label]);
    };
  };
  families.push_back(requests.Collect(current_worker(3)));
  families.push_back(request_duration.Collect());
  families.push_back(router_overhead.Collect());
  for (const ShardedFamily* f : {&pd_decisions, &pd_stage, &pd_failures, &pd_releases,
                                 &pd_client_fields, &pd_transfer_rejected}) {
    families.push_back(f->Collect());
  }
  for (const ShardedFamily* f :
       {&ttfb, &ttft, &ttft_error, &ttft_predicted, &ttft_observed, &predicted_tokens,
        &actual_tokens, &overestimated_tokens, &underestimated_tokens}) {
    families.push_back(f->Collect(current_worker(0)));
  }
  families.push_back(PerWorker("kvgate_worker_in_flight_requests",
                               "Requests the gateway has outstanding on each worker",
                               MetricType::Gauge, workers,
                               [](const Worker& w) { return static_cast<double>(w.in_flight()); }));
  families.push_back(PerWorker(
      "kvgate_worker_healthy", "1 when the worker passes active health checks, else 0",
      MetricType::Gauge, workers, [](const Worker& w) { return w.healthy() ? 1.0 : 0.0; }));
  families.push_back(
      PerWorker("kvgate_upstream_connect_errors_total",
                "Failed connections or resets before a response, by worker", MetricType::Counter,
                workers, [](const Worker& w) { return static_cast<double>(w.connect_errors()); }));
  families.push_back(PerWorker("kvgate_upstream_timeouts_total",
                               "Upstream requests that timed out, by worker", MetricType::Counter,
                               workers,
                               [](const Worker& w) { return static_cast<double>(w.timeouts()); }));
  families.push_back(PerWorker("kvgate_prefix_prediction_accuracy_ratio",
                               "Moving average of min(predicted, actual) / max(predicted, actual)",
                               MetricType::Gauge, workers,
                               [](const Worker& w) { return w.prediction_accuracy(); }));
  families.push_back(PerWorker("kvgate_worker_engine_waiting_requests",
                               "Waiting queue scraped from the worker's own metrics",
                               MetricType::Gauge, workers,
                               [](const Worker& w) { return w.engine_stats().waiting; }));
  families.push_back(PerWorker("kvgate_worker_engine_kv_usage_ratio",
                               "KV cache usage (0-1) scraped from the worker's own metrics",
                               MetricType::Gauge, workers,
                               [](const Worker& w) { return w.engine_stats().kv_usage; }));
  families.push_back(Single("kvgate_http_connections", "Client connections currently open",
                            MetricType::Gauge, static_cast<double>(process.open_connections)));
  families.push_back(
      Single("kvgate_admission_running",
             "Inference requests holding a place under max_concurrent_requests (0 without a cap)",
             MetricType::Gauge, static_cast<double>(process.admission_running)));
  families.push_back(Single("kvgate_admission_queued",
                            "Inference requests waiting for a place (limits.queue_size)",
                            MetricType::Gauge, static_cast<double>(process.admission_queued)));
  families.push_back(Single("kvgate_index_errors_total",
                            "Prefix-index updates refused (e.g. more workers than index holders)",
                            MetricType::Counter, static_cast<double>(process.index_errors)));
  families.push_back(Single(
      "kvgate_prefix_reuse_hits_total",
      "Long chat bodies parsed without the messages an earlier body of theirs had (issue 31)",
      MetricType::Counter, static_cast<double>(process.prefix_reuse_hits)));
  families.push_back(Single("kvgate_prefix_reuse_misses_total",
                            "Long chat bodies parsed whole: no earlier body began with them",
                            MetricType::Counter, static_cast<double>(process.prefix_reuse_misses)));
  families.push_back(Single("kvgate_prefix_reuse_skipped_bytes_total",
                            "Request body bytes not parsed thanks to prefix reuse",
                            MetricType::Counter,
                            static_cast<double>(process.prefix_reuse_skipped_bytes)));
  families.push_back(Single(
      "kvgate_prefix_reuse_late_tools_total",
      "Long chat bodies whose tools after the messages were an earlier body's, left unparsed",
      MetricType::Counter, static_cast<double>(process.prefix_reuse_late_tools)));
  families.push_back(Single(
      "kvgate_prefix_reuse_cache_bytes", "Memory the prefix-reuse cache holds (at most 64 MiB)",
      MetricType::Gauge, static_cast<double>(process.prefix_reuse_cache_bytes)));
  families.push_back(Single("kvgate_bug_total",
                            "Invariant violations caught by KVGATE_BUG (each is also logged)",
                            MetricType::Counter, static_cast<double>(common::BugCounter().load())));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace kvgate::router
