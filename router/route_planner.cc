#include "router/route_planner.h"

#include <algorithm>

#include "common/strings.h"
#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"
#include "router/policies/policy_factory.h"
#include "router/policies/policy_util.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

// Canonical bytes are ~4 per token (the bytes4 rule the simulator also uses).
constexpr uint32_t kBytesPerToken = 4;
constexpr kvindex::BlockHash kForked = ~kvindex::BlockHash{0};
constexpr size_t kMaxForkEntries = 1 << 20;

kvindex::Canonicalizer& ThreadCanonicalizer() {
  thread_local kvindex::Canonicalizer canonicalizer;
  return canonicalizer;
}

}  // namespace

const RoutingPolicySharedPtr& PolicySet::For(std::string_view model) const {
  if (!by_model.empty()) {
    auto it = by_model.find(absl::string_view(model.data(), model.size()));
    if (it != by_model.end()) return it->second;
  }
  return default_policy;
}

bool PolicySet::AnyUsesPrefixCache() const {
  if (default_policy->UsesPrefixCache()) return true;
  for (const auto& [_, p] : by_model) {
    if (p->UsesPrefixCache()) return true;
  }
  return false;
}

absl::StatusOr<PolicySetConstSharedPtr> MakePolicySet(const config::RoutingConfig& config) {
  auto set = std::make_shared<PolicySet>();
  set->default_policy = MakeRoutingPolicy(config.policy, config);
  if (!set->default_policy) {
    return absl::InvalidArgumentError(
        common::StrCat("routing.policy: unknown policy '", config.policy, "'"));
  }
  for (const auto& [model, name] : config.model_policies) {
    auto p = MakeRoutingPolicy(name, config);
    if (!p) {
      return absl::InvalidArgumentError(
          common::StrCat("routing.model_policies.", model, ": unknown policy '", name, "'"));
    }
    set->by_model[model] = std::move(p);
  }
  return PolicySetConstSharedPtr(std::move(set));
}

RoutePlanner::RoutePlanner(const config::RoutingConfig& config, RouterMetrics& metrics,
                           PreciseMode* precise)
    : index_(kvindex::PrefixIndexOptions{
          .num_shards = 64,
          .default_capacity_blocks = 26'000,  // 8B model on one H100 (docs/routing.md)
          .max_memory_bytes = config.index_memory_bytes}),
      metrics_(metrics),
      precise_(precise) {}

std::vector<Worker*> RoutePlanner::Available(const WorkerSet& workers, std::string_view model,
                                             SteadyClock::time_point now, bool* any_serves) {
  std::vector<Worker*> out;
  *any_serves = false;
  for (const auto& w : workers.workers) {
    if (!w->ServesModel(model)) continue;
    *any_serves = true;
    if (w->IsAvailable(now)) out.push_back(w.get());
  }
  return out;
}

PreparedPrompt RoutePlanner::Prepare(std::string_view body, size_t capacity, bool chat,
                                     std::string_view model, const PolicySet& policies,
                                     const config::RoutingConfig& config) const {
  PreparedPrompt out;
  out.prompt_tokens = static_cast<uint32_t>(body.size() / kBytesPerToken);
  if (!policies.For(model)->UsesPrefixCache()) return out;
  kvindex::CanonicalRequest req;
  const auto api = chat ? kvindex::ApiKind::kChatCompletions : kvindex::ApiKind::kCompletions;
  if (!ThreadCanonicalizer().CanonicalizePadded(body, capacity, api, &req).ok() ||
      req.prompts.empty()) {
    return out;
  }
  // A batch of completions routes by its first prompt.
  const kvindex::CanonicalPrompt& prompt = req.prompts[0];
  const uint64_t ns = kvindex::NamespaceSeed({req.model, "", req.cache_salt});
  kvindex::HashOptions ho;
  ho.text_block_bytes = config.block_tokens * kBytesPerToken;
  ho.token_block_tokens = config.block_tokens;
  kvindex::HashPrompt(prompt, ns, ho, &out.chain);
  out.prompt_tokens =
      prompt.kind == kvindex::PromptKind::kTokens
          ? static_cast<uint32_t>(prompt.tokens.size())
          : static_cast<uint32_t>((prompt.bytes.size() + kBytesPerToken - 1) / kBytesPerToken);
  out.hashed = true;
  // Precise mode matches token chains; a cache_salt changes the engine's hashes in ways its
  // events do not show, so salted requests stay approximate.
  if (precise_ != nullptr && precise_->enabled() && req.cache_salt.empty()) {
    const kvindex::Tokenizer* tokenizer = PreciseMode::TokenizerFor(config.precise, req.model);
    if (tokenizer == nullptr || !tokenizer->Tokenize(prompt, &out.tokens).ok()) out.tokens.clear();
  }
  return out;
}

