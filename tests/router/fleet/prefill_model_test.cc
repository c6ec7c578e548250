// PrefillModel: the line through observed TTFTs, on hand-made samples.
#include "router/fleet/prefill_model.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(PrefillModelTest, UnobservedUsesTheFallbackRate) {
  PrefillModel m;
  EXPECT_EQ(m.rate(), 0);
  EXPECT_EQ(m.overhead(), 0);
  EXPECT_DOUBLE_EQ(m.Seconds(20000, 10000), 2.0);
}

TEST(PrefillModelTest, FewOrAlikeSamplesGiveTheirRatioAndNoOverhead) {
  PrefillModel m;
  for (int i = 0; i < 20; ++i) m.Observe(10000, 0.5);  // all the same size: no line to fit
  EXPECT_NEAR(m.rate(), 20000, 1e-6);
  EXPECT_EQ(m.overhead(), 0);
  PrefillModel few;
  few.Observe(1000, 0.1);
  few.Observe(30000, 1.1);
  // Fewer than kMinSamples: their work over their time.
  EXPECT_NEAR(few.rate(), (1000 + 30000) / (0.1 + 1.1), 1e-6);
  EXPECT_EQ(few.overhead(), 0);
}

TEST(PrefillModelTest, SpreadSamplesFitOverheadAndRate) {
  // An engine that spends 40 ms on every answer and prefills 20k tokens/s.
  PrefillModel m;
  for (int i = 0; i < 40; ++i) {
    const double work = 500 + (i % 8) * 5000;
    m.Observe(work, 0.04 + work / 20000);
  }
  EXPECT_NEAR(m.rate(), 20000, 1e-3);
  EXPECT_NEAR(m.overhead(), 0.04, 1e-9);
  EXPECT_NEAR(m.Seconds(10000, 1), 0.54, 1e-9);
  // A ratio through the origin would have put the 40 ms on the tokens: short prefills would
  // be predicted too fast, long ones too slow.
}

TEST(PrefillModelTest, OutliersDoNotMoveTheLine) {
  // The same engine, and one answer in eight stalled 30x (a step another request stretched):
  // the line still describes the other seven. A least-squares line put 2.3 s of stall into
  // every prediction, 50x the real overhead.
  PrefillModel m;
  for (int i = 0; i < 200; ++i) {
    const double work = 500 + (i % 7) * 5000;
    const double seconds = 0.04 + work / 20000;
    m.Observe(work, i % 8 == 3 ? 30 * seconds : seconds);
  }
  EXPECT_NEAR(m.rate(), 20000, 200);
  EXPECT_NEAR(m.overhead(), 0.04, 0.002);
}

TEST(PrefillModelTest, RecentSamplesOutweighOldOnes) {
  PrefillModel m;
  for (int i = 0; i < 40; ++i) m.Observe(1000 + (i % 4) * 4000, (1000 + (i % 4) * 4000) / 10000.0);
  EXPECT_NEAR(m.rate(), 10000, 1e-3);
  for (int i = 0; i < 400; ++i) m.Observe(1000 + (i % 4) * 4000, (1000 + (i % 4) * 4000) / 40000.0);
  EXPECT_NEAR(m.rate(), 40000, 40);  // the worker got faster (less load): it follows
}

TEST(PrefillModelTest, ALineThatIsNoCostKeepsTheRatio) {
  // Time falling as work grows (noise, a queue that drained): no line.
  PrefillModel m;
  for (int i = 0; i < 16; ++i) {
    const double work = 1000 + (i % 4) * 4000;
    m.Observe(work, 1.0 - work / 40000);
  }
  EXPECT_GT(m.rate(), 0);
  EXPECT_EQ(m.overhead(), 0);
  // Bad samples are ignored.
  const double before = m.rate();
  m.Observe(-1, 1);
  m.Observe(1000, 0);
  m.Observe(1000, -2);
  EXPECT_EQ(m.rate(), before);
}

}  // namespace
}  // namespace kvgate::router
