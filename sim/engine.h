// File: sim/engine.h
// One simulated vLLM engine (one data-parallel rank): a continuous-batching scheduler with
// chunked prefill over a KV cache of one or more groups (KvCoordinator), in simulated time. Pure
// and deterministic: no I/O, no clock; the caller supplies arrival times and runs Step() back to
// back, so the same request sequence gives the same outputs, events and timings. Thread-compatible.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "sim/block_pool.h"
#include "sim/external_cache.h"
#include "sim/kv_coordinator.h"
#include "sim/profile.h"

namespace kvgate::sim {

/// What the engine needs of one request.
struct EngineRequest {
  uint64_t id = 0;  // Unique per engine, chosen by the caller.
  std::vector<uint32_t> prompt;
  uint32_t max_tokens = 16;  // Output length (the simulator has no EOS: finish_reason "length").
  double arrival = 0;        // Simulated seconds.
  // P/D (sim/pd_agent.h). A prefill keeps its blocks once finished, until ReleaseHeld();
  // a decode starts with this many prompt tokens' KV received from its prefill (the last prompt
  // token is still computed, as vLLM does for connector-loaded prompts).
  bool hold = false;
  uint32_t remote_tokens = 0;
};

/// What one step produced for one request.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<uint32_t> new_tokens;
  bool finished = false;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;      // Prefix hit (GPU, host tier, store) at first scheduling.
  uint32_t external_tokens = 0;    // Of which loaded from the external store.
  uint32_t completion_tokens = 0;  // Total so far.
  double arrival = 0;
  double first_token_time = -1;  // Simulated; set once the first token exists.
  double first_scheduled_time = -1;
};

/// The result of one step.
struct StepResult {
  double start = 0;
  double duration = 0;  // Simulated seconds.
  uint32_t num_scheduled_tokens = 0;
  uint32_t num_prefill_tokens = 0;
  uint32_t num_decode_seqs = 0;
  std::vector<RequestOutput> outputs;  // Requests that got tokens this step.
  std::vector<KvEvent> events;         // KV events of this step, in order.
};

/// Cumulative counters, as vLLM's Prometheus metrics.
struct EngineCounters {
  uint64_t prefix_cache_queries = 0;  // Tokens.
  uint64_t prefix_cache_hits = 0;     // Tokens.
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t finished = 0;
  uint64_t steps = 0;
  uint64_t host_blocks_loaded = 0;
  // The external store, as vLLM's vllm:external_prefix_cache_{queries,hits} (tokens).
  uint64_t external_prefix_cache_queries = 0;
  uint64_t external_prefix_cache_hits = 0;
  // Store lookups asked (each admission attempt asks again) and the blocks they named.
  uint64_t store_lookups = 0;
  uint64_t store_lookup_blocks = 0;
  // What the responses' usage reports, summed (first scheduling of each request only; the
  // vLLM counters above count a preempted request again when it is rescheduled).
  uint64_t usage_cached_tokens = 0;
  uint64_t usage_store_tokens = 0;     // Of those, loaded from the store.
  uint64_t remote_prefill_tokens = 0;  // Of usage_cached_tokens, received from a P/D prefill.
};

class Engine {
 public:
  Engine(const Profile& profile, std::string model, uint64_t seed);

  /// Connects an external KV store (not owned; outlives the engine). nullptr: none.
  void SetExternalCache(ExternalKvCache* cache) { external_ = cache; }

  /// Queues a request. It is scheduled no earlier than the next Step().
  void AddRequest(EngineRequest request);
  /// Drops a request (client went away); its blocks are freed, held ones too.
  void Abort(uint64_t id);
  /// Frees the blocks a finished `hold` request kept (no-op when it holds none).
  void ReleaseHeld(uint64_t id);
  /// The full-attention blocks a finished `hold` request keeps, or nullptr.
  const std::vector<int32_t>* HeldBlocks(uint64_t id) const;
  /// Blocks kept by finished `hold` requests (every group's).
  uint64_t num_held_blocks() const { return num_held_blocks_; }
  /// True while some request is waiting or running.
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

  /// Schedules and runs one step starting at simulated time `now`; the outputs and events
  /// belong to its end, `now + duration`. Call only when HasWork(). Store loads are synchronous
  /// (ExternalKvCache::Load).
  StepResult Step(double now);

