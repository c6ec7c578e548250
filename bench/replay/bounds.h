// File: bench/replay/bounds.h
// The trace's own reuse bounds, computed from the trace alone: ideal prefix reuse (one
// infinite cache, perfect routing) and the reuse of one pooled LRU cache with the whole fleet's
// capacity. Per-block prefix semantics: a request reuses the leading run of its blocks that is
// cached when it arrives. Pure functions over value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "bench/replay/report.h"
#include "bench/replay/trace.h"

namespace kvgate::replay {

/// One request as the bounds see it, in send order.
struct BoundsRequest {
  std::vector<uint64_t> block_keys;  // Globally unique block keys (namespace folded in).
  uint32_t block_tokens = 0;         // Tokens per block.
  uint64_t input_tokens = 0;         // Hits are capped at this (the last block may be partial).
};

struct ReuseResult {
  uint64_t input_tokens = 0;
  uint64_t reused_tokens = 0;
  double ratio() const {
    return input_tokens == 0 ? 0.0 : static_cast<double>(reused_tokens) / input_tokens;
  }
};

/// Reuse with an infinite cache.
ReuseResult IdealReuse(const std::vector<BoundsRequest>& requests);

/// Reuse with one LRU cache holding `capacity_tokens` tokens of blocks. A request touches its
/// hit blocks, then inserts its missing blocks in order, evicting least recently used ones.
ReuseResult PooledLruReuse(const std::vector<BoundsRequest>& requests, uint64_t capacity_tokens);

/// A block key: XXH3 of (namespace, id).
uint64_t BlockKey(std::string_view ns, uint64_t id);

/// One Mooncake request's blocks, keyed as MooncakePrompt names them.
BoundsRequest MooncakeBoundsRequest(const MooncakeRequest& request);

/// One agentic turn's blocks, keyed as AgentConversation names them: the first
/// `prefix_blocks` in the shared-prefix namespace when `share_prefix`, the rest in `ns`.
BoundsRequest AgenticBoundsRequest(const AgentRequest& request, std::string_view ns,
                                   uint64_t prefix_blocks, bool share_prefix);

/// Bounds requests of a Mooncake trace, in timestamp order.
std::vector<BoundsRequest> MooncakeBoundsRequests(const std::vector<MooncakeRequest>& requests);

/// One conversation instance to be replayed: its session and namespace (conversation id,
/// made unique when a file is replayed more than once), and its estimated start (seconds).
struct PlannedConversation {
  const AgentSession* session = nullptr;
  std::string ns;
  double start_s = 0;
};

/// Bounds requests of agentic conversations, ordered by absolute start time estimated from
/// the trace (conversation start + t; sub-agents at parent start + their t).
std::vector<BoundsRequest> AgenticBoundsRequests(const std::vector<PlannedConversation>& plan,
                                                 bool share_prefix);

/// Both bounds of `requests` (in replay order); the pooled-LRU one is NaN when
/// `capacity_tokens` is 0.
BoundsSummary SummarizeBounds(const std::vector<BoundsRequest>& requests, uint64_t capacity_tokens);

}  // namespace kvgate::replay
