#include "router/gateway_state.h"

namespace kvgate::router {

GatewayState::GatewayState(config::ConfigConstSharedPtr initial)
    : precise(registry, initial->routing),
      planner(initial->routing, metrics, &precise),
      config_(std::move(initial)),
      workers_(std::make_shared<const WorkerSet>()),
      policies_(nullptr),
      models_json_(std::make_shared<const std::string>(R"({"object":"list","data":[]})")) {}

void GatewayState::Publish(config::ConfigConstSharedPtr config, WorkerSetConstSharedPtr workers,
                           PolicySetConstSharedPtr policies) {
  workers_.Store(std::move(workers));
  policies_.Store(std::move(policies));
  config_.Store(std::move(config));
  version_.fetch_add(1, std::memory_order_acq_rel);
}

void GatewayState::SetModelsJson(std::string json) {
  models_json_.Store(std::make_shared<const std::string>(std::move(json)));
}

bool GatewayState::AnyWorkerAvailable() const {
  const auto now = SteadyClock::now();
  for (const auto& w : workers()->workers) {
    if (w->IsAvailable(now)) return true;
  }
  return false;
}

}  // namespace kvgate::router
