#include "sim/cli.h"

#include "gtest/gtest.h"

namespace kvgate::sim {
namespace {

absl::StatusOr<SimOptions> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "kvgate-sim");
  return ParseSimCli(static_cast<int>(args.size()), args.data());
}

TEST(SimCli, FlagsAndProfileOverrides) {
  auto o = Parse({"--port", "0", "--workers=3", "--dp-size", "2", "--time-scale", "0.05",
                  "--num-gpu-blocks", "100", "--kv-events-endpoint", "tcp://*:5557",
                  "--kv-events-encoding", "map", "--kv-events-bind", "--kv-events-remote",
                  "--fault-error-rate", "0.1", "--model", "m"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->base_port, 0);
  EXPECT_EQ(o->workers, 3u);
  EXPECT_EQ(o->dp_size, 2u);
  EXPECT_DOUBLE_EQ(o->time_scale, 0.05);
  EXPECT_EQ(o->profile.num_gpu_blocks, 100u);
  EXPECT_EQ(o->profile.block_size, 16u);
  EXPECT_EQ(o->kv_events_encoding, EventEncoding::kMap);
  EXPECT_TRUE(o->kv_events_bind);
  EXPECT_DOUBLE_EQ(o->faults.error_rate, 0.1);
  EXPECT_EQ(o->model, "m");
  EXPECT_EQ(Parse({})->model, "sim-model");
}

TEST(SimCli, RejectsBadInput) {
  EXPECT_FALSE(Parse({"--frob"}).ok());
  EXPECT_EQ(Parse({"--frob"}).status().message(), "unknown flag --frob");
  EXPECT_FALSE(Parse({"--workers", "0"}).ok());
  EXPECT_FALSE(Parse({"--time-scale", "abc"}).ok());
  EXPECT_FALSE(Parse({"--kv-events-encoding", "json"}).ok());
  EXPECT_FALSE(Parse({"--fault-error-rate", "2"}).ok());
  EXPECT_FALSE(Parse({"--profile", "/nonexistent.yaml"}).ok());
  EXPECT_FALSE(Parse({"--kv-events-replay-endpoint", "tcp://*:1"}).ok());
  // Event listeners beyond loopback only when asked for (their events carry token ids).
  for (const char* ep : {"tcp://*:5557", "tcp://10.0.0.5:5557"}) {
    auto refused = Parse({"--kv-events-endpoint", ep, "--kv-events-bind"});
    ASSERT_FALSE(refused.ok()) << ep;
    EXPECT_NE(refused.status().message().find("--kv-events-remote"), std::string::npos)
        << refused.status();
  }
  EXPECT_TRUE(Parse({"--kv-events-endpoint", "tcp://127.0.0.1:5557"}).ok());
  EXPECT_TRUE(Parse({"--kv-events-endpoint", "tcp://10.0.0.5:5557"}).ok());  // Connects there.
  EXPECT_FALSE(Parse({"--kv-events-endpoint", "tcp://127.0.0.1:1", "--kv-events-replay-endpoint",
                      "tcp://*:2"})
                   .ok());
  EXPECT_TRUE(Parse({"--kv-events-endpoint", "tcp://*:1", "--kv-events-replay-endpoint",
                     "tcp://*:2", "--kv-events-remote"})
                  .ok());
}

TEST(SimCli, ShippedProfileLoads) {
  auto p = LoadProfile(std::string(KVGATE_TEST_SOURCE_DIR) + "/sim/profiles/llama3-8b-h100.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_gpu_blocks, 26000u);
  EXPECT_EQ(p->block_size, 16u);
  EXPECT_DOUBLE_EQ(p->step_fixed_s, Profile{}.step_fixed_s);  // Same as the built-in default.
  EXPECT_FALSE(ParseProfile("num_gpu_blocks: 10\nbogus: 1\n").ok());
  EXPECT_FALSE(ParseProfile("num_gpu_blocks: 0\n").ok());
}

}  // namespace
}  // namespace kvgate::sim
