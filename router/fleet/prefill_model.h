// File: router/fleet/prefill_model.h
// What one worker's time to first token costs, learned from the TTFTs it was observed to take:
//   seconds = overhead + work / rate
// where `work` is the prefill ahead of the answer in token-equivalents (the queue reserved on
// the worker plus the prompt's own uncached tokens, each weighted by its context: see
// PrefillWork in router/policies/routing_policy.h). The slope is 1/rate; the intercept is what
// an engine spends whatever the prompt (the step it joins, decode steps of the running requests
// interleaved with the prefill), which a rate alone put on the tokens and so under-predicted
// short prefills and over-predicted long ones (issue 30).
//
// The line minimises the sum of relative errors |seconds - line| / seconds over the last
// kWindow answers (iteratively reweighted least squares, warm-started from the last fit). Not
// least squares: TTFTs carry one-sided outliers (a step another request's prefill or store load
// stretched, a stall of the host), and one 150 ms sample among 5 ms ones raised a least-squares
// intercept by milliseconds, so every short prompt was predicted 2-3x too slow (issue 30: p90
// relative error 70% offline on a replay's records, 36% with this fit). Relative, because the
// error kvaware is judged by is relative and a short TTFT is decided on as often as a long one.
// Until kMinSamples answers spread enough to fit a line, the rate is their work over their time
// and the overhead 0. Thread-compatible.
#pragma once

#include <array>
#include <cstddef>
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

  // The answers the line is fitted to: the most recent ones (about a minute of one worker's
  // traffic in the agentic replays), so it follows a worker whose load changes.
  static constexpr size_t kWindow = 64;
  // A line needs this many samples whose work spreads by a coefficient of variation of kMinCv.
  static constexpr uint64_t kMinSamples = 8;
  static constexpr double kMinCv = 0.25;
  // Reweighting rounds a fit: warm-started, the line moves little between answers.
  static constexpr int kRounds = 12;

 private:
  struct Sample {
    double work = 0, seconds = 0;
  };
  void Fit();

  std::array<Sample, kWindow> window_{};
  size_t next_ = 0;       // where the next sample goes
  uint64_t samples_ = 0;  // observed in all
  double rate_ = 0;
  double overhead_ = 0;
  bool fitted_ = false;  // rate_ and overhead_ are a line (else a ratio)
};

}  // namespace kvgate::router
