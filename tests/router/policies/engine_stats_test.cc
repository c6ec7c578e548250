#include "router/policies/engine_stats.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(EngineStats, ParsesVllmExposition) {
  const EngineStats s = ParseEngineMetrics(R"(# HELP vllm:num_requests_running Number of requests
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="26000"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.1"} 4
)");
  EXPECT_TRUE(s.valid);
  EXPECT_EQ(s.running, 5);
  EXPECT_EQ(s.waiting, 7);
  EXPECT_EQ(s.kv_usage, 0.5);
  EXPECT_EQ(s.prefix_cache_queries, 1000);
  EXPECT_EQ(s.prefix_cache_hits, 640);
  EXPECT_EQ(s.num_gpu_blocks, 26000u);
  EXPECT_EQ(s.block_size, 16u);
}

TEST(EngineStats, ParsesSglangNames) {
  const EngineStats s = ParseEngineMetrics(
      "sglang:num_running_reqs{model_name=\"m\"} 4\nsglang:num_queue_reqs{model_name=\"m\"} 9\n"
      "sglang:token_usage{model_name=\"m\"} 0.75\n");
  EXPECT_TRUE(s.valid);
  EXPECT_EQ(s.running, 4);
  EXPECT_EQ(s.waiting, 9);
  EXPECT_EQ(s.kv_usage, 0.75);
}

TEST(EngineStats, GarbageIsIgnored) {
  EXPECT_FALSE(ParseEngineMetrics("not prometheus at all\n{}{}\n").valid);
  EXPECT_FALSE(ParseEngineMetrics("").valid);
  const EngineStats s = ParseEngineMetrics("vllm:num_requests_waiting{x=\"1\"} notanumber\n");
  EXPECT_FALSE(s.valid);
}

}  // namespace
}  // namespace kvgate::router
