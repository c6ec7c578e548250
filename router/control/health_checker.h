// File: router/control/health_checker.h
// Control-plane loops on the control thread: active health checks (GET /health, of workers
// and of the stores that have an address) and discovery
// of each worker's models (GET /v1/models), which also refreshes the /v1/models union served
// to clients. Thread-compatible: created, run and stopped on the control io_context.
#pragma once

#include <memory>

#include "router/runtime/gateway_state.h"

namespace boost::asio {
class io_context;
}

namespace kvgate::router {

class HealthChecker {
 public:
  HealthChecker(boost::asio::io_context& ioc, GatewayState& state);
  ~HealthChecker();

  /// Starts both loops; they pick up worker-set and config changes at each tick.
  void Start();
  /// Stops the loops (pending checks finish on their own timeouts).
  void Stop();

  /// Rebuilds the /v1/models union from what each worker reported (also called on reload).
  static void RefreshModelsJson(GatewayState& state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::router
