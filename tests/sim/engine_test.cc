#include "sim/engine.h"

#include <algorithm>
#include <map>

#include "gtest/gtest.h"
#include "sim/tokens.h"
#include "tests/sim/sim_test_util.h"

namespace kvgate::sim {
namespace {

Profile SmallProfile(uint32_t gpu_blocks, uint32_t cpu_blocks = 0) {
  Profile p;
  p.num_gpu_blocks = gpu_blocks;
  p.num_cpu_blocks = cpu_blocks;
  p.max_num_seqs = 4;
  p.max_num_batched_tokens = 64;
  p.step_fixed_s = 0.01;
  p.prefill_per_token_s = 0.001;
  p.prefill_per_token_ctx_s = 0;
  p.decode_per_seq_s = 0.002;
  p.decode_per_kv_token_s = 0;
  p.cpu_load_per_block_s = 0.005;
  return p;
}

// Runs one request alone to completion; returns its last output.
RequestOutput RunAlone(Engine& e, uint64_t id, std::vector<uint32_t> prompt, uint32_t max_tokens,
                       double* now, std::vector<KvEvent>* events = nullptr) {
  e.AddRequest({id, std::move(prompt), max_tokens, *now});
  RequestOutput last;
  while (e.HasWork()) {
    StepResult r = e.Step(*now);
    *now += r.duration;
    if (events) events->insert(events->end(), r.events.begin(), r.events.end());
    for (auto& o : r.outputs) last = o;
  }
  return last;
}

// A hand-computed case: block 16, budget 64, fixed 10 ms, prefill 1 ms/token, decode 2 ms/seq.
TEST(Engine, HandComputedTimingsAndPrefixHit) {
  Engine e(SmallProfile(8), "m", 0);
  e.AddRequest({1, Prompt(40, 1), 2, 0.0});
  StepResult s1 = e.Step(0.0);
  EXPECT_DOUBLE_EQ(s1.duration, 0.01 + 40 * 0.001);  // Whole prompt in one chunk.
  ASSERT_EQ(s1.outputs.size(), 1u);
  EXPECT_DOUBLE_EQ(s1.outputs[0].first_token_time, 0.05);
  EXPECT_EQ(s1.outputs[0].cached_tokens, 0u);
  ASSERT_EQ(s1.events.size(), 1u);  // Two full blocks stored in one BlockStored.
  const KvEvent& st = s1.events[0];
  EXPECT_EQ(st.type, KvEvent::Type::kBlockStored);
  EXPECT_EQ(st.block_hashes.size(), 2u);
  EXPECT_FALSE(st.parent_block_hash.has_value());
  EXPECT_EQ(st.token_ids, Prompt(32, 1));
  EXPECT_EQ(st.block_size, 16u);
  EXPECT_EQ(e.pool().Usage(), 3.0 / 8);

  StepResult s2 = e.Step(0.05);
  EXPECT_DOUBLE_EQ(s2.duration, 0.01 + 0.002);  // One decode.
  ASSERT_EQ(s2.outputs.size(), 1u);
  EXPECT_TRUE(s2.outputs[0].finished);
  EXPECT_EQ(s2.outputs[0].completion_tokens, 2u);
  EXPECT_FALSE(e.HasWork());
  EXPECT_EQ(e.pool().Usage(), 0.0);

  // The same prompt again: both full blocks hit; only the 8-token tail is prefilled.
  double now = 0.062;
  RequestOutput again = RunAlone(e, 2, Prompt(40, 1), 1, &now);
  EXPECT_EQ(again.cached_tokens, 32u);
  EXPECT_DOUBLE_EQ(again.first_token_time - 0.062, 0.01 + 8 * 0.001);
  EXPECT_EQ(e.counters().prefix_cache_queries, 80u);
  EXPECT_EQ(e.counters().prefix_cache_hits, 32u);
  // Same prompt, same seed: same tokens.
  EXPECT_EQ(again.new_tokens[0], s1.outputs[0].new_tokens[0]);
}

TEST(Engine, BlockAlignedPromptRecomputesItsLastBlockAsVllm) {
  Engine e(SmallProfile(8), "m", 0);
  double now = 0;
  RunAlone(e, 1, Prompt(32, 1), 1, &now);
  EXPECT_EQ(RunAlone(e, 2, Prompt(32, 1), 1, &now).cached_tokens, 16u);
}

TEST(Engine, EvictsLeastRecentlyFreedBlocksTailFirst) {
  Engine e(SmallProfile(8), "m", 0);
  double now = 0;
  std::vector<KvEvent> ev;
  // Each request: 33-token prompt, 1 output -> 3 blocks, 2 of them cached afterwards.
  RunAlone(e, 1, Prompt(33, 1000), 1, &now, &ev);  // X
  RunAlone(e, 2, Prompt(33, 2000), 1, &now, &ev);  // Y
  RunAlone(e, 3, Prompt(33, 3000), 1, &now, &ev);  // Z: takes the free uncached blocks
  std::vector<uint64_t> x, y, z;
  AppendBlockHashes(RootBlockHash("m"), Prompt(33, 1000), 16, 0, &x);
  AppendBlockHashes(RootBlockHash("m"), Prompt(33, 2000), 16, 0, &y);
  AppendBlockHashes(RootBlockHash("m"), Prompt(33, 3000), 16, 0, &z);
  for (const auto& v : ev) EXPECT_EQ(v.type, KvEvent::Type::kBlockStored);
  ev.clear();
  RunAlone(e, 4, Prompt(33, 4000), 1, &now, &ev);  // W: must evict two blocks -> X's, tail first
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0].type, KvEvent::Type::kBlockRemoved);
  EXPECT_EQ(ev[0].block_hashes, (std::vector<uint64_t>{x[1]}));
  EXPECT_EQ(ev[1].type, KvEvent::Type::kBlockRemoved);
  EXPECT_EQ(ev[1].block_hashes, (std::vector<uint64_t>{x[0]}));
  EXPECT_EQ(ev[2].type, KvEvent::Type::kBlockStored);
  const auto gpu = e.pool().CachedHashes(Medium::kGpu);
  EXPECT_EQ(gpu.size(), 6u);
  EXPECT_FALSE(std::binary_search(gpu.begin(), gpu.end(), x[0]));
  EXPECT_TRUE(std::binary_search(gpu.begin(), gpu.end(), y[0]));
  // Y is still cached, X is not.
  EXPECT_EQ(RunAlone(e, 5, Prompt(33, 2000), 1, &now).cached_tokens, 32u);
  EXPECT_EQ(RunAlone(e, 6, Prompt(33, 1000), 1, &now).cached_tokens, 0u);
}

