// Per-thread metric shards merge into the families Prometheus expects.
#include "router/fleet/sharded_metrics.h"

#include <thread>

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(ShardedFamily, CountersSumOverShardsWithSortedLabels) {
  ShardedFamily f("t_total", "help", ShardedFamily::Type::kCounter, {"worker", "code"}, {}, 3);
  const std::string_view a[] = {"w1", "200"};
  const std::string_view b[] = {"w2", "500"};
  f.Get(0, a)->Increment();
  f.Get(1, a)->Increment(2);
  f.Get(2, b)->Increment();
  EXPECT_EQ(f.Get(0, a), f.Get(0, a));  // one series per shard and label set
  const auto fam = f.Collect();
  ASSERT_EQ(fam.metric.size(), 2u);
  EXPECT_EQ(fam.metric[0].label[0].name, "code");  // sorted by name
  EXPECT_EQ(fam.metric[0].label[1].value, "w1");
  EXPECT_DOUBLE_EQ(fam.metric[0].counter.value, 3);
  EXPECT_DOUBLE_EQ(fam.metric[1].counter.value, 1);
  const auto only_w2 = f.Collect([](absl::Span<const std::string> v) { return v[0] == "w2"; });
  ASSERT_EQ(only_w2.metric.size(), 1u);
}

TEST(ShardedFamily, HistogramBucketsAreCumulative) {
  ShardedFamily f("t_seconds", "help", ShardedFamily::Type::kHistogram, {}, {0.1, 1.0}, 2);
  f.Get(0, {})->Observe(0.05);
  f.Get(1, {})->Observe(0.1);  // le="0.1" includes it
  f.Get(1, {})->Observe(0.5);
  f.Get(0, {})->Observe(7);
  const auto fam = f.Collect();
  ASSERT_EQ(fam.metric.size(), 1u);
  const auto& h = fam.metric[0].histogram;
  ASSERT_EQ(h.bucket.size(), 3u);
  EXPECT_EQ(h.bucket[0].cumulative_count, 2u);
  EXPECT_EQ(h.bucket[1].cumulative_count, 3u);
  EXPECT_EQ(h.bucket[2].cumulative_count, 4u);
  EXPECT_EQ(h.sample_count, 4u);
  EXPECT_DOUBLE_EQ(h.sample_sum, 7.65);
}

TEST(ShardedFamily, ShardsWrittenConcurrentlyWhileScraped) {
  ShardedFamily f("c_total", "help", ShardedFamily::Type::kCounter, {"k"}, {}, 4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&f, t] {
      for (int i = 0; i < 20000; ++i) {
        const std::string key = std::to_string(i % 8);
        const std::string_view v[] = {key};
        f.Get(t, v)->Increment();
      }
    });
  }
  for (int i = 0; i < 50; ++i) (void)f.Collect();
  for (auto& t : threads) t.join();
  double total = 0;
  for (const auto& m : f.Collect().metric) total += m.counter.value;
  EXPECT_DOUBLE_EQ(total, 80000);
}

// New series keep arriving (each worker, endpoint and status is one) while a scrape merges:
// the owner's map grows and moves its entries, and the scrape must still print every label.
TEST(ShardedFamily, SeriesCreatedWhileScrapedKeepTheirLabels) {
  ShardedFamily f("c_total", "help", ShardedFamily::Type::kCounter, {"k"}, {}, 1);
  constexpr int kSeries = 20000;
  std::thread owner([&f] {
    for (int i = 0; i < kSeries; ++i) {
      const std::string key = "worker-" + std::to_string(i);
      const std::string_view v[] = {key};
      f.Get(0, v)->Increment();
    }
  });
  size_t scraped = 0;
  while (scraped < kSeries) {
    const auto family = f.Collect();
    for (const auto& m : family.metric) {
      ASSERT_EQ(m.label.size(), 1u);
      ASSERT_EQ(m.label[0].value.rfind("worker-", 0), 0u) << m.label[0].value;
    }
    scraped = family.metric.size();
  }
  owner.join();
}

}  // namespace
}  // namespace kvgate::router
