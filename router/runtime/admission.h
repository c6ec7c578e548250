// File: router/runtime/admission.h
// Who gets in when, beyond authentication: per-key token buckets (requests and prompt tokens
// per minute, limits.rate and auth.api_keys[].rate) and the global cap on inference requests
// running at once, with a bounded FIFO queue in front of it (limits.max_concurrent_requests,
// queue_size, queue_timeout_ms). Shared by every gateway thread: thread-safe (one small lock
// each; taken alone).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "config/config.h"
#include "net/asio.h"
#include "router/policies/routing_policy.h"
#include "router/runtime/lru_table.h"

namespace kvgate::router {

/// Buckets per key (an API key's name, else a client address) in an LruTable: past
/// `max_keys` keys the least recently used bucket is dropped, O(1) per new key. A dropped
/// bucket starts full if its key comes back, which costs an attacker nothing it could not get
/// from a fresh address anyway.
class RateLimiter {
 public:
  static constexpr size_t kMaxKeys = 100'000;
  explicit RateLimiter(size_t max_keys = kMaxKeys) : buckets_(max_keys) {}

  struct Decision {
    bool allowed = true;
    double retry_after_seconds = 0;  // when refused: until the bucket holds enough again
    std::string_view limit;          // when refused: "requests" or "tokens"
    bool never = false;              // the request alone is larger than the bucket
  };

  /// Takes one request and `tokens` prompt tokens from `key`'s buckets, which hold a minute's
  /// worth of `rate` and refill continuously. Refused (nothing taken) when either is short.
  Decision Take(const std::string& key, const config::RateLimitConfig& rate, uint64_t tokens,
                SteadyClock::time_point now);
  size_t keys() const;
  uint64_t evictions() const;  // buckets dropped for new keys

 private:
  struct Bucket {
    double requests = 0;
    double tokens = 0;
    SteadyClock::time_point last{};
  };

  mutable common::Mutex mu_;
  LruTable<Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

/// Open client connections per client address (limits.max_connections_per_client).
class ClientConnectionCounts {
 public:
  /// Counts one more connection from `peer` unless it holds `max` already (0: no limit).
  bool TryAdd(const std::string& peer, uint32_t max);
  void Remove(const std::string& peer);
  uint32_t count(const std::string& peer) const;

 private:
  mutable common::Mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> counts_ ABSL_GUARDED_BY(mu_);
};

class AdmissionGate;

/// One admitted request's place under the cap; given back when destroyed.
class AdmissionSlot {
 public:
  AdmissionSlot() = default;
  explicit AdmissionSlot(AdmissionGate* gate) : gate_(gate) {}
  AdmissionSlot(AdmissionSlot&& o) noexcept : gate_(std::exchange(o.gate_, nullptr)) {}
  AdmissionSlot& operator=(AdmissionSlot&& o) noexcept;
  ~AdmissionSlot();

 private:
  AdmissionGate* gate_ = nullptr;
};

/// Who waits, for the per-client share of the queue: `name` (an API key's name, else an
/// address) may hold at most `max_queued` (0: no share) of the waiting places, so that one
/// client cannot fill the queue and leave everyone else a 503.
struct AdmissionClient {
  std::string_view name;
  uint32_t max_queued = 0;
};

class AdmissionGate {
 public:
  enum class Result : uint8_t { kAdmitted, kQueueFull, kTimedOut, kOverClientShare };
  using Client = AdmissionClient;

  /// Admits at once, without waiting, while fewer than `max` requests run and none waits.
  bool TryAcquire(uint32_t max, AdmissionSlot* slot);

  /// Admits at once while fewer than `max` (> 0) requests run; otherwise waits, first come
  /// first served, behind at most `queue_size` others, for up to `timeout`. A slot freed goes
  /// straight to the oldest waiter. `*wait_timer`, when given, points to the timer while the
  /// request waits: cancelling it gives up the wait (a client that left), as kTimedOut. A
  /// `client` already holding its share of the queue gets kOverClientShare (a full queue is
  /// kQueueFull first). Runs on the caller's io_context.
  net::awaitable<Result> Acquire(uint32_t max, uint32_t queue_size,
                                 std::chrono::milliseconds timeout, AdmissionSlot* slot,
                                 net::steady_timer** wait_timer = nullptr,
                                 AdmissionClient client = AdmissionClient());

  int64_t running() const;
  size_t queued() const;
  /// Requests `client` has waiting now.
  uint32_t queued_by(std::string_view client) const;

 private:
  friend class AdmissionSlot;
  struct Waiter {
    net::any_io_executor executor;
    net::steady_timer* timer = nullptr;  // touched only on `executor`'s thread
    bool granted = false;                // under mu_
    std::string client;                  // counted in queued_per_client_ while queued
  };
  void Release();
  void Dequeued(const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable common::Mutex mu_;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::shared_ptr<Waiter>> queue_ ABSL_GUARDED_BY(mu_);
  // Only clients with waiters.
  absl::flat_hash_map<std::string, uint32_t> queued_per_client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::router
