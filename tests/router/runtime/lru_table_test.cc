// LruTable and the rate limiter's table on it (issue 27): a hard cap on entries, the least
// recently used one dropped for a new key, no scan however many keys come.
#include "router/runtime/lru_table.h"

#include <chrono>
#include <string>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "router/runtime/admission.h"

namespace kvgate::router {
namespace {

TEST(LruTableTest, DropsTheLeastRecentlyUsedKeyForANewOne) {
  LruTable<int> t(3);
  bool fresh = false;
  for (int i = 0; i < 3; ++i) {
    t.FindOrInsert(common::StrCat("k", i), &fresh) = i;
    EXPECT_TRUE(fresh);
  }
  ASSERT_NE(t.Find("k0"), nullptr);  // k0 used again: k1 is now the oldest
  t.FindOrInsert("k3", &fresh) = 3;
  EXPECT_TRUE(fresh);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.evictions(), 1u);
  EXPECT_EQ(t.Find("k1"), nullptr);
  ASSERT_NE(t.Find("k0"), nullptr);
  EXPECT_EQ(*t.Find("k0"), 0);
  EXPECT_EQ(*t.Find("k2"), 2);
  EXPECT_EQ(*t.Find("k3"), 3);
  // An existing key keeps its value; a dropped one comes back fresh.
  EXPECT_EQ(t.FindOrInsert("k2", &fresh), 2);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(t.FindOrInsert("k1", &fresh), 0);
  EXPECT_TRUE(fresh);
  t.Erase("k1");
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find("k1"), nullptr);
}

TEST(LruTableTest, ManyMoreKeysThanPlacesStayWithinTheCap) {
  LruTable<int> t(1'000);
  bool fresh = false;
  for (int i = 0; i < 50'000; ++i) t.FindOrInsert(std::to_string(i), &fresh) = i;
  EXPECT_EQ(t.size(), 1'000u);
  EXPECT_EQ(t.evictions(), 49'000u);
  EXPECT_EQ(t.Find("48999"), nullptr);
  ASSERT_NE(t.Find("49000"), nullptr);
  EXPECT_EQ(*t.Find("49999"), 49'999);
}

// Past 100,000 addresses each new one cost the limiter a scan of the whole table; now the table
// holds at most its cap and a client that keeps coming keeps its bucket.
TEST(RateLimiterTest, TheTableIsCappedAndARegularClientKeepsItsBucket) {
  RateLimiter limiter(100);
  config::RateLimitConfig rate;
  rate.requests_per_minute = 2;
  const auto now = SteadyClock::now();
  EXPECT_TRUE(limiter.Take("regular", rate, 0, now).allowed);
  EXPECT_TRUE(limiter.Take("regular", rate, 0, now).allowed);
  for (int i = 0; i < 1'000; ++i) {
    EXPECT_TRUE(limiter.Take(common::StrCat("10.0.", i / 256, ".", i % 256), rate, 0, now).allowed);
    if (i % 50 == 0) EXPECT_FALSE(limiter.Take("regular", rate, 0, now).allowed);
  }
  EXPECT_EQ(limiter.keys(), 100u);
  EXPECT_EQ(limiter.evictions(), 901u);
  EXPECT_FALSE(limiter.Take("regular", rate, 0, now).allowed);  // still empty: not dropped
}

}  // namespace
}  // namespace kvgate::router
