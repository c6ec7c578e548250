#include "router/runtime/auth_throttle.h"

namespace kvgate::router {

double AuthFailureThrottle::RetryAfterSeconds(std::string_view peer, const Limit& limit,
                                              SteadyClock::time_point now) {
  if (limit.max_failures == 0) return 0;
  common::MutexLock lock(&mu_);
  const Entry* e = table_.Find(peer);
  if (e == nullptr || e->failures < limit.max_failures) return 0;
  const auto left = e->window_start + limit.window - now;
  return left.count() > 0 ? std::chrono::duration<double>(left).count() : 0;
}

void AuthFailureThrottle::RecordFailure(std::string_view peer, const Limit& limit,
                                        SteadyClock::time_point now) {
  if (limit.max_failures == 0) return;
  common::MutexLock lock(&mu_);
  bool fresh = false;
  Entry& e = table_.FindOrInsert(peer, &fresh);
  if (fresh || now - e.window_start >= limit.window) {
    e.failures = 0;
    e.window_start = now;
  }
  if (e.failures < UINT32_MAX) ++e.failures;
}

size_t AuthFailureThrottle::addresses() const {
  common::MutexLock lock(&mu_);
  return table_.size();
}

bool LogLimiter::Allow(SteadyClock::time_point now, uint64_t* suppressed) {
  const int64_t t =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  int64_t last = last_.load(std::memory_order_relaxed);
  if (t - last >= interval_ && last_.compare_exchange_strong(last, t)) {
    *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
    return true;
  }
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace kvgate::router
