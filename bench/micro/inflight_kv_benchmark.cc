// What counting a worker's in-flight KV once per shared block costs a request: Worker::Reserve
// and Release add and remove one key per InFlightKv::kGroup blocks of the prompt's chain (under
// the worker's kv lock, not measured here), beside 8 requests of the same agent already in
// flight (sharing a 12,800-token system prompt). Results: docs/benchmarks.md.
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kvindex/block_hash.h"
#include "router/fleet/inflight_kv.h"

namespace kvgate::router {
namespace {

// A prompt of `tokens` tokens in 16-token blocks: an 800-block system prompt, then its own.
std::vector<kvindex::BlockHash> Prompt(uint32_t tokens, uint32_t who) {
  std::vector<uint32_t> t(tokens);
  for (uint32_t i = 0; i < tokens; ++i) t[i] = i < 12'800 ? i : i * 7919 + who;
  std::vector<kvindex::BlockHash> chain;
  kvindex::HashTokenBlocks(t, 1, 16, &chain);
  return chain;
}

// Add and Remove of one prompt of range(0) tokens beside 8 others in flight.
void BM_InFlightKvAddRemove(benchmark::State& state) {
  const uint32_t tokens = static_cast<uint32_t>(state.range(0));
  InFlightKv kv;
  std::vector<InFlightKv::Held> others;
  for (uint32_t w = 1; w <= 8; ++w) {
    const auto c = Prompt(tokens, w);
    others.push_back(kv.Add(c, static_cast<int64_t>(c.size())));
  }
  const auto chain = Prompt(tokens, 0);
  for (auto _ : state) {
    const InFlightKv::Held held = kv.Add(chain, static_cast<int64_t>(chain.size()));
    benchmark::DoNotOptimize(kv.blocks());
    kv.Remove(held);
  }
  state.SetLabel(std::to_string(chain.size()) + " blocks");
}
BENCHMARK(BM_InFlightKvAddRemove)->Arg(1'024)->Arg(20'000)->Arg(131'072)->Arg(287'000);

}  // namespace
}  // namespace kvgate::router
