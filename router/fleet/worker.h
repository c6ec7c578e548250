// File: router/fleet/worker.h
// Runtime state of one inference worker (a vLLM/SGLang server): health, circuit breaker, load,
// learned prefill rate, counters and the models it serves. Metrics read these values when
// /metrics is scraped, so the request path never calls into Prometheus. Thread-safe: gateway
// threads, the health checker and reloads touch it through atomics and two small locks: mu_,
// taken alone, and kv_mu_, taken alone or (Reserve) under the planner's decision lock, never
// the reverse. Owned by shared_ptr from snapshots, so a request that picked a worker keeps it
// alive across a reload that removes it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "config/config.h"
#include "router/fleet/endpoint_state.h"
#include "router/fleet/inflight_kv.h"
#include "router/fleet/prefill_model.h"
#include "router/policies/engine_stats.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router {

/// Whether routing may trust a worker's KV events (precise mode, docs/precise-mode.md).
enum class PreciseState : uint8_t {
  kOff = 0,         // no kv_events configured: approximate mode
  kPending = 1,     // events configured; waiting to probe (start, reconnect, engine restart)
  kProbing = 2,     // a probe request is out; approximate mode meanwhile
  kVerified = 3,    // the probe's blocks came back in the events: precise mode
  kUnverified = 4,  // the probe failed or the events went silent: approximate mode
};
const char* PreciseStateName(PreciseState state);

/// The agents' APIs precise mode proves apart from completions: an engine may convert one of
/// them differently from kvgate (its own Anthropic or Responses layer), and then only that API
/// routes approximately on it.
enum class PreciseApi : uint8_t { kMessages = 0, kResponses = 1 };
inline constexpr int kNumPreciseApis = 2;
const char* PreciseApiName(PreciseApi api);

/// What one routing decision reserved on a worker; released in two steps.
struct Reservation {
  int64_t prefill_tokens = 0;
  int64_t kv_blocks = 0;
  InFlightKv::Held kv_held;  // its blocks among the worker's in-flight KV
  bool prefill_released = false;
  bool released = true;  // nothing reserved until Worker::Reserve
};

class Worker {
 public:
  /// `id` is stable for the worker's URL across reloads (it names the worker in kvindex).
  explicit Worker(config::WorkerConfig config, uint32_t id = 0);

  const config::WorkerConfig& config() const { return config_; }
  /// The canonical URL ("http://host:port"): label, log field and X-Kvgate-Worker value.
  const std::string& name() const { return name_; }
  const std::string& authority() const { return authority_; }
  WorkerIdentity identity() const { return {id_, name_, config_.weight}; }

  /// True when the worker may receive new traffic: actively healthy, not draining, ready by
  /// its discovery source and its breaker is not open.
  bool IsAvailable(SteadyClock::time_point now) const;
  bool healthy() const { return healthy_.load(std::memory_order_relaxed); }

