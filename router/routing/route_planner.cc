#include "router/routing/route_planner.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/assert.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "kvindex/agent_chat.h"
#include "kvindex/block_hash.h"
#include "kvindex/prefix_reuse.h"
#include "router/policies/policy_util.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

// Canonical bytes are ~4 per token (the bytes4 rule the simulator also uses).
constexpr uint32_t kBytesPerToken = 4;
constexpr kvindex::BlockHash kForked = ~kvindex::BlockHash{0};
constexpr size_t kMaxForkEntries = 1 << 20;

kvindex::ApiKind AgentApiOf(ApiEndpoint endpoint) {
  switch (endpoint) {
    case ApiEndpoint::kMessages:
    case ApiEndpoint::kCountTokens:
      return kvindex::ApiKind::kMessages;
    case ApiEndpoint::kResponses:
      return kvindex::ApiKind::kResponses;
    default:
      return kvindex::ApiKind::kOther;
  }
}

std::optional<PreciseApi> PreciseApiOf(ApiEndpoint endpoint) {
  switch (AgentApiOf(endpoint)) {
    case kvindex::ApiKind::kMessages:
      return PreciseApi::kMessages;
    case kvindex::ApiKind::kResponses:
      return PreciseApi::kResponses;
    default:
      return std::nullopt;
  }
}

// The prefill chunk a worker's Mamba groups checkpoint at (workers[].kv_groups), 0 if unknown.
uint32_t MambaChunkTokens(const config::WorkerConfig& worker) {
  for (const auto& g : worker.kv_groups) {
    kvindex::GroupKind kind;
    if (kvindex::ParseGroupKind(g.kind, &kind) && kind == kvindex::GroupKind::kMamba) {
      return g.chunk_tokens;
    }
  }
  return 0;
}

// The chosen candidate's GPU hit in the engine's `block_size`-token blocks (cached_blocks
// counts routing blocks; speculative guesses are engine blocks).
uint64_t GpuHitInEngineBlocks(const Decision& d, uint32_t block_tokens, uint32_t block_size) {
  return uint64_t{d.candidates[d.index].cached_blocks[static_cast<int>(kvindex::Tier::kGpu)]} *
         block_tokens / std::max<uint32_t>(1, block_size);
}

// Where the chosen candidate's engine starts computing, in chain blocks of `block_tokens`
// tokens: past its GPU hit and what it loads from its host tier or a store.
uint32_t ComputeStart(const Decision& d) {
  const uint32_t* tiers = d.candidates[d.index].cached_blocks;
  return *std::max_element(tiers, tiers + kvindex::kNumTiers);
}

// The prefill a request sent to a worker now waits behind, in token-equivalents: what the
// gateway reserved there less what the engine did of the first prompt since it started it.
int64_t TokensAhead(const LoadSnapshot& load, double prefill_busy_s, double prefill_rate) {
  return std::max<int64_t>(
      0, load.pending_prefill_tokens - std::llround(std::min(1e15, prefill_busy_s * prefill_rate)));
}

}  // namespace

RoutePlanner::RoutePlanner(const config::RoutingConfig& config, PreciseMode* precise)
    : index_(kvindex::PrefixIndexOptions{
          .num_shards = 64,
          .default_capacity_blocks = 26'000,  // 8B model on one H100 (docs/routing.md)
          .max_memory_bytes = config.index_memory_bytes}),
      precise_(precise) {}

