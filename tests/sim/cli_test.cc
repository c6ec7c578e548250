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

TEST(SimCli, BuiltInProfilesByName) {
  for (const char* name : {"gpt-oss-like", "gemma3-like", "qwen3-next-like", "llama3-8b-h100"}) {
    auto o = Parse({"--profile", name});
    ASSERT_TRUE(o.ok()) << name << ": " << o.status();
    EXPECT_EQ(o->profile.name, name);
  }
  auto gpt = Parse({"--profile", "gpt-oss-like"});
  ASSERT_EQ(gpt->profile.groups.size(), 2u);
  EXPECT_EQ(gpt->profile.groups[0].num_gpu_blocks, gpt->profile.num_gpu_blocks);
  auto unknown = Parse({"--profile", "gpt-oss-unlike"});  // Neither a name nor a file.
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("built-in profile: llama3-8b-h100, gpt-oss-like"),
            std::string::npos)
      << unknown.status();
  // --num-gpu-blocks sets full attention's pool and scales the other group alike.
  auto half = Parse({"--profile", "gpt-oss-like", "--num-gpu-blocks", "49152"});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->profile.num_gpu_blocks, 49152u);
  EXPECT_EQ(half->profile.groups[0].num_gpu_blocks, 49152u);
  EXPECT_EQ(half->profile.groups[1].num_gpu_blocks, gpt->profile.groups[1].num_gpu_blocks / 2);
  // Too small for one request's window plus a chunk.
  auto tiny = Parse({"--profile", "gemma3-like", "--num-gpu-blocks", "100"});
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("groups[1]"), std::string::npos) << tiny.status();
}

TEST(SimCli, ProfileGroups) {
  auto p = ParseProfile(
      "num_gpu_blocks: 100\ngroups:\n  - kind: full_attention\n  - kind: mamba\n"
      "    num_gpu_blocks: 3\n");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->groups.size(), 2u);
  EXPECT_EQ(p->groups[0].num_gpu_blocks, 100u);  // The top-level pool is group 0's.
  EXPECT_EQ(p->KvGroups().size(), 2u);
  auto q = ParseProfile(
      "max_num_batched_tokens: 64\ngroups:\n  - kind: full_attention\n    num_gpu_blocks: 50\n"
      "  - kind: sliding_window\n    sliding_window: 33\n    num_gpu_blocks: 9\n");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->num_gpu_blocks, 50u);
  EXPECT_EQ(q->groups[1].sliding_window, 33u);
  // Without groups: one implicit full-attention group.
  ASSERT_EQ(Profile{}.KvGroups().size(), 1u);
  EXPECT_EQ(Profile{}.KvGroups()[0].num_gpu_blocks, Profile{}.num_gpu_blocks);

  const std::string full = "groups:\n  - kind: full_attention\n    num_gpu_blocks: 50\n";
  for (const std::string& bad : {
           // Group 0 must be full attention.
           std::string("groups:\n  - kind: mamba\n    num_gpu_blocks: 50\n"),
           full + "  - kind: linear\n    num_gpu_blocks: 50\n",           // Unknown kind.
           full + "  - kind: sliding_window\n    num_gpu_blocks: 900\n",  // No window.
           full + "  - kind: mamba\n    sliding_window: 8\n    num_gpu_blocks: 9\n",
           full + "  - kind: mamba\n    num_gpu_blocks: 2\n",                // Too small.
           full + "  - kind: mamba\n",                                       // No pool.
           full + "  - kind: mamba\n    num_gpu_blocks: 9\n    lanes: 2\n",  // Unknown key.
           full + "  - kind: full_attention\n    num_gpu_blocks: 9\n",
           full + "  - kind: mamba\n    num_gpu_blocks: 9\n  - kind: mamba\n"
                  "    num_gpu_blocks: 9\n",  // One group beside full attention at most.
           "num_gpu_blocks: 60\n" + full,     // Disagrees with group 0.
           std::string("groups: 3\n"),
       }) {
    EXPECT_FALSE(ParseProfile(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kvgate::sim
