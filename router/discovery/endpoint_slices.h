// File: router/discovery/endpoint_slices.h
// The Kubernetes objects discovery reads, parsed from the API server's JSON
// (discovery.k8s.io/v1 EndpointSlice, its list and watch events, a Pod's metadata), and how
// kvgate turns them into workers: which endpoints, on which port, in which state, with which
// kvgate.io/* settings. Pure: no I/O. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "router/discovery/address_policy.h"
#include "router/discovery/discovery_source.h"

namespace kvgate::router::k8s {

using StringMap = std::map<std::string, std::string>;

struct SliceEndpoint {
  std::string address;  // the first of `addresses` (the API: consumers use the first)
  // Conditions with the API's defaults for absent ones: ready and serving true, terminating
  // false (serving defaults to ready where absent).
  bool ready = true;
  bool serving = true;
  bool terminating = false;
  std::string pod_name;  // targetRef of kind Pod; empty otherwise
  std::string pod_uid;
};

struct SlicePort {
  std::string name;
  uint16_t port = 0;  // 0: the API's "all ports" (no port); never used
};

struct EndpointSlice {
  std::string name;
  std::string namespace_;
  std::string resource_version;
  std::string address_type;  // IPv4, IPv6 or FQDN
  StringMap labels;
  std::vector<SliceEndpoint> endpoints;
  std::vector<SlicePort> ports;
};

struct SliceList {
  std::string resource_version;
  std::vector<EndpointSlice> items;
};

struct WatchEvent {
  enum class Type : uint8_t { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  EndpointSlice slice;           // kAdded, kModified, kDeleted
  std::string resource_version;  // every type but kError
  int error_code = 0;            // kError: the Status object's code (410: re-list)
  std::string error_message;
};

struct PodMetadata {
  StringMap annotations;
  StringMap labels;
};

absl::StatusOr<SliceList> ParseSliceList(std::string_view json);
/// One line of a watch stream: {"type": ..., "object": ...}.
absl::StatusOr<WatchEvent> ParseWatchEvent(std::string_view json);
absl::StatusOr<PodMetadata> ParsePodMetadata(std::string_view json);
/// The Status object's message in an error answer, else the body itself (truncated).
std::string StatusMessage(std::string_view json);

/// The state kvgate gives an endpoint: terminating wins (drain), then ready.
EndpointState StateOf(const SliceEndpoint& e);

/// The kvgate.io/* keys read from a Service's labels (through its slices) and a pod's
/// annotations and labels, later ones overriding earlier ones:
///   kvgate.io/role (mixed|prefill|decode), kvgate.io/dp-size, kvgate.io/weight,
///   kvgate.io/kv-capacity-tokens, kvgate.io/bootstrap-port, kvgate.io/kv-events-port,
///   kvgate.io/kv-events-replay-port, kvgate.io/block-size.
/// Applies each valid one to `w` (a kv-events port makes `tcp://<address>:<port>` its
/// endpoint); returns a line per invalid value, for a warning.
std::vector<std::string> ApplyWorkerMetadata(const StringMap& keys, const std::string& address,
                                             const config::KubernetesDiscoveryConfig& source,
                                             config::WorkerConfig* w);

/// The workers `slices` describe for `source`: one per endpoint address (on port `source.port`,
/// else the slice port named `source.port_name`, else its first port), with the source's
/// template, the slice's labels and `pods` (by pod uid) applied. An address listed twice
/// (a pod moving between slices) keeps its readiest state. Sorted by URL. `problems` gets a
/// line per endpoint left out or value ignored. Endpoints outside the source's bounds
/// (allowed_networks, allowed_ports, the ranges refused by default: address_policy.h) are left
/// out and listed in `refused` when given.
std::vector<DiscoveredWorker> WorkersFromSlices(const std::vector<const EndpointSlice*>& slices,
                                                const std::map<std::string, PodMetadata>& pods,
                                                const config::KubernetesDiscoveryConfig& source,
                                                std::vector<std::string>* problems,
                                                std::vector<RefusedAddress>* refused = nullptr);

}  // namespace kvgate::router::k8s