absl::StatusOr<RoutePlan> RoutePlanner::Plan(const ParsedRequest& request,
                                             std::string_view endpoint, const WorkerList& workers,
                                             const PolicySet& policies,
                                             const config::RoutingConfig& config,
                                             SteadyClock::time_point now) const {
  RoutePlan plan;
  plan.request = &request;
  plan.endpoint = endpoint;
  plan.config = &config;
  const std::string& model = request.model();
  bool any_serves = false;
  for (const auto& w : workers) {
    if (!w->ServesModel(model)) continue;
    any_serves = true;
    if (w->IsAvailable(now)) plan.available.push_back(w.get());
  }
  if (!any_serves && !workers.empty()) {
    return absl::NotFoundError(common::StrCat("The model `", model, "` does not exist."));
  }
  if (plan.available.empty()) return absl::UnavailableError("no healthy worker available");
  plan.policy = policies.For(model);
  plan.prompt_tokens = static_cast<uint32_t>(request.body.size() / kBytesPerToken);
  if (!plan.policy->UsesPrefixCache() || !request.has_prompt()) return plan;

  // A batch of completions routes by its first prompt.
  const kvindex::CanonicalPrompt& prompt = request.json.prompts[0];
  const uint64_t ns = kvindex::NamespaceSeed({model, "", request.json.cache_salt});
  kvindex::HashOptions ho;
  ho.text_block_bytes = config.block_tokens * kBytesPerToken;
  ho.token_block_tokens = config.block_tokens;
  kvindex::HashPrompt(prompt, ns, ho, &plan.chain);
  plan.prompt_tokens =
      prompt.kind == kvindex::PromptKind::kTokens
          ? static_cast<uint32_t>(prompt.tokens.size())
          : static_cast<uint32_t>((prompt.size() + kBytesPerToken - 1) / kBytesPerToken);
  plan.hashed = true;
  // Precise mode matches token chains; a cache_salt changes the engine's hashes in ways its
  // events do not show, so salted requests stay approximate.
  if (precise_ != nullptr && precise_->enabled() && request.json.cache_salt.empty()) {
    const tokenizer::Tokenizer* tokenizer = PreciseMode::TokenizerFor(config.precise, model);
    // A model's own tokenizer renders chat bodies through its chat template (issue 16); one
    // without templates (bytes4) tokenises the canonical prompt. A failed render (a template
    // outside the supported subset, raise_exception) leaves the request approximate.
    absl::Status s = absl::UnimplementedError("");
    if (tokenizer != nullptr && prompt.kind == kvindex::PromptKind::kChat) {
      const kvindex::ApiKind agent = AgentApiOf(request.endpoint);
      if (agent == kvindex::ApiKind::kOther) {
        // Where the gateway's parse found the messages, so the template's read skips them.
        tokenizer::ChatLayout layout;
        const kvindex::ReusablePrefix* parsed = request.json.messages_layout.get();
        if (parsed != nullptr) layout = {parsed->messages_begin, parsed->separators};
        s = tokenizer->TokenizeChat(request.body, parsed != nullptr ? &layout : nullptr,
                                    &plan.tokens);
      } else if (tokenizer->HasChatTemplate()) {
        // The engine renders its template over the chat its Anthropic / Responses layer built.
        thread_local kvindex::AgentChatConverter converter;
        thread_local std::string chat;
        s = converter.ConvertToChatBody(request.body, agent, &chat);
        if (s.ok()) s = tokenizer->TokenizeChat(chat, &plan.tokens);
      }
    }
    if (tokenizer != nullptr && absl::IsUnimplemented(s))
      s = tokenizer->Tokenize(prompt, &plan.tokens);
    if (!s.ok()) plan.tokens.clear();
  }
  return plan;
}

absl::Status RoutePlanner::PinToResponseOwner(RoutePlan& plan, ResponsePins& pins,
                                              const WorkerList& workers,
                                              std::string_view response_id,
                                              SteadyClock::time_point now) {
  plan.pinned_response.assign(response_id);
  const auto pin = pins.Find(response_id, now);
  const auto not_found = [&](std::string_view why) {
    return absl::NotFoundError(
        common::StrCat("Response with id '", response_id, "' not found: ", why));
  };
  if (!pin) return not_found("no worker behind this gateway is known to have stored it");
  auto owner = std::find_if(workers.begin(), workers.end(),
                            [&](const auto& w) { return w->id() == pin->worker_id; });
  if (owner == workers.end()) {
    return not_found("the worker that stored it has left the fleet");
  }
  const std::string_view name = (*owner)->name();
  if (std::find(plan.available.begin(), plan.available.end(), owner->get()) ==
      plan.available.end()) {
    return not_found(common::StrCat("the worker that stored it (", name, ") ",
                                    (*owner)->draining()          ? "is draining"
                                    : !(*owner)->IsAvailable(now) ? "is unavailable"
                                                                  : "does not serve this model"));
  }
  plan.available.assign(1, owner->get());
  return absl::OkStatus();
}

