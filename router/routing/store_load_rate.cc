#include "router/routing/store_load_rate.h"

#include <algorithm>

namespace kvgate::router {

void StoreLoadRate::Observe(double tokens, double extra_seconds) {
  if (!(tokens >= kMinTokens)) return;
  // A load that took no time beyond the predicted queue and recompute was hidden by their
  // over-prediction: it says nothing of the store's rate. Taken as a zero it pulled the median
  // to zero whenever such loads held half the window's tokens, and kvaware then charged nothing
  // for a load of any size (issue 32: 103 of 246 long loads of a qwen3-next-like run were
  // charged at 10^8-10^9 tokens a second).
  if (!(extra_seconds > 0)) return;
  const double sample = extra_seconds / tokens;
  if (!(sample < 1e3)) return;  // absurd: nothing to learn
  common::MutexLock lock(&mu_);
  window_[samples_ % kWindow] = Sample{tokens, sample};
  ++samples_;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(samples_, kWindow));
  std::array<Sample, kWindow> sorted;
  std::copy_n(window_.begin(), n, sorted.begin());
  std::sort(sorted.begin(), sorted.begin() + n, [](const Sample& a, const Sample& b) {
    return a.seconds_per_token < b.seconds_per_token;
  });
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += sorted[i].tokens;
  // The lowest sample at which half the tokens are covered.
  double covered = 0;
  for (size_t i = 0; i < n; ++i) {
    covered += sorted[i].tokens;
    if (covered * 2 >= total) {
      seconds_per_token_ = sorted[i].seconds_per_token;
      break;
    }
  }
}

double StoreLoadRate::TokensPerSecond(double configured) const {
  common::MutexLock lock(&mu_);
  if (samples_ == 0) return configured;
  return seconds_per_token_ > 1e-9 ? 1.0 / seconds_per_token_ : 1e9;
}

}  // namespace kvgate::router
