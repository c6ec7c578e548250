#include "router/policies/kvaware_policy.h"

#include <algorithm>
#include <limits>

#include "router/policies/policy_util.h"

namespace kvgate::router {

double KvAwarePolicy::PredictTtft(const RouteRequest& r, const Candidate& c) const {
  return PredictTtft(r, c, c.prefill_rate > 0 ? c.prefill_rate : config_.prefill_tokens_per_second);
}

double KvAwarePolicy::PredictTtft(const RouteRequest& r, const Candidate& c, double rate) const {
  const TtftParts p = PredictParts(r, c, rate);
  return p.total();
}

TtftParts KvAwarePolicy::PredictParts(const RouteRequest& r, const Candidate& c,
                                      double rate) const {
  const double bt = r.block_tokens;
  const double prompt = r.prompt_tokens;
  double gpu = c.cached_blocks[0] * bt;
  double host = std::max(0.0, (static_cast<double>(c.cached_blocks[1]) - c.cached_blocks[0]) * bt);
  double store = std::max(0.0, (static_cast<double>(c.cached_blocks[2]) -
                                std::max(c.cached_blocks[0], c.cached_blocks[1])) *
                                   bt);
  if (gpu + host + store < config_.min_match_tokens) gpu = host = store = 0;
  gpu = std::min(gpu, prompt);
  host = std::min(host, prompt - gpu);
  store = std::min(store, prompt - gpu - host);
  const double uncached = prompt - gpu - host - store;
  const double store_rate =
      r.store_tokens_per_second > 0 ? r.store_tokens_per_second : config_.store_tokens_per_second;
  TtftParts p;
  p.queue =
      std::max(0.0, static_cast<double>(c.load.pending_prefill_tokens) / rate - c.prefill_busy_s);
  p.prefill = PrefillWork(uncached, prompt - uncached, config_.prefill_context_factor) / rate;
  p.overhead = c.prefill_overhead_s;
  p.host_load = host / config_.host_tokens_per_second;
  p.store_load = store / store_rate;
  p.decode_interference =
      config_.decode_interference_seconds * static_cast<double>(c.load.active_decode);
  // KV pressure: the engine admits a prompt only when its new blocks fit beside those of the
  // requests it is still running; until then it waits for decodes to finish (or preempts one).
  // Long agentic contexts make this the main source of tail latency. The wait is a running
  // request's end however few blocks are missing (a wait scaled by the missing share predicted
  // 0.8 s for a turn that waited 9.4 s: docs/benchmarks.md, session 37).
  const double capacity = static_cast<double>(c.engine.num_gpu_blocks) *
                          (c.engine.block_size > 0 ? c.engine.block_size : bt);
  if (capacity > 0 && prompt > 0) {
    const double resident = static_cast<double>(c.load.active_kv_blocks) * bt;
    const double overflow = resident + (prompt - gpu) - capacity;
    if (overflow > 0) p.kv_wait = config_.kv_full_wait_seconds;
  }
  return p;
}

namespace {

// The mean of `field` over the candidates that have one (a positive value), else `otherwise`.
double MeanOfKnown(absl::Span<const Candidate> c, double Candidate::*field, double otherwise) {
  double sum = 0;
  int known = 0;
  for (const auto& x : c) {
    if (x.*field > 0) {
      sum += x.*field;
      ++known;
    }
  }
  return known > 0 ? sum / known : otherwise;
}

}  // namespace

double KvAwarePolicy::FleetRate(absl::Span<const Candidate> c) const {
  return MeanOfKnown(c, &Candidate::prefill_rate, config_.prefill_tokens_per_second);
}

double KvAwarePolicy::FleetOverhead(absl::Span<const Candidate> c) const {
  return MeanOfKnown(c, &Candidate::prefill_overhead_s, 0);
}

std::optional<TtftParts> KvAwarePolicy::Predict(const RouteRequest& request,
                                                absl::Span<const Candidate> c,
                                                size_t chosen) const {
  if (chosen >= c.size()) return std::nullopt;
  const double rate = c[chosen].prefill_rate > 0 ? c[chosen].prefill_rate : FleetRate(c);
  TtftParts p = PredictParts(request, c[chosen], rate);
  if (c[chosen].prefill_overhead_s <= 0) p.overhead = FleetOverhead(c);
  return p;
}

void KvAwarePolicy::AddLaneCost(absl::Span<const double> queue, absl::Span<const double> added,
                                std::vector<double>* score) const {
  const size_t n = queue.size();
  const size_t lanes = static_cast<size_t>(config_.open_lanes * static_cast<double>(n) + 0.5);
  if (lanes == 0) return;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const auto shorter = [&](size_t a, size_t b) { return queue[a] < queue[b]; };
  // The next arrivals' best queues are the `lanes` shortest; a request there raises their sum
  // by what it adds, up to the first queue outside them (which then becomes a lane). Which of
  // equal queues is inside does not matter: the charge up to an equal ceiling is 0.
  double ceiling = std::numeric_limits<double>::infinity();
  if (lanes < n) {
    std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(lanes), order.end(),
                     shorter);
    ceiling = queue[order[lanes]];
  }
  for (size_t rank = 0; rank < std::min(lanes, n); ++rank) {
    const size_t i = order[rank];
    (*score)[i] += config_.lane_weight * std::max(0.0, std::min(added[i], ceiling - queue[i]));
  }
}

