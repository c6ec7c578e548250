// File: router/routing/store_load_rate.h
// How fast workers load KV from the shared store, learned from observed TTFTs: what a request's
// first byte took beyond its queue and its recomputed tokens (at the worker's prefill rate),
// per token it loaded. kvaware charges a candidate's store tier at this rate; until the first
// observation, at routing.kvaware.store_tokens_per_second. Thread-safe.
#pragma once

#include <algorithm>

#include "common/mutex.h"

namespace kvgate::router {

class StoreLoadRate {
 public:
  /// Loads shorter than this measure scheduling noise, not bandwidth.
  static constexpr double kMinTokens = 1024;

  /// One request loaded `tokens` from the store, and its TTFT exceeded its queue and recompute
  /// time by `extra_seconds` (clamped at zero: a queue shorter than predicted).
  void Observe(double tokens, double extra_seconds, double configured_tokens_per_second) {
    if (tokens < kMinTokens) return;
    // One outlier (a queue far longer than predicted) must not swamp the estimate: a sample is
    // bounded at 10x the configured cost per token.
    const double cap = 10.0 / configured_tokens_per_second;
    const double sample = std::clamp(extra_seconds / tokens, 0.0, cap);
    common::MutexLock lock(&mu_);
    seconds_per_token_ = samples_ == 0 ? sample : 0.9 * seconds_per_token_ + 0.1 * sample;
    ++samples_;
  }

  /// Tokens per second (the configured figure until observed; at most 1e9).
  double TokensPerSecond(double configured) const {
    common::MutexLock lock(&mu_);
    if (samples_ == 0) return configured;
    return seconds_per_token_ > 1e-9 ? 1.0 / seconds_per_token_ : 1e9;
  }

  uint64_t samples() const {
    common::MutexLock lock(&mu_);
    return samples_;
  }

 private:
  mutable common::Mutex mu_;
  double seconds_per_token_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t samples_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvgate::router