TEST(Engine, ABlockComputedTwiceIsCachedTwiceAndHitsUntilItsLastCopyGoes) {
  // vLLM does not deduplicate: two prompts computing the same block in one step each cache a
  // copy and announce it; each copy is removed when evicted, and the hash hits until the last
  // goes. (A hybrid model recomputing blocks past a window's hit does the same; a prompt
  // preempted there finds its own copies again.)
  Engine e(SmallProfile(8), "m", 0);
  std::vector<uint64_t> h;
  AppendBlockHashes(RootBlockHash("m"), Prompt(17, 1), 16, 0, &h);
  auto count = [&](const std::vector<KvEvent>& ev, KvEvent::Type type) {
    int n = 0;
    for (const auto& v : ev) {
      if (v.type == type)
        n += static_cast<int>(std::count(v.block_hashes.begin(), v.block_hashes.end(), h[0]));
    }
    return n;
  };
  e.AddRequest({1, Prompt(17, 1), 1, 0.0});
  e.AddRequest({2, Prompt(17, 1), 1, 0.0});
  StepResult s = e.Step(0.0);
  ASSERT_EQ(s.outputs.size(), 2u);  // Both in one step: neither could hit the other.
  EXPECT_EQ(count(s.events, KvEvent::Type::kBlockStored), 2);
  EXPECT_FALSE(e.HasWork());
  double now = s.duration;
  // Seven blocks for a 97-token prompt: the four never used, both requests' partial blocks and
  // the first copy (freed before the second).
  std::vector<KvEvent> ev;
  RunAlone(e, 3, Prompt(97, 50), 1, &now, &ev);
  EXPECT_EQ(count(ev, KvEvent::Type::kBlockRemoved), 1);
  EXPECT_TRUE(e.pool().IsCached(h[0]));
  EXPECT_EQ(RunAlone(e, 4, Prompt(17, 1), 1, &now).cached_tokens, 16u);
  ev.clear();
  RunAlone(e, 5, Prompt(113, 60), 1, &now, &ev);  // Every block: the last copy goes.
  EXPECT_EQ(count(ev, KvEvent::Type::kBlockRemoved), 1);
  EXPECT_FALSE(e.pool().IsCached(h[0]));
  EXPECT_EQ(RunAlone(e, 6, Prompt(17, 1), 1, &now).cached_tokens, 0u);
}

