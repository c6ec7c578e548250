// File: router/dispatch/pd_dispatcher.h
// Prefill/decode disaggregation (reference/protocols.md §4, docs/pd.md): for a model with a P/D
// protocol, the choice (routing/pd_choice.h) names a decode worker and, unless it holds nearly
// all of the prompt, a prefill worker; then the engines' own protocol moves the KV:
//   vllm-nixl       prefill (max_tokens 1, not streamed) first; its kv_transfer_params go to
//                   decode verbatim; a decode that fails before answering is retried on another
//                   decode worker, and when none answers, one more short decode is sent so the
//                   prefill worker frees the blocks it holds (engines otherwise keep them for
//                   minutes);
//   vllm-p2p-nccl   the same order, both peers' addresses in the shared X-Request-Id;
//   vllm-mooncake   both at once, decode pointed at prefill's bootstrap server;
//   sglang-bootstrap the same body to both at once, with a random 63-bit bootstrap room.
// Both stages carry the same X-Request-Id. When either concurrent stage fails before the client
// saw a byte the other is cancelled (the peers' hang, smg#831). A failed prefill is served by a
// mixed worker when pd.fallback_to_mixed and one is available, else the client gets a clean
// OpenAI error. Everything else is the retry dispatcher's. Thread-compatible: one per thread.
#pragma once

#include <random>
#include <string>

#include "router/dispatch/dispatcher.h"
#include "router/dispatch/retry_dispatcher.h"
#include "router/routing/pd_choice.h"
#include "router/upstream/upstream.h"

namespace kvgate::router {

class PdDispatcher : public Dispatcher {
 public:
  /// `upstream`, `planner` and `metrics` outlive the dispatcher; `seed` seeds the retries'
  /// backoff jitter.
  PdDispatcher(Upstream& upstream, RoutePlanner& planner, RouterMetrics& metrics, uint32_t seed)
      : upstream_(upstream),
        planner_(planner),
        metrics_(metrics),
        rng_(seed ^ 0x5044u),
        retry_(upstream, planner, metrics, seed) {}

  // router::Dispatcher
  net::awaitable<void> Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) override;

 private:
  net::awaitable<void> Disaggregate(ThreadContext& tc, Exchange& ex, RoutePlan& plan,
                                    PdChoice& choice);
  // sglang-bootstrap with `return_logprob` and no stream: both answers are read whole and the
  // client gets decode's with prefill's prompt logprobs first (as SGLang's gateway merges).
  net::awaitable<void> MergeLogprobs(ThreadContext& tc, Exchange& ex, RoutePlan& plan,
                                     PdChoice& choice, const UpstreamAttempt& prefill,
                                     Decision& decode, const std::string& decode_body);
  // Prefill failed (`why`): a mixed worker serves the request, or the client gets the error.
  net::awaitable<void> PrefillFailed(ThreadContext& tc, Exchange& ex, RoutePlan& plan,
                                     PdChoice& choice, const FetchResult& prefill);
  // Sends decode workers a one-token decode with `params`, so that the prefill worker's held
  // blocks are pulled and freed after a decode that never answered.
  net::awaitable<void> ReleaseHeld(ThreadContext& tc, Exchange& ex, PdChoice& choice,
                                   const std::string& params, std::string_view request_id);

  Upstream& upstream_;
  RoutePlanner& planner_;
  RouterMetrics& metrics_;
  std::minstd_rand rng_;  // request ids and bootstrap rooms
  RetryDispatcher retry_;
};

}  // namespace kvgate::router
