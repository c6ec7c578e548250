// File: transfer/local/local_transport.h
// The `local` transport: requests whose segment is this engine's own (same process). Bytes move
// with memcpy, or with the CUDA/HIP runtime when either side is device memory. The remote range
// is checked against the live registry, not a published descriptor. Thread-safe.
#pragma once

#include "transfer/transport.h"

namespace kvgate::transfer {

class LocalTransport final : public Transport {
 public:
  LocalTransport() = default;

  // transfer::Transport
  std::string_view Name() const override { return "local"; }
  Capabilities GetCapabilities() const override;
  absl::Status Start(const TransportContext& context) override;
  void Describe(SegmentDescriptor& desc) const override {}
  bool CanReach(const SegmentDescriptor& peer) const override;
  bool CanCarry(const SegmentDescriptor& peer, const TransferTask& task) const override;
  absl::Status Submit(const SegmentDescriptorPtr& peer,
                      absl::Span<const TransferTask> tasks) override;
  const TransportStats& Stats() const override { return stats_; }

 private:
  TransportContext context_;
  TransportStats stats_;
};

}  // namespace kvgate::transfer
