#include "router/discovery/discovery_source.h"

#include "router/discovery/dns_discovery.h"
#include "router/discovery/kubernetes_discovery.h"

namespace kvgate::router {

const char* EndpointStateName(EndpointState state) {
  switch (state) {
    case EndpointState::kReady:
      return "ready";
    case EndpointState::kNotReady:
      return "not_ready";
    case EndpointState::kTerminating:
      return "terminating";
  }
  return "unknown";
}

size_t DiscoverySourceCount(const config::DiscoveryConfig& config) {
  return config.dns.size() + config.kubernetes.size();
}

std::vector<std::unique_ptr<DiscoverySource>> MakeDiscoverySources(
    net::io_context& ioc, const config::DiscoveryConfig& config,
    DiscoverySource::OnChange on_change, DiscoverySource::OnRefused on_refused) {
  std::vector<std::unique_ptr<DiscoverySource>> out;
  for (const auto& d : config.dns) {
    out.push_back(std::make_unique<DnsDiscovery>(ioc, out.size(), d, on_change, on_refused));
  }
  for (const auto& k : config.kubernetes) {
    out.push_back(std::make_unique<KubernetesDiscovery>(ioc, out.size(), k, on_change, on_refused));
  }
  return out;
}

}  // namespace kvgate::router
