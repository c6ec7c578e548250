#include "router/fleet/worker.h"

#include <algorithm>
#include <cmath>

#include "common/mutex.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

int64_t ToNs(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

const char* PreciseStateName(PreciseState state) {
  switch (state) {
    case PreciseState::kOff:
      return "off";
    case PreciseState::kPending:
      return "pending";
    case PreciseState::kProbing:
      return "probing";
    case PreciseState::kVerified:
      return "verified";
    case PreciseState::kUnverified:
      return "unverified";
  }
  return "unknown";
}

const char* PreciseApiName(PreciseApi api) {
  return api == PreciseApi::kMessages ? "messages" : "responses";
}

Worker::Worker(config::WorkerConfig config, uint32_t id)
    : config_(std::move(config)),
      name_(config_.url.ToString()),
      authority_(config_.url.Authority()),
      id_(id),
      precise_state_(config_.kv_events ? PreciseState::kPending : PreciseState::kOff) {}

bool Worker::IsAvailable(SteadyClock::time_point now) const {
  return healthy() && !draining() && discovery_state() == EndpointState::kReady &&
         !BreakerOpen(now);
}

bool Worker::BreakerOpen(SteadyClock::time_point now) const {
  return ToNs(now) < breaker_open_until_ns_.load(std::memory_order_relaxed);
}

bool Worker::RecordHealthCheck(bool ok, const config::HealthCheckConfig& cfg) {
  bool changed = false;
  probed_.store(true, std::memory_order_relaxed);
  if (ok) {
    check_failures_.store(0, std::memory_order_relaxed);
    const uint32_t s = check_successes_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (unchecked_.exchange(false, std::memory_order_relaxed) && !healthy()) {
      healthy_.store(true, std::memory_order_relaxed);
      spdlog::info("worker {} admitted: its first health check passed", name_);
      return true;
    }
    if (!healthy() && s >= cfg.healthy_threshold) {
      healthy_.store(true, std::memory_order_relaxed);
      passive_failures_.store(0, std::memory_order_relaxed);
      breaker_open_until_ns_.store(0, std::memory_order_relaxed);
      changed = true;
      spdlog::info("worker {} readmitted after {} good health checks", name_, s);
    }
  } else {
    check_successes_.store(0, std::memory_order_relaxed);
    const uint32_t f = check_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (healthy() && f >= cfg.unhealthy_threshold) {
      healthy_.store(false, std::memory_order_relaxed);
      changed = true;
      spdlog::warn("worker {} ejected after {} failed health checks", name_, f);
    }
  }
  return changed;
}

void Worker::RecordConnectionFailure(SteadyClock::time_point now,
                                     const config::CircuitBreakerConfig& cb) {
  connect_errors_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t f = passive_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (f >= cb.consecutive_failures && !BreakerOpen(now)) {
    breaker_open_until_ns_.store(ToNs(now + std::chrono::milliseconds(cb.open_ms)),
                                 std::memory_order_relaxed);
    passive_failures_.store(0, std::memory_order_relaxed);
    spdlog::warn("worker {}: circuit breaker open for {} ms after {} connection failures", name_,
                 cb.open_ms, f);
  }
}

void Worker::RecordSuccess() { passive_failures_.store(0, std::memory_order_relaxed); }

void Worker::ObservePrediction(int64_t predicted, int64_t actual) {
  const double hi = static_cast<double>(std::max(predicted, actual));
  const double ratio = hi > 0 ? static_cast<double>(std::min(predicted, actual)) / hi : 1.0;
  // Racing threads may lose one another's update: an average of many, so that is harmless.
  accuracy_.store(0.9 * accuracy_.load(std::memory_order_relaxed) + 0.1 * ratio,
                  std::memory_order_relaxed);
}

void Worker::SetDiscoveredModels(std::vector<std::string> models) {
  std::sort(models.begin(), models.end());
  common::MutexLock lock(&mu_);
  discovered_models_ = std::move(models);
}

std::vector<std::string> Worker::Models() const {
  std::vector<std::string> out = config_.models;
  {
    common::MutexLock lock(&mu_);
    out.insert(out.end(), discovered_models_.begin(), discovered_models_.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Worker::ServesModel(std::string_view model) const {
  if (model.empty()) return true;
  for (const auto& m : config_.models) {
    if (m == model) return true;
  }
  common::MutexLock lock(&mu_);
  if (config_.models.empty() && discovered_models_.empty()) return true;
  return std::binary_search(discovered_models_.begin(), discovered_models_.end(), model);
}

LoadSnapshot Worker::local_load() const {
  LoadSnapshot s;
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.pending_prefill_tokens = pending_prefill_.load(std::memory_order_relaxed);
  s.active_decode = active_decode_.load(std::memory_order_relaxed);
  s.active_kv_blocks = active_blocks_.load(std::memory_order_relaxed);
  return s;
}

LoadSnapshot Worker::load() const {
  LoadSnapshot s = local_load();
  s.in_flight += remote_in_flight_.load(std::memory_order_relaxed);
  s.pending_prefill_tokens += remote_pending_prefill_.load(std::memory_order_relaxed);
  s.active_decode += remote_active_decode_.load(std::memory_order_relaxed);
  s.active_kv_blocks += remote_active_blocks_.load(std::memory_order_relaxed);
  return s;
}

void Worker::SetRemoteLoad(const LoadSnapshot& remote) {
  remote_in_flight_.store(remote.in_flight, std::memory_order_relaxed);
  remote_pending_prefill_.store(remote.pending_prefill_tokens, std::memory_order_relaxed);
  remote_active_decode_.store(remote.active_decode, std::memory_order_relaxed);
  remote_active_blocks_.store(remote.active_kv_blocks, std::memory_order_relaxed);
}

void Worker::Reserve(Reservation& r, int64_t prefill_tokens, int64_t kv_blocks,
                     absl::Span<const kvindex::BlockHash> chain) {
  r.prefill_tokens = prefill_tokens;
  r.kv_blocks = kv_blocks;
  if (kv_blocks > 0) {
    common::MutexLock lock(&kv_mu_);
    r.kv_held = inflight_kv_.Add(chain, kv_blocks);
    active_blocks_.store(inflight_kv_.blocks(), std::memory_order_relaxed);
  }
  r.prefill_released = false;
  r.released = false;
  routed_.fetch_add(1, std::memory_order_relaxed);
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  if (pending_prefill_.fetch_add(prefill_tokens, std::memory_order_relaxed) <= 0 &&
      prefill_tokens > 0) {
    prefill_head_since_ns_.store(SteadyClock::now().time_since_epoch().count(),
                                 std::memory_order_relaxed);
  }
  active_decode_.fetch_add(1, std::memory_order_relaxed);
}

void Worker::ReleasePrefill(Reservation& r) {
  if (r.released || r.prefill_released) return;
  r.prefill_released = true;
  if (pending_prefill_.fetch_sub(r.prefill_tokens, std::memory_order_relaxed) > r.prefill_tokens &&
      r.prefill_tokens > 0) {
    // The next one in line starts now.
    prefill_head_since_ns_.store(SteadyClock::now().time_since_epoch().count(),
                                 std::memory_order_relaxed);
  }
}

double Worker::PrefillBusySeconds(SteadyClock::time_point now) const {
  if (pending_prefill_.load(std::memory_order_relaxed) <= 0) return 0;
  const SteadyClock::time_point since{
      SteadyClock::duration(prefill_head_since_ns_.load(std::memory_order_relaxed))};
  return std::max(0.0, std::chrono::duration<double>(now - since).count());
}

void Worker::Release(Reservation& r) {
  if (r.released) return;
  ReleasePrefill(r);
  r.released = true;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  active_decode_.fetch_sub(1, std::memory_order_relaxed);
  if (r.kv_blocks > 0) {
    common::MutexLock lock(&kv_mu_);
    inflight_kv_.Remove(r.kv_held);
    active_blocks_.store(inflight_kv_.blocks(), std::memory_order_relaxed);
  }
  r.kv_held.keys.clear();  // a long prompt's keys are on the heap: give them back now
  r.kv_held.keys.shrink_to_fit();
  r.kv_held.unchained = 0;
}

double Worker::PrefillRate(double fallback) const {
  common::MutexLock lock(&mu_);
  return prefill_.rate() > 0 ? prefill_.rate() : fallback;
}

double Worker::PrefillOverhead() const {
  common::MutexLock lock(&mu_);
  return prefill_.overhead();
}

double Worker::PrefillSeconds(double work, double fallback_rate) const {
  common::MutexLock lock(&mu_);
  return prefill_.Seconds(work, fallback_rate);
}

void Worker::ObservePrefill(double work, double seconds) {
  common::MutexLock lock(&mu_);
  prefill_.Observe(work, seconds);
}

double Worker::DecayedRecentWork(SteadyClock::time_point now, double half_life_s) const {
  const double dt = std::chrono::duration<double>(now - recent_at_).count();
  return dt <= 0 ? recent_work_ : recent_work_ * std::exp2(-dt / half_life_s);
}

Worker::Learned Worker::LearnedState(SteadyClock::time_point now, double half_life_s) const {
  common::MutexLock lock(&mu_);
  Learned l;
  l.engine = engine_;
  l.prefill_rate = prefill_.rate();
  l.prefill_overhead_s = prefill_.overhead();
  l.recent_work = DecayedRecentWork(now, half_life_s);
  return l;
}

void Worker::AddRecentWork(double tokens, SteadyClock::time_point now, double half_life_s) {
  common::MutexLock lock(&mu_);
  recent_work_ = DecayedRecentWork(now, half_life_s) + tokens;
  if (now > recent_at_) recent_at_ = now;
}

EngineStats Worker::engine_stats() const {
  common::MutexLock lock(&mu_);
  return engine_;
}

void Worker::SetEngineStats(const EngineStats& stats) {
  common::MutexLock lock(&mu_);
  engine_ = stats;
}

}  // namespace kvgate::router
