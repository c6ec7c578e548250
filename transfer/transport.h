// File: transfer/transport.h
// The seam between TransferEngine and one way of moving bytes (local memcpy, shm, tcp, rdma);
// implementations live in transfer/<kind>/. A transport both serves this engine's segment to
// peers (Start, Describe, RegisterBuffer) and carries this engine's requests to peers (CanReach,
// CanCarry, Submit). All methods are thread-safe; the engine owns its transports and calls
// Start() before anything else and destroys them before the registry and copy pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transfer/metrics.h"
#include "transfer/peer_auth.h"
#include "transfer/segment.h"
#include "transfer/types.h"

namespace kvgate::transfer {

class CopyPool;
class GpuRuntime;
class MemoryRegistry;
struct LocalBuffer;
class Task;

/// What a transport can do; used for selection and reported by the bench.
struct Capabilities {
  bool same_process_only = false;     // local
  bool same_host_only = false;        // shm
  bool local_device_memory = false;   // The local side may be GPU memory (directly or bounced).
  bool remote_device_memory = false;  // The remote side may be GPU memory.
  bool zero_copy = false;  // Bytes move between registered memory and the wire without staging.
  uint64_t max_slice_bytes = 0;  // Largest unit on the wire (0: whole requests).
};

/// Everything a transport may use from its engine; outlives the transport.
struct TransportContext {
  std::string segment_name;
  std::string instance;  // SegmentDescriptor::instance of this engine.
  std::string host_id;
  const MemoryRegistry* registry = nullptr;
  CopyPool* copy_pool = nullptr;
  GpuRuntime* cuda = nullptr;  // Null when not built or no GPU.
  GpuRuntime* hip = nullptr;
  bool verify_crc32c = false;  // Checksum every slice end to end (tcp).
  /// Peers prove who they are before their first request (transfer/peer_auth.h); null: open.
  PeerAuthPtr auth;

  /// The runtime for device memory at `loc`, or null (always null for cpu).
  GpuRuntime* RuntimeFor(MemoryLocation loc) const {
    return loc.kind == MemoryKind::kCuda ? cuda : loc.kind == MemoryKind::kHip ? hip : nullptr;
  }
};

/// One request as a transport receives it. Valid (and its memory mapped) until the task is
/// terminal; `peer` descriptor is kept alive by the shared_ptr passed with it to Submit().
struct TransferTask {
  TransferOp op = TransferOp::kRead;
  uint8_t* local = nullptr;
  MemoryLocation local_location;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  const BufferDesc* remote_buffer = nullptr;  // The peer's buffer containing the range.
  Clock::time_point deadline;                 // The batch's time-out, from submission.
  Task* task = nullptr;
  uint64_t flow = 0;             // Whose work (Batch::flow()): transports serve flows round robin.
  RangeCapability capability{};  // TransferRequest::capability.
};

using SegmentDescriptorPtr = std::shared_ptr<const SegmentDescriptor>;

class Transport {
 public:
  virtual ~Transport() = default;

  /// "local", "shm", "tcp", "rdma".
  virtual std::string_view Name() const = 0;
  virtual Capabilities GetCapabilities() const = 0;

  /// Starts serving this engine's segment (listeners, threads). Called once, before any other
  /// method. @return kUnavailable when it cannot serve (the engine then does not offer it).
  virtual absl::Status Start(const TransportContext& context) = 0;
  /// Adds what peers need to reach this transport (endpoint, per-buffer fields) to `desc`.
  virtual void Describe(SegmentDescriptor& desc) const = 0;
  /// Called after a buffer enters, and before it leaves, the registry (RDMA registers MRs).
  virtual absl::Status RegisterBuffer(const LocalBuffer& buffer) { return absl::OkStatus(); }
  virtual void UnregisterBuffer(const LocalBuffer& buffer) {}

  /// Whether this transport can move data between this engine and `peer` at all (both sides
  /// offer it, same host or process where required).
  virtual bool CanReach(const SegmentDescriptor& peer) const = 0;
  /// Whether it can carry this request (e.g. the remote buffer is shareable, memory kinds).
  virtual bool CanCarry(const SegmentDescriptor& peer, const TransferTask& task) const {
    return true;
  }

  /// Starts `tasks` without blocking on the network. Returning OK hands every task over: each
  /// reaches a terminal state by its deadline (a broken connection fails its slices, it never
  /// hangs them). Returning an error means no task was begun, so the engine may try the next
  /// transport (kUnavailable: the peer cannot be reached this way now).
  virtual absl::Status Submit(const SegmentDescriptorPtr& peer,
                              absl::Span<const TransferTask> tasks) = 0;

  /// The peer's segment was closed or re-published by a new instance: drop cached state.
  virtual void ForgetPeer(const SegmentDescriptor& peer) {}

  virtual const TransportStats& Stats() const = 0;
};

using TransportPtr = std::unique_ptr<Transport>;

}  // namespace kvgate::transfer
