// File: bench/replay/replayer.h
// The kvgate-replay engine: sends a trace's requests to an OpenAI-compatible target (the
// gateway or a worker) over keep-alive HTTP/1.1 (or a connection per request) from one
// io_context thread, open-loop for Mooncake traces and closed-loop for agentic sessions, and
// measures every stream.
// RunReplay and friends block until the replay ends; each call is independent (thread-safe to
// call from different threads, nothing is shared).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/replay/agent_bodies.h"
#include "bench/replay/bounds.h"
#include "bench/replay/prompt.h"
#include "bench/replay/report.h"
#include "bench/replay/request_sample.h"
#include "bench/replay/trace.h"

namespace kvgate::replay {

struct ReplayOptions {
  std::string target;              // Base URL, e.g. http://127.0.0.1:8080
  std::string trace;               // *.jsonl (Mooncake), *.json or a directory of them (agentic).
  uint64_t conversations = 16;     // Concurrent agentic conversations.
  uint64_t max_conversations = 0;  // Conversations to run; 0 = each session file once.
  bool loop = false;               // Keep drawing sessions until --duration / --max-requests.
  double speedup = 1.0;            // Divides open-loop gaps and think times.
  double ramp_up_s = 0;            // Spread the first conversations' starts over this long.
  double max_think_time_s = 300;   // Cap on one think time (trace seconds); 0 = no cap.
  double duration_s = 0;           // Stop sending after this long; 0 = no limit.
  uint64_t max_requests = 0;       // Stop sending after this many; 0 = no limit.
  bool share_prefix = true;        // Tool/system prefix blocks shared across conversations.
  Api api = Api::kDefault;         // kDefault: completions for Mooncake, chat for agentic.
  BodyOptions body;
  uint64_t fleet_capacity_tokens = 0;  // Pooled-LRU bound capacity; 0 = skip that bound.
  bool compute_bounds = true;
  double request_timeout_s = 600;
  int progress = -1;  // 1 on, 0 off, -1 when stderr is a terminal, 2 a line every 5 s.
  std::vector<std::pair<std::string, std::string>> headers;  // Extra request headers.
  // A new TCP connection for every request, closed after it (Connection: close), as a client
  // without keep-alive: a TCP balancer in front of gateway replicas then spreads a session's
  // turns over them instead of pinning the session to the replica of its first connection.
  bool connection_per_request = false;
  uint64_t request_sample_size = 0;  // Keep a uniform sample of this many sent requests.
  // One worker's prefill rate, tokens per wall-clock second; > 0 computes the TTFT floor.
  double floor_prefill_rate = 0;
  // A token's extra cost per token of context before it, as a share of its own cost (the
  // simulator's prefill_per_token_ctx_s / prefill_per_token_s); 0 = flat rate.
  double floor_context_factor = 0;
  // An engine step's fixed cost (wall-clock seconds) and its prefill token budget
  // (max_num_batched_tokens): a prefill of c tokens takes at least ceil(c / budget) steps.
  double floor_step_s = 0;
  uint32_t floor_step_tokens = 0;
};

struct ReplayResult {
  Report report;
  std::vector<RequestRecord> records;        // In completion order.
  std::vector<ApiRequest> sampled_requests;  // request_sample_size of those sent, as sent.
};

/// Loads `options.trace` and replays it. kInvalidArgument / kNotFound for bad options or
/// traces; transport and HTTP errors of single requests are counted in the report instead.
absl::StatusOr<ReplayResult> RunReplay(const ReplayOptions& options);

/// Replays an in-memory Mooncake trace open-loop.
absl::StatusOr<ReplayResult> RunMooncake(const std::vector<MooncakeRequest>& trace,
                                         const ReplayOptions& options);

/// Replays in-memory agentic sessions closed-loop.
absl::StatusOr<ReplayResult> RunAgentic(const std::vector<AgentSession>& sessions,
                                        const ReplayOptions& options);

/// The conversation instances RunAgentic will run, with start times estimated from the trace
/// (used for the bounds): `conversations` slots, each taking the next instance when its
/// previous one ends (trace time: last request t + api_time).
std::vector<PlannedConversation> PlanConversations(const std::vector<AgentSession>& sessions,
                                                   const ReplayOptions& options);

}  // namespace kvgate::replay