const std::vector<kvindex::BlockHash>& RoutePlanner::TokenChainFor(RoutePlan& plan,
                                                                   uint32_t block_size) {
  auto it = std::find_if(plan.token_chains.begin(), plan.token_chains.end(),
                         [block_size](const auto& e) { return e.first == block_size; });
  if (it == plan.token_chains.end()) {
    plan.token_chains.emplace_back(block_size, std::vector<kvindex::BlockHash>());
    it = plan.token_chains.end() - 1;
    PreciseMode::TokenChain(plan.tokens, plan.request->model(), block_size, &it->second);
  }
  return it->second;
}

void RoutePlanner::MatchPrecise(RoutePlan& plan, SteadyClock::time_point now,
                                absl::Span<Worker* const> workers, Decision& d) const {
  const config::RoutingConfig& config = *plan.config;
  // One index match per block size for every eligible worker's ranks. A holder whose list is
  // not prefix-closed (it evicted a block whose child it still holds) is matched by walking the
  // chain to its first miss: one call walks once, to the longest hit, instead of once per worker.
  struct Walk {  // The workers of one block size and their matches.
    uint32_t block_size;
    std::vector<kvindex::Holder> holders;
    std::vector<kvindex::MatchResult> matches;
  };
  struct Eligible {
    size_t candidate;
    size_t walk;
    size_t first;  // Its first rank's place in the walk's holders.
  };
  absl::InlinedVector<Walk, 2> walks;
  absl::InlinedVector<Eligible, 16> eligible;
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const Worker& w = *workers[i];
    if (w.precise_state() != PreciseState::kVerified || !w.config().kv_events) continue;
    if (const auto api = PreciseApiOf(plan.request->endpoint); api && !w.precise_api_agrees(*api)) {
      continue;  // its engine converts this API differently: approximate for it
    }
    const uint32_t bs = w.config().kv_events->block_size;
    size_t k = 0;
    while (k < walks.size() && walks[k].block_size != bs) ++k;
    if (k == walks.size()) walks.push_back(Walk{bs, {}, {}});
    eligible.push_back(Eligible{i, k, walks[k].holders.size()});
    for (uint32_t r = 0; r < w.config().dp_size; ++r) {
      walks[k].holders.push_back(PreciseMode::HolderOf(w, r));
    }
  }
  for (Walk& walk : walks) {
    precise_->index().Match(TokenChainFor(plan, walk.block_size), walk.holders, &walk.matches);
  }
  for (const Eligible& e : eligible) {
    const size_t i = e.candidate;
    Candidate& c = d.candidates[i];
    const Worker& w = *workers[i];
    Walk& walk = walks[e.walk];
    const uint32_t bs = walk.block_size;
    const auto& chain = TokenChainFor(plan, bs);
    // A sliding window's pool turns over while the request waits: what the queue ahead of it
    // will cache may evict the hit before the engine schedules it (Cap's ahead_tokens).
    const double rate =
        c.prefill_rate > 0 ? c.prefill_rate : config.kvaware.prefill_tokens_per_second;
    const auto ahead =
        static_cast<uint64_t>(TokensAhead(w.load(), w.PrefillBusySeconds(now), rate));
    const absl::Span<const kvindex::Holder> holders(walk.holders.data() + e.first,
                                                    w.config().dp_size);
    const absl::Span<kvindex::MatchResult> matches(walk.matches.data() + e.first,
                                                   w.config().dp_size);
    // As vLLM, the engine computes at least the prompt's last token: a block-aligned prompt
    // hits all blocks but its last.
    const uint32_t max_hit = static_cast<uint32_t>((plan.tokens.size() - 1) / std::max(1u, bs));
    // The rank holding the longest prefix (in GPU, or about to be, then in any tier).
    uint32_t best_gpu = 0, best_any = 0;
    int best_rank = -1;
    for (size_t r = 0; r < matches.size(); ++r) {
      kvindex::MatchResult& m = matches[r];
      // A hybrid model's hit is what every KV-cache group serves, not full attention's alone.
      auto& gpu_blocks = m.blocks[static_cast<int>(kvindex::Tier::kGpu)];
      gpu_blocks = std::min(gpu_blocks, max_hit);
      m.any_tier_blocks = std::min(m.any_tier_blocks, max_hit);
      const uint32_t full_attention = gpu_blocks;
      const bool hybrid = precise_->groups().Hybrid(holders[r]);
      if (hybrid) {
        gpu_blocks = precise_->groups().Cap(holders[r], chain, bs, gpu_blocks, /*gpu_only=*/true,
                                            nullptr, ahead);
        m.any_tier_blocks =
            precise_->groups().Cap(holders[r], chain, bs, m.any_tier_blocks, /*gpu_only=*/false);
      }
      for (auto& tier_blocks : m.blocks) tier_blocks = std::min(tier_blocks, m.any_tier_blocks);
      uint32_t gpu =
          std::min(max_hit, precise_->speculative().Extend(holders[r], chain, full_attention, now));
      if (gpu <= full_attention) {
        gpu = gpu_blocks;  // No guess beyond the events: they say what every group kept.
      } else if (hybrid) {
        // A prompt still in flight: what its guesses say each group will keep (a fork inside
        // it finds its sliding window or last Mamba checkpoint, not its full-attention prefix).
        gpu = GuessedHybridHit(precise_->groups(), precise_->speculative(), holders[r], chain, bs,
                               full_attention, gpu, now, ahead);
      }
      const uint32_t any = std::max(gpu, m.any_tier_blocks);
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
    c.precise = true;
    c.dp_rank = best_rank;
    d.precise_blocks[i] = best_any;
  }
}

