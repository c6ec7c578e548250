// The TTFT prediction error and the x-kvgate-prediction header, on hand-made cases.
#include "router/routing/ttft_prediction.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(TtftPredictionTest, ErrorIsRelativeToTheObservedTtft) {
  // Predicted 1 s, observed 2 s: half too fast.
  TtftError e = TtftPredictionError(1.0, 2.0);
  EXPECT_DOUBLE_EQ(e.relative, -0.5);
  EXPECT_DOUBLE_EQ(e.abs_relative, 0.5);
  // Predicted 3 s, observed 2 s: half again too slow.
  e = TtftPredictionError(3.0, 2.0);
  EXPECT_DOUBLE_EQ(e.relative, 0.5);
  EXPECT_DOUBLE_EQ(e.abs_relative, 0.5);
  // Exact.
  e = TtftPredictionError(0.25, 0.25);
  EXPECT_DOUBLE_EQ(e.relative, 0);
  // Ten times too slow is an error of 9, not capped.
  EXPECT_DOUBLE_EQ(TtftPredictionError(1.0, 0.1).abs_relative, 9.0);
}

TEST(TtftPredictionTest, HeaderNamesTheTotalAndEveryPart) {
  TtftParts p;
  p.queue = 0.5;
  p.prefill = 1.25;
  p.host_load = 0.00004;
  p.store_load = 0.2;
  p.decode_interference = 0.01;
  p.kv_wait = 3;
  p.overhead = 0.02;
  EXPECT_DOUBLE_EQ(p.total(), 4.98004);
  EXPECT_EQ(PredictionHeader(p),
            "ttft=4.9800;queue=0.5000;prefill=1.2500;host=0.0000;store=0.2000;decode=0.0100;"
            "kv_wait=3.0000;overhead=0.0200");
}

}  // namespace
}  // namespace kvgate::router
