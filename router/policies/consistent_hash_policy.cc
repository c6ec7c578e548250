#include "router/policies/consistent_hash_policy.h"

#include <algorithm>

#include "common/strings.h"
#include "router/policies/policy_util.h"
#include "xxhash.h"

namespace kvgate::router {

uint64_t ConsistentHashPolicy::KeyHash(std::string_view key) {
  return XXH3_64bits(key.data(), key.size());
}

ConsistentHashPolicy::ConsistentHashPolicy(const config::ConsistentHashPolicyConfig& config,
                                           absl::Span<const WorkerIdentity> workers)
    : config_(config) {
  ring_.reserve(workers.size() * config_.virtual_nodes);
  for (const WorkerIdentity& w : workers) {
    // Points derive from the worker's URL, so every gateway replica builds the same ring.
    for (uint32_t v = 0; v < config_.virtual_nodes; ++v) {
      ring_.emplace_back(KeyHash(common::StrCat(w.name, "#", v)), w.id);
    }
  }
  std::sort(ring_.begin(), ring_.end());
}

size_t ConsistentHashPolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                                    std::vector<CandidateScore>* scores) {
  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i) {
      (*scores)[i].score = static_cast<double>(c[i].load.in_flight);
    }
  }
  if (ring_.empty()) return 0;
  auto index_of = [&](uint32_t id) -> size_t {
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i].worker_id == id) return i;
    }
    return c.size();  // not a candidate now
  };
  const std::string_view key = request.session_key.empty() ? request.body : request.session_key;
  const uint64_t h = KeyHash(key);
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, uint32_t{0}));
  const size_t start = it == ring_.end() ? 0 : static_cast<size_t>(it - ring_.begin());
  size_t owner = c.size();
  const int64_t bound = config_.bounded_load_factor > 0
                            ? policy_util::LoadBound(c, config_.bounded_load_factor, 0)
                            : INT64_MAX;
  for (size_t k = 0; k < ring_.size(); ++k) {
    const size_t i = index_of(ring_[(start + k) % ring_.size()].second);
    if (i == c.size()) continue;
    if (owner == c.size()) owner = i;
    if (c[i].load.in_flight < bound) {
      if (scores != nullptr && i != owner) (*scores)[owner].note = "owner over load bound";
      return i;
    }
  }
  return owner == c.size() ? 0 : owner;
}

}  // namespace kvgate::router
