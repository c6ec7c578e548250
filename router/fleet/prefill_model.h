// File: router/fleet/prefill_model.h
// What one worker's time to first token costs, learned from the TTFTs it was observed to take:
//   seconds = overhead + work / rate
// where `work` is the prefill ahead of the answer in token-equivalents (the queue reserved on
// the worker plus the prompt's own uncached tokens, each weighted by its context: see
// PrefillWork in router/policies/routing_policy.h). A least-squares line over exponentially
// decayed samples: the slope is 1/rate; the intercept is what an engine spends whatever the
// prompt (the step it joins, decode steps of the running requests interleaved with the
// prefill), which a rate alone put on the tokens and so under-predicted short prefills and
// over-predicted long ones (issue 30). Until the samples spread enough to fit a line, the rate
// is their work over their time and the overhead 0. Thread-compatible.
#pragma once

#include <cstdint>

namespace kvgate::router {

class PrefillModel {
 public:
  /// One answer whose first token came `seconds` after the request was sent with `work` ahead.
  void Observe(double work, double seconds);
  /// Token-equivalents per second; 0 until observed.
  double rate() const { return rate_; }
  /// Seconds every TTFT costs beside the work; 0 until fitted.
  double overhead() const { return overhead_; }
  /// overhead + work / rate; `fallback_rate` until observed.
  double Seconds(double work, double fallback_rate) const;

  // Each new sample weighs older ones down by this: about the last 50 answers count.
  static constexpr double kDecay = 0.98;
  // A line needs this many samples whose work spreads by a coefficient of variation of kMinCv.
  static constexpr uint64_t kMinSamples = 8;
  static constexpr double kMinCv = 0.25;

 private:
  void Fit();

  uint64_t samples_ = 0;
  double n_ = 0, sw_ = 0, sww_ = 0, st_ = 0, swt_ = 0;  // decayed sums
  double rate_ = 0;
  double overhead_ = 0;
};

}  // namespace kvgate::router