void RoutePlanner::MatchPrecise(const RouteRequest& request, const config::RoutingConfig& config,
                                Decision& d) const {
  const size_t n = d.candidates.size();
  d.precise.assign(n, false);
  d.dp_ranks.assign(n, -1);
  d.precise_blocks.assign(n, 0);
  std::vector<kvindex::Holder> holders;
  std::vector<kvindex::MatchResult> matches;
  for (size_t i = 0; i < n; ++i) {
    Candidate& c = d.candidates[i];
    const Worker& w = *c.worker;
    if (w.precise_state() != PreciseState::kVerified || !w.config().kv_events) continue;
    const uint32_t bs = w.config().kv_events->block_size;
    auto it = std::find_if(d.token_chains.begin(), d.token_chains.end(),
                           [bs](const auto& e) { return e.first == bs; });
    if (it == d.token_chains.end()) {
      d.token_chains.emplace_back(bs, std::vector<kvindex::BlockHash>());
      it = d.token_chains.end() - 1;
      PreciseMode::TokenChain(request.tokens, request.model, bs, &it->second);
    }
    const auto& chain = it->second;
    holders.clear();
    for (uint32_t r = 0; r < w.config().dp_size; ++r)
      holders.push_back(PreciseMode::HolderOf(w, r));
    precise_->index().Match(chain, holders, &matches);
    // The rank holding the longest prefix (in GPU, or about to be, then in any tier).
    uint32_t best_gpu = 0, best_any = 0;
    int best_rank = -1;
    for (size_t r = 0; r < matches.size(); ++r) {
      const uint32_t gpu = precise_->speculative().Extend(
          holders[r], chain, matches[r].blocks[static_cast<int>(kvindex::Tier::kGpu)], request.now);
      const uint32_t any = std::max(gpu, matches[r].any_tier_blocks);
      if (best_rank < 0 || gpu > best_gpu || (gpu == best_gpu && any > best_any)) {
        best_rank = static_cast<int>(r);
        best_gpu = gpu;
        best_any = any;
      }
    }
    if (best_any == 0 && w.config().dp_size > 1) {
      // Spread cold prompts over the ranks.
      best_rank = static_cast<int>(policy_util::Mix(epoch_.load() + i) % w.config().dp_size);
    }
    // Policies count blocks of routing.block_tokens tokens.
    auto scaled = [&](uint32_t blocks) {
      return static_cast<uint32_t>(uint64_t{blocks} * bs /
                                   std::max<uint32_t>(1, config.block_tokens));
    };
    const kvindex::MatchResult& m = matches[static_cast<size_t>(std::max(best_rank, 0))];
    c.cached_blocks[static_cast<int>(kvindex::Tier::kGpu)] = scaled(best_gpu);
    c.cached_blocks[static_cast<int>(kvindex::Tier::kHost)] =
        scaled(m.blocks[static_cast<int>(kvindex::Tier::kHost)]);
    c.cached_blocks[static_cast<int>(kvindex::Tier::kStore)] =
        scaled(m.blocks[static_cast<int>(kvindex::Tier::kStore)]);
    c.cached_any_blocks = scaled(best_any);
    d.precise[i] = true;
    d.dp_ranks[i] = best_rank;
    d.precise_blocks[i] = best_any;
  }
}

