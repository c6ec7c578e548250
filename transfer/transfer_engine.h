// File: transfer/transfer_engine.h
// The KV transfer engine (Mooncake Transfer Engine's shape): register memory, open remote
// segments, submit batches of one-sided READ/WRITE requests asynchronously, poll or wait for
// per-task and per-batch status. Transports (local, shm, tcp, rdma) are chosen per peer, best
// first, with fallback; segment descriptors are published through SegmentMetadata.
//
//   auto engine = TransferEngine::Create({.segment_name = "store-0",
//                                         .metadata_uri = "etcd://10.0.0.1:2379"});
//   void* pool = *(*engine)->AllocateManagedMemory(1 << 30);   // or RegisterMemory(p, n, "cuda:0")
//   SegmentId peer = *(*engine)->OpenSegment("worker-3");
//   BatchId b = *(*engine)->AllocateBatch(64);
//   (*engine)->Submit(b, {{TransferOp::kRead, pool, peer, remote_addr, 1 << 20}});
//   BatchStatus s = *(*engine)->Wait(b, Clock::now() + std::chrono::seconds(5));
//   (*engine)->FreeBatch(b);
//
// Thread-safe: every method may be called from any thread. The engine owns its transports,
// metadata client and copy workers; callers own registered (non-managed) memory and keep it
// mapped until UnregisterMemory() returns, and keep request buffers alive until their tasks are
// terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transfer/copy_pool.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/metadata/segment_metadata.h"
#include "transfer/metrics.h"
#include "transfer/segment.h"
#include "transfer/transport.h"
#include "transfer/transport_params.h"
#include "transfer/types.h"

namespace kvgate::transfer {

struct TransferEngineOptions {
  std::string segment_name;  // Required; unique in the cluster (Mooncake's local_server_name).
  std::string metadata_uri;  // See OpenSegmentMetadata(); ignored when `metadata` is set.
  SegmentMetadataPtr metadata;
  /// Transports to offer, best first. Unknown names are an error; known ones that cannot run
  /// here (rdma without a device) are left out with one log line (see UnavailableTransports()).
  std::vector<std::string> transports = {"local", "shm", "rdma", "tcp"};
  std::chrono::milliseconds default_timeout{30000};  // Per batch, from submission.
  bool verify_crc32c = false;  // CRC32C per slice (tcp) for verification runs.
  /// Authentication of peers (transfer/peer_auth.h): the verifier checks peers that connect to
  /// this engine's tcp and shm servers; `self` is presented to others'. Null: open (a bare
  /// engine, e.g. kvgate-transfer-bench); the store always sets it unless run with --auth none.
  PeerAuthPtr auth;
  CopyPoolParams copy;
  ShmParams shm;
  TcpParams tcp;
  RdmaParams rdma;
  /// Load the CUDA/HIP runtimes for device memory (when built with them).
  bool load_gpu_runtimes = true;
  /// Replaces the loaded CUDA runtime (tests use a fake one).
  GpuRuntimePtr cuda_runtime;
  /// Applied to every transport created (tests wrap them in fault injection).
  std::function<TransportPtr(TransportPtr)> wrap_transport;
};

class TransferEngine {
 public:
  /// Starts the transports and publishes this engine's (empty) segment.
  /// @return kInvalidArgument for a bad option; kUnavailable when no transport can start or the
  /// metadata store cannot be reached.
  static absl::StatusOr<std::unique_ptr<TransferEngine>> Create(TransferEngineOptions options);
  /// Fails whatever is still in flight, unpublishes the segment, stops the transports.
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  const std::string& segment_name() const;

  /// Makes [addr, addr + length) readable and writable by peers and usable as the local side of
  /// requests. `location` is "cpu:0", "cuda:N" or "hip:N".
  /// @return kInvalidArgument on overlap, bad location or a device range the runtime does not
  /// recognise; kFailedPrecondition for device memory without a GPU runtime.
  absl::Status RegisterMemory(void* addr, uint64_t length, std::string_view location = "cpu:0");
  /// Allocates and registers host memory that same-host peers can map (memfd), which the shm
  /// transport needs; freed by UnregisterMemory().
  absl::StatusOr<void*> AllocateManagedMemory(uint64_t length);
  /// Withdraws a buffer (by its start address), waiting for transfers this engine is serving on
  /// it to finish. @return kNotFound when not registered; kDeadlineExceeded when peers still use
  /// it after the default time-out.
  absl::Status UnregisterMemory(void* addr);

  /// Looks `name` up in the metadata (this engine's own name opens its own segment) and picks
  /// the transports that reach it. Opening an open segment refreshes its descriptor.
  /// @return kNotFound when no engine published it; kUnavailable when no transport reaches it.
  absl::StatusOr<SegmentId> OpenSegment(std::string_view name);
  absl::Status CloseSegment(SegmentId segment);
  /// The descriptor last fetched for `segment`: its buffers are what requests may address.
  absl::StatusOr<SegmentDescriptor> GetSegmentDescriptor(SegmentId segment) const;
  /// The transports that reach `segment`, best first.
  absl::StatusOr<std::vector<std::string>> SegmentTransports(SegmentId segment) const;

  /// A batch of up to `max_requests` tasks; tasks time out `timeout` (default: the engine's)
  /// after their submission. Batches of one `flow` (1 .. 2^63-1; 0: the batch alone) are one
  /// caller's work: transports share a connection or the copy workers round robin between flows,
  /// so a large flow does not hold up a small one. @return kInvalidArgument for 0 or more than
  /// 1<<20 requests, or a flow of 2^63 or more.
  absl::StatusOr<BatchId> AllocateBatch(uint32_t max_requests,
                                        std::optional<std::chrono::milliseconds> timeout = {},
                                        uint64_t flow = 0);
  /// Validates every request, then starts them all and returns without waiting for the network.
  /// Task indices continue from earlier Submit() calls on the batch. @return kInvalidArgument
  /// (local memory not registered, zero length, batch full) or kOutOfRange (remote range
  /// outside the owner's buffers), naming the request, segment, offset and transport; then no
  /// request was started. A request no transport could start fails with kUnavailable in its
  /// task status instead.
  absl::Status Submit(BatchId batch, absl::Span<const TransferRequest> requests);
  absl::StatusOr<TaskStatus> GetTaskStatus(BatchId batch, uint32_t task) const;
  absl::StatusOr<BatchStatus> GetBatchStatus(BatchId batch) const;
  /// Blocks until every task submitted so far is terminal or `deadline` passes; returns the
  /// status then (check BatchStatus::finished()).
  absl::StatusOr<BatchStatus> Wait(BatchId batch, Clock::time_point deadline) const;
  /// @return kFailedPrecondition while tasks are unfinished (Mooncake's rule); kNotFound.
  absl::Status FreeBatch(BatchId batch);

  /// Transports offered, best first.
  std::vector<std::string> Transports() const;
  /// Transports asked for that could not start here, with the reason.
  std::vector<std::pair<std::string, std::string>> UnavailableTransports() const;
  /// Publishes every counter (see transfer/metrics.h) to `sink`.
  void CollectMetrics(MetricsSink& sink) const;

 private:
  struct Impl;
  explicit TransferEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::transfer
