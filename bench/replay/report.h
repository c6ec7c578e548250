// File: bench/replay/report.h
// What kvgate-replay measures: one RequestRecord per request sent, summarised into a Report
// (latency percentiles, throughput, token and cache counts, per-worker load, trace bounds, the
// gateway's TTFT prediction error, the TTFT floor), written as JSON and as a human table. Value
// types and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/replay/floor.h"
#include "bench/replay/prediction.h"

namespace kvgate::replay {

/// The outcome of one request.
struct RequestRecord {
  std::string conversation;  // Session id (sub-agents "<root>/<agent>"), or "mooncake".
  uint64_t index = 0;        // Turn within the session, or request index in a JSONL trace.
  double send_s = 0;         // When it was sent, seconds since the run started.
  double ttft_s = -1;        // First content token; < 0 when none arrived.
  double e2e_s = 0;          // Until the end of the stream (or the error).
  int status = 0;            // HTTP status; 0 on transport errors.
  std::string error;         // Empty when the request succeeded.
  bool usage = false;        // A usage object was seen.
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t store_tokens = 0;       // Of cached_tokens, loaded from a KV store (kvgate-sim's usage).
  uint64_t completion_tokens = 0;  // From usage, else the number of content events.
  std::string worker;              // X-Kvgate-Worker response header, if any.
  TtftPrediction prediction;       // x-kvgate-prediction response header, if any.
  int64_t predicted_cached_tokens = -1;  // x-kvgate-predicted-cached-tokens, -1 without.
  uint64_t compulsory_tokens = 0;        // Input no earlier request of the run sent (floor.h).
  double floor_s = -1;                   // compulsory_tokens / --floor-prefill-rate; < 0 without.
  // The TTFT by the engine's own clock (kvgate-sim's usage.kv_engine_ttft_s); < 0 without.
  double engine_ttft_s = -1;

  bool ok() const { return error.empty() && status >= 200 && status < 300; }
  /// (E2E - TTFT) / (completion_tokens - 1); < 0 when undefined.
  double tpot_s() const;
};

struct LatencySummary {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

/// Nearest-rank percentiles and the mean of `values` (sorted in place).
LatencySummary Summarize(std::vector<double> values);

struct WorkerSummary {
  uint64_t requests = 0;
  uint64_t errors = 0;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t store_tokens = 0;
  uint64_t max_concurrent = 0;  // Streams open at once (response header to end of body).
};

struct BoundsSummary {
  bool computed = false;
  uint64_t input_tokens = 0;
  double ideal_reuse_ratio = 0;
  double pooled_lru_reuse_ratio = 0;
  uint64_t capacity_tokens = 0;
};

struct Report {
  std::string target;
  std::string trace;
  std::string mode;              // "open-loop" or "closed-loop".
  std::string api;               // "completions", "chat", "messages" or "responses".
  bool responses_store = false;  // Responses turns stored and chained (--responses-store).
  double duration_s = 0;
  uint64_t requests = 0;
  uint64_t ok = 0;
  uint64_t errors = 0;
  std::map<std::string, uint64_t> error_kinds;  // "http_503", "transport", ...
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t store_tokens = 0;  // Of cached_tokens, loaded from a KV store.
  uint64_t completion_tokens = 0;
  uint64_t conversations = 0;
  LatencySummary ttft, tpot, e2e;
  std::map<std::string, WorkerSummary> workers;  // Keyed by X-Kvgate-Worker ("" = unknown).
  BoundsSummary bounds;
  PredictionSummary prediction;               // count 0 when no response carried a prediction.
  CachedPredictionSummary cached_prediction;  // count 0 without the header.
  FloorSummary floor;                         // computed only with --floor-prefill-rate.
  // The TTFT by the engines' clocks (count 0 unless kvgate-sim answered), and that less each
  // request's floor (count 0 without a floor): what routing decides, without the testbed's hops
  // and late threads, which the client's TTFT also holds.
  LatencySummary engine_ttft, engine_above_floor;

  double cached_ratio() const;
  double requests_per_s() const;
  double output_tokens_per_s() const;
};

/// Builds a report from the records; `max_concurrent` (per worker) is measured by the client.
Report BuildReport(const std::vector<RequestRecord>& records,
                   const std::map<std::string, uint64_t>& max_concurrent, double duration_s);

std::string ReportToJson(const Report& report);
/// One JSON object per record, one per line (for --records).
std::string RecordsToJsonl(const std::vector<RequestRecord>& records);
std::string ReportToTable(const Report& report);

}  // namespace kvgate::replay
