// File: sim/engine_runner.h
// How kvgate-sim drives its engines in real time: the process's simulated clock, the
// hand-rendered Prometheus histograms, and EngineRunner, which steps one Engine on the io thread
// (each step ending on a timer at its simulated end; store loads on the store client's threads)
// and hands its KV events to the process's event thread. Included by worker_server.h, server.cc
// and pd_agent.h only (it brings Asio). Thread-compatible: io thread only.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "sim/cli.h"
#include "sim/engine.h"
#include "sim/kv_events.h"

namespace kvgate::sim {

namespace net = boost::asio;
using SteadyTime = std::chrono::steady_clock::time_point;

// Simulated time of the whole process: 0 at start, advancing 1/time_scale times real time.
class SimClock {
 public:
  SimClock(SteadyTime origin, double time_scale) : origin_(origin), scale_(time_scale) {}
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count() /
           scale_;
  }
  /// Real seconds a simulated second takes.
  double scale() const { return scale_; }
  SteadyTime RealAt(double sim) const {
    return origin_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(sim * scale_));
  }
  double RealElapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

 private:
  SteadyTime origin_;
  double scale_;
};

// A Prometheus histogram rendered by hand (buckets as vLLM's).
struct Histogram {
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void Observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (v <= bounds[i]) ++counts[i];
    }
    sum += v;
    ++count;
  }
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // Cumulative.
  double sum = 0;
  uint64_t count = 0;
};

inline const std::vector<double> kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
inline const std::vector<double> kLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// One HTTP request's view of its engine request; the runner fills it, the session reads it.
struct Pending {
  explicit Pending(net::any_io_executor ex) : wake(ex) {}
  std::vector<uint32_t> tokens;  // Output so far.
  bool finished = false;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t store_tokens = 0;  // Of cached_tokens, loaded from the store.
  // Arrival to first token by the engine's own clock, in real seconds at the time scale (the
  // client's TTFT less the hops and whatever this process's thread ran late); < 0 before it.
  double engine_ttft_s = -1;
  net::steady_timer wake;  // Cancelled whenever something changes.
};

// Drives one Engine on the io thread: one step at a time, each ending on a timer at its
// simulated end time. Its publisher is used on `events` only: as vLLM's ZmqEventPublisher
// encodes and sends on a thread of its own, a step's events (megabytes of msgpack for a
// 300K-token prefill, token ids included) never hold up the engines' shared io thread.
// Thread-compatible (io thread only).
class EngineRunner {
 public:
  EngineRunner(net::io_context& io, net::any_io_executor events, const SimOptions& o, uint32_t rank,
               const SimClock& clock, std::unique_ptr<KvEventPublisher> publisher)
      : rank_(rank),
        clock_(clock),
        engine_(o.profile, o.model, o.seed),
        events_(std::move(events)),
        publisher_(std::move(publisher)),
        timer_(io),
        ttft_(kTtftBuckets),
        e2e_(kLatencyBuckets),
        queue_(kLatencyBuckets) {}

  /// `arrived` >= 0: the request reached the server earlier (a P/D decode that first pulled its
  /// KV), so that its latencies count from then.
  void Submit(std::shared_ptr<Pending> pending, EngineRequest request, double arrived = -1) {
    const double now = clock_.Now();
    if (engine_.InStep()) {
      ++deferred_requests_;
      deferred_.push_back([this, now, arrived, pending = std::move(pending),
                           request = std::move(request)]() mutable {
        --deferred_requests_;
        Enqueue(now, std::move(pending), std::move(request), arrived);
      });
      return;
    }
    Enqueue(now, std::move(pending), std::move(request), arrived);
  }

  void Abort(uint64_t id) {
    Between([this, id] {
      if (pending_.erase(id) > 0) engine_.Abort(id);
    });
  }

  void ReleaseHeld(uint64_t id) {
    Between([this, id] { engine_.ReleaseHeld(id); });
  }

  void SetExternalCache(ExternalKvCache* cache) {
    external_ = cache;
    engine_.SetExternalCache(cache);
  }

  void ResetPrefixCache() {
    Between([this] {
      engine_.ResetPrefixCache();
      if (!stepping_) Publish(engine_.TakeEvents());
    });
  }

  size_t Load() const { return engine_.num_running() + engine_.num_waiting() + deferred_requests_; }
  const Engine& engine() const { return engine_; }
  KvEventPublisher* publisher() const { return publisher_.get(); }
  uint32_t rank() const { return rank_; }
  const Histogram& ttft() const { return ttft_; }
  const Histogram& e2e() const { return e2e_; }
  const Histogram& queue() const { return queue_; }
  double max_lag() const { return max_lag_; }
  double lag() const { return lag_; }
  double sim_now() const { return sim_now_; }

