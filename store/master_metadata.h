// File: store/master_metadata.h
// Transfer segment metadata kept by the store's master, so that a store needs no etcd or shared
// file for its data path: data nodes publish their segment descriptors there and clients look
// them up (transfer::SegmentMetadata over MasterClient). Descriptors live in the leader's memory;
// after a failover data nodes publish again when they re-register. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "store/master_client.h"
#include "transfer/metadata/segment_metadata.h"

namespace kvgate::store {

class MasterMetadata final : public transfer::SegmentMetadata {
 public:
  /// `publish` false (clients): descriptors are only kept here, never sent — nobody opens a
  /// client's segment, and a client must start while the master is away.
  MasterMetadata(std::shared_ptr<MasterClient> master, bool publish)
      : master_(std::move(master)), publish_(publish) {}

  std::string_view Kind() const override { return "kvgate-store master"; }
  absl::Status Publish(const transfer::SegmentDescriptor& desc) override;
  absl::StatusOr<transfer::SegmentDescriptor> Lookup(std::string_view name) override;
  /// Segments go when their node does; clients' own segments are never looked up.
  absl::Status Remove(std::string_view) override { return absl::OkStatus(); }

  /// Publishes every descriptor again (to a new leader, which starts empty).
  absl::Status Republish();

 private:
  std::shared_ptr<MasterClient> master_;
  const bool publish_;
  common::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> published_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::store
