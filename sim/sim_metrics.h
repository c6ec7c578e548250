// File: sim/sim_metrics.h
// One simulated server's /metrics page: vLLM's own series per engine (vllm:*), the
// simulator's health and usage counters (kvgate_sim_*) and the P/D ones. Pure rendering of
// what the engines and the P/D agent hold. Thread-compatible (the server's io thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sim/cli.h"
#include "sim/engine_runner.h"
#include "sim/pd_agent.h"

namespace kvgate::sim {

/// The Prometheus text page of a server with `runners`, a store connector when `with_store`,
/// and `pd` (null for a mixed worker).
std::string RenderSimMetrics(const SimOptions& options,
                             const std::vector<std::unique_ptr<EngineRunner>>& runners,
                             bool with_store, const PdAgent* pd);

}  // namespace kvgate::sim
