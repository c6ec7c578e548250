// File: transfer/metadata/segment_metadata.h
// Where engines publish their segment descriptors and find each other's: a JSON file on one host
// (static_metadata) or etcd for a cluster (etcd_metadata). Implementations are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transfer/segment.h"

namespace kvgate::transfer {

class SegmentMetadata {
 public:
  virtual ~SegmentMetadata() = default;

  /// "static" or "etcd", for messages.
  virtual std::string_view Kind() const = 0;
  /// Creates or replaces the descriptor of `desc.name`; it stays visible while this process
  /// lives (etcd: while its lease is kept alive).
  /// @return kUnavailable when the store cannot be reached.
  virtual absl::Status Publish(const SegmentDescriptor& desc) = 0;
  /// @return kNotFound when no live engine published `name`; kUnavailable on store errors;
  /// kInvalidArgument when the stored descriptor does not parse.
  virtual absl::StatusOr<SegmentDescriptor> Lookup(std::string_view name) = 0;
  /// Removes `name` if present (OK when absent).
  virtual absl::Status Remove(std::string_view name) = 0;
};

using SegmentMetadataPtr = std::unique_ptr<SegmentMetadata>;

/// Opens metadata from a URI:
///   "file:/path/segments.json"                   static, one host
///   "etcd://host:port[,host:port...][/prefix]"   etcd v3 JSON gateway; prefix default "kvgate"
/// Optional query parameters for etcd: "?ttl_s=N" (lease TTL, default 10), "&timeout_ms=N".
/// @return kInvalidArgument naming the URI when it is malformed.
absl::StatusOr<SegmentMetadataPtr> OpenSegmentMetadata(std::string_view uri);

}  // namespace kvgate::transfer
