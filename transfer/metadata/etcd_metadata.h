// File: transfer/metadata/etcd_metadata.h
// Segment metadata in etcd, through its v3 JSON gateway (POST /v3/kv/put, /v3/kv/range,
// /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke; keys and values
// base64). Descriptors live under "<prefix>/transfer/segments/<name>", attached to a lease this
// process keeps alive from a background thread: when the process dies the lease expires and its
// segments disappear. If the lease is lost (etcd restarted, a long pause), a new one is granted
// and every descriptor this process published is put again. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "transfer/metadata/segment_metadata.h"

namespace kvgate::transfer {

struct EtcdParams {
  std::vector<std::pair<std::string, uint16_t>> endpoints;  // Tried in order.
  std::string prefix = "kvgate";
  uint32_t lease_ttl_s = 10;  // etcd raises TTLs below its minimum (about 1.5 x election time).
  uint32_t request_timeout_ms = 2000;
};

class EtcdMetadata final : public SegmentMetadata {
 public:
  explicit EtcdMetadata(EtcdParams params);
  /// Stops the keep-alive and revokes the lease (so this process's segments go at once).
  ~EtcdMetadata() override;

  // transfer::SegmentMetadata
  std::string_view Kind() const override { return "etcd"; }
  absl::Status Publish(const SegmentDescriptor& desc) override;
  absl::StatusOr<SegmentDescriptor> Lookup(std::string_view name) override;
  absl::Status Remove(std::string_view name) override;

  /// The current lease id (0 before the first Publish); for tests.
  int64_t LeaseIdForTest();

 private:
  absl::StatusOr<std::string> Call(std::string_view path, const std::string& body);
  absl::Status GrantLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutLocked(const std::string& name, const std::string& value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Key(std::string_view name) const;
  void KeepAlive();

  const EtcdParams params_;
  common::Mutex mu_;
  common::CondVar cv_;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::string> published_ ABSL_GUARDED_BY(mu_);  // name -> JSON
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvgate::transfer
