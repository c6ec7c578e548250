// File: router/config/discovery_section.cc
// The `discovery` section: DNS names and Kubernetes Services whose workers kvgate finds itself,
// each within its address bounds; and the worker keys that bound where a prefill's KV transfer
// may point (both issue 27's trust boundaries on what workers and registries say).
#include <algorithm>
#include <set>
#include <string>

#include "common/cidr.h"
#include "common/strings.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {
namespace {

// A list's entries, or a scalar as a list of one.
std::vector<YAML::Node> Items(const YAML::Node& n) {
  if (!n.IsSequence()) return {n};
  std::vector<YAML::Node> out;
  for (const auto& v : n) out.push_back(v);
  return out;
}

// A source's `allowed_networks` (CIDRs) and `allowed_ports` (issue 27): scalars or lists.
void ReadAddressBounds(YamlReader& r, const YAML::Node& e, const std::string& path,
                       std::vector<std::string>* networks, std::vector<uint16_t>* ports) {
  if (const YAML::Node n = e["allowed_networks"]; n.IsDefined() && !n.IsNull()) {
    const std::string at = YamlReader::Join(path, "allowed_networks");
    for (const YAML::Node& v : Items(n)) {
      if (!v.IsScalar()) {
        r.Error(v, at, "expected a list of networks such as [10.0.0.0/8, fd00::/8]");
      } else if (auto c = common::ParseCidr(v.Scalar()); !c.ok()) {
        r.Error(v, at, c.status().message());
      } else {
        networks->push_back(c->ToString());
      }
    }
  }
  if (const YAML::Node n = e["allowed_ports"]; n.IsDefined() && !n.IsNull()) {
    const std::string at = YamlReader::Join(path, "allowed_ports");
    for (const YAML::Node& v : Items(n)) {
      uint64_t p = 0;
      if (!v.IsScalar() || !common::ParseUint64(v.Scalar(), &p) || p == 0 || p > 65535) {
        r.Error(v, at,
                common::StrCat("expected ports 1 to 65535, got '", YamlReader::Describe(v), "'"));
      } else {
        ports->push_back(static_cast<uint16_t>(p));
      }
    }
  }
}

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
                                       "kv_events_block_size",
                                       "allowed_networks",
                                       "allowed_ports"};
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
  ReadAddressBounds(r, e, path, &k->allowed_networks, &k->allowed_ports);
}

}  // namespace

void ReadTransferPeer(YamlReader& r, const YAML::Node& node, const std::string& path,
                      WorkerConfig* w) {
  if (const YAML::Node n = node["kv_transfer_hosts"]; n.IsDefined() && !n.IsNull()) {
    for (const YAML::Node& v : Items(n)) {
      if (!v.IsScalar() || v.Scalar().empty()) {
        r.Error(v, YamlReader::Join(path, "kv_transfer_hosts"),
                "expected a list of host names or addresses");
      } else {
        w->kv_transfer_hosts.push_back(v.Scalar());
      }
    }
  }
  if (const YAML::Node n = node["kv_transfer_ports"]; n.IsDefined() && !n.IsNull()) {
    for (const YAML::Node& v : Items(n)) {
      uint64_t p = 0;
      if (!v.IsScalar() || !common::ParseUint64(v.Scalar(), &p) || p == 0 || p > 65535) {
        r.Error(v, YamlReader::Join(path, "kv_transfer_ports"),
                common::StrCat("expected ports 1 to 65535, got '", YamlReader::Describe(v), "'"));
      } else {
        w->kv_transfer_ports.push_back(static_cast<uint16_t>(p));
      }
    }
  }
  r.String(node, path, "kv_transfer_engine_id", &w->kv_transfer_engine_id);
}

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
    constexpr std::string_view kOwn[] = {
        "name",         "srv", "port", "server", "interval_ms", "timeout_ms", "allowed_networks",
        "allowed_ports"};
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
    ReadAddressBounds(r, e, path, &d.allowed_networks, &d.allowed_ports);
    if (!d.srv && !d.allowed_ports.empty() &&
        std::find(d.allowed_ports.begin(), d.allowed_ports.end(), d.port) ==
            d.allowed_ports.end()) {
      // A/AAAA answers are all used on `port`: a list without it would refuse every one.
      r.Error(e["allowed_ports"], YamlReader::Join(path, "allowed_ports"),
              common::StrCat("does not include port ", d.port, " (every A/AAAA answer's port)"));
    }
    c->dns.push_back(std::move(d));
  }
}

}  // namespace kvgate::config
