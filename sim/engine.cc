#include "sim/engine.h"

#include <algorithm>
#include <optional>

#include "sim/kv_groups.h"
#include "sim/tokens.h"

namespace kvgate::sim {

Engine::Engine(const Profile& profile, std::string model, uint64_t seed)
    : profile_(profile),
      model_(std::move(model)),
      seed_(seed),
      root_hash_(RootBlockHash(model_)),
      kv_(profile, &events_) {}

uint32_t Engine::ChunkTokens(const Seq& seq, uint32_t computed, uint32_t n) const {
  if (!kv_.has_mamba()) return n;
  return MambaAlignedChunk(computed, n, static_cast<uint32_t>(seq.tokens.size()),
                           static_cast<uint32_t>(seq.req.prompt.size()), profile_.block_size);
}

void Engine::AddRequest(EngineRequest request) {
  auto seq = std::make_unique<Seq>();
  seq->tokens = request.prompt;
  seq->prompt_hash = PromptHash(seq->tokens);
  seq->req = std::move(request);
  seq->req.max_tokens = std::max<uint32_t>(1, seq->req.max_tokens);
  waiting_.push_back(std::move(seq));
}

void Engine::Abort(uint64_t id) {
  ReleaseHeld(id);
  auto match = [id](const SeqPtr& s) { return s->req.id == id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    kv_.Free(&(*it)->kv);
    running_.erase(it);
    return;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
    kv_.Free(&(*it)->kv);
    waiting_.erase(it);
  }
}

void Engine::ReleaseHeld(uint64_t id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  num_held_blocks_ -= kv_.NumBlocks(it->second);
  kv_.Free(&it->second);
  held_.erase(it);
}

const std::vector<int32_t>* Engine::HeldBlocks(uint64_t id) const {
  auto it = held_.find(id);
  return it == held_.end() || it->second.groups.empty() ? nullptr : &it->second.groups[0].ids;
}

void Engine::UpdateHashes(Seq& seq) {
  const uint64_t parent = seq.hashes.empty() ? root_hash_ : seq.hashes.back();
  AppendBlockHashes(parent, seq.tokens, profile_.block_size, seq.hashes.size(), &seq.hashes);
}

void Engine::Preempt(Seq& seq) {
  // Preemption by recompute, as vLLM V1: the blocks go back to the pool (cached ones stay
  // hittable until evicted) and the request restarts from its prefix-cache hit.
  kv_.Free(&seq.kv);
  seq.num_computed = 0;
  ++counters_.preemptions;
}

void Engine::ResetPrefixCache() { kv_.ResetPrefixCache(); }

std::vector<KvEvent> Engine::TakeEvents() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

StepResult Engine::Step(double now) {
  StepProgress p = BeginStep(now);
  while (!p.load.empty()) p = ResumeStep(external_->Load(p.load));
  return std::move(p.result);
}

Engine::StepProgress Engine::BeginStep(double now) {
  step_ = std::make_unique<StepInProgress>();
  StepInProgress& st = *step_;
  st.result.start = now;
  st.now = now;
  st.budget = profile_.max_num_batched_tokens;
  uint32_t& budget = st.budget;
  auto& scheduled = st.scheduled;

  // 1. Running requests first, in admission order; make room by preempting the newest.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq& s = *running_[i];
    const uint32_t n = ChunkTokens(
        s, s.num_computed,
        std::min<uint32_t>(static_cast<uint32_t>(s.tokens.size()) - s.num_computed, budget));
    if (n == 0) {  // A Mamba model's aligned chunk does not fit the budget left.
      ++i;
      continue;
    }
    kv_.RemoveSkipped(&s.kv, s.num_computed);
    bool self_preempted = false;
    while (!kv_.CanGrow(s.kv, s.num_computed, n)) {
      st.preempted = true;
      if (running_.size() - 1 > i) {
        Preempt(*running_.back());
        waiting_.push_front(std::move(running_.back()));
        running_.pop_back();
      } else {
        Preempt(s);
        waiting_.push_front(std::move(running_[i]));
        running_.erase(running_.begin() + static_cast<ptrdiff_t>(i));
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    kv_.Grow(&s.kv, s.num_computed, n);
    scheduled.push_back({&s, n, s.num_computed});
    budget -= n;
    ++i;
  }
  return Admit();
}

bool Engine::PlanAdmission(size_t ext_hit) {
  StepInProgress& st = *step_;
  Seq& s = *waiting_.front();
  const uint32_t bs = profile_.block_size;
  st.computed = std::max(static_cast<uint32_t>((st.hit.blocks + ext_hit) * bs), st.remote);
  st.n = ChunkTokens(
      s, st.computed,
      std::min<uint32_t>(static_cast<uint32_t>(s.tokens.size()) - st.computed, st.budget));
  return st.n > 0 && kv_.CanAdmit(st.hit, st.hs, st.computed, st.n);
}

Engine::StepProgress Engine::ResumeStep(size_t loaded) {
  StepInProgress& st = *step_;
  if (loaded < st.ext_hit) {  // A failed load: recompute what did not arrive.
    st.ext_hit = loaded;
    if (!PlanAdmission(st.ext_hit)) return Finish();
  }
  AdmitFront();
  return Admit();
}

// 2. Admit waiting requests (not in a step that had to preempt), with prefix-cache hits.
Engine::StepProgress Engine::Admit() {
  StepInProgress& st = *step_;
  const uint32_t bs = profile_.block_size;
  while (!st.preempted && !waiting_.empty() && running_.size() < profile_.max_num_seqs &&
         st.budget > 0) {
    Seq& s = *waiting_.front();
    UpdateHashes(s);
    // As vLLM, at least the last token is always computed, so a block-aligned prompt hits at
    // most all blocks but its last.
    const size_t max_hit_blocks = (s.tokens.size() - 1) / bs;
    st.hs = absl::MakeConstSpan(s.hashes).first(std::min(s.hashes.size(), max_hit_blocks));
    // The local hit: the leading blocks every group serves (GPU, then the host tier).
    st.hit = kv_.FindHit(st.hs);
    const size_t local_hit = st.hit.blocks;
    // Then the external store, for the blocks after the local hit (where vLLM asks its
    // connector's get_num_new_matched_tokens). Loaded blocks get fresh GPU blocks.
    // A P/D decode's prompt KV came from its prefill: it counts as computed, like a store hit,
    // but needs no lookup (first scheduling only; after a preemption the local cache serves).
    st.remote = s.scheduled_once ? 0
                                 : std::min<uint32_t>(s.req.remote_tokens,
                                                      static_cast<uint32_t>(s.tokens.size()) - 1);
    st.ext_hit = 0;
    if (external_ != nullptr && st.remote == 0 && local_hit < st.hs.size()) {
      st.ext_hit = external_->Lookup(st.hs.subspan(local_hit));
      ++counters_.store_lookups;
      counters_.store_lookup_blocks += st.hs.size() - local_hit;
    }
    if (!PlanAdmission(st.ext_hit)) break;
    // The caller loads the store's blocks (Step() here, or its own thread), then ResumeStep().
    if (st.ext_hit > 0) return {st.hs.subspan(local_hit, st.ext_hit), {}};
    AdmitFront();
  }
  return Finish();
}

void Engine::AdmitFront() {
  StepInProgress& st = *step_;
  Seq& s = *waiting_.front();
  const uint32_t bs = profile_.block_size;
  const size_t local_hit = st.hit.blocks;
  const uint32_t computed = st.computed, n = st.n;
  // Store-loaded blocks are registered (and announced) like computed ones, in step 4.
  kv_.Admit(&s.kv, st.hit, st.hs, computed, n);
  if (st.hit.host > 0) {
    st.loaded_blocks += static_cast<uint32_t>(st.hit.host);
    counters_.host_blocks_loaded += st.hit.host;
  }
  s.num_computed = computed;
  s.num_saved_blocks = static_cast<uint32_t>(local_hit + st.ext_hit);
  const uint32_t local_tokens = static_cast<uint32_t>(local_hit * bs);
  const uint32_t ext_tokens = st.remote > 0 ? 0 : computed - local_tokens;
  st.external_loaded_tokens += ext_tokens;
  counters_.prefix_cache_queries += s.tokens.size();
  counters_.prefix_cache_hits += local_tokens;
  if (external_ != nullptr) {
    counters_.external_prefix_cache_queries += s.tokens.size() - local_tokens;
    counters_.external_prefix_cache_hits += ext_tokens;
  }
  if (!s.scheduled_once) {
    s.scheduled_once = true;
    s.cached_tokens = computed;
    s.external_tokens = ext_tokens;
    counters_.usage_cached_tokens += computed;
    counters_.usage_store_tokens += ext_tokens;
    counters_.remote_prefill_tokens += computed - local_tokens - ext_tokens;
    s.first_scheduled_time = st.now;
    counters_.prompt_tokens += s.req.prompt.size();
  }
  running_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  st.scheduled.push_back({&s, n, computed});
  st.budget -= n;
}

Engine::StepProgress Engine::Finish() {
  StepInProgress st = std::move(*step_);
  step_.reset();
  const uint32_t bs = profile_.block_size;
  StepResult& result = st.result;
  const double now = st.now;
  const auto& scheduled = st.scheduled;
  const uint32_t loaded_blocks = st.loaded_blocks;
  const uint64_t external_loaded_tokens = st.external_loaded_tokens;

  // 3. Step time from the profile.
  double d = profile_.step_fixed_s;
  for (const auto& sc : scheduled) {
    const Seq& s = *sc.seq;
    const bool decode = sc.n == 1 && s.num_output > 0 && sc.ctx_before + 1 == s.tokens.size();
    if (decode) {
      d += profile_.decode_per_seq_s + profile_.decode_per_kv_token_s * sc.ctx_before;
      ++result.num_decode_seqs;
    } else {
      d += sc.n * (profile_.prefill_per_token_s +
                   profile_.prefill_per_token_ctx_s * (sc.ctx_before + sc.n / 2.0));
      result.num_prefill_tokens += sc.n;
    }
    result.num_scheduled_tokens += sc.n;
  }
  d += loaded_blocks * profile_.cpu_load_per_block_s;
  // The real KV's transfer time from the store (the bytes moved here are a scaled-down stand-in).
  d += static_cast<double>(external_loaded_tokens) *
       static_cast<double>(profile_.kv_bytes_per_token) / profile_.store_bandwidth_bytes_per_s;
  result.duration = d;
  const double end = now + d;

  // 4. Apply: cache newly full blocks, sample, finish.
  bool any_finished = false;
  for (const auto& sc : scheduled) {
    Seq& s = *sc.seq;
    s.num_computed += sc.n;
    UpdateHashes(s);
    const uint32_t full = s.num_computed / bs;
    kv_.Cache(&s.kv, s.hashes, s.tokens, s.num_computed);
    if (external_ != nullptr && full > s.num_saved_blocks) {
      // Newly computed blocks go to the store after the step (vLLM's save_kv_layer).
      const uint32_t from = s.num_saved_blocks;
      external_->Save(absl::MakeConstSpan(s.hashes).subspan(from, full - from),
                      from > 0 ? std::optional<uint64_t>(s.hashes[from - 1]) : std::nullopt,
                      absl::MakeConstSpan(s.tokens).subspan(from * bs, (full - from) * bs));
      s.num_saved_blocks = full;
    }
    if (s.num_computed < s.tokens.size()) continue;  // Prefill chunk, no token yet.
    const uint32_t tok = OutputToken(seed_, s.prompt_hash, s.num_output);
    s.tokens.push_back(tok);
    ++s.num_output;
    ++counters_.generation_tokens;
    if (s.first_token_time < 0) s.first_token_time = end;
    RequestOutput out;
    out.id = s.req.id;
    out.new_tokens.push_back(tok);
    out.prompt_tokens = static_cast<uint32_t>(s.req.prompt.size());
    out.cached_tokens = s.cached_tokens;
    out.external_tokens = s.external_tokens;
    out.completion_tokens = s.num_output;
    out.arrival = s.req.arrival;
    out.first_token_time = s.first_token_time;
    out.first_scheduled_time = s.first_scheduled_time;
    if (s.num_output >= s.req.max_tokens) {
      out.finished = true;
      any_finished = true;
      if (s.req.hold) {  // A P/D prefill: its KV waits for the decode to pull it.
        num_held_blocks_ += kv_.NumBlocks(s.kv);
        held_[s.req.id] = std::move(s.kv);
      } else {
        kv_.Free(&s.kv);
      }
      s.kv.groups.clear();
      ++counters_.finished;
    }
    result.outputs.push_back(std::move(out));
  }
  if (any_finished) {
    std::erase_if(running_, [](const SeqPtr& s) { return s->num_output >= s->req.max_tokens; });
  }
  ++counters_.steps;
  result.events = TakeEvents();
  return {{}, std::move(result)};
}

}  // namespace kvgate::sim
