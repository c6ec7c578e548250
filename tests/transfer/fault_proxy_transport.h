// File: tests/transfer/fault_proxy_transport.h
// A Transport decorator that injects faults (Mooncake TENT's FaultProxyTransport idea): refused
// submits, delays, failed tasks, refusal after N submits. The engine sees a normal transport, so
// its fallback and status paths run without real failures. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "transfer/transport.h"

namespace kvgate::transfer::testing {

/// All fields default to "no fault".
struct FaultPolicy {
  double submit_fail_rate = 0.0;  // Probability that Submit() is refused (kUnavailable).
  uint64_t submit_delay_us = 0;   // Added before each Submit().
  int fail_after_n_submits = -1;  // >= 0: the first N submits pass, then all are refused.
  double task_fail_rate = 0.0;    // Probability that a task is failed instead of carried.
  uint64_t seed = 1;
};

class FaultProxyTransport final : public Transport {
 public:
  FaultProxyTransport(TransportPtr inner, FaultPolicy policy);

  uint64_t refused_submits() const { return refused_.load(); }
  uint64_t failed_tasks() const { return failed_.load(); }

  // transfer::Transport
  std::string_view Name() const override { return inner_->Name(); }
  Capabilities GetCapabilities() const override { return inner_->GetCapabilities(); }
  absl::Status Start(const TransportContext& context) override { return inner_->Start(context); }
  void Describe(SegmentDescriptor& desc) const override { inner_->Describe(desc); }
  absl::Status RegisterBuffer(const LocalBuffer& buffer) override {
    return inner_->RegisterBuffer(buffer);
  }
  void UnregisterBuffer(const LocalBuffer& buffer) override { inner_->UnregisterBuffer(buffer); }
  bool CanReach(const SegmentDescriptor& peer) const override { return inner_->CanReach(peer); }
  bool CanCarry(const SegmentDescriptor& peer, const TransferTask& task) const override {
    return inner_->CanCarry(peer, task);
  }
  absl::Status Submit(const SegmentDescriptorPtr& peer,
                      absl::Span<const TransferTask> tasks) override;
  void ForgetPeer(const SegmentDescriptor& peer) override { inner_->ForgetPeer(peer); }
  const TransportStats& Stats() const override { return inner_->Stats(); }

 private:
  const TransportPtr inner_;
  const FaultPolicy policy_;
  common::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  int submits_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> failed_{0};
};

}  // namespace kvgate::transfer::testing