 private:
  // A request that arrives during a step is scheduled at its end; the clock of an idle engine
  // jumps to the present.
  void Enqueue(double now, std::shared_ptr<Pending> pending, EngineRequest request,
               double arrived) {
    const double arrival = stepping_ ? std::min(now, step_end_) : std::max(now, sim_now_);
    if (!stepping_) sim_now_ = arrival;
    request.arrival = arrived >= 0 ? std::min(arrival, arrived) : arrival;
    pending_[request.id] = std::move(pending);
    engine_.AddRequest(std::move(request));
    if (!stepping_) StartStep();
  }

  // Runs `op`, which changes the engine, now or, while a step waits for a store load, once the
  // step's result is known: in arrival order, as if it had come during the step's timer.
  template <typename Op>
  void Between(Op op) {
    if (engine_.InStep()) {
      deferred_.push_back(std::move(op));
    } else {
      op();
    }
  }

  void StartStep() {
    stepping_ = true;
    Continue(engine_.BeginStep(sim_now_));
  }

  // The store's bytes move on the client's threads: a load of 20K blocks takes tens of ms of
  // real time, which on this io thread would hold up every engine of the process (all ranks of
  // all workers), not only the one that loads. The step's simulated time is the same.
  void Continue(Engine::StepProgress p) {
    if (!p.load.empty()) {
      external_->LoadAsync(p.load, [this, ex = timer_.get_executor(),
                                    alive = std::weak_ptr<int>(alive_)](size_t loaded) {
        net::post(ex, [this, loaded, alive] {
          if (!alive.expired()) Continue(engine_.ResumeStep(loaded));
        });
      });
      return;
    }
    StepResult r = std::move(p.result);
    step_end_ = sim_now_ + r.duration;
    timer_.expires_at(clock_.RealAt(step_end_));
    timer_.async_wait([this, r = std::move(r)](const boost::system::error_code& ec) mutable {
      if (ec == net::error::operation_aborted) return;
      OnStepEnd(std::move(r));
    });
    std::vector<absl::AnyInvocable<void()>> ops;
    ops.swap(deferred_);
    for (auto& op : ops) op();
  }

  void Publish(std::vector<KvEvent> events) {
    if (!publisher_ || events.empty()) return;
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // Batches stay in order: one event thread, posts run in the order made.
    net::post(events_,
              [p = publisher_.get(), ts, events = std::move(events)] { p->Publish(ts, events); });
  }

  void OnStepEnd(StepResult r) {
    sim_now_ = step_end_;
    lag_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_.RealAt(step_end_))
            .count();
    max_lag_ = std::max(max_lag_, lag_);
    // Events first: a client that got its last token may look at the cache right away (sent
    // on the event thread, so usually before the answer's bytes; vLLM promises no order).
    Publish(std::move(r.events));
    for (RequestOutput& out : r.outputs) {
      auto it = pending_.find(out.id);
      const bool first_token = out.completion_tokens == 1 && out.first_token_time == step_end_;
      if (first_token) {
        ttft_.Observe(out.first_token_time - out.arrival);
        queue_.Observe(out.first_scheduled_time - out.arrival);
      }
      if (out.finished) e2e_.Observe(step_end_ - out.arrival);
      if (it == pending_.end()) continue;
      Pending& p = *it->second;
      if (first_token) p.engine_ttft_s = (out.first_token_time - out.arrival) * clock_.scale();
      p.tokens.insert(p.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
      p.prompt_tokens = out.prompt_tokens;
      p.cached_tokens = out.cached_tokens;
      p.store_tokens = out.external_tokens;
      p.finished = out.finished;
      p.wake.cancel();
      if (out.finished) pending_.erase(it);
    }
    stepping_ = false;
    if (engine_.HasWork()) {
      StartStep();
    } else if (publisher_) {
      net::post(events_, [p = publisher_.get()] { p->ServiceReplay(); });
    }
  }

  const uint32_t rank_;
  const SimClock& clock_;
  Engine engine_;
  net::any_io_executor events_;  // where publisher_ is used
  std::unique_ptr<KvEventPublisher> publisher_;
  net::steady_timer timer_;
  bool stepping_ = false;
  double sim_now_ = 0;
  double step_end_ = 0;
  double lag_ = 0;
  double max_lag_ = 0;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Pending>> pending_;
  ExternalKvCache* external_ = nullptr;
  std::vector<absl::AnyInvocable<void()>> deferred_;  // Arrived while a store load was out.
  size_t deferred_requests_ = 0;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // Expires with the runner.
  Histogram ttft_;
  Histogram e2e_;
  Histogram queue_;
};

}  // namespace kvgate::sim
