// File: router/policies/engine_stats.h
// Load signals scraped from a worker's own Prometheus endpoint: vLLM (`vllm:*`) and SGLang
// (`sglang:*`) names, see reference/protocols.md §3. Parsing is pure; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace kvgate::router {

struct EngineStats {
  bool valid = false;               // at least one known metric was found
  double running = 0;               // requests in the running batch (summed over engines/DP ranks)
  double waiting = 0;               // waiting queue
  double kv_usage = 0;              // fraction of KV blocks used, 0-1 (max over engines)
  uint64_t num_gpu_blocks = 0;      // from vllm:cache_config_info (summed over engines)
  uint32_t block_size = 0;          // tokens per engine block, from vllm:cache_config_info
  double prefix_cache_queries = 0;  // tokens (counter)
  double prefix_cache_hits = 0;     // tokens (counter)
  std::chrono::steady_clock::time_point scraped_at{};
};

/// Parses the Prometheus text exposition of one worker. Unknown metrics are ignored; a line
/// that does not parse is skipped, never fatal.
EngineStats ParseEngineMetrics(std::string_view text);

}  // namespace kvgate::router