void RoutePlanner::MatchStores(RoutePlan& plan, absl::Span<Worker* const> workers,
                               Decision& d) const {
  const auto stores = precise_->Stores();
  if (stores->empty()) return;
  const config::RoutingConfig& config = *plan.config;
  // A shared pool's blocks are the pool's, whoever published them: its prefix is the store tier
  // of every candidate that reaches it (kvaware charges the load time, not the recompute time).
  absl::InlinedVector<uint32_t, 4> prefix(stores->size(), 0);
  std::vector<kvindex::MatchResult> matches;
  for (size_t i = 0; i < stores->size(); ++i) {
    if (!precise_->StoreUp(i)) continue;  // What it held cannot be loaded now.
    const uint32_t bs = (*stores)[i].kv_events.block_size;
    const auto& chain = TokenChainFor(plan, bs);
    const kvindex::Holder holder = PreciseMode::StoreHolder(i);
    precise_->index().Match(chain, {&holder, 1}, &matches);
    if (matches.empty()) continue;
    const uint32_t blocks = matches[0].blocks[static_cast<int>(kvindex::Tier::kStore)];
    prefix[i] =
        static_cast<uint32_t>(uint64_t{blocks} * bs / std::max<uint32_t>(1, config.block_tokens));
  }
  for (size_t c = 0; c < d.candidates.size() && c < workers.size(); ++c) {
    const auto& reaches = workers[c]->config().stores;  // empty: every store
    uint32_t best = 0;
    for (size_t i = 0; i < stores->size(); ++i) {
      if (reaches.empty() ||
          std::find(reaches.begin(), reaches.end(), (*stores)[i].name) != reaches.end()) {
        best = std::max(best, prefix[i]);
      }
    }
    auto& store = d.candidates[c].cached_blocks[static_cast<int>(kvindex::Tier::kStore)];
    store = std::max(store, best);
  }
}