size_t KvAwarePolicy::Choose(const RouteRequest& request, absl::Span<const Candidate> c,
                             std::vector<CandidateScore>* scores) {
  double mean_recent = 0;
  for (const Candidate& x : c) mean_recent += x.recent_work / static_cast<double>(c.size());
  const int64_t bound = policy_util::LoadBound(c, 1.0, config_.spill_bound);
  std::vector<bool> eligible(c.size());
  bool any = false;
  for (size_t i = 0; i < c.size(); ++i) {
    eligible[i] = c[i].load.in_flight < bound;
    any |= eligible[i];
  }
  if (!any) eligible.assign(c.size(), true);

  const double fleet_rate = FleetRate(c);
  const double fleet_overhead = FleetOverhead(c);
  std::vector<double> score(c.size());
  std::vector<double> ttft(c.size());
  std::vector<double> delay(c.size(), 0.0);  // what a load here costs the requests running here
  std::vector<TtftParts> parts(scores != nullptr ? c.size() : 0);
  // Open lanes (off by default): the prefill queued ahead on each, and what this request adds.
  const bool lanes = config_.lane_weight > 0;
  std::vector<double> queue(lanes ? c.size() : 0);
  std::vector<double> added(lanes ? c.size() : 0);
  for (size_t i = 0; i < c.size(); ++i) {
    const double rate = c[i].prefill_rate > 0 ? c[i].prefill_rate : fleet_rate;
    const double unfitted = c[i].prefill_overhead_s > 0 ? 0 : fleet_overhead;
    TtftParts part = PredictParts(request, c[i], rate);
    part.overhead += unfitted;
    ttft[i] = part.total();
    // An engine loads host or store KV before the step that needs it runs (vLLM's connectors
    // load in start_load_kv, ahead of the forward pass): the requests already running there wait
    // for the load as well, a cost the moved request's own TTFT does not show.
    delay[i] = config_.load_delay_weight * (part.host_load + part.store_load) *
               static_cast<double>(std::max<int64_t>(0, c[i].load.in_flight));
    if (scores != nullptr) parts[i] = part;
    if (lanes) {
      queue[i] = part.queue;
      added[i] = part.prefill + part.host_load + part.store_load;
    }
    score[i] =
        ttft[i] + delay[i] + config_.balance_weight * (c[i].recent_work - mean_recent) / rate;
  }
  if (lanes) AddLaneCost(queue, added, &score);
  // The bound spreads a hot prefix, which costs a request at most its recompute elsewhere. A
  // worker over the bound still competes when it would answer sooner than every worker under
  // it by more than that: the bound counts decoding requests like queued ones, so in a burst of
  // long prompts the workers under it can be the ones with the longest queues.
  if (any) {
    double best_under = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < c.size(); ++i) {
      if (eligible[i]) best_under = std::min(best_under, score[i]);
    }
    const double recompute =
        PrefillWork(request.prompt_tokens, 0, config_.prefill_context_factor) / fleet_rate;
    for (size_t i = 0; i < c.size(); ++i) {
      if (!eligible[i] && score[i] + recompute < best_under) eligible[i] = true;
    }
  }

  // Session affinity: one worker alone holds this prompt's deepest match and that match is the
  // session's own history (not a shared prefix). It keeps the request unless it is at its load
  // bound or its queue makes it slower than recomputing elsewhere (then the prompt spills, and
  // the index holds it on both).
  size_t owner = c.size();
  std::string owner_note;
  if (!request.match_is_shared_prefix) {
    size_t best = 0;
    uint32_t second = 0;
    for (size_t i = 1; i < c.size(); ++i) {
      if (c[i].cached_any_blocks > c[best].cached_any_blocks) {
        second = c[best].cached_any_blocks;
        best = i;
      } else {
        second = std::max(second, c[i].cached_any_blocks);
      }
    }
    const double matched = static_cast<double>(c[best].cached_any_blocks) * request.block_tokens;
    if (c[best].cached_any_blocks > second && matched >= config_.min_match_tokens) {
      double best_other = -1;
      for (size_t j = 0; j < c.size(); ++j) {
        if (j != best && eligible[j] && (best_other < 0 || ttft[j] + delay[j] < best_other)) {
          best_other = ttft[j] + delay[j];
        }
      }
      if (!eligible[best]) {
        owner_note = "session owner at load bound: spill";
      } else if (best_other >= 0 && ttft[best] > best_other + config_.affinity_margin_seconds) {
        owner_note = "session owner slower than recomputing elsewhere: spill";
      } else {
        owner = best;
        owner_note = "session owner";
      }
      if (scores == nullptr && owner < c.size()) return owner;
      if (owner == c.size()) owner = best;  // for the note only
    }
  }
  if (scores != nullptr) {
    scores->assign(c.size(), {});
    for (size_t i = 0; i < c.size(); ++i) {
      (*scores)[i].score = score[i];
      (*scores)[i].predicted_ttft_s = ttft[i];
      (*scores)[i].ttft_parts = parts[i];
      (*scores)[i].eligible = eligible[i];
      if (!eligible[i]) (*scores)[i].note = "at load bound (fair share + spill_bound)";
      if (eligible[i] && any && c[i].load.in_flight >= bound) {
        (*scores)[i].note =
            "over load bound, but sooner than all under it by more than a recompute";
      }
    }
    if (owner < c.size()) {
      (*scores)[owner].note = owner_note;
      if (owner_note == "session owner") return owner;
    }
  }
  return policy_util::ArgMinWithTies(score, request.tie_seed, 1e-9, &eligible);
}

}  // namespace kvgate::router
