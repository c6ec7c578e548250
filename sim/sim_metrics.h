// File: sim/sim_metrics.h
// One simulated server's /metrics page: vLLM's own series per engine (vllm:*), the
// simulator's health and usage counters (kvgate_sim_*) and the P/D ones. Pure rendering of
// what the engines and the P/D agent hold. Thread-compatible (the server's io thread).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
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

// The page is text format 0.0.4 as prometheus_client's generate_latest() writes it, which is
// what vLLM serves: a counter's # HELP and # TYPE lines name its `_total` samples (a family
// named without `_total` would hold none of them, and Prometheus and promtool would read them as
// an untyped family without help), and the `_created` samples of counters and histograms (when
// the series was made, Unix seconds) follow their family as a gauge family NAME_created.

/// The # HELP and # TYPE lines of family `name`.
void AppendMetricFamily(std::string* out, std::string_view name, std::string_view type,
                        std::string_view help);

/// Counter `name` (without `_total`): a sample per entry of `samples` (label set "" or "{...}",
/// value), then their NAME_created family.
void AppendCounter(std::string* out, std::string_view name, std::string_view help,
                   const std::vector<std::pair<std::string, uint64_t>>& samples);

/// The NAME_created gauge family that follows counter or histogram `name`, a sample per label
/// set. Every series of a kvgate-sim page exists from the process's start (as vLLM makes its
/// labelled series at startup), so that is their creation time.
void AppendCreated(std::string* out, std::string_view name, std::string_view help,
                   const std::vector<std::string>& label_sets);

}  // namespace kvgate::sim