Decision RoutePlanner::Decide(RoutePlan& plan, uint32_t attempt, bool commit,
                              SteadyClock::time_point now) {
  const config::RoutingConfig& config = *plan.config;
  RoutingPolicy& policy = *plan.policy;
  const double half_life_s = config.kvaware.balance_half_life_ms / 1000.0;

  // Candidates: the plan's workers not tried yet, with every value the policy reads, taken
  // before the decision lock.
  Decision d;
  absl::InlinedVector<Worker*, 16> workers;
  for (Worker* w : plan.available) {
    if (std::find(plan.tried.begin(), plan.tried.end(), w->id()) == plan.tried.end()) {
      workers.push_back(w);
    }
  }
  d.candidates.resize(workers.size());
  d.precise_blocks.assign(workers.size(), 0);
  for (size_t i = 0; i < workers.size(); ++i) {
    const Worker& w = *workers[i];
    Candidate& c = d.candidates[i];
    c.worker_id = w.id();
    c.name = w.name();
    c.weight = w.config().weight;
    Worker::Learned learned = w.LearnedState(now, half_life_s);
    c.engine = learned.engine;
    c.prefill_rate = std::max(0.0, learned.prefill_rate);
    c.prefill_overhead_s = learned.prefill_overhead_s;
    c.recent_work = learned.recent_work;
  }
  const bool prefix = policy.UsesPrefixCache() && !plan.chain.empty();
  if (prefix) {
    std::vector<kvindex::Holder> holders(workers.size());
    for (size_t i = 0; i < workers.size(); ++i) holders[i] = HolderOf(*workers[i]);
    std::vector<kvindex::MatchResult> matches;
    index_.Match(plan.chain, holders, &matches);
    for (size_t i = 0; i < matches.size() && i < d.candidates.size(); ++i) {
      for (int t = 0; t < kvindex::kNumTiers; ++t) {
        d.candidates[i].cached_blocks[t] = matches[i].blocks[t];
      }
      d.candidates[i].cached_any_blocks = matches[i].any_tier_blocks;
      // A hybrid worker serves the prefix only as far as its other groups do (issue 32).
      uint32_t& gpu = d.candidates[i].cached_blocks[static_cast<int>(kvindex::Tier::kGpu)];
      const uint32_t capped = groups_.Cap(holders[i], plan.chain, config.block_tokens, gpu);
      if (capped < gpu) {
        gpu = capped;
        uint32_t any = 0;
        for (uint32_t blocks : d.candidates[i].cached_blocks) any = std::max(any, blocks);
        d.candidates[i].cached_any_blocks = any;
      }
    }
  }
  uint32_t deepest = 0;  // In the approximate chain, whose blocks the fork tracking records.
  for (const auto& c : d.candidates) deepest = std::max(deepest, c.cached_any_blocks);
  if (policy.UsesPrefixCache() && precise_ != nullptr && !plan.tokens.empty()) {
    MatchPrecise(plan, now, workers, d);
    MatchStores(plan, workers, d);
  }

  const ParsedRequest& req = *plan.request;
  RouteRequest r;
  r.endpoint = plan.endpoint;
  r.model = req.model();
  r.session_key = req.session_key;
  r.body = req.body;
  r.attempt = attempt;
  r.chain = plan.chain;
  r.prompt_tokens = plan.prompt_tokens;
  r.block_tokens = config.block_tokens;
  r.store_tokens_per_second = store_rate_.TokensPerSecond(config.kvaware.store_tokens_per_second);
  r.now = now;
  const uint64_t chain_key = plan.chain.empty() ? 0 : plan.chain.back();
  {
    common::MutexLock lock(&decision_mu_);
    r.match_is_shared_prefix = deepest > 0 && SeenFork(plan.chain[deepest - 1]);
    if (commit && deepest > 0 && deepest < plan.chain.size()) {
      RecordContinuation(plan.chain[deepest - 1], plan.chain[deepest]);
    }
    for (size_t i = 0; i < workers.size(); ++i) {
      d.candidates[i].load = workers[i]->load();
      d.candidates[i].prefill_busy_s = workers[i]->PrefillBusySeconds(now);
    }
    // Explain sees the tie seed the next real decision will use.
    const uint64_t epoch = commit ? epoch_.fetch_add(1) : epoch_.load();
    r.tie_seed = policy_util::Mix(epoch ^ policy_util::Mix(chain_key)) ^
                 policy_util::Mix(std::hash<std::string_view>()(r.session_key));
    d.index = policy.Choose(r, d.candidates, commit ? nullptr : &d.scores);
    // A policy that returns an index out of range is a bug: fall back to the first candidate.
    KVGATE_BUG(d.index < d.candidates.size(), "routing policy chose no candidate");
    if (d.index >= d.candidates.size()) d.index = 0;
    d.worker = workers[d.index];
    d.predicted_ttft = policy.Predict(r, d.candidates, d.index);
    const Candidate& chosen = d.candidates[d.index];
    d.dp_rank = chosen.dp_rank;
    d.predicted_cached_tokens = std::min<int64_t>(
        static_cast<int64_t>(chosen.cached_blocks[0]) * config.block_tokens, r.prompt_tokens);
    const int64_t local = std::max(chosen.cached_blocks[0], chosen.cached_blocks[1]);
    d.predicted_store_tokens = std::clamp<int64_t>(
        (static_cast<int64_t>(chosen.cached_blocks[2]) - local) * config.block_tokens, 0,
        r.prompt_tokens - d.predicted_cached_tokens);
    const double prefill_rate =
        chosen.prefill_rate > 0 ? chosen.prefill_rate : config.kvaware.prefill_tokens_per_second;
    // What is still ahead of it: the queue less what the engine did of its first prefill.
    d.queue_tokens_at_dispatch = TokensAhead(chosen.load, chosen.prefill_busy_s, prefill_rate);
    if (commit) {
      // Loading from a store keeps the engine busy for a fraction of the recompute time: the
      // loaded tokens are reserved as that many prefill tokens, so that the queue the next
      // decisions see is the engine's time, not its token count.
      const double load_share = std::min(1.0, prefill_rate / r.store_tokens_per_second);
      // The queue is reserved in token-equivalents (PrefillWork): a long context's tokens keep
      // the engine longer.
      const double reused =
          static_cast<double>(d.predicted_cached_tokens + d.predicted_store_tokens);
      const int64_t uncached = std::llround(
          PrefillWork(r.prompt_tokens - reused, reused, config.kvaware.prefill_context_factor) +
          static_cast<double>(d.predicted_store_tokens) * load_share);
      const int64_t blocks = (r.prompt_tokens + config.block_tokens - 1) / config.block_tokens;
      // A request that prefills nothing (count_tokens) holds only its place in flight.
      d.worker->Reserve(d.reservation, plan.learn ? uncached : 0, plan.learn ? blocks : 0,
                        plan.chain);
      cluster().LoadChanged();
    }
  }
  if (!commit) return d;
  plan.tried.push_back(d.worker->id());
  if (plan.learn) d.worker->AddRecentWork(r.prompt_tokens, now, half_life_s);
  d.learn_pending = plan.learn;
  if (!plan.learn_when_sent) Learn(plan, d, now);
  return d;
}