TEST(Engine, HostTierKeepsEvictedBlocksAndLoadsThemBack) {
  Engine e(SmallProfile(4, 8), "m", 0);
  double now = 0;
  std::vector<KvEvent> ev;
  RunAlone(e, 1, Prompt(33, 1000), 1, &now, &ev);  // X on blocks 0,1,2
  RunAlone(e, 2, Prompt(33, 2000), 1, &now, &ev);  // Y evicts X's second block into the host
  std::vector<uint64_t> x;
  AppendBlockHashes(RootBlockHash("m"), Prompt(33, 1000), 16, 0, &x);
  EXPECT_EQ(e.pool().CachedHashes(Medium::kCpu), (std::vector<uint64_t>{x[1]}));
  bool stored_cpu = false;
  for (const auto& v : ev) {
    if (v.type == KvEvent::Type::kBlockStored && v.medium == Medium::kCpu) {
      stored_cpu = true;
      EXPECT_EQ(v.block_hashes, (std::vector<uint64_t>{x[1]}));
      EXPECT_EQ(v.parent_block_hash, std::optional<uint64_t>(x[0]));
      EXPECT_EQ(v.token_ids, Prompt(16, 1016));
    }
  }
  EXPECT_TRUE(stored_cpu);
  const double before = now;
  RequestOutput again = RunAlone(e, 3, Prompt(33, 1000), 1, &now);
  EXPECT_EQ(again.cached_tokens, 32u);  // One GPU block + one host block.
  EXPECT_EQ(e.counters().host_blocks_loaded, 1u);
  EXPECT_DOUBLE_EQ(again.first_token_time - before, 0.01 + 1 * 0.001 + 0.005);
}

TEST(Engine, ChunkedPrefillSplitsLongPrompts) {
  Engine e(SmallProfile(16), "m", 0);
  e.AddRequest({1, Prompt(150, 1), 1, 0});
  std::vector<uint32_t> chunks;
  double now = 0;
  while (e.HasWork()) {
    StepResult r = e.Step(now);
    now += r.duration;
    chunks.push_back(r.num_prefill_tokens);
  }
  EXPECT_EQ(chunks, (std::vector<uint32_t>{64, 64, 22}));
}

// A random workload through a tiny pool (preemptions included), twice: identical results.
std::vector<std::string> Replay(uint64_t seed) {
  Engine e(SmallProfile(12), "m", seed);
  const std::vector<EngineRequest> reqs = RandomWorkload(30, 58, 60);
  std::vector<std::string> log;
  std::map<uint64_t, uint32_t> got;
  RunWorkload(e, reqs, [&](double now, const StepResult& r) {
    for (const auto& o : r.outputs) {
      got[o.id] = o.completion_tokens;
      log.push_back(std::to_string(o.id) + ":" + std::to_string(o.new_tokens[0]) + "@" +
                    std::to_string(now) + (o.finished ? " done" : ""));
    }
    for (const auto& ev : r.events) log.push_back("ev" + std::to_string(ev.block_hashes.size()));
  });
  for (const auto& r : reqs) EXPECT_EQ(got[r.id], r.max_tokens);
  EXPECT_GT(e.counters().preemptions, 0u);
  return log;
}

TEST(Engine, DeterministicReplayWithPreemption) {
  const auto a = Replay(7);
  EXPECT_EQ(a, Replay(7));
  EXPECT_NE(a, Replay(8));  // Outputs depend on the seed.
}

}  // namespace
}  // namespace kvgate::sim
