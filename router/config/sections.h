// File: router/config/sections.h
// Readers of the config's sections that live outside loader.cc (one file per section), and the
// worker reader they share. Used by the loader only.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "config/config.h"
#include "router/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

/// A worker entry; with `seen` null, the settings a discovery source gives every worker it
/// finds (no url), the source's own keys `extra` allowed beside them.
void ReadWorker(YamlReader& r, const YAML::Node& node, const std::string& path, WorkerConfig* w,
                std::set<std::string>* seen, absl::Span<const std::string_view> extra = {});

/// A worker's kv_transfer_hosts, kv_transfer_ports and kv_transfer_engine_id (issue 27: what a
/// vLLM prefill's kv_transfer_params may name), in discovery_section.cc.
void ReadTransferPeer(YamlReader& r, const YAML::Node& node, const std::string& path,
                      WorkerConfig* w);

/// A `rate` mapping (requests and prompt tokens per minute) at `path`.
void ReadRate(YamlReader& r, const YAML::Node& n, const std::string& path, RateLimitConfig* rate);

/// `auth`: API keys inline and from `api_keys_file`, names unique across both, each key's
/// SHA-256 as 64 hex digits (lower-cased); whether metrics name them.
void ReadAuth(YamlReader& r, const YAML::Node& n, AuthConfig* c);

/// `admin`: its listener, and its token inline or from a file or environment variable.
void ReadAdmin(YamlReader& r, const YAML::Node& n, AdminConfig* c);

/// `routing`: the policy, its settings and precise mode (routing_section.cc).
void ReadRouting(YamlReader& r, const YAML::Node& n, RoutingConfig* c);

/// `pd`: disaggregated prefill and decode (routing_section.cc).
void ReadPd(YamlReader& r, const YAML::Node& n, PdConfig* c);

/// `discovery`: DNS names and Kubernetes EndpointSlice sources.
void ReadDiscovery(YamlReader& r, const YAML::Node& n, DiscoveryConfig* c);

}  // namespace kvgate::config
