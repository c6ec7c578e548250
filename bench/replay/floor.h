// File: bench/replay/floor.h
// The TTFT floor of a run: each request's compulsory prefill (tokens no cache could have held,
// because no earlier request of the run sent their blocks) on an idle worker, without queueing:
// a lower bound that the measured TTFTs are read against. Value types and pure functions are
// thread-safe; CompulsoryTokens is thread-compatible.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "bench/replay/trace.h"

namespace kvgate::replay {

struct BoundsRequest;
struct LatencySummary;

/// Counts each request's compulsory tokens in send order, with the ideal-reuse bound's prefix
/// semantics (bounds.h): the leading run of blocks some earlier request sent is reusable, the
/// rest of the input (a block after the first new one, a partial or unhashed tail beyond the
/// hashed blocks) is compulsory.
class CompulsoryTokens {
 public:
  /// The compulsory tokens of `request` (at most its input tokens); remembers its blocks.
  uint64_t Add(const BoundsRequest& request);

 private:
  absl::flat_hash_set<uint64_t> seen_;
};

/// An agentic turn's blocks as AgentConversation sends them: its hashed blocks, keyed as the
/// bounds key them, and no more input than they hold (the trace's unhashed tail of `in` is
/// not sent). A Mooncake request's are MooncakeBoundsRequest's (its tail is sent).
BoundsRequest AgenticFloorRequest(const AgentRequest& request, std::string_view ns,
                                  uint64_t prefix_blocks, bool share_prefix);

/// What a prefill costs at least on one worker, as a chunked-prefill engine (and kvgate-sim)
/// spends it: a token's own cost, dearer by its context, and a fixed cost per engine step.
struct FloorModel {
  double prefill_tokens_per_s = 0;  // A context-free token's rate (wall clock); 0 = no floor.
  // A token's extra cost per token of context before it, as a share of its own cost.
  double context_factor = 0;
  double step_s = 0;         // An engine step's fixed cost (wall clock); 0 = none counted.
  uint32_t step_tokens = 0;  // Tokens one step prefills at most; 0 = no bound (one step).
};

/// One request's floor: its `compulsory` tokens, which end a prompt of `prompt_tokens` (no
/// router can serve them from a cache, and each attends to every token before it, cached or
/// not), prefilled at the model's rate in as few steps as the step budget allows (at least one:
/// an engine computes a fully cached prompt's last token). A lone request on an idle worker
/// takes exactly this (tests/replay/floor_sim_test.cc), anything else more.
double FloorSeconds(const FloorModel& model, uint64_t compulsory, uint64_t prompt_tokens);

struct FloorSummary {
  bool computed = false;
  double prefill_tokens_per_s = 0;  // --floor-prefill-rate (wall clock).
  uint64_t count = 0;               // Successful requests with a TTFT.
  uint64_t compulsory_tokens = 0;   // Of those requests.
  double mean_s = 0, p99_s = 0;     // Of their floors.
  double ttft_mean_above_s = 0;     // TTFT mean - floor mean.
  double ttft_p99_above_s = 0;      // TTFT p99 - floor p99.
};

/// The floor of the requests whose TTFTs `ttft` summarises: `floors_s` and
/// `compulsory_tokens` hold one entry per such request.
FloorSummary SummarizeFloor(std::vector<double> floors_s, uint64_t compulsory_tokens,
                            const LatencySummary& ttft);

}  // namespace kvgate::replay
