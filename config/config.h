// File: config/config.h
// The gateway's configuration: plain immutable values built by config/loader.h. A Config is
// never modified after loading; a reload builds a new one and publishes it as
// std::shared_ptr<const Config>. Thread-compatible (and immutable once shared).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/url.h"

namespace kvgate::config {

enum class WorkerRole { kMixed, kPrefill, kDecode };

const char* WorkerRoleName(WorkerRole role);

struct WorkerConfig {
  common::HttpUrl url;
  std::vector<std::string> models;  // empty: learned from the worker's /v1/models
  WorkerRole role = WorkerRole::kMixed;
  uint32_t dp_size = 1;
  double weight = 1.0;
};

struct LimitsConfig {
  uint32_t max_header_bytes = 16 * 1024;
  uint64_t max_body_bytes = 32ull * 1024 * 1024;  // agentic prompts are large
  uint32_t idle_timeout_ms = 60'000;              // keep-alive connection with no request
  uint32_t read_timeout_ms = 30'000;              // whole request once its first byte arrived
  uint32_t write_timeout_ms = 60'000;             // a client that stops reading for this long
  uint32_t max_connections = 10'000;              // per gateway; extra accepts are closed
};

struct UpstreamConfig {
  uint32_t connect_timeout_ms = 2'000;
  uint32_t response_timeout_ms = 600'000;  // request sent -> response header (prefill can be long)
  uint32_t stream_idle_timeout_ms = 300'000;  // between two body chunks of a response
  uint32_t max_idle_per_worker = 64;  // idle keep-alive connections kept per thread and worker
};

struct RetryConfig {
  uint32_t max_attempts = 3;  // total tries of one request, first included
  uint32_t backoff_base_ms = 10;
  uint32_t backoff_max_ms = 200;
  double jitter = 0.2;  // +-fraction applied to each backoff
};

struct HealthCheckConfig {
  bool enabled = true;
  std::string path = "/health";
  uint32_t interval_ms = 5'000;
  uint32_t timeout_ms = 2'000;
  uint32_t unhealthy_threshold = 3;  // consecutive failed checks before ejection
  uint32_t healthy_threshold = 2;    // consecutive good checks before readmission
};

struct CircuitBreakerConfig {
  uint32_t consecutive_failures = 5;  // passive connection errors before the breaker opens
  uint32_t open_ms = 10'000;          // how long an open breaker keeps the worker out
};

struct RoutingConfig {
  std::string policy = "round_robin";
};

struct AccessLogConfig {
  bool enabled = false;
  std::string path = "-";  // "-" = stdout
};

struct Config {
  std::string listen_host = "0.0.0.0";
  uint16_t listen_port = 8000;
  uint32_t threads = 0;  // 0 = number of cores
  std::string log_level = "info";
  uint32_t drain_timeout_ms = 30'000;
  uint32_t models_refresh_interval_ms = 10'000;
  LimitsConfig limits;
  UpstreamConfig upstream;
  RetryConfig retry;
  HealthCheckConfig health_check;
  CircuitBreakerConfig circuit_breaker;
  RoutingConfig routing;
  AccessLogConfig access_log;
  std::vector<WorkerConfig> workers;
};

using ConfigConstSharedPtr = std::shared_ptr<const Config>;

}  // namespace kvgate::config
