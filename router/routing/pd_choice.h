// File: router/routing/pd_choice.h
// How a prefill/decode request is served, decided before any byte moves (shared by the P/D
// dispatcher and /admin/explain): the decode worker first, among the decode pool, by the
// policy in force (its cached prefix, KV headroom and decode load); then, unless that worker
// already holds nearly all of the prompt (vLLM Router's uncached-token threshold, Dynamo's
// conditional disaggregation, llm-d's prefix decider), the prefill worker among the prefill
// pool by the same policy (its cached prefix, queued prefill and, with a store, the store's
// load time instead of recompute). Both decisions reserve load at once, so a burst of long
// prompts spreads over the prefill pool (peers.md §8.1). Thread-safe (the planner is).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "router/pd/pd_bodies.h"
#include "router/routing/route_planner.h"

namespace kvgate::router {

enum class PdMode : uint8_t {
  kNotPd,          // the model has no P/D protocol, or the plan has no P/D worker: as usual
  kDisaggregate,   // prefill on `prefill`, then (or beside it) decode on `decode`
  kDirect,         // decode alone: it holds the prompt, or no prefill worker is available
  kFallbackMixed,  // mixed workers serve it (no decode worker available)
  kUnavailable,    // P/D workers but none that can serve it
};

struct PdChoice {
  PdMode mode = PdMode::kNotPd;
  pd::PdProtocol protocol = pd::PdProtocol::kVllmNixl;
  std::string reason;                   // why this mode, for explain and logs
  std::optional<Decision> decode;       // kDisaggregate, kDirect
  std::optional<Decision> prefill;      // kDisaggregate
  int64_t decode_uncached_tokens = -1;  // the prompt less the decode worker's cached prefix
  // The request's API (Anthropic Messages, OpenAI Responses) is not carried by the engines'
  // P/D paths: served whole on one decode (or mixed) worker (kDirect or kFallbackMixed).
  bool whole_api = false;
  // The plan's workers by role (snapshot order): what each stage may retry on.
  absl::InlinedVector<Worker*, 16> prefill_pool, decode_pool, mixed_pool;
};

/// The decision label of kvgate_pd_decisions_total: disaggregated, skipped_cached,
/// skipped_no_prefill, fallback_mixed, whole_api, unavailable (not_pd is not counted).
std::string_view PdDecisionLabel(const PdChoice& choice);

/// The P/D protocol for `model`: the per-model override, else pd.protocol; none when off.
std::optional<pd::PdProtocol> PdProtocolFor(const config::PdConfig& pd, std::string_view model);

/// Chooses how `plan` is served. With `commit` the chosen workers' loads are reserved (release
/// each through RoutePlanner::Complete); without, nothing changes and scores are filled.
/// Leaves plan.available as it found it.
PdChoice ChoosePd(RoutePlanner& planner, RoutePlan& plan, const config::PdConfig& pd,
                  std::string_view model, bool commit, SteadyClock::time_point now);

/// Whether `protocol`'s decode workers can serve a request without a prefill peer (vLLM's
/// connectors can; an SGLang decode server waits for a bootstrap room).
bool DecodeCanServeAlone(pd::PdProtocol protocol);

}  // namespace kvgate::router
