#include "bench/replay/bounds.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "bench/replay/prompt.h"
#include "xxhash.h"

namespace kvgate::replay {
namespace {

uint64_t HitTokens(const BoundsRequest& r, size_t hit_blocks) {
  return std::min<uint64_t>(uint64_t{hit_blocks} * r.block_tokens, r.input_tokens);
}

struct TimedRequest {
  double t;
  size_t seq;  // Ties keep trace order.
  BoundsRequest request;
};

void CollectSession(const AgentSession& session, std::string_view ns, double start,
                    bool share_prefix, size_t* seq, std::vector<TimedRequest>* out) {
  const uint64_t prefix = session.PrefixBlocks();
  for (const auto& r : session.requests) {
    out->push_back({start + r.t, (*seq)++, AgenticBoundsRequest(r, ns, prefix, share_prefix)});
  }
  for (const auto& sub : session.subagents) {
    CollectSession(sub, ns, start + sub.t, share_prefix, seq, out);
  }
}

}  // namespace

uint64_t BlockKey(std::string_view ns, uint64_t id) {
  return XXH3_64bits_withSeed(ns.data(), ns.size(), id);
}

ReuseResult IdealReuse(const std::vector<BoundsRequest>& requests) {
  ReuseResult result;
  absl::flat_hash_set<uint64_t> seen;
  for (const auto& r : requests) {
    size_t hits = 0;
    while (hits < r.block_keys.size() && seen.contains(r.block_keys[hits])) ++hits;
    result.input_tokens += r.input_tokens;
    result.reused_tokens += HitTokens(r, hits);
    seen.insert(r.block_keys.begin(), r.block_keys.end());
  }
  return result;
}

ReuseResult PooledLruReuse(const std::vector<BoundsRequest>& requests, uint64_t capacity_tokens) {
  ReuseResult result;
  std::list<std::pair<uint64_t, uint32_t>> lru;  // Front = most recent; (key, tokens).
  absl::flat_hash_map<uint64_t, std::list<std::pair<uint64_t, uint32_t>>::iterator> where;
  uint64_t used = 0;
  for (const auto& r : requests) {
    result.input_tokens += r.input_tokens;
    size_t hits = 0;
    while (hits < r.block_keys.size() && where.contains(r.block_keys[hits])) ++hits;
    result.reused_tokens += HitTokens(r, hits);
    if (r.block_tokens > capacity_tokens) continue;
    for (const uint64_t key : r.block_keys) {
      if (auto it = where.find(key); it != where.end()) {
        lru.splice(lru.begin(), lru, it->second);
        continue;
      }
      while (used + r.block_tokens > capacity_tokens && !lru.empty()) {
        used -= lru.back().second;
        where.erase(lru.back().first);
        lru.pop_back();
      }
      lru.emplace_front(key, r.block_tokens);
      where[key] = lru.begin();
      used += r.block_tokens;
    }
  }
  return result;
}

BoundsRequest MooncakeBoundsRequest(const MooncakeRequest& request) {
  BoundsRequest b;
  b.block_tokens = kMooncakeBlockTokens;
  b.input_tokens = request.input_length;
  b.block_keys.reserve(request.hash_ids.size());
  for (const uint64_t id : request.hash_ids) {
    b.block_keys.push_back(BlockKey(kMooncakeNamespace, id));
  }
  return b;
}

BoundsRequest AgenticBoundsRequest(const AgentRequest& request, std::string_view ns,
                                   uint64_t prefix_blocks, bool share_prefix) {
  BoundsRequest b;
  b.block_tokens = kAgenticBlockTokens;
  b.input_tokens = request.in;
  b.block_keys.reserve(request.hash_ids.size());
  for (size_t i = 0; i < request.hash_ids.size(); ++i) {
    const bool shared = share_prefix && i < prefix_blocks;
    b.block_keys.push_back(BlockKey(shared ? kSharedPrefixNamespace : ns, request.hash_ids[i]));
  }
  return b;
}

std::vector<BoundsRequest> MooncakeBoundsRequests(const std::vector<MooncakeRequest>& requests) {
  std::vector<const MooncakeRequest*> order;
  order.reserve(requests.size());
  for (const auto& r : requests) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->timestamp_ms < b->timestamp_ms; });
  std::vector<BoundsRequest> out;
  out.reserve(requests.size());
  for (const auto* r : order) out.push_back(MooncakeBoundsRequest(*r));
  return out;
}

std::vector<BoundsRequest> AgenticBoundsRequests(const std::vector<PlannedConversation>& plan,
                                                 bool share_prefix) {
  std::vector<TimedRequest> timed;
  size_t seq = 0;
  for (const auto& c : plan) {
    CollectSession(*c.session, c.ns, c.start_s, share_prefix, &seq, &timed);
  }
  std::stable_sort(timed.begin(), timed.end(), [](const TimedRequest& a, const TimedRequest& b) {
    return a.t < b.t || (a.t == b.t && a.seq < b.seq);
  });
  std::vector<BoundsRequest> out;
  out.reserve(timed.size());
  for (auto& t : timed) out.push_back(std::move(t.request));
  return out;
}

BoundsSummary SummarizeBounds(const std::vector<BoundsRequest>& requests,
                              uint64_t capacity_tokens) {
  BoundsSummary b;
  const ReuseResult ideal = IdealReuse(requests);
  b.computed = true;
  b.input_tokens = ideal.input_tokens;
  b.ideal_reuse_ratio = ideal.ratio();
  b.capacity_tokens = capacity_tokens;
  b.pooled_lru_reuse_ratio =
      capacity_tokens > 0 ? PooledLruReuse(requests, capacity_tokens).ratio() : NAN;
  return b;
}

}  // namespace kvgate::replay
