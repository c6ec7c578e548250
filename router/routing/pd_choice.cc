#include "router/routing/pd_choice.h"

#include <algorithm>
#include <utility>

#include "common/strings.h"

namespace kvgate::router {

std::string_view PdDecisionLabel(const PdChoice& choice) {
  if (choice.whole_api && (choice.mode == PdMode::kDirect || choice.mode == PdMode::kFallbackMixed))
    return "whole_api";
  switch (choice.mode) {
    case PdMode::kNotPd:
      return "not_pd";
    case PdMode::kDisaggregate:
      return "disaggregated";
    case PdMode::kDirect:
      return choice.prefill_pool.empty() ? "skipped_no_prefill" : "skipped_cached";
    case PdMode::kFallbackMixed:
      return "fallback_mixed";
    case PdMode::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

std::optional<pd::PdProtocol> PdProtocolFor(const config::PdConfig& pd, std::string_view model) {
  for (const auto& [m, protocol] : pd.model_protocols) {
    if (m == model) return pd::PdProtocolFromName(protocol);  // "none": nullopt
  }
  if (pd.protocol.empty()) return std::nullopt;
  return pd::PdProtocolFromName(pd.protocol);
}

bool DecodeCanServeAlone(pd::PdProtocol protocol) {
  return protocol != pd::PdProtocol::kSglangBootstrap;
}

namespace {

// Decides among `pool` only: plan.available is swapped for the call and restored.
Decision DecideAmong(RoutePlanner& planner, RoutePlan& plan,
                     const absl::InlinedVector<Worker*, 16>& pool, bool commit,
                     SteadyClock::time_point now) {
  absl::InlinedVector<Worker*, 16> all = std::move(plan.available);
  plan.available = pool;
  const std::vector<uint32_t> tried = plan.tried;
  Decision d = planner.Decide(plan, /*attempt=*/0, commit, now);
  plan.available = std::move(all);
  if (!commit) plan.tried = tried;
  return d;
}

// The prompt tokens the chosen candidate holds in any tier (its engine would not recompute).
int64_t CachedTokens(const Decision& d, const RoutePlan& plan) {
  const Candidate& c = d.candidates[d.index];
  const uint32_t blocks = std::max({c.cached_blocks[0], c.cached_blocks[1], c.cached_blocks[2]});
  return std::min<int64_t>(int64_t{blocks} * plan.config->block_tokens, plan.prompt_tokens);
}

}  // namespace

PdChoice ChoosePd(RoutePlanner& planner, RoutePlan& plan, const config::PdConfig& pd,
                  std::string_view model, bool commit, SteadyClock::time_point now) {
  PdChoice c;
  const std::optional<pd::PdProtocol> protocol = PdProtocolFor(pd, model);
  if (!protocol) {
    c.reason = "no P/D protocol for this model";
    return c;
  }
  c.protocol = *protocol;
  for (Worker* w : plan.available) {
    switch (w->config().role) {
      case config::WorkerRole::kPrefill:
        c.prefill_pool.push_back(w);
        break;
      case config::WorkerRole::kDecode:
        c.decode_pool.push_back(w);
        break;
      case config::WorkerRole::kMixed:
        c.mixed_pool.push_back(w);
        break;
    }
  }
  if (c.prefill_pool.empty() && c.decode_pool.empty()) {
    c.reason = "no prefill or decode worker available";
    return c;
  }
  // The agents' APIs: vLLM's Anthropic layer carries kv_transfer_params, so /v1/messages is
  // disaggregated under vLLM's protocols like chat; SGLang's drops the bootstrap fields, and
  // /v1/responses carries them only in recent vLLM builds: those, count_tokens and the stored
  // response endpoints are served whole (docs/pd.md).
  const ApiEndpoint endpoint =
      plan.request != nullptr ? plan.request->endpoint : ApiEndpoint::kOther;
  const bool messages_pd =
      endpoint == ApiEndpoint::kMessages && c.protocol != pd::PdProtocol::kSglangBootstrap;
  if (!messages_pd &&
      (endpoint == ApiEndpoint::kMessages || endpoint == ApiEndpoint::kCountTokens ||
       endpoint == ApiEndpoint::kResponses || !plan.pinned_response.empty())) {
    c.whole_api = true;
    const std::string_view api = plan.pinned_response.empty() ? ApiName(endpoint) : "responses";
    if (!c.decode_pool.empty() && DecodeCanServeAlone(c.protocol)) {
      c.decode = DecideAmong(planner, plan, c.decode_pool, commit, now);
      c.mode = PdMode::kDirect;
      c.reason = common::StrCat("the engines' P/D paths do not carry the ", api,
                                " API: served whole on a decode worker");
    } else if (!c.mixed_pool.empty()) {
      c.mode = PdMode::kFallbackMixed;
      c.reason = common::StrCat("the engines' P/D paths do not carry the ", api,
                                " API: served whole on a mixed worker");
    } else {
      c.mode = PdMode::kUnavailable;
      c.reason = common::StrCat("the engines' P/D paths do not carry the ", api,
                                " API, this protocol's decode workers cannot serve alone, and no "
                                "mixed worker is available");
    }
    return c;
  }
  if (c.decode_pool.empty()) {
    if (!c.mixed_pool.empty()) {
      c.mode = PdMode::kFallbackMixed;
      c.reason = "no decode worker available";
    } else {
      c.mode = PdMode::kUnavailable;
      c.reason = "no decode worker available (and no mixed worker)";
    }
    return c;
  }
  c.decode = DecideAmong(planner, plan, c.decode_pool, commit, now);
  c.decode_uncached_tokens = plan.prompt_tokens - CachedTokens(*c.decode, plan);
  const bool alone = DecodeCanServeAlone(c.protocol);
  if (alone && pd.skip_prefill_below_tokens > 0 &&
      c.decode_uncached_tokens < int64_t{pd.skip_prefill_below_tokens}) {
    c.mode = PdMode::kDirect;
    c.reason =
        common::StrCat("the decode worker holds all but ", c.decode_uncached_tokens,
                       " of the prompt's ", plan.prompt_tokens,
                       " tokens (skip_prefill_below_tokens ", pd.skip_prefill_below_tokens, ")");
    return c;
  }
  if (c.prefill_pool.empty()) {
    if (alone) {
      c.mode = PdMode::kDirect;
      c.reason = "no prefill worker available: the decode worker prefills";
      return c;
    }
    if (commit) {
      RouteOutcome none;
      planner.Complete(plan, *c.decode, none);
    }
    c.decode.reset();
    c.mode = c.mixed_pool.empty() ? PdMode::kUnavailable : PdMode::kFallbackMixed;
    c.reason = "no prefill worker available";
    return c;
  }
  c.prefill = DecideAmong(planner, plan, c.prefill_pool, commit, now);
  c.mode = PdMode::kDisaggregate;
  c.reason = common::StrCat(c.decode_uncached_tokens, " of the prompt's ", plan.prompt_tokens,
                            " tokens are not cached on the decode worker");
  return c;
}

}  // namespace kvgate::router
