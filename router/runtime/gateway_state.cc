#include "router/runtime/gateway_state.h"

#include "common/process_metrics.h"
#include "router/routing/parsed_request.h"

namespace kvgate::router {

GatewayState::GatewayState(config::ConfigConstSharedPtr initial, size_t threads)
    : threads(threads),
      metrics(registry, threads),
      precise(registry, initial->routing),
      planner(initial->routing, &precise),
      response_pins(initial->routing.responses.max_pins,
                    std::chrono::seconds(initial->routing.responses.pin_ttl_s)),
      snapshot_(std::make_shared<const Snapshot>(Snapshot{initial, {}, nullptr, nullptr})),
      models_json_(std::make_shared<const std::string>(R"({"object":"list","data":[]})")) {}

void GatewayState::Publish(SnapshotConstSharedPtr snapshot) {
  const config::ResponsesConfig& responses = snapshot->config->routing.responses;
  response_pins.Configure(responses.max_pins, std::chrono::seconds(responses.pin_ttl_s));
  snapshot_.Store(std::move(snapshot));
  version_.fetch_add(1, std::memory_order_acq_rel);
}

void GatewayState::SetModelsJson(std::string json) {
  models_json_.Store(std::make_shared<const std::string>(std::move(json)));
}

bool GatewayState::AnyWorkerAvailable() const {
  const auto now = SteadyClock::now();
  for (const auto& w : snapshot()->workers) {
    if (w->IsAvailable(now)) return true;
  }
  return false;
}

std::string GatewayState::MetricsText() {
  ProcessGauges p;
  p.open_connections = open_connections.load(std::memory_order_relaxed);
  p.index_errors = planner.index_errors();
  p.admission_running = admission.running();
  p.admission_queued = static_cast<int64_t>(admission.queued());
  const kvindex::PrefixReuseCache::Stats reuse = SharedPrefixReuse().stats();
  p.prefix_reuse_hits = reuse.hits;
  p.prefix_reuse_misses = reuse.misses;
  p.prefix_reuse_skipped_bytes = reuse.reused_bytes;
  p.prefix_reuse_late_tools = reuse.late_tools;
  p.prefix_reuse_cache_bytes = reuse.bytes;
  return metrics.Render(registry, snapshot()->workers, p) + common::ProcessMetricsText("kvgate");
}

}  // namespace kvgate::router