  /// A draining worker gets no new requests and keeps its in-flight ones (POST /admin/drain).
  void SetDraining(bool draining) { draining_.store(draining, std::memory_order_relaxed); }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }

  /// What discovery says of the worker (always ready for a listed one). Not ready or
  /// terminating: no new requests, in-flight ones finish, the index keeps what it learned.
  void SetDiscoveryState(EndpointState s) { discovery_state_.store(s, std::memory_order_relaxed); }
  EndpointState discovery_state() const { return discovery_state_.load(std::memory_order_relaxed); }

  /// Feeds one active health-check result; ejects after `unhealthy_threshold` failures in a row
  /// and readmits after `healthy_threshold` successes. @return true when health changed.
  bool RecordHealthCheck(bool ok, const config::HealthCheckConfig& cfg);
  /// A worker not yet checked (at start, or found by discovery): unknown, so no traffic, until
  /// a health check passes; its first passing check admits it at once.
  void MarkUnchecked() {
    unchecked_.store(true, std::memory_order_relaxed);
    healthy_.store(false, std::memory_order_relaxed);
  }
  /// A worker that replaces `old` (same URL, other settings) starts with its health.
  void InheritHealth(const Worker& old) {
    unchecked_.store(old.unchecked_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    healthy_.store(old.healthy(), std::memory_order_relaxed);
    probed_.store(old.probed(), std::memory_order_relaxed);
  }
  /// True once any health check of this worker finished.
  bool probed() const { return probed_.load(std::memory_order_relaxed); }

  /// Passive signal: a connection to the worker failed (refused, reset, timed out). Opens the
  /// breaker for `open_ms` after `consecutive_failures` in a row.
  void RecordConnectionFailure(SteadyClock::time_point now, const config::CircuitBreakerConfig& cb);
  /// Passive signal: the worker answered; closes the breaker.
  void RecordSuccess();
  bool BreakerOpen(SteadyClock::time_point now) const;

  uint32_t id() const { return id_; }

  PreciseState precise_state() const { return precise_state_.load(std::memory_order_acquire); }
  void set_precise_state(PreciseState s) { precise_state_.store(s, std::memory_order_release); }
  /// False once `api`'s probe disagreed (until a probe of it agrees): its requests route
  /// approximately on this worker while the other APIs stay precise.
  bool precise_api_agrees(PreciseApi api) const {
    return (precise_api_off_.load(std::memory_order_acquire) & (1u << static_cast<int>(api))) == 0;
  }
  void set_precise_api_agrees(PreciseApi api, bool agrees) {
    const uint8_t bit = static_cast<uint8_t>(1u << static_cast<int>(api));
    if (agrees) {
      precise_api_off_.fetch_and(static_cast<uint8_t>(~bit), std::memory_order_acq_rel);
    } else {
      precise_api_off_.fetch_or(bit, std::memory_order_acq_rel);
    }
  }
  /// Requests routed here so far (the silence check: serving, yet no events).
  uint64_t routed() const { return routed_.load(std::memory_order_relaxed); }

  /// Requests the gateway currently has outstanding on this worker.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

  /// Counters exported as kvgate_upstream_connect_errors_total / _timeouts_total.
  uint64_t connect_errors() const { return connect_errors_.load(std::memory_order_relaxed); }
  uint64_t timeouts() const { return timeouts_.load(std::memory_order_relaxed); }
  void RecordTimeout() { timeouts_.fetch_add(1, std::memory_order_relaxed); }

  /// Moving average of min(predicted, actual) / max(predicted, actual) cached tokens.
  double prediction_accuracy() const { return accuracy_.load(std::memory_order_relaxed); }
  void ObservePrediction(int64_t predicted, int64_t actual);

  /// What routing weighs: this replica's reservations plus the other replicas' (cluster sync).
  LoadSnapshot load() const;
  /// This replica's reservations only (what it tells the others).
  LoadSnapshot local_load() const;
  /// The other replicas' reservations on this worker, summed (router/cluster/).
  void SetRemoteLoad(const LoadSnapshot& remote);
  /// Reserves one request's load: in-flight, pending prefill, decode slot and KV blocks.
  /// `chain`, the prompt's block hashes when hashed: blocks it shares with the requests already
  /// in flight here count once (InFlightKv).
  void Reserve(Reservation& r, int64_t prefill_tokens, int64_t kv_blocks,
               absl::Span<const kvindex::BlockHash> chain = {});
  /// The first response byte arrived: the prefill is done.
  void ReleasePrefill(Reservation& r);
  /// How long (seconds, at `now`) the engine has been working on the first of the prefills
  /// this gateway has pending here: since the queue last started, or since the one before it
  /// answered. The engine runs them in order (its running requests take the step budget
  /// first), so that much of the queue is done: kvaware counts only the rest (issue 30: the
  /// whole queue over-predicted those requests' TTFT 1.6x). 0 when nothing is pending.
  double PrefillBusySeconds(SteadyClock::time_point now) const;
  /// The request ended (any way); releases whatever is still held. Idempotent.
  void Release(Reservation& r);

  /// Prefill throughput in token-equivalents/s learned from observed TTFTs (PrefillModel);
  /// `fallback` until observed.
  double PrefillRate(double fallback) const;
  /// Seconds every TTFT costs here beside its prefill work (PrefillModel); 0 until fitted.
  double PrefillOverhead() const;
  /// The learned TTFT of `work` token-equivalents; at `fallback_rate` until observed.
  double PrefillSeconds(double work, double fallback_rate) const;
  /// One observation: `work` (queue ahead plus this prompt's uncached tokens, weighted by
  /// context) took `seconds` to its first token.
  void ObservePrefill(double work, double seconds);

  /// Adds to the exponentially decayed prompt tokens recently routed here (half-life
  /// `half_life_s`): the work sessions bring back on their next turns (LearnedState reads it).
  void AddRecentWork(double tokens, SteadyClock::time_point now, double half_life_s);

  EngineStats engine_stats() const;
  void SetEngineStats(const EngineStats& stats);

  /// What a routing decision reads of the learned state, taken under one lock instead of four
  /// (a decision reads it for every candidate).
  struct Learned {
    EngineStats engine;
    double prefill_rate = 0;        // PrefillRate(0)
    double prefill_overhead_s = 0;  // PrefillOverhead()
    double recent_work = 0;         // decayed to `now` (AddRecentWork)
  };
  Learned LearnedState(SteadyClock::time_point now, double half_life_s) const;

  /// Models from config plus those the worker itself reports on /v1/models.
  void SetDiscoveredModels(std::vector<std::string> models);
  std::vector<std::string> Models() const;
  /// True when the worker serves `model`, or when it has no known models yet (it may).
  bool ServesModel(std::string_view model) const;

 private:
  const config::WorkerConfig config_;
  const std::string name_;
  const std::string authority_;

  std::atomic<bool> healthy_{true};  // with checks off, always; else see MarkUnchecked
  std::atomic<bool> unchecked_{false};
  std::atomic<bool> probed_{false};
  std::atomic<bool> draining_{false};
  std::atomic<EndpointState> discovery_state_{EndpointState::kReady};
  std::atomic<uint32_t> check_failures_{0};
  std::atomic<uint32_t> check_successes_{0};
  std::atomic<uint32_t> passive_failures_{0};
  std::atomic<int64_t> breaker_open_until_ns_{0};
  const uint32_t id_;
  std::atomic<PreciseState> precise_state_;
  std::atomic<uint8_t> precise_api_off_{0};  // bit per PreciseApi whose probe disagreed
  std::atomic<uint64_t> routed_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> pending_prefill_{0};
  std::atomic<int64_t> prefill_head_since_ns_{0};  // see PrefillBusySeconds
  std::atomic<int64_t> active_decode_{0};
  std::atomic<int64_t> active_blocks_{0};
  std::atomic<int64_t> remote_in_flight_{0};
  std::atomic<int64_t> remote_pending_prefill_{0};
  std::atomic<int64_t> remote_active_decode_{0};
  std::atomic<int64_t> remote_active_blocks_{0};
  std::atomic<uint64_t> connect_errors_{0};
  std::atomic<uint64_t> timeouts_{0};
  std::atomic<double> accuracy_{1.0};

  // common::Mutex rather than absl::Mutex: Debian's abseil is not TSan-instrumented.
  mutable common::Mutex mu_;
  // The in-flight requests' KV; its count is mirrored in active_blocks_ for lock-free reads.
  common::Mutex kv_mu_;
  InFlightKv inflight_kv_ ABSL_GUARDED_BY(kv_mu_);
  double DecayedRecentWork(SteadyClock::time_point now, double half_life_s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> discovered_models_ ABSL_GUARDED_BY(mu_);
  PrefillModel prefill_ ABSL_GUARDED_BY(mu_);
  double recent_work_ ABSL_GUARDED_BY(mu_) = 0;
  SteadyClock::time_point recent_at_ ABSL_GUARDED_BY(mu_){};
  EngineStats engine_ ABSL_GUARDED_BY(mu_);
};

using WorkerSharedPtr = std::shared_ptr<Worker>;

/// The published worker list (part of a gateway snapshot).
using WorkerList = std::vector<WorkerSharedPtr>;

}  // namespace kvgate::router
