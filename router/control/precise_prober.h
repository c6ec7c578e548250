// File: router/control/precise_prober.h
// Proves, for each worker with kv_events, that kvgate and the engine agree on its KV cache
// before precise routing trusts the events: at start, when a worker comes back, and after its
// engine restarted, it sends the worker a small completion whose blocks kvgate predicts, and
// waits for the engine's events to carry exactly those blocks. A worker that does not pass, or
// whose events go silent while it serves requests, is routed in approximate mode and logged
// loudly (docs/precise-mode.md). Runs on the control io_context; thread-compatible.
#pragma once

#include <memory>

#include "router/runtime/gateway_state.h"

namespace boost::asio {
class io_context;
}

namespace kvgate::router {

class PreciseProber {
 public:
  PreciseProber(boost::asio::io_context& ioc, GatewayState& state);
  ~PreciseProber();

  void Start();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::router
