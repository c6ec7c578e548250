#include "router/policies/consistent_hash_policy.h"

#include <algorithm>

#include "common/strings.h"
#include "router/policies/policy_util.h"
#include "xxhash.h"

namespace kvgate::router {

uint64_t ConsistentHashPolicy::KeyHash(std::string_view key) {
  return XXH3_64bits(key.data(), key.size());
}

void ConsistentHashPolicy::Rebuild(absl::Span<const Candidate> c) {
  std::vector<uint32_t> ids;
  for (const auto& x : c) ids.push_back(x.worker->id());
  std::sort(ids.begin(), ids.end());
  if (ids == ring_ids_) return;
  ring_ids_ = ids;
  ring_.clear();
  for (const auto& x : c) {
    // Points derive from the worker's URL, so every gateway replica builds the same ring.
    for (uint32_t v = 0; v < config_.virtual_nodes; ++v) {
      ring_.emplace_back(KeyHash(common::StrCat(x.worker->name(), "#", v)), x.worker->id());
    }
  }
  std::sort(ring_.begin(), ring_.end());
}

size_t ConsistentHashPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                                    std::vector<CandidateScore>* scores) {
  Rebuild(c);
  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i)
      (*scores)[i].score = static_cast<double>(c[i].load.in_flight);
  }
  const std::string_view key = request.session_key.empty() ? request.body : request.session_key;
  const uint64_t h = KeyHash(key);
  auto index_of = [&](uint32_t id) -> size_t {
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i].worker->id() == id) return i;
    }
    return 0;
  };
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, uint32_t{0}));
  const size_t start = it == ring_.end() ? 0 : static_cast<size_t>(it - ring_.begin());
  const size_t owner = index_of(ring_[start].second);
  if (config_.bounded_load_factor <= 0) return owner;
  const int64_t bound = policy_util::LoadBound(c, config_.bounded_load_factor, 0);
  for (size_t k = 0; k < ring_.size(); ++k) {
    const size_t i = index_of(ring_[(start + k) % ring_.size()].second);
    if (c[i].load.in_flight < bound) {
      if (scores != nullptr && i != owner) (*scores)[owner].note = "owner over load bound";
      return i;
    }
  }
  return owner;
}

}  // namespace kvgate::router
