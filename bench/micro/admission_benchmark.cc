// Rate limiter micro benchmarks (issue 27: past 100,000 client addresses each new one cost a
// full table scan, 6,351 -> 1,294 req/s). The limiter keeps its buckets in an LruTable, so
// taking from a new address's bucket should cost the same with 1k, 100k or 1M addresses held.
// Results: docs/benchmarks.md.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "config/config.h"
#include "router/runtime/admission.h"

namespace kvgate::router {
namespace {

// An IPv4-looking address per number, as the gateway's keys are (the text, not the address).
void Address(uint64_t n, std::string* out) {
  out->clear();
  absl::StrAppend(out, (n >> 24) & 255, ".", (n >> 16) & 255, ".", (n >> 8) & 255, ".", n & 255);
}

config::RateLimitConfig Rate() {
  config::RateLimitConfig r;
  r.requests_per_minute = 600;
  return r;
}

// A limiter holding `held` addresses, full (max_keys = held): each new address drops the least
// recently used bucket, the steady state of a flood from ever new addresses.
void BM_RateLimiterNewAddress(benchmark::State& state) {
  const uint64_t held = static_cast<uint64_t>(state.range(0));
  RateLimiter limiter(held);
  const config::RateLimitConfig rate = Rate();
  const auto now = SteadyClock::now();
  std::string key;
  uint64_t n = 0;
  for (; n < held; ++n) {
    Address(n, &key);
    limiter.Take(key, rate, 0, now);
  }
  for (auto _ : state) {
    Address(n++, &key);  // never seen: the oldest was dropped long ago
    benchmark::DoNotOptimize(limiter.Take(key, rate, 0, now));
  }
  state.counters["keys"] = static_cast<double>(limiter.keys());
  state.counters["evictions"] = static_cast<double>(limiter.evictions());
}
BENCHMARK(BM_RateLimiterNewAddress)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

// The same limiter, one address already held asking again: the common case, for reference.
void BM_RateLimiterKnownAddress(benchmark::State& state) {
  const uint64_t held = static_cast<uint64_t>(state.range(0));
  RateLimiter limiter(held);
  const config::RateLimitConfig rate = Rate();
  auto now = SteadyClock::now();
  std::string key;
  for (uint64_t n = 0; n < held; ++n) {
    Address(n, &key);
    limiter.Take(key, rate, 0, now);
  }
  uint64_t n = 0;
  for (auto _ : state) {
    Address(n, &key);
    n = (n + 7919) % held;  // spread over the table, not one hot entry
    benchmark::DoNotOptimize(limiter.Take(key, rate, 0, now));
  }
}
BENCHMARK(BM_RateLimiterKnownAddress)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

// Formatting the key alone, to subtract from the two above.
void BM_AddressText(benchmark::State& state) {
  std::string key;
  uint64_t n = 0;
  for (auto _ : state) {
    Address(n++, &key);
    benchmark::DoNotOptimize(key.data());
  }
}
BENCHMARK(BM_AddressText);

}  // namespace
}  // namespace kvgate::router

BENCHMARK_MAIN();