void RoutePlanner::Learn(RoutePlan& plan, Decision& d, SteadyClock::time_point now) {
  if (!d.learn_pending) return;
  d.learn_pending = false;
  const config::RoutingConfig& config = *plan.config;
  const bool prefix = plan.policy->UsesPrefixCache() && !plan.chain.empty();
  if (prefix) {
    // Approximate learning: the worker will hold this prompt once it has prefilled it. Learned
    // before the answer, so that the session's next request (a sub-agent burst) already sees
    // it; taken back by Complete when the worker does not serve it.
    if (auto s = index_.Insert(HolderOf(*d.worker), plan.chain, kvindex::Tier::kGpu); !s.ok()) {
      IndexError(s, *d.worker);
    } else {
      d.learned = true;
      d.learned_from = d.candidates[d.index].cached_blocks[static_cast<int>(kvindex::Tier::kGpu)];
      groups_.Learn(HolderOf(*d.worker), plan.chain, config.block_tokens,
                    static_cast<uint32_t>(d.learned_from), ComputeStart(d));
    }
    cluster().Learned(*d.worker, plan.chain, plan.prompt_tokens);
  }
  if (d.candidates[d.index].precise) {
    // Until its BlockStored event arrives, the chosen rank is about to hold the prompt.
    const uint32_t bs = std::max<uint32_t>(1, d.worker->config().kv_events->block_size);
    const kvindex::Holder holder =
        PreciseMode::HolderOf(*d.worker, static_cast<uint32_t>(std::max(d.dp_rank, 0)));
    const uint64_t hit = GpuHitInEngineBlocks(d, config.block_tokens, bs);
    const uint64_t start = uint64_t{ComputeStart(d)} * config.block_tokens / bs;  // Loads too.
    const uint32_t mamba_chunk_blocks = MambaChunkTokens(d.worker->config()) / bs;
    for (const auto& [size, chain] : plan.token_chains) {
      if (size != bs) continue;
      const auto held = static_cast<uint32_t>(std::min<uint64_t>(hit, chain.size()));
      const auto from_block = static_cast<uint32_t>(std::min<uint64_t>(start, chain.size()));
      const auto groups =
          PendingGroups(precise_->groups(), holder, static_cast<uint32_t>(chain.size()), bs, held,
                        from_block, mamba_chunk_blocks);
      // Guesses start where the hit ends, or earlier where another group keeps a block before
      // it (a sliding window's, Mamba's starting state): the blocks below are the rank's by
      // its events or by an earlier guess, and lookups read guesses only past what events
      // confirm. A follow-up turn then guesses what it appended, not its whole history (~19K
      // map inserts for a 300K-token turn: 29% of Decide's samples in a precise hybrid run).
      uint32_t from = held;
      for (uint32_t i = 0; i < held && i < groups.size(); ++i) {
        if (groups[i] != 0) {
          from = i;
          break;
        }
      }
      // What the engine reads of its other groups below the hit becomes their most recently
      // used (none when the worker is not hybrid: `from` is then the hit).
      precise_->groups().Touch(
          holder, absl::MakeConstSpan(chain).subspan(from, held - from),
          absl::MakeConstSpan(groups).subspan(std::min<size_t>(from, groups.size()), held - from));
      precise_->speculative().Insert(
          holder, absl::MakeConstSpan(chain).subspan(from),
          now + std::chrono::milliseconds(config.precise.speculative_ttl_ms),
          absl::MakeConstSpan(groups).subspan(std::min<size_t>(from, groups.size())));
    }
  }
}

