#include "bench/replay/request_sample.h"

#include "common/json_util.h"

namespace kvgate::replay {

RequestSample::RequestSample(uint64_t capacity, uint64_t seed) : capacity_(capacity), rng_(seed) {}

void RequestSample::Offer(const ApiRequest& request) {
  ++offered_;
  if (capacity_ == 0) return;
  if (kept_.size() < capacity_) {
    kept_.push_back(request);
    return;
  }
  // Algorithm R: the n-th request replaces a kept one with probability capacity / n.
  const uint64_t slot = std::uniform_int_distribution<uint64_t>(0, offered_ - 1)(rng_);
  if (slot < capacity_) kept_[slot] = request;
}

std::string RequestsToJsonl(const std::vector<ApiRequest>& requests) {
  std::string out;
  for (const ApiRequest& r : requests) {
    out += "{\"path\":";
    common::AppendJsonString(out, r.path);
    out += ",\"headers\":{";
    for (size_t i = 0; i < r.headers.size(); ++i) {
      if (i > 0) out += ",";
      common::AppendJsonString(out, r.headers[i].first);
      out += ":";
      common::AppendJsonString(out, r.headers[i].second);
    }
    out += "},\"body\":";
    common::AppendJsonString(out, r.body);
    out += "}\n";
  }
  return out;
}

}  // namespace kvgate::replay
