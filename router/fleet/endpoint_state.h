// File: router/fleet/endpoint_state.h
// What a worker registry (Kubernetes EndpointSlice conditions) says of one endpoint. Kept
// apart from discovery_source.h so that worker.h can hold it without Asio.
#pragma once

#include <cstdint>

namespace kvgate::router {

/// What the registry says of one endpoint. Only kReady endpoints get new requests (and then
/// only once kvgate's own health check admits them); the others keep their in-flight requests
/// and their place in the prefix index, so a pod that fails one readiness probe does not
/// lose what kvgate learned of its cache.
enum class EndpointState : uint8_t {
  kReady = 0,        // serving, not terminating
  kNotReady = 1,     // e.g. a failed readiness probe, or a pod still starting
  kTerminating = 2,  // being deleted: drains (Kubernetes `terminating`, serving or not)
};
const char* EndpointStateName(EndpointState state);

}  // namespace kvgate::router