Prediction RoutePlanner::Complete(const RoutePlan& plan, Decision& d, const RouteOutcome& outcome) {
  Worker& w = *d.worker;
  const config::RoutingConfig& config = *plan.config;
  w.Release(d.reservation);
  cluster().LoadChanged();
  const bool served = outcome.success && !outcome.error_answer;
  if (d.learned && !served && d.learned_from < plan.chain.size()) {
    // The worker did not compute the prompt (an error, a reset, a failed prefill): the blocks
    // this decision taught the index are not in its cache. Blocks it held before stay.
    const auto unlearned = absl::MakeConstSpan(plan.chain).subspan(d.learned_from);
    index_.Remove(HolderOf(w), unlearned, kvindex::Tier::kGpu);
    groups_.Unlearn(HolderOf(w), unlearned);
    cluster().Forgot(w, unlearned);
    d.learned = false;
  }
  // A decision whose request was never written taught nothing (Learn did not run).
  const bool taught = plan.learn && !d.learn_pending;
  d.learn_pending = false;
  if (!served && d.candidates[d.index].precise && taught) {
    // Likewise the guess that the chosen rank is about to hold the prompt: the blocks it
    // matched at decision time stay (an earlier request's guesses, or its events').
    const uint32_t bs = std::max<uint32_t>(1, w.config().kv_events->block_size);
    const size_t from = GpuHitInEngineBlocks(d, config.block_tokens, bs);
    for (const auto& [size, chain] : plan.token_chains) {
      if (size != bs || from >= chain.size()) continue;
      precise_->speculative().Remove(
          PreciseMode::HolderOf(w, static_cast<uint32_t>(std::max(d.dp_rank, 0))),
          absl::MakeConstSpan(chain).subspan(from));
    }
  }
  if (served && d.learned && !d.candidates[d.index].precise && outcome.cached_tokens >= 0 &&
      d.predicted_cached_tokens > outcome.cached_tokens) {
    // The index believed blocks [actual, predicted) were cached and the engine had lost them
    // (on a hybrid worker mostly a sliding window's). It computed them again for this prompt,
    // so it holds them now: the index keeps them (dropping them made the session's next turn
    // look uncached on the worker that had just computed it, and moved it). What the imitation
    // got wrong is the work: the groups churned from what was cached, not from the predicted hit.
    const auto actual = static_cast<uint32_t>(std::min<size_t>(
        plan.chain.size(), static_cast<size_t>(outcome.cached_tokens / config.block_tokens)));
    groups_.Learn(HolderOf(w), plan.chain, config.block_tokens, actual, actual);
    spdlog::debug("worker {}: predicted {} cached tokens, engine reported {}", w.name(),
                  d.predicted_cached_tokens, outcome.cached_tokens);
  }
  if (served && taught && outcome.output_tokens > 0 && !d.candidates[d.index].precise) {
    // The decode cached blocks no prompt names in a hybrid worker's other groups (a Mamba
    // checkpoint per block of output): approximate mode ages those groups by them.
    const int64_t prompt = outcome.prompt_tokens >= 0 ? outcome.prompt_tokens : plan.prompt_tokens;
    groups_.LearnOutput(HolderOf(w), static_cast<uint64_t>(prompt),
                        static_cast<uint64_t>(outcome.output_tokens), config.block_tokens);
  }
  if (outcome.success && outcome.ttft_seconds > 0) {
    // What the engine prefilled: the prompt less what it reported cached (GPU, host and store
    // alike), else what the decision predicted.
    double computed = static_cast<double>(d.reservation.prefill_tokens);
    double loaded = 0;  // from a store: cached beyond the local prediction, up to the store's
    if (outcome.cached_tokens >= 0) {
      const double cached = static_cast<double>(outcome.cached_tokens);
      computed = PrefillWork(std::max(0.0, static_cast<double>(plan.prompt_tokens) - cached),
                             cached, config.kvaware.prefill_context_factor);
      loaded = static_cast<double>(std::clamp<int64_t>(
          outcome.cached_tokens - d.predicted_cached_tokens, 0, d.predicted_store_tokens));
    }
    const double queued = static_cast<double>(d.queue_tokens_at_dispatch);
    const double configured = config.kvaware.store_tokens_per_second;
    if (loaded >= StoreLoadRate::kMinTokens) {
      // A TTFT with a store load teaches the store's rate beside the prefill line, never the
      // line itself: the line took in what the load rate missed as overhead, which then left
      // less to the load (a loop that fitted 100+ ms overheads, issue 30).
      const double prefill =
          w.PrefillSeconds(queued + computed, config.kvaware.prefill_tokens_per_second);
      store_rate_.Observe(loaded, outcome.ttft_seconds - prefill);
    } else {
      w.ObservePrefill(queued + computed,
                       outcome.ttft_seconds - loaded / store_rate_.TokensPerSecond(configured));
    }
  }
  Prediction p;
  if (outcome.success && outcome.ttft_seconds > 0 && d.predicted_ttft) {
    p.ttft_compared = true;
    p.predicted_ttft_s = d.predicted_ttft->total();
    p.actual_ttft_s = outcome.ttft_seconds;
  }
  if (!outcome.success || outcome.cached_tokens < 0 || !plan.policy->UsesPrefixCache() ||
      plan.chain.empty()) {
    return p;
  }
  p.compared = true;
  // The engine reports store-loaded tokens as cached, as vLLM does.
  p.predicted_tokens = d.predicted_cached_tokens + d.predicted_store_tokens;
  p.actual_tokens = outcome.cached_tokens;
  w.ObservePrediction(p.predicted_tokens, p.actual_tokens);
  return p;
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

void RoutePlanner::IndexError(const absl::Status& status, const Worker& worker) {
  const uint64_t n = index_errors_.fetch_add(1, std::memory_order_relaxed);
  // Loud but bounded: the first, then every 1000th.
  if (n % 1000 == 0) {
    spdlog::error("prefix index refused an update for worker {} ({} so far): {}", worker.name(),
                  n + 1, status.message());
  }
}

void RoutePlanner::SetCapacity(const Worker& worker, uint64_t tokens, uint32_t block_tokens) {
  if (auto s =
          index_.SetCapacity(HolderOf(worker), kvindex::Tier::kGpu,
                             std::max<uint64_t>(1, tokens / std::max<uint32_t>(1, block_tokens)));
      !s.ok()) {
    IndexError(s, worker);
  }
}

void RoutePlanner::SetGroups(const Worker& worker, absl::Span<const config::KvGroupConfig> groups,
                             uint32_t block_tokens) {
  std::vector<kvindex::ImitatedGroupSpec> specs;
  for (const auto& g : groups) {
    kvindex::ImitatedGroupSpec spec;
    if (!kvindex::ParseGroupKind(g.kind, &spec.spec.kind)) continue;  // refused by the loader
    spec.spec.sliding_window = g.sliding_window;
    spec.capacity_blocks = g.num_gpu_blocks;
    spec.chunk_blocks = g.chunk_tokens / std::max<uint32_t>(1, block_tokens);
    specs.push_back(spec);
  }
  groups_.Configure(HolderOf(worker), specs);
}

void RoutePlanner::RemoveWorker(const Worker& worker) {
  index_.RemoveHolder(HolderOf(worker));
  groups_.Forget(HolderOf(worker));
}

}  // namespace kvgate::router
