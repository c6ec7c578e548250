// File: bench/replay/prediction.h
// The gateway's TTFT prediction (x-kvgate-prediction response header of the kvaware policy)
// and how far it was from the TTFT the client measured. Value types and pure functions;
// thread-safe.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvgate::replay {

/// The parts of a predicted TTFT, in the order the report lists them.
inline constexpr std::array<std::string_view, 7> kPredictionParts = {
    "queue", "prefill", "overhead", "host", "store", "decode", "kv_wait"};

/// One x-kvgate-prediction header, in seconds.
struct TtftPrediction {
  double ttft_s = -1;  // < 0 when the response carried no (valid) prediction.
  std::array<double, kPredictionParts.size()> parts_s = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};

  bool present() const { return ttft_s >= 0; }
};

/// Parses "ttft=1.2;queue=0.1;prefill=0.9;...": keys in any order, unknown keys ignored,
/// blanks around entries allowed; a part missing from the header stays NaN. False (and
/// `*out` untouched) when `ttft` is missing or any entry is not key=finite non-negative number,
/// or a known key repeats.
bool ParsePredictionHeader(std::string_view value, TtftPrediction* out);

/// The error of the predictions against the measured TTFTs: e = (predicted - actual) / actual.
struct PredictionSummary {
  uint64_t count = 0;  // Requests with both a prediction and a measured TTFT > 0.
  double abs_error_p50 = 0, abs_error_p90 = 0;  // Of |e|, nearest rank.
  double bias = 0;                              // Mean of e (signed).
  double over_share = 0, under_share = 0;       // Shares with e > 0 and e < 0.
  double predicted_ttft_mean_s = 0, actual_ttft_mean_s = 0;
  // Mean of each part over the requests whose header had it; NaN when none had.
  std::array<double, kPredictionParts.size()> part_means_s = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
};

/// Pairs predicted[i] with actual_ttft_s[i]; pairs without a prediction or with an actual
/// TTFT <= 0 are skipped.
PredictionSummary SummarizePredictions(const std::vector<TtftPrediction>& predicted,
                                       const std::vector<double>& actual_ttft_s);

/// How far the gateway's predicted cached tokens (x-kvgate-predicted-cached-tokens) were from the
/// cached tokens the engine reported in usage: what precise mode must get exactly right.
struct CachedPredictionSummary {
  uint64_t count = 0;        // Requests with both.
  uint64_t exact = 0;        // Of them, predicted == reported.
  uint64_t over_tokens = 0;  // Sum of (predicted - reported) where predicted > reported.
  uint64_t under_tokens = 0;
  uint64_t abs_error_p90 = 0, abs_error_max = 0;  // Tokens; nearest rank.
  double abs_error_mean = 0;                      // Tokens.
  // sum |predicted - reported| / sum prompt tokens: the error as a share of the prompts.
  double abs_error_share = 0;
};

/// `predicted[i]` < 0 (no header) pairs are skipped.
CachedPredictionSummary SummarizeCachedPredictions(const std::vector<int64_t>& predicted,
                                                   const std::vector<uint64_t>& reported,
                                                   const std::vector<uint64_t>& prompt_tokens);

}  // namespace kvgate::replay
