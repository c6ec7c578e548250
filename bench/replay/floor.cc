#include "bench/replay/floor.h"

#include <algorithm>

#include "bench/replay/bounds.h"
#include "bench/replay/report.h"

namespace kvgate::replay {

uint64_t CompulsoryTokens::Add(const BoundsRequest& request) {
  size_t hits = 0;
  while (hits < request.block_keys.size() && seen_.contains(request.block_keys[hits])) ++hits;
  seen_.insert(request.block_keys.begin(), request.block_keys.end());
  const uint64_t reusable =
      std::min<uint64_t>(uint64_t{hits} * request.block_tokens, request.input_tokens);
  return request.input_tokens - reusable;
}

BoundsRequest AgenticFloorRequest(const AgentRequest& request, std::string_view ns,
                                  uint64_t prefix_blocks, bool share_prefix) {
  BoundsRequest b = AgenticBoundsRequest(request, ns, prefix_blocks, share_prefix);
  b.input_tokens = std::min<uint64_t>(b.input_tokens, b.block_keys.size() * b.block_tokens);
  return b;
}

double FloorSeconds(const FloorModel& m, uint64_t compulsory, uint64_t prompt_tokens) {
  if (m.prefill_tokens_per_s <= 0) return 0;
  const double c = static_cast<double>(compulsory);
  // Context before the compulsory run; a caller's prompt shorter than it counts it as the prompt.
  const double before = static_cast<double>(std::max(prompt_tokens, compulsory) - compulsory);
  const double tokens = c * (1 + m.context_factor * (before + c / 2)) / m.prefill_tokens_per_s;
  const uint64_t steps =
      m.step_tokens == 0 ? 1
                         : (std::max<uint64_t>(compulsory, 1) + m.step_tokens - 1) / m.step_tokens;
  return tokens + static_cast<double>(steps) * m.step_s;
}

FloorSummary SummarizeFloor(std::vector<double> floors_s, uint64_t compulsory_tokens,
                            const LatencySummary& ttft) {
  FloorSummary f;
  const LatencySummary s = Summarize(std::move(floors_s));
  f.computed = true;
  f.count = s.count;
  f.compulsory_tokens = compulsory_tokens;
  f.mean_s = s.mean;
  f.p99_s = s.p99;
  f.ttft_mean_above_s = ttft.mean - s.mean;
  f.ttft_p99_above_s = ttft.p99 - s.p99;
  return f;
}

}  // namespace kvgate::replay
