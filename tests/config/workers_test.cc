// The worker sections of the config: which stores a worker reaches, and a hybrid model's
// KV-cache groups for approximate mode.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config/loader.h"

namespace kvgate::config {
namespace {

using ::testing::HasSubstr;

TEST(ConfigValidate, WorkerStoresMustNameConfiguredStores) {
  auto c = LoadConfigFromString(
      "workers:\n  - {url: \"http://a:1\", stores: [pool]}\n  - url: http://b:1\n"
      "stores:\n  - {name: pool, model: m, kv_events: {endpoint: \"tcp://10.0.0.5:5557\"}}\n",
      "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->workers[0].stores, std::vector<std::string>{"pool"});
  EXPECT_TRUE(c->workers[1].stores.empty());
  EXPECT_TRUE(ValidateConfig(*c).ok());
  c->workers[1].stores = {"elsewhere"};
  EXPECT_THAT(std::string(ValidateConfig(*c).message()),
              HasSubstr("workers[1].stores: no store named 'elsewhere'"));
}

// Issue 32: a hybrid model's groups for approximate mode, named as vLLM names them.
TEST(ConfigLoader, WorkerKvGroups) {
  auto c = LoadConfigFromString(
      "workers:\n  - url: http://a:1\n    kv_groups:\n"
      "      - {kind: SWA, sliding_window: 128, num_gpu_blocks: 49152}\n"
      "      - {kind: linear_attention, num_gpu_blocks: 432, chunk_tokens: 8192}\n"
      "  - url: http://b:1\n",
      "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->workers[0].kv_groups.size(), 2u);
  EXPECT_EQ(c->workers[0].kv_groups[0], (config::KvGroupConfig{"sliding_window", 128, 49152}));
  EXPECT_EQ(c->workers[0].kv_groups[1], (config::KvGroupConfig{"mamba", 0, 432, 8192}));
  EXPECT_TRUE(c->workers[1].kv_groups.empty());
  auto bad = [](const std::string& groups) {
    auto r = LoadConfigFromString("workers:\n  - url: http://a:1\n    kv_groups: " + groups + "\n",
                                  "g.yaml");
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_THAT(bad("[{kind: full_attention, num_gpu_blocks: 5}]"),
              HasSubstr("workers[0].kv_groups[0].kind: must be sliding_window or mamba"));
  EXPECT_THAT(bad("[{kind: sliding_window, num_gpu_blocks: 5}]"),
              HasSubstr("workers[0].kv_groups[0].sliding_window: is required"));
  EXPECT_THAT(bad("[{kind: mamba}]"),
              HasSubstr("workers[0].kv_groups[0].num_gpu_blocks: is required"));
  EXPECT_THAT(bad("[{kind: mamba, num_gpu_blocks: 0}]"),
              HasSubstr("workers[0].kv_groups[0].num_gpu_blocks: must be between 1 and"));
  EXPECT_THAT(bad("[{kind: mamba, num_gpu_blocks: 5, window: 3}]"), HasSubstr("unknown key"));
  EXPECT_THAT(bad("[{kind: swa, sliding_window: 4, num_gpu_blocks: 5, chunk_tokens: 64}]"),
              HasSubstr("workers[0].kv_groups[0].chunk_tokens: is for mamba only"));
  EXPECT_THAT(bad("{kind: mamba}"), HasSubstr("workers[0].kv_groups: must be a list"));
}

}  // namespace
}  // namespace kvgate::config
