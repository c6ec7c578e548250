// File: router/discovery/discovery_source.h
// The seam between the gateway and whatever finds its workers (DNS names, Kubernetes
// EndpointSlices): a source reports, on the control io_context, the whole set of workers it
// now knows, each with the state its registry gives it. The gateway merges every source's set
// after the static `workers` list; what a source stops reporting leaves the fleet and the index.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "net/asio.h"
#include "router/fleet/endpoint_state.h"

namespace kvgate::router {

struct DiscoveredWorker {
  config::WorkerConfig config;
  EndpointState state = EndpointState::kReady;

  friend bool operator==(const DiscoveredWorker&, const DiscoveredWorker&) = default;
};

class DiscoverySource {
 public:
  /// Called with the source's index and every worker it now knows, when that set changes.
  using OnChange = std::function<void(size_t source, std::vector<DiscoveredWorker>)>;
  /// Called when a source starts refusing an address its registry names (issue 27,
  /// router/discovery/address_policy.h): the source's name and the refusal's label. Once per
  /// refused address while it stays refused, not at every poll.
  using OnRefused = std::function<void(const std::string& source, std::string_view reason)>;

  virtual ~DiscoverySource() = default;
  /// Starts the source's loop on the io_context given at construction.
  virtual void Start() = 0;
  /// Ends the loop; nothing is reported after this returns (a call in flight ends at its
  /// timeout, reporting nothing).
  virtual void Stop() = 0;
};

/// Every source `config` names: the DNS ones first, then the Kubernetes ones, numbered in
/// that order for `on_change`.
std::vector<std::unique_ptr<DiscoverySource>> MakeDiscoverySources(
    net::io_context& ioc, const config::DiscoveryConfig& config,
    DiscoverySource::OnChange on_change, DiscoverySource::OnRefused on_refused = {});

/// The number of sources MakeDiscoverySources makes for `config`.
size_t DiscoverySourceCount(const config::DiscoveryConfig& config);

}  // namespace kvgate::router
