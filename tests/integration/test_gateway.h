// File: tests/integration/test_gateway.h
// The gateway as the integration tests start it: a config on loopback (port 0, one thread,
// round robin, no engine scrapes) and a Gateway created and started from it.
#pragma once

#include <memory>
#include <string>

#include "common/url.h"
#include "config/config.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"

namespace kvgate::testing {

/// Loopback on a free port, one thread, round robin, no engine scrapes. Health checks off, or
/// with `health_checks` every 50 ms, one passing check admitting a worker.
inline config::Config TestGatewayConfig(bool health_checks = false) {
  config::Config c;
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.threads = 1;
  c.routing.policy = "round_robin";
  c.routing.engine_metrics_interval_ms = 0;
  c.health_check.enabled = health_checks;
  c.health_check.interval_ms = 50;
  c.health_check.healthy_threshold = 1;
  return c;
}

/// Adds a static worker at `url` (http://host:port) to `c`.
inline void AddTestWorker(config::Config& c, const std::string& url) {
  config::WorkerConfig w;
  w.url = *common::ParseHttpUrl(url);
  c.workers.push_back(w);
}

/// Creates and starts a gateway from `c`; fails the test and returns null when it cannot.
inline std::unique_ptr<router::Gateway> StartTestGateway(config::Config c) {
  auto gw = router::Gateway::Create(std::move(c));
  EXPECT_TRUE(gw.ok()) << gw.status();
  if (!gw.ok()) return nullptr;
  const absl::Status started = (*gw)->Start();
  EXPECT_TRUE(started.ok()) << started;
  if (!started.ok()) return nullptr;
  return std::move(*gw);
}

}  // namespace kvgate::testing
