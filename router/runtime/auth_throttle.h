// File: router/runtime/auth_throttle.h
// Failed API-key attempts, per client address (auth.max_failures_per_address within
// auth.failure_window_ms): past the limit an address is answered 429 without its key being
// looked at, until its window ends, so guessing keys costs the guesser time rather than the
// gateway hashing and logging (issue 27: wrong keys were never throttled and logged a warning
// each, 15,841 lines/s). And LogLimiter, which keeps such warnings to about one line a second
// with a count of what it left out. Both thread-safe (one small lock, taken alone; atomics).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/mutex.h"
#include "router/policies/routing_policy.h"  // SteadyClock
#include "router/runtime/lru_table.h"

namespace kvgate::router {

class AuthFailureThrottle {
 public:
  static constexpr size_t kMaxAddresses = 100'000;
  explicit AuthFailureThrottle(size_t max_addresses = kMaxAddresses) : table_(max_addresses) {}

  struct Limit {
    uint32_t max_failures = 0;  // 0: never throttled
    std::chrono::milliseconds window{60'000};
  };

  /// Seconds `peer` must still wait (> 0) when it used up its failures in its current window;
  /// 0 when it may try a key. Addresses that never failed cost a lookup and nothing stored.
  double RetryAfterSeconds(std::string_view peer, const Limit& limit, SteadyClock::time_point now);

  /// Counts one failed attempt by `peer`; its window starts with its first failure. Past
  /// kMaxAddresses the least recently failing address is forgotten (O(1)).
  void RecordFailure(std::string_view peer, const Limit& limit, SteadyClock::time_point now);

  size_t addresses() const;

 private:
  struct Entry {
    uint32_t failures = 0;
    SteadyClock::time_point window_start{};
  };

  mutable common::Mutex mu_;
  LruTable<Entry> table_ ABSL_GUARDED_BY(mu_);
};

/// Lets a log line through at most once per `interval`; the others are counted, and the next
/// line let through reports how many were left out.
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::nanoseconds interval = std::chrono::seconds(1))
      : interval_(interval.count()) {}

  /// True when this line may be written; then `*suppressed` holds the lines refused since the
  /// last one written.
  bool Allow(SteadyClock::time_point now, uint64_t* suppressed);

 private:
  const int64_t interval_;
  std::atomic<int64_t> last_{INT64_MIN / 2};  // the first line always passes
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace kvgate::router
