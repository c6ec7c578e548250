#include "router/metrics.h"

#include <sstream>

#include "common/strings.h"
#include "prometheus/text_serializer.h"

namespace kvgate::router {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Latency buckets from 1 ms to 10 min: LLM requests span prefill of a few tokens to long
// generations.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                0.1,   0.25,   0.5,   1,    2.5,   5,
                                                10,    30,     60,    120,  300,   600};
  return b;
}

// The gateway's own cost per request is microseconds: 5 us to 100 ms.
const Histogram::BucketBoundaries& OverheadBuckets() {
  static const Histogram::BucketBoundaries b = {0.000005, 0.00001, 0.000025, 0.00005, 0.0001,
                                                0.00025,  0.0005,  0.001,    0.0025,  0.005,
                                                0.01,     0.025,   0.1};
  return b;
}

}  // namespace

RouterMetrics::RouterMetrics(prometheus::Registry& r)
    : requests_(BuildCounter()
                    .Name("kvgate_http_requests_total")
                    .Help("Requests answered by the gateway, by endpoint, status code and worker")
                    .Register(r)),
      request_duration_(BuildHistogram()
                            .Name("kvgate_http_request_duration_seconds")
                            .Help("End-to-end latency: request fully read to last byte written")
                            .Register(r)),
      ttfb_(BuildHistogram()
                .Name("kvgate_upstream_time_to_first_byte_seconds")
                .Help("Request written to a worker until its first response byte")
                .Register(r)),
      overhead_family_(BuildHistogram()
                           .Name("kvgate_router_overhead_seconds")
                           .Help("Request fully read until its first byte is written upstream")
                           .Register(r)),
      in_flight_(BuildGauge()
                     .Name("kvgate_worker_in_flight_requests")
                     .Help("Requests the gateway has outstanding on each worker")
                     .Register(r)),
      healthy_(BuildGauge()
                   .Name("kvgate_worker_healthy")
                   .Help("1 when the worker passes active health checks, else 0")
                   .Register(r)),
      connect_errors_(BuildCounter()
                          .Name("kvgate_upstream_connect_errors_total")
                          .Help("Failed connections or resets before a response, by worker")
                          .Register(r)),
      timeouts_(BuildCounter()
                    .Name("kvgate_upstream_timeouts_total")
                    .Help("Upstream requests that timed out, by worker")
                    .Register(r)),
      retries_(BuildCounter()
                   .Name("kvgate_upstream_retries_total")
                   .Help("Requests retried on another worker, by reason")
                   .Register(r)),
      reloads_(BuildCounter()
                   .Name("kvgate_config_reloads_total")
                   .Help("Configuration reloads, by result")
                   .Register(r)),
      connections_family_(BuildGauge()
                              .Name("kvgate_http_connections")
                              .Help("Client connections currently open")
                              .Register(r)),
      predicted_(BuildCounter()
                     .Name("kvgate_prefix_prediction_predicted_tokens_total")
                     .Help("Prompt tokens the prefix index predicted cached on the chosen worker")
                     .Register(r)),
      actual_(BuildCounter()
                  .Name("kvgate_prefix_prediction_actual_tokens_total")
                  .Help("Cached prompt tokens the worker reported (usage.prompt_tokens_details)")
                  .Register(r)),
      over_(BuildCounter()
                .Name("kvgate_prefix_prediction_overestimated_tokens_total")
                .Help("Predicted cached tokens the worker did not have")
                .Register(r)),
      under_(BuildCounter()
                 .Name("kvgate_prefix_prediction_underestimated_tokens_total")
                 .Help("Cached tokens the worker had beyond the prediction")
                 .Register(r)),
      accuracy_(BuildGauge()
                    .Name("kvgate_prefix_prediction_accuracy_ratio")
                    .Help("Moving average of min(predicted, actual) / max(predicted, actual)")
                    .Register(r)),
      engine_waiting_(BuildGauge()
                          .Name("kvgate_worker_engine_waiting_requests")
                          .Help("Waiting queue scraped from the worker's own metrics")
                          .Register(r)),
      engine_kv_usage_(BuildGauge()
                           .Name("kvgate_worker_engine_kv_usage_ratio")
                           .Help("KV cache usage (0-1) scraped from the worker's own metrics")
                           .Register(r)),
      router_overhead_(&overhead_family_.Add({}, OverheadBuckets())),
      open_connections_(&connections_family_.Add({})) {}

WorkerMetrics RouterMetrics::ForWorker(const std::string& worker) {
  WorkerMetrics m;
  m.in_flight = &in_flight_.Add({{"worker", worker}});
  m.healthy = &healthy_.Add({{"worker", worker}});
  m.connect_errors = &connect_errors_.Add({{"worker", worker}});
  m.timeouts = &timeouts_.Add({{"worker", worker}});
  m.ttfb = &ttfb_.Add({{"worker", worker}}, LatencyBuckets());
  m.predicted_tokens = &predicted_.Add({{"worker", worker}});
  m.actual_tokens = &actual_.Add({{"worker", worker}});
  m.overpredicted_tokens = &over_.Add({{"worker", worker}});
  m.underpredicted_tokens = &under_.Add({{"worker", worker}});
  m.prediction_accuracy = &accuracy_.Add({{"worker", worker}});
  m.prediction_accuracy->Set(1);
  m.engine_waiting = &engine_waiting_.Add({{"worker", worker}});
  m.engine_kv_usage = &engine_kv_usage_.Add({{"worker", worker}});
  return m;
}

void RouterMetrics::RemoveWorker(const std::string& worker) {
  const prometheus::Labels l = {{"worker", worker}};
  in_flight_.Remove(&in_flight_.Add(l));
  healthy_.Remove(&healthy_.Add(l));
  connect_errors_.Remove(&connect_errors_.Add(l));
  timeouts_.Remove(&timeouts_.Add(l));
  ttfb_.Remove(&ttfb_.Add(l, LatencyBuckets()));
  predicted_.Remove(&predicted_.Add(l));
  actual_.Remove(&actual_.Add(l));
  over_.Remove(&over_.Add(l));
  under_.Remove(&under_.Add(l));
  accuracy_.Remove(&accuracy_.Add(l));
  engine_waiting_.Remove(&engine_waiting_.Add(l));
  engine_kv_usage_.Remove(&engine_kv_usage_.Add(l));
}

prometheus::Counter& RouterMetrics::Requests(std::string_view endpoint, int code,
                                             std::string_view worker) {
  return requests_.Add({{"endpoint", std::string(endpoint)},
                        {"code", common::StrCat(code)},
                        {"worker", std::string(worker)}});
}

prometheus::Histogram& RouterMetrics::RequestDuration(std::string_view endpoint) {
  return request_duration_.Add({{"endpoint", std::string(endpoint)}}, LatencyBuckets());
}

prometheus::Counter& RouterMetrics::Retries(std::string_view reason) {
  return retries_.Add({{"reason", std::string(reason)}});
}

prometheus::Counter& RouterMetrics::ConfigReloads(bool ok) {
  return reloads_.Add({{"result", ok ? "success" : "failure"}});
}

std::string RouterMetrics::Serialize(prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace kvgate::router
