// The store's load rate kvaware charges, learned from TTFTs (router/routing/store_load_rate.h).
#include "router/routing/store_load_rate.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(StoreLoadRate, LearnsFromTheTimeBeyondQueueAndRecompute) {
  StoreLoadRate r;
  EXPECT_EQ(r.TokensPerSecond(100000), 100000);  // configured until observed
  r.Observe(512, 1.0);                           // too short a load to measure anything
  EXPECT_EQ(r.samples(), 0u);
  r.Observe(20000, 0.5);  // 25 us a token
  EXPECT_NEAR(r.TokensPerSecond(100000), 40000, 1e-6);
  StoreLoadRate hidden;
  hidden.Observe(20000, -0.1);  // a queue shorter than predicted hid the load: no sample
  hidden.Observe(20000, 0.0);
  EXPECT_EQ(hidden.samples(), 0u);
  EXPECT_EQ(hidden.TokensPerSecond(100000), 100000);
}

// Loads that an over-predicted queue hid (no time beyond it) hold most of the window's tokens:
// the rate is what the measured loads say, not "free". Counted as zeros they made the median
// zero and the rate 1e9 tokens/s, so kvaware charged nothing for any load.
TEST(StoreLoadRate, LoadsHiddenByTheQueueDoNotMakeTheStoreFree) {
  StoreLoadRate r;
  for (int i = 0; i < 60; ++i) {
    if (i % 3 == 0) {
      r.Observe(100000, 2.5);  // 25 us a token
    } else {
      r.Observe(100000, i % 2 == 0 ? 0.0 : -0.3);
    }
  }
  EXPECT_EQ(r.samples(), 20u);
  EXPECT_NEAR(r.TokensPerSecond(1e6), 40000, 1e-6);
}

// Long loads at 4 us a token and many short ones whose TTFT carried 2 ms of someone else's
// step (100-200 us a token): the long loads hold most of the tokens and decide, and one stall
// (a 100K-token load that took 5 s) moves nothing. An average of the samples, the estimator
// before, put the rate near 40K tokens/s.
TEST(StoreLoadRate, LongLoadsDecideAndStallsDoNot) {
  StoreLoadRate r;
  for (int i = 0; i < 40; ++i) {
    r.Observe(100000, 0.4);
    const double tokens = 10000 + 1000 * (i % 10);
    r.Observe(tokens, 0.002 + tokens * 4e-6);
    r.Observe(1024 * (1 + i % 3), 0.2);  // a short load caught in a long step
  }
  r.Observe(100000, 5.0);
  EXPECT_NEAR(r.TokensPerSecond(1e6), 250000, 1.0);
  // The window follows a store that became slower: 20 us a token from then on.
  for (int i = 0; i < 64; ++i) r.Observe(100000, 2.0);
  EXPECT_NEAR(r.TokensPerSecond(1e6), 50000, 1e-6);
}

}  // namespace
}  // namespace kvgate::router