Decision RoutePlanner::Decide(RouteRequest& request, absl::Span<Worker* const> available,
                              const PolicySet& policies, const config::RoutingConfig& config,
                              bool commit) {
  Decision d;
  const RoutingPolicySharedPtr& policy = policies.For(request.model);
  d.policy = std::string(policy->name());
  d.candidates.resize(available.size());
  std::vector<kvindex::Holder> holders(available.size());
  for (size_t i = 0; i < available.size(); ++i) {
    d.candidates[i].worker = available[i];
    holders[i] = HolderOf(*available[i]);
    d.candidates[i].engine = available[i]->engine_stats();
  }
  // Matching takes only shard read locks; do it before the decision lock.
  if (policy->UsesPrefixCache() && !request.chain.empty()) {
    std::vector<kvindex::MatchResult> matches;
    index_.Match(request.chain, holders, &matches);
    for (size_t i = 0; i < matches.size() && i < d.candidates.size(); ++i) {
      for (int t = 0; t < kvindex::kNumTiers; ++t) {
        d.candidates[i].cached_blocks[t] = matches[i].blocks[t];
      }
      d.candidates[i].cached_any_blocks = matches[i].any_tier_blocks;
    }
  }
  const uint64_t chain_key = request.chain.empty() ? 0 : request.chain.back();
  uint32_t deepest = 0;  // In the approximate chain, whose blocks the fork tracking records.
  for (const auto& c : d.candidates) deepest = std::max(deepest, c.cached_any_blocks);
  if (policy->UsesPrefixCache() && precise_ != nullptr && !request.tokens.empty()) {
    MatchPrecise(request, config, d);
  }
  {
    std::unique_lock<std::mutex> lock(decision_mu_);
    request.match_is_shared_prefix = deepest > 0 && SeenFork(request.chain[deepest - 1]);
    if (commit && deepest > 0 && deepest < request.chain.size()) {
      RecordContinuation(request.chain[deepest - 1], request.chain[deepest]);
    }
    for (auto& c : d.candidates) c.load = c.worker->load();
    // Explain sees the tie seed the next real decision will use.
    const uint64_t epoch = commit ? epoch_.fetch_add(1) : epoch_.load();
    request.tie_seed = policy_util::Mix(epoch ^ policy_util::Mix(chain_key)) ^
                       policy_util::Mix(std::hash<std::string_view>()(request.session_key));
    d.index = policy->Choose(request, d.candidates, commit ? nullptr : &d.scores);
    d.index = std::min(d.index, d.candidates.size() - 1);
    d.worker = d.candidates[d.index].worker;
    if (!d.dp_ranks.empty()) d.dp_rank = d.dp_ranks[d.index];
    const Candidate& chosen = d.candidates[d.index];
    d.predicted_cached_tokens = std::min<int64_t>(
        static_cast<int64_t>(chosen.cached_blocks[0]) * config.block_tokens, request.prompt_tokens);
    d.queue_tokens_at_dispatch = chosen.load.pending_prefill_tokens;
    if (commit) {
      const int64_t uncached = request.prompt_tokens - d.predicted_cached_tokens;
      const int64_t blocks =
          (request.prompt_tokens + config.block_tokens - 1) / config.block_tokens;
      d.worker->Reserve(d.reservation, uncached, blocks);
    }
  }
  if (commit) {
    d.worker->AddRecentWork(request.prompt_tokens, request.now,
                            config.kvaware.balance_half_life_ms / 1000.0);
    if (policy->UsesPrefixCache() && !request.chain.empty()) {
      // Approximate learning: the worker will hold this prompt once it has prefilled it.
      (void)index_.Insert(HolderOf(*d.worker), request.chain, kvindex::Tier::kGpu);
    }
    if (!d.precise.empty() && d.precise[d.index]) {
      // Until its BlockStored event arrives, the chosen rank is about to hold the prompt.
      const uint32_t bs = d.worker->config().kv_events->block_size;
      for (const auto& [size, chain] : d.token_chains) {
        if (size != bs) continue;
        precise_->speculative().Insert(
            PreciseMode::HolderOf(*d.worker, static_cast<uint32_t>(std::max(d.dp_rank, 0))), chain,
            request.now + std::chrono::milliseconds(config.precise.speculative_ttl_ms));
      }
    }
  }
  return d;
}

