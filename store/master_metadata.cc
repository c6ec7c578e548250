// File: store/master_metadata.cc
#include "store/master_metadata.h"

namespace kvgate::store {

absl::Status MasterMetadata::Publish(const transfer::SegmentDescriptor& desc) {
  std::string json = transfer::SegmentToJson(desc);
  {
    common::MutexLock lock(&mu_);
    published_[desc.name] = json;
  }
  if (!publish_) return absl::OkStatus();
  return master_->Call<EmptyResponse>(PublishSegmentRequest{desc.name, std::move(json)}).status();
}

absl::Status MasterMetadata::Republish() {
  if (!publish_) return absl::OkStatus();
  absl::flat_hash_map<std::string, std::string> all;
  {
    common::MutexLock lock(&mu_);
    all = published_;
  }
  for (auto& [name, json] : all) {
    auto s = master_->Call<EmptyResponse>(PublishSegmentRequest{name, std::move(json)}).status();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<transfer::SegmentDescriptor> MasterMetadata::Lookup(std::string_view name) {
  auto r = master_->Call<LookupSegmentResponse>(LookupSegmentRequest{std::string(name)});
  if (!r.ok()) return r.status();
  return transfer::ParseSegmentJson(r->json);
}

}  // namespace kvgate::store
