// File: config/discovery_section.cc
// The `discovery` section: DNS names and Kubernetes Services whose workers kvgate finds itself.
#include <set>
#include <string>

#include "common/strings.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {
namespace {

// One `discovery.kubernetes[]` source: a Service's EndpointSlices through the API server.
void ReadKubernetesSource(YamlReader& r, const YAML::Node& e, const std::string& path,
                          KubernetesDiscoveryConfig* k) {
  constexpr std::string_view kOwn[] = {"service",
                                       "label_selector",
                                       "namespace",
                                       "port_name",
                                       "port",
                                       "api_server",
                                       "token_file",
                                       "ca_file",
                                       "pod_metadata",
                                       "timeout_ms",
                                       "watch_timeout_s",
                                       "retry_max_ms",
                                       "kv_events_port",
                                       "kv_events_replay_port",
                                       "kv_events_topic",
                                       "kv_events_block_size"};
  ReadWorker(r, e, path, &k->worker, nullptr, kOwn);
  if (!e.IsMap()) return;
  r.String(e, path, "service", &k->service);
  r.String(e, path, "label_selector", &k->label_selector);
  if (k->service.empty() && k->label_selector.empty()) {
    r.Error(e, path, "needs service or label_selector (which EndpointSlices to watch)");
  }
  r.String(e, path, "namespace", &k->namespace_);
  r.String(e, path, "port_name", &k->port_name);
  r.Uint(e, path, "port", &k->port, 1, 65535);
  if (r.String(e, path, "api_server", &k->api_server) && !k->api_server.empty()) {
    if (auto u = common::ParseHttpUrl(k->api_server, /*allow_https=*/true); !u.ok()) {
      r.Error(e["api_server"], YamlReader::Join(path, "api_server"), u.status().message());
    }
  }
  r.String(e, path, "token_file", &k->token_file);
  r.String(e, path, "ca_file", &k->ca_file);
  r.Bool(e, path, "pod_metadata", &k->pod_metadata);
  r.Uint(e, path, "timeout_ms", &k->timeout_ms, 10);
  r.Uint(e, path, "watch_timeout_s", &k->watch_timeout_s, 1, 3600);
  r.Uint(e, path, "retry_max_ms", &k->retry_max_ms, 10);
  r.Uint(e, path, "kv_events_port", &k->kv_events_port, 1, 65535);
  r.Uint(e, path, "kv_events_replay_port", &k->kv_events_replay_port, 1, 65535);
  r.String(e, path, "kv_events_topic", &k->kv_events_topic);
  r.Uint(e, path, "kv_events_block_size", &k->kv_events_block_size, 1, 4096);
}

}  // namespace

void ReadDiscovery(YamlReader& r, const YAML::Node& n, DiscoveryConfig* c) {
  if (!r.ExpectMap(n, "discovery", {"dns", "kubernetes"})) return;
  if (const YAML::Node k = n["kubernetes"]; k.IsDefined() && !k.IsNull()) {
    if (!k.IsSequence()) {
      r.Error(k, "discovery.kubernetes", "must be a list");
    } else {
      for (size_t i = 0; i < k.size(); ++i) {
        KubernetesDiscoveryConfig source;
        ReadKubernetesSource(r, k[i], common::StrCat("discovery.kubernetes[", i, "]"), &source);
        c->kubernetes.push_back(std::move(source));
      }
    }
  }
  const YAML::Node dns = n["dns"];
  if (!dns.IsDefined() || dns.IsNull()) return;
  if (!dns.IsSequence()) {
    r.Error(dns, "discovery.dns", "must be a list");
    return;
  }
  for (size_t i = 0; i < dns.size(); ++i) {
    const std::string path = common::StrCat("discovery.dns[", i, "]");
    const YAML::Node e = dns[i];
    DnsDiscoveryConfig d;
    constexpr std::string_view kOwn[] = {"name",   "srv",         "port",
                                         "server", "interval_ms", "timeout_ms"};
    ReadWorker(r, e, path, &d.worker, nullptr, kOwn);
    if (!e.IsMap()) continue;
    if (!r.String(e, path, "name", &d.name) || d.name.empty()) {
      r.Error(e, YamlReader::Join(path, "name"), "is required (the DNS name to resolve)");
    }
    r.Bool(e, path, "srv", &d.srv);
    r.Uint(e, path, "port", &d.port, 1, 65535);
    if (r.String(e, path, "server", &d.server) && !d.server.empty()) {
      if (auto hp = common::ParseHostPort(
              d.server.find(':') == std::string::npos ? common::StrCat(d.server, ":53") : d.server);
          !hp.ok()) {
        r.Error(e["server"], YamlReader::Join(path, "server"), hp.status().message());
      }
    }
    r.Uint(e, path, "interval_ms", &d.interval_ms, 100);
    r.Uint(e, path, "timeout_ms", &d.timeout_ms, 10);
    c->dns.push_back(std::move(d));
  }
}

}  // namespace kvgate::config
