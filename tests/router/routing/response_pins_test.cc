// Stored-response pins: bounded by count (least recently used first) and by time since last use,
// a few hundred bytes each, and safe from many threads.
#include "router/routing/response_pins.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

using Clock = ResponsePins::Clock;
using std::chrono::seconds;

std::string Id(int i) { return "resp_" + std::to_string(i) + "_0123456789abcdef0123456789ab"; }

TEST(ResponsePins, LearnFindForget) {
  ResponsePins pins(100, seconds(60));
  const auto t0 = Clock::now();
  pins.Learn("resp_a", 3, t0);
  auto pin = pins.Find("resp_a", t0);
  ASSERT_TRUE(pin.has_value());
  EXPECT_EQ(pin->worker_id, 3u);
  pins.Learn("resp_a", 5, t0);  // a later pin replaces the older
  EXPECT_EQ(pins.Find("resp_a", t0)->worker_id, 5u);
  EXPECT_FALSE(pins.Find("resp_b", t0).has_value());
  pins.Forget("resp_a");
  EXPECT_FALSE(pins.Find("resp_a", t0).has_value());
  EXPECT_EQ(pins.size(), 0u);
  // Not ids kvgate keeps.
  pins.Learn("", 1, t0);
  pins.Learn(std::string(ResponsePins::kMaxIdBytes + 1, 'x'), 1, t0);
  EXPECT_EQ(pins.size(), 0u);
}

TEST(ResponsePins, ExpireAfterTheTtlSinceLastUse) {
  ResponsePins pins(100, seconds(10));
  const auto t0 = Clock::now();
  pins.Learn("resp_a", 1, t0);
  pins.Learn("resp_b", 2, t0);
  EXPECT_TRUE(pins.Find("resp_a", t0 + seconds(9)).has_value());  // refreshed until t0+19
  EXPECT_TRUE(pins.Find("resp_a", t0 + seconds(18)).has_value());
  EXPECT_FALSE(pins.Find("resp_b", t0 + seconds(11)).has_value());
  EXPECT_FALSE(pins.Find("resp_a", t0 + seconds(40)).has_value());
  EXPECT_EQ(pins.size(), 0u);
}

TEST(ResponsePins, BoundedByCountLeastRecentlyUsedFirst) {
  const size_t max = 1600;  // 100 per shard
  ResponsePins pins(max, seconds(3600));
  const auto t0 = Clock::now();
  for (int i = 0; i < 10000; ++i) {
    pins.Learn(Id(i), static_cast<uint32_t>(i % 7), t0);
    if (i >= 100) pins.Find(Id(0), t0);  // kept warm
  }
  EXPECT_LE(pins.size(), max);
  EXPECT_GE(pins.size(), max * 9 / 10);
  EXPECT_EQ(pins.evicted(), 10000 - pins.size());
  EXPECT_TRUE(pins.Find(Id(0), t0).has_value());
  EXPECT_TRUE(pins.Find(Id(9999), t0).has_value());
  EXPECT_FALSE(pins.Find(Id(1), t0).has_value());
  // Memory per pin, as docs/agent-apis.md states it (~40-byte ids).
  const double per_pin = static_cast<double>(pins.memory_bytes()) / pins.size();
  EXPECT_LT(per_pin, 400) << per_pin;
  EXPECT_GT(per_pin, 80) << per_pin;
  // A smaller bound applies at the next pins learned.
  pins.Configure(160, seconds(3600));
  for (int i = 0; i < 200; ++i) pins.Learn(Id(20000 + i), 1, t0);
  EXPECT_LE(pins.size(), 160u);
}

TEST(ResponsePins, ConcurrentThreads) {
  ResponsePins pins(4096, seconds(60));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pins, t] {
      const auto now = Clock::now();
      for (int i = 0; i < 5000; ++i) {
        const std::string id = Id(t * 100000 + i);
        pins.Learn(id, static_cast<uint32_t>(t), now);
        auto p = pins.Find(id, now);
        if (p) ASSERT_EQ(p->worker_id, static_cast<uint32_t>(t));
        if (i % 3 == 0) pins.Forget(id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(pins.size(), 4096u);
}

}  // namespace
}  // namespace kvgate::router
