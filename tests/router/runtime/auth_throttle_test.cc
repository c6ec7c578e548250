// Failed API keys per address and the log limiter (issue 27).
#include "router/runtime/auth_throttle.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

using namespace std::chrono_literals;

TEST(AuthFailureThrottleTest, AnAddressIsRefusedAfterItsFailuresUntilItsWindowEnds) {
  AuthFailureThrottle t;
  const AuthFailureThrottle::Limit limit{3, 60'000ms};
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.RetryAfterSeconds("10.0.0.1", limit, t0), 0);
    t.RecordFailure("10.0.0.1", limit, t0 + std::chrono::seconds(i));
  }
  EXPECT_DOUBLE_EQ(t.RetryAfterSeconds("10.0.0.1", limit, t0 + 10s), 50);  // from its first
  EXPECT_EQ(t.RetryAfterSeconds("10.0.0.2", limit, t0 + 10s), 0);          // others unaffected
  EXPECT_EQ(t.RetryAfterSeconds("10.0.0.1", limit, t0 + 60s), 0);
  // A new window starts with the next failure.
  t.RecordFailure("10.0.0.1", limit, t0 + 61s);
  EXPECT_EQ(t.RetryAfterSeconds("10.0.0.1", limit, t0 + 62s), 0);
  EXPECT_EQ(t.addresses(), 1u);  // addresses that never failed are not stored
}

TEST(AuthFailureThrottleTest, OffWithZeroAndBoundedInAddresses) {
  AuthFailureThrottle t(10);
  const auto now = SteadyClock::now();
  t.RecordFailure("a", {0, 1'000ms}, now);
  EXPECT_EQ(t.addresses(), 0u);
  const AuthFailureThrottle::Limit one{1, 60'000ms};
  for (int i = 0; i < 100; ++i) t.RecordFailure(std::to_string(i), one, now);
  EXPECT_EQ(t.addresses(), 10u);
  EXPECT_GT(t.RetryAfterSeconds("99", one, now), 0);
  EXPECT_EQ(t.RetryAfterSeconds("0", one, now), 0);  // the oldest were forgotten
}

TEST(LogLimiterTest, OneLineAnIntervalWithTheCountLeftOut) {
  LogLimiter limiter(1s);
  const auto t0 = SteadyClock::now();
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(t0, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 1'000; ++i) EXPECT_FALSE(limiter.Allow(t0 + 500ms, &suppressed));
  EXPECT_TRUE(limiter.Allow(t0 + 1s, &suppressed));
  EXPECT_EQ(suppressed, 1'000u);
  EXPECT_FALSE(limiter.Allow(t0 + 1500ms, &suppressed));
  EXPECT_TRUE(limiter.Allow(t0 + 2s, &suppressed));
  EXPECT_EQ(suppressed, 1u);
}

}  // namespace
}  // namespace kvgate::router
