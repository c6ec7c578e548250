// File: transfer/segment.h
// A segment descriptor: what one engine publishes about itself so that peers can reach it —
// its transports' endpoints and the buffers it registered. Published through SegmentMetadata
// (transfer/metadata/) as JSON. Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvgate::transfer {

/// One registered buffer as peers see it.
struct BufferDesc {
  uint64_t addr = 0;  // The owner's virtual address; requests name remote bytes by it.
  uint64_t length = 0;
  std::string location = "cpu:0";
  uint64_t id = 0;              // Unique per registration in this engine instance.
  bool shm = false;             // memfd-backed: a same-host peer can map it (shm transport).
  std::vector<uint32_t> rkeys;  // RDMA remote keys, one per entry of rdma_devices; else empty.

  friend bool operator==(const BufferDesc&, const BufferDesc&) = default;
};

/// One RDMA NIC port of the owner.
struct RdmaDeviceDesc {
  std::string name;  // "mlx5_0"
  uint32_t lid = 0;
  std::string gid;  // 32 hex digits
  friend bool operator==(const RdmaDeviceDesc&, const RdmaDeviceDesc&) = default;
};

struct SegmentDescriptor {
  std::string name;           // Cluster-unique segment name (the engine's).
  std::string instance;       // Unique per engine instance: a restarted process gets a new one.
  std::string host_id;        // Equal for engines on the same host (boot id + hostname).
  uint64_t version = 0;       // Bumped on every change by the owner.
  std::string tcp_endpoint;   // "host:port", empty when tcp is not offered.
  std::string shm_socket;     // Abstract Unix socket name, empty when shm is not offered.
  std::string rdma_endpoint;  // "host:port" of the RDMA handshake, empty when not offered.
  std::vector<RdmaDeviceDesc> rdma_devices;
  std::vector<BufferDesc> buffers;  // Sorted by addr, never overlapping.

  /// The buffer containing all of [addr, addr + length), or nullptr (also on length 0 and on
  /// address overflow).
  const BufferDesc* FindRange(uint64_t addr, uint64_t length) const;

  friend bool operator==(const SegmentDescriptor&, const SegmentDescriptor&) = default;
};

std::string SegmentToJson(const SegmentDescriptor& desc);

/// @return kInvalidArgument naming the field on malformed input, missing fields, overlapping or
/// zero-length buffers, or rkeys not matching rdma_devices.
absl::StatusOr<SegmentDescriptor> ParseSegmentJson(std::string_view json);

/// "<boot id>/<hostname>": equal for processes on one kernel.
std::string LocalHostId();

}  // namespace kvgate::transfer
