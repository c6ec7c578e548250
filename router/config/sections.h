// File: router/config/sections.h
// The readers of the config's sections, one per top-level key, in files by theme
// (listener_section.cc, upstream_section.cc, workers_section.cc, auth_section.cc,
// routing_section.cc, discovery_section.cc); ParseConfig (loader.cc) calls them in turn. None
// does I/O: keys that name files, variables or tokenizers are recorded with their place
// (YamlReader::RecordPlace) for ResolveConfig (resolve.cc). Used by the loader only.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "config/config.h"
#include "router/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

/// The top-level scalars: listen, threads, log_level, drain_timeout_ms, drain_delay_ms,
/// models_refresh_interval_ms (listener_section.cc).
void ReadTopLevel(YamlReader& r, const YAML::Node& root, Config* c);

/// `tls`: the client listener's certificate, key and client CA (listener_section.cc).
void ReadTls(YamlReader& r, const YAML::Node& n, TlsConfig* c);

/// `limits`: sizes, timeouts, connection caps and admission (listener_section.cc).
void ReadLimits(YamlReader& r, const YAML::Node& n, LimitsConfig* c);

/// `access_log` (listener_section.cc).
void ReadAccessLog(YamlReader& r, const YAML::Node& n, AccessLogConfig* c);

/// `cors`: origins browsers may call from (listener_section.cc).
void ReadCors(YamlReader& r, const YAML::Node& n, CorsConfig* c);

/// `upstream`: timeouts, TLS to workers, where the worker API key is (upstream_section.cc).
void ReadUpstream(YamlReader& r, const YAML::Node& n, UpstreamConfig* c);

/// `retry` (upstream_section.cc).
void ReadRetry(YamlReader& r, const YAML::Node& n, RetryConfig* c);

/// `health_check` (upstream_section.cc).
void ReadHealthCheck(YamlReader& r, const YAML::Node& n, HealthCheckConfig* c);

/// `circuit_breaker` (upstream_section.cc).
void ReadCircuitBreaker(YamlReader& r, const YAML::Node& n, CircuitBreakerConfig* c);

/// A worker entry; with `seen` null, the settings a discovery source gives every worker it
/// finds (no url), the source's own keys `extra` allowed beside them (workers_section.cc).
void ReadWorker(YamlReader& r, const YAML::Node& node, const std::string& path, WorkerConfig* w,
                std::set<std::string>* seen, absl::Span<const std::string_view> extra = {});

/// `workers`: the static list, urls unique (workers_section.cc).
void ReadWorkers(YamlReader& r, const YAML::Node& n, std::vector<WorkerConfig>* workers);

/// `stores`: KV stores publishing events, names unique (workers_section.cc).
void ReadStores(YamlReader& r, const YAML::Node& n, std::vector<StoreConfig>* stores);

/// A worker's kv_transfer_hosts, kv_transfer_ports and kv_transfer_engine_id (issue 27: what a
/// vLLM prefill's kv_transfer_params may name), in discovery_section.cc.
void ReadTransferPeer(YamlReader& r, const YAML::Node& node, const std::string& path,
                      WorkerConfig* w);

/// A `rate` mapping (requests and prompt tokens per minute) at `path`.
void ReadRate(YamlReader& r, const YAML::Node& n, const std::string& path, RateLimitConfig* rate);

/// A list of API keys at `path`: names unique across `names`, each key's SHA-256 as 64 hex
/// digits (lower-cased). Also reads the list in auth.api_keys_file (resolve.cc).
void ReadApiKeys(YamlReader& r, const YAML::Node& keys, const std::string& path,
                 std::set<std::string>* names, std::vector<ApiKeyConfig>* out);

/// `auth`: the inline API keys and the api_keys_file path (read by ResolveConfig); whether
/// metrics name the keys; the failed-key throttle.
void ReadAuth(YamlReader& r, const YAML::Node& n, AuthConfig* c);

/// `admin`: its listener, and its token inline or where it is (a file or a variable, read by
/// ResolveConfig).
void ReadAdmin(YamlReader& r, const YAML::Node& n, AdminConfig* c);

/// `cluster`: replica sync through Redis; the password's file or variable is read by
/// ResolveConfig (cluster_section.cc).
void ReadCluster(YamlReader& r, const YAML::Node& n, ClusterConfig* c);

/// `routing`: the policy, its settings and precise mode (routing_section.cc).
void ReadRouting(YamlReader& r, const YAML::Node& n, RoutingConfig* c);

/// `pd`: disaggregated prefill and decode (routing_section.cc).
void ReadPd(YamlReader& r, const YAML::Node& n, PdConfig* c);

/// `discovery`: DNS names and Kubernetes EndpointSlice sources.
void ReadDiscovery(YamlReader& r, const YAML::Node& n, DiscoveryConfig* c);

}  // namespace kvgate::config
