// File: router/routing/store_load_rate.h
// How fast workers load KV from the shared store, learned from observed TTFTs: what a request's
// first byte took beyond its queue and its recomputed tokens (at the worker's prefill line),
// per token it loaded. kvaware charges a candidate's store tier at this rate; until the first
// observation, at routing.kvaware.store_tokens_per_second. Thread-safe.
//
// The rate is the token-weighted median of the last kWindow loads' seconds per token. A load's
// sample carries the noise of everything else in its TTFT (the step it joined, other requests'
// loads in that step, a host stall) divided by its own size, so a short load's sample scatters
// widely and a long one's is close to the real cost: weighting by tokens lets the long loads,
// whose cost kvaware most needs right, decide. The median ignores the stalls. Loads hidden by an
// over-predicted queue are left out rather than counted as free (see Observe). The moving average
// it replaces gave every load one vote and capped outliers at 10x: on qwen3-next-like with the
// store its rate wandered between 0.6M and 17M tokens/s around a real ~4M, and the store part
// of 100K+-token loads was predicted 1.6x too slow at the median (issue 32).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "common/mutex.h"

namespace kvgate::router {

class StoreLoadRate {
 public:
  /// Loads shorter than this measure scheduling noise, not bandwidth.
  static constexpr double kMinTokens = 1024;
  /// The loads the median is taken over: the most recent ones.
  static constexpr size_t kWindow = 64;

  /// One request loaded `tokens` from the store, and its TTFT exceeded its queue and recompute
  /// time by `extra_seconds`. A load with no time beyond them (a queue shorter than predicted
  /// hid it) is not a sample: a load is never free.
  void Observe(double tokens, double extra_seconds);

  /// Tokens per second (the configured figure until observed; at most 1e9).
  double TokensPerSecond(double configured) const;

  uint64_t samples() const {
    common::MutexLock lock(&mu_);
    return samples_;
  }

 private:
  struct Sample {
    double tokens = 0, seconds_per_token = 0;
  };

  mutable common::Mutex mu_;
  std::array<Sample, kWindow> window_ ABSL_GUARDED_BY(mu_){};
  uint64_t samples_ ABSL_GUARDED_BY(mu_) = 0;
  double seconds_per_token_ ABSL_GUARDED_BY(mu_) = 0;  // the window's weighted median
};

}  // namespace kvgate::router
