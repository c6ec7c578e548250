#include "router/fleet/worker.h"

#include <chrono>
#include <cmath>

#include "gtest/gtest.h"
#include "kvindex/block_hash.h"

namespace kvgate::router {
namespace {

Worker MakeWorker(std::vector<std::string> models = {}) {
  config::WorkerConfig c;
  c.url = *common::ParseHttpUrl("http://w:1");
  c.models = std::move(models);
  return Worker(c);
}

TEST(Worker, EjectsAfterThresholdAndReadmits) {
  Worker w = MakeWorker();
  config::HealthCheckConfig hc;
  hc.unhealthy_threshold = 3;
  hc.healthy_threshold = 2;
  const auto now = SteadyClock::now();
  EXPECT_TRUE(w.IsAvailable(now));
  EXPECT_FALSE(w.RecordHealthCheck(false, hc));
  EXPECT_FALSE(w.RecordHealthCheck(false, hc));
  EXPECT_TRUE(w.IsAvailable(now));
  EXPECT_TRUE(w.RecordHealthCheck(false, hc));
  EXPECT_FALSE(w.IsAvailable(now));
  EXPECT_FALSE(w.RecordHealthCheck(true, hc));
  EXPECT_FALSE(w.healthy());
  EXPECT_TRUE(w.RecordHealthCheck(true, hc));
  EXPECT_TRUE(w.IsAvailable(now));
}

TEST(Worker, SuccessResetsFailureStreak) {
  Worker w = MakeWorker();
  config::HealthCheckConfig hc;
  hc.unhealthy_threshold = 2;
  w.RecordHealthCheck(false, hc);
  w.RecordHealthCheck(true, hc);
  w.RecordHealthCheck(false, hc);
  EXPECT_TRUE(w.healthy());
}

TEST(Worker, BreakerOpensForConfiguredTime) {
  Worker w = MakeWorker();
  config::CircuitBreakerConfig cb;
  cb.consecutive_failures = 2;
  cb.open_ms = 1000;
  const auto t0 = SteadyClock::now();
  w.RecordConnectionFailure(t0, cb);
  EXPECT_TRUE(w.IsAvailable(t0));
  w.RecordConnectionFailure(t0, cb);
  EXPECT_FALSE(w.IsAvailable(t0));
  EXPECT_FALSE(w.IsAvailable(t0 + std::chrono::milliseconds(999)));
  EXPECT_TRUE(w.IsAvailable(t0 + std::chrono::milliseconds(1001)));
}

TEST(Worker, PassiveSuccessResetsStreak) {
  Worker w = MakeWorker();
  config::CircuitBreakerConfig cb;
  cb.consecutive_failures = 2;
  const auto t0 = SteadyClock::now();
  w.RecordConnectionFailure(t0, cb);
  w.RecordSuccess();
  w.RecordConnectionFailure(t0, cb);
  EXPECT_TRUE(w.IsAvailable(t0));
}

TEST(Worker, PrefillBusySecondsRestartsWhenTheQueueStartsOrItsHeadAnswers) {
  Worker w = MakeWorker();
  const auto later = [] { return SteadyClock::now() + std::chrono::seconds(10); };
  EXPECT_EQ(w.PrefillBusySeconds(later()), 0);  // nothing pending
  Reservation a, b, none;
  const auto before_a = SteadyClock::now();
  w.Reserve(a, 1000, 1);
  const auto after_a = SteadyClock::now();
  w.Reserve(b, 500, 1);  // queued behind a: does not restart the clock
  const auto t = after_a + std::chrono::seconds(10);
  EXPECT_GE(w.PrefillBusySeconds(t), 10.0);
  EXPECT_LE(w.PrefillBusySeconds(t), std::chrono::duration<double>(t - before_a).count());
  w.Reserve(none, 0, 0);  // prefills nothing: no effect
  const auto before_release = SteadyClock::now();
  w.ReleasePrefill(a);  // b is the head now
  EXPECT_LE(w.PrefillBusySeconds(before_release + std::chrono::seconds(2)), 2.0);
  w.ReleasePrefill(b);
  EXPECT_EQ(w.PrefillBusySeconds(later()), 0);
}

TEST(Worker, ModelsFromConfigAndDiscovery) {
  Worker open = MakeWorker();
  EXPECT_TRUE(open.ServesModel("anything"));  // nothing known yet
  open.SetDiscoveredModels({"m2", "m1"});
  EXPECT_TRUE(open.ServesModel("m1"));
  EXPECT_FALSE(open.ServesModel("m3"));
  EXPECT_TRUE(open.ServesModel(""));

  Worker fixed = MakeWorker({"cfg"});
  EXPECT_FALSE(fixed.ServesModel("other"));
  fixed.SetDiscoveredModels({"disc"});
  EXPECT_TRUE(fixed.ServesModel("disc"));
  EXPECT_EQ(fixed.Models(), (std::vector<std::string>{"cfg", "disc"}));
}

// Requests sharing a prompt's prefix hold its KV once on the engine: the load routing weighs
// says so (kvaware's KV-room check, cost's decode blocks).
TEST(Worker, RequestsSharingAPrefixReserveItsBlocksOnce) {
  Worker w = MakeWorker();
  std::vector<uint32_t> tokens(64 * 16, 5);
  std::vector<kvindex::BlockHash> chain;
  kvindex::HashTokenBlocks(tokens, 1, 16, &chain);  // 64 blocks
  Reservation a, b, plain;
  w.Reserve(a, 100, 64, chain);
  w.Reserve(b, 100, 70, chain);  // the same 64 and 6 of its own
  EXPECT_EQ(w.load().active_kv_blocks, 70);
  EXPECT_EQ(w.local_load().active_kv_blocks, 70);
  w.Reserve(plain, 100, 10);  // not hashed: its own
  EXPECT_EQ(w.load().active_kv_blocks, 80);
  w.Release(b);
  w.Release(b);  // idempotent
  EXPECT_EQ(w.load().active_kv_blocks, 74);
  w.Release(a);
  w.Release(plain);
  EXPECT_EQ(w.load().active_kv_blocks, 0);
  EXPECT_EQ(w.load().in_flight, 0);
}

// A decision reads the learned state in one call; it must say what the four getters say.
TEST(Worker, LearnedStateIsWhatTheGettersSay) {
  Worker w = MakeWorker();
  const auto t0 = SteadyClock::now();
  Worker::Learned blank = w.LearnedState(t0, 60);
  EXPECT_EQ(blank.prefill_rate, 0);
  EXPECT_EQ(blank.recent_work, 0);
  EXPECT_FALSE(blank.engine.valid);

  for (int i = 0; i < 20; ++i) w.ObservePrefill(1000.0 * (1 + i % 5), 0.02 + 0.001 * (1 + i % 5));
  w.AddRecentWork(4000, t0, 60);
  EngineStats e;
  e.valid = true;
  e.running = 3;
  e.kv_usage = 0.5;
  w.SetEngineStats(e);
  const auto later = t0 + std::chrono::seconds(30);
  const Worker::Learned l = w.LearnedState(later, 60);
  EXPECT_GT(l.prefill_rate, 0);
  EXPECT_DOUBLE_EQ(l.prefill_rate, w.PrefillRate(0));
  EXPECT_DOUBLE_EQ(l.prefill_overhead_s, w.PrefillOverhead());
  EXPECT_NEAR(l.recent_work, 4000 / std::sqrt(2.0), 1e-6);  // half a half-life
  EXPECT_TRUE(l.engine.valid);
  EXPECT_EQ(l.engine.running, 3);
  EXPECT_EQ(l.engine.kv_usage, 0.5);
}

}  // namespace
}  // namespace kvgate::router