void RoutePlanner::Complete(const RouteRequest& request, Decision& d, const RouteOutcome& outcome,
                            const PolicySet& policies, const config::RoutingConfig& config) {
  Worker& w = *d.worker;
  const RoutingPolicySharedPtr& policy = policies.For(request.model);
  if (outcome.success && outcome.ttfb_seconds > 0) {
    w.ObservePrefill(
        static_cast<double>(outcome.queue_tokens_at_dispatch + outcome.uncached_tokens),
        outcome.ttfb_seconds);
  }
  if (outcome.success && outcome.cached_tokens >= 0 && policy->UsesPrefixCache() &&
      !request.chain.empty()) {
    const int64_t predicted = d.predicted_cached_tokens;
    const int64_t actual = outcome.cached_tokens;
    const WorkerMetrics& m = w.metrics();
    if (m.predicted_tokens != nullptr) {
      m.predicted_tokens->Increment(static_cast<double>(predicted));
      m.actual_tokens->Increment(static_cast<double>(actual));
      if (predicted > actual)
        m.overpredicted_tokens->Increment(static_cast<double>(predicted - actual));
      if (actual > predicted)
        m.underpredicted_tokens->Increment(static_cast<double>(actual - predicted));
      const double hi = static_cast<double>(std::max(predicted, actual));
      const double ratio = hi > 0 ? static_cast<double>(std::min(predicted, actual)) / hi : 1.0;
      m.prediction_accuracy->Set(0.9 * m.prediction_accuracy->Value() + 0.1 * ratio);
    }
    const bool precise = !d.precise.empty() && d.precise[d.index];  // events correct that index
    if (predicted > actual && !precise) {
      // The index believed blocks [actual, predicted) were cached; the engine had evicted them.
      const size_t from = static_cast<size_t>(actual / config.block_tokens);
      const size_t to =
          std::min(request.chain.size(), static_cast<size_t>(predicted / config.block_tokens));
      if (to > from) {
        index_.Remove(HolderOf(w), request.chain.subspan(from, to - from), kvindex::Tier::kGpu);
        spdlog::debug(
            "worker {}: predicted {} cached tokens, engine reported {}; dropped {} blocks",
            w.name(), predicted, actual, to - from);
      }
    }
  }
  policy->OnComplete(w, outcome);
}

bool RoutePlanner::SeenFork(kvindex::BlockHash parent) const {
  auto it = continuations_.find(parent);
  return it != continuations_.end() && it->second == kForked;
}

void RoutePlanner::RecordContinuation(kvindex::BlockHash parent, kvindex::BlockHash child) {
  if (continuations_.size() >= kMaxForkEntries) continuations_.clear();
  auto [it, inserted] = continuations_.emplace(parent, child);
  if (!inserted && it->second != child) it->second = kForked;
}

void RoutePlanner::SetCapacity(const Worker& worker, uint64_t tokens, uint32_t block_tokens) {
  (void)index_.SetCapacity(HolderOf(worker), kvindex::Tier::kGpu,
                           std::max<uint64_t>(1, tokens / std::max<uint32_t>(1, block_tokens)));
}

void RoutePlanner::RemoveWorker(const Worker& worker) { index_.RemoveHolder(HolderOf(worker)); }

}  // namespace kvgate::router