  /// Step() in parts, for a caller that moves the store's bytes on another thread: BeginStep()
  /// schedules until an admission needs blocks from the external store and returns them in
  /// `load`; the caller loads them and calls ResumeStep(how many leading ones arrived), until
  /// `load` comes back empty with the step's `result`. Same schedule and timings as Step().
  /// Between the parts the engine is mid-step (InStep()): call nothing else that changes it
  /// (AddRequest, Abort, ReleaseHeld, ResetPrefixCache); `load` stays valid until ResumeStep().
  struct StepProgress {
    absl::Span<const uint64_t> load;
    StepResult result;
  };
  StepProgress BeginStep(double now);
  StepProgress ResumeStep(size_t loaded);
  bool InStep() const { return step_ != nullptr; }

  /// Forgets the prefix cache (POST /reset_prefix_cache); events go to the next step's batch
  /// or to TakeEvents().
  void ResetPrefixCache();
  /// Events produced outside Step() (ResetPrefixCache).
  std::vector<KvEvent> TakeEvents();

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  const EngineCounters& counters() const { return counters_; }
  /// The full-attention group's pool (the only one without hybrid groups).
  const BlockPool& pool() const { return kv_.pool(0); }
  const KvCoordinator& kv_cache() const { return kv_; }
  const Profile& profile() const { return profile_; }

 private:
  struct Seq {
    EngineRequest req;
    std::vector<uint32_t> tokens;  // Prompt, then output.
    std::vector<uint64_t> hashes;  // Chained hashes of the full blocks of `tokens`.
    RequestKv kv;                  // Its blocks, per group.
    uint32_t num_computed = 0;
    uint32_t num_output = 0;
    uint64_t prompt_hash = 0;
    bool scheduled_once = false;
    uint32_t cached_tokens = 0;
    uint32_t external_tokens = 0;
    uint32_t num_saved_blocks = 0;  // Leading blocks the store has or was sent.
    double first_token_time = -1;
    double first_scheduled_time = -1;
  };
  using SeqPtr = std::unique_ptr<Seq>;

  struct Scheduled {
    Seq* seq;
    uint32_t n;
    uint32_t ctx_before;
  };
  // A step between BeginStep() and its result: what is scheduled so far, and the admission of
  // waiting_.front() while its store load is out.
  struct StepInProgress {
    double now = 0;
    StepResult result;
    std::vector<Scheduled> scheduled;
    uint32_t budget = 0;
    uint32_t loaded_blocks = 0;  // From the host tier.
    uint64_t external_loaded_tokens = 0;
    bool preempted = false;
    absl::Span<const uint64_t> hs;  // The front's hashes that may hit.
    CacheHit hit;
    size_t ext_hit = 0;
    uint32_t remote = 0;
    uint32_t computed = 0;  // The front's plan: tokens counted computed, and its chunk.
    uint32_t n = 0;
  };

  StepProgress Admit();
  /// Plans the front's first chunk for a store hit of `ext_hit` blocks; false when no group has
  /// room for it (admission stops for this step).
  bool PlanAdmission(size_t ext_hit);
  void AdmitFront();
  StepProgress Finish();
  void UpdateHashes(Seq& seq);
  void Preempt(Seq& seq);
  /// The tokens of a chunk of up to `n` from seq's num_computed (or `computed`) that may run:
  /// `n`, or block-aligned for a Mamba model (MambaAlignedChunk); 0: none this step.
  uint32_t ChunkTokens(const Seq& seq, uint32_t computed, uint32_t n) const;

  const Profile profile_;
  const std::string model_;
  const uint64_t seed_;
  const uint64_t root_hash_;
  std::vector<KvEvent> events_;
  ExternalKvCache* external_ = nullptr;
  KvCoordinator kv_;
  std::vector<SeqPtr> running_;  // Admission order.
  std::deque<SeqPtr> waiting_;
  EngineCounters counters_;
  absl::flat_hash_map<uint64_t, RequestKv> held_;  // Finished `hold` requests.
  uint64_t num_held_blocks_ = 0;
  std::unique_ptr<StepInProgress> step_;  // Null between steps.
};

}  // namespace kvgate::sim
