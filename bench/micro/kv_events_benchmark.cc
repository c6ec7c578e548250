// Precise mode's events path on one thread (issue 7): decode msgpack batches as vLLM publishes
// them and apply them to the precise index; and encode them as kvgate-sim publishes them. Target:
// >= 2 M blocks/s. Results: docs/benchmarks.md.
#include <msgpuck.h>

#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kvevents/event_applier.h"
#include "kvevents/event_decoder.h"
#include "kvevents/publisher.h"
#include "kvindex/prefix_index.h"

namespace kvgate::kvevents {
namespace {

constexpr uint32_t kBlockSize = 16;

// One engine step's batch, legacy positional form: BlockStored of `blocks` new blocks chained
// after `parent` (0 = root), and BlockRemoved of `evict` earlier ids. Ids >= 2^63 as vLLM's.
std::string StepBatch(uint64_t first_id, uint64_t parent, uint32_t blocks,
                      const std::vector<uint64_t>& evict) {
  std::string out(64 + blocks * (9 + kBlockSize * 5) + evict.size() * 9, '\0');
  char* p = out.data();
  p = mp_encode_array(p, 3);
  p = mp_encode_double(p, 1.7e9);
  p = mp_encode_array(p, evict.empty() ? 1 : 2);
  p = mp_encode_array(p, 8);
  p = mp_encode_str(p, "BlockStored", 11);
  p = mp_encode_array(p, blocks);
  for (uint32_t b = 0; b < blocks; ++b) p = mp_encode_uint(p, (uint64_t{1} << 63) | (first_id + b));
  p = parent == 0 ? mp_encode_nil(p) : mp_encode_uint(p, (uint64_t{1} << 63) | parent);
  p = mp_encode_array(p, blocks * kBlockSize);
  for (uint32_t t = 0; t < blocks * kBlockSize; ++t)
    p = mp_encode_uint(p, 1000 + (first_id * 7 + t) % 120000);
  p = mp_encode_uint(p, kBlockSize);
  p = mp_encode_nil(p);
  p = mp_encode_str(p, "GPU", 3);
  p = mp_encode_nil(p);
  if (!evict.empty()) {
    p = mp_encode_array(p, 3);
    p = mp_encode_str(p, "BlockRemoved", 12);
    p = mp_encode_array(p, static_cast<uint32_t>(evict.size()));
    for (uint64_t id : evict) p = mp_encode_uint(p, (uint64_t{1} << 63) | id);
    p = mp_encode_str(p, "GPU", 3);
  }
  p = mp_encode_uint(p, 0);
  out.resize(static_cast<size_t>(p - out.data()));
  return out;
}

// A steady state of an engine with `capacity` cached blocks: each step stores a chain of
// `range(0)` blocks and evicts as many of the oldest, as a full prefix cache does.
void BM_DecodeAndApply(benchmark::State& state) {
  const uint32_t per_step = static_cast<uint32_t>(state.range(0));
  constexpr uint64_t kCapacity = 26'000;
  constexpr int kSteps = 4096;
  std::vector<std::string> batches;
  uint64_t next = 1;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<uint64_t> evict;
    if (next > kCapacity) {
      for (uint32_t b = 0; b < per_step; ++b) evict.push_back(next - kCapacity + b);
    }
    batches.push_back(StepBatch(next, 0, per_step, evict));
    next += per_step;
  }
  kvindex::PrefixIndex index;
  EventApplier applier(index);
  const kvindex::Holder holder{0, 0};
  uint64_t blocks = 0;
  size_t i = 0;
  for (auto _ : state) {
    if (i == batches.size()) {
      state.PauseTiming();
      applier.Forget(holder);  // Replaying the same ids: start from an empty engine again.
      i = 0;
      state.ResumeTiming();
    }
    auto batch = DecodeEventBatch(batches[i++]);
    const ApplyResult r = applier.Apply(holder, "m", *batch);
    blocks += r.stored_blocks + r.removed_blocks;
  }
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeAndApply)->Arg(1)->Arg(16)->Arg(128);

// Decoding alone (the share of msgpack parsing).
void BM_Decode(benchmark::State& state) {
  const std::string batch = StepBatch(1, 0, static_cast<uint32_t>(state.range(0)), {});
  for (auto _ : state) benchmark::DoNotOptimize(DecodeEventBatch(batch));
  state.counters["blocks/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * state.range(0)), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Decode)->Arg(16)->Arg(128);

// Encoding one step's batch as kvgate-sim publishes it (the publisher's side of precise mode):
// `range(0)` new blocks of a hybrid model, stored in both of its groups (full attention and a
// sliding window, the same token ids in each, as vLLM sends them), into a reused buffer.
void BM_EncodeHybridStep(benchmark::State& state) {
  const uint32_t blocks = static_cast<uint32_t>(state.range(0));
  std::vector<PublishedEvent> events(2);
  for (int g = 0; g < 2; ++g) {
    PublishedEvent& e = events[static_cast<size_t>(g)];
    for (uint32_t b = 0; b < blocks; ++b) e.block_hashes.push_back((uint64_t{1} << 63) | (b + 1));
    for (uint32_t t = 0; t < blocks * kBlockSize; ++t) e.token_ids.push_back(1000 + t % 120000);
    e.block_size = kBlockSize;
    e.group_idx = g;
    e.kv_cache_spec_kind = g == 0 ? "full_attention" : "sliding_window";
    if (g == 1) e.kv_cache_spec_sliding_window = 128;
  }
  std::string out;
  for (auto _ : state) {
    out.clear();
    EncodeEventBatch(1.7e9, events, 0, EventEncoding::kArray, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2 * blocks * kBlockSize,
                         benchmark::Counter::kIsRate);
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_EncodeHybridStep)->Arg(16)->Arg(512);

}  // namespace
}  // namespace kvgate::kvevents
BENCHMARK_MAIN();
