// File: transfer/metadata/static_metadata.h
// Segment metadata in one file shared by the engines of one host: one descriptor JSON per line.
// Every change is a read-modify-write under flock() on "<path>.lock" followed by an atomic
// rename, so concurrent publishers never lose each other's entries and readers never see a torn
// file. An entry is visible until its engine removes it: a killed process leaves it behind, and
// peers then fail to connect (use etcd where processes die unannounced). Thread-safe.
#pragma once

#include <string>

#include "transfer/metadata/segment_metadata.h"

namespace kvgate::transfer {

class StaticMetadata final : public SegmentMetadata {
 public:
  explicit StaticMetadata(std::string path) : path_(std::move(path)) {}

  // transfer::SegmentMetadata
  std::string_view Kind() const override { return "static"; }
  absl::Status Publish(const SegmentDescriptor& desc) override;
  absl::StatusOr<SegmentDescriptor> Lookup(std::string_view name) override;
  absl::Status Remove(std::string_view name) override;

 private:
  absl::Status Update(std::string_view name, const SegmentDescriptor* replacement);

  const std::string path_;
};

}  // namespace kvgate::transfer
