// File: router/config/upstream_section.cc
// How the gateway talks to workers: `upstream` (timeouts, TLS, where the worker API key is),
// `retry`, `health_check` and `circuit_breaker`.
#include <string>

#include "common/strings.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

void ReadUpstream(YamlReader& r, const YAML::Node& n, UpstreamConfig* c) {
  if (!r.ExpectMap(n, "upstream",
                   {"connect_timeout_ms", "response_timeout_ms", "stream_idle_timeout_ms",
                    "max_idle_per_worker", "tls", "api_key_file", "api_key_env"})) {
    return;
  }
  r.Uint(n, "upstream", "connect_timeout_ms", &c->connect_timeout_ms, 1);
  r.Uint(n, "upstream", "response_timeout_ms", &c->response_timeout_ms, 1);
  r.Uint(n, "upstream", "stream_idle_timeout_ms", &c->stream_idle_timeout_ms, 1);
  r.Uint(n, "upstream", "max_idle_per_worker", &c->max_idle_per_worker);
  r.String(n, "upstream", "api_key_file", &c->api_key_file);
  r.String(n, "upstream", "api_key_env", &c->api_key_env);
  if (!c->api_key_file.empty() && !c->api_key_env.empty()) {
    r.Error(n["api_key_env"], "upstream.api_key_env", "set api_key_file or api_key_env, not both");
  }
  // The key is read by ResolveConfig; its errors point at the section, as they always have.
  r.RecordPlace(n, "upstream");
  if (const YAML::Node t = n["tls"]; t.IsDefined() && !t.IsNull()) {
    if (r.ExpectMap(t, "upstream.tls", {"ca_file", "cert_file", "key_file"})) {
      r.String(t, "upstream.tls", "ca_file", &c->tls.ca_file);
      r.String(t, "upstream.tls", "cert_file", &c->tls.cert_file);
      r.String(t, "upstream.tls", "key_file", &c->tls.key_file);
    }
  }
}

void ReadRetry(YamlReader& r, const YAML::Node& n, RetryConfig* c) {
  if (!r.ExpectMap(n, "retry", {"max_attempts", "backoff_base_ms", "backoff_max_ms", "jitter"})) {
    return;
  }
  r.Uint(n, "retry", "max_attempts", &c->max_attempts, 1, 16);
  r.Uint(n, "retry", "backoff_base_ms", &c->backoff_base_ms);
  r.Uint(n, "retry", "backoff_max_ms", &c->backoff_max_ms);
  r.Double(n, "retry", "jitter", &c->jitter, 0.0, 1.0);
}

void ReadHealthCheck(YamlReader& r, const YAML::Node& n, HealthCheckConfig* c) {
  if (!r.ExpectMap(n, "health_check",
                   {"enabled", "path", "interval_ms", "timeout_ms", "unhealthy_threshold",
                    "healthy_threshold"})) {
    return;
  }
  r.Bool(n, "health_check", "enabled", &c->enabled);
  if (r.String(n, "health_check", "path", &c->path) && (c->path.empty() || c->path[0] != '/')) {
    r.Error(n["path"], "health_check.path", "must start with '/'");
  }
  r.Uint(n, "health_check", "interval_ms", &c->interval_ms, 10);
  r.Uint(n, "health_check", "timeout_ms", &c->timeout_ms, 1);
  r.Uint(n, "health_check", "unhealthy_threshold", &c->unhealthy_threshold, 1);
  r.Uint(n, "health_check", "healthy_threshold", &c->healthy_threshold, 1);
}

void ReadCircuitBreaker(YamlReader& r, const YAML::Node& n, CircuitBreakerConfig* c) {
  if (!r.ExpectMap(n, "circuit_breaker", {"consecutive_failures", "open_ms"})) return;
  r.Uint(n, "circuit_breaker", "consecutive_failures", &c->consecutive_failures, 1);
  r.Uint(n, "circuit_breaker", "open_ms", &c->open_ms, 1);
}

}  // namespace kvgate::config
