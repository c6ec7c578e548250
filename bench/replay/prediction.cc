#include "bench/replay/prediction.h"

#include <algorithm>
#include <cmath>

#include "bench/replay/report.h"
#include "common/strings.h"

namespace kvgate::replay {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseSeconds(std::string_view v, double* out) {
  return common::ParseDouble(v, out) && std::isfinite(*out) && *out >= 0;
}

}  // namespace

bool ParsePredictionHeader(std::string_view value, TtftPrediction* out) {
  TtftPrediction p;
  std::array<bool, kPredictionParts.size()> seen{};
  bool seen_ttft = false;
  while (!value.empty()) {
    const size_t semi = value.find(';');
    const std::string_view entry = Trim(value.substr(0, semi));
    value = semi == std::string_view::npos ? std::string_view() : value.substr(semi + 1);
    if (entry.empty()) continue;  // A trailing ';'.
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = Trim(entry.substr(0, eq));
    const std::string_view v = Trim(entry.substr(eq + 1));
    if (key == "ttft") {
      if (seen_ttft || !ParseSeconds(v, &p.ttft_s)) return false;
      seen_ttft = true;
      continue;
    }
    for (size_t i = 0; i < kPredictionParts.size(); ++i) {
      if (key != kPredictionParts[i]) continue;
      if (seen[i] || !ParseSeconds(v, &p.parts_s[i])) return false;
      seen[i] = true;
    }
    // Unknown keys: a newer gateway's; their values are not ours to judge.
  }
  if (!seen_ttft) return false;
  *out = p;
  return true;
}

PredictionSummary SummarizePredictions(const std::vector<TtftPrediction>& predicted,
                                       const std::vector<double>& actual_ttft_s) {
  PredictionSummary s;
  std::vector<double> abs_errors;
  double sum_error = 0, sum_predicted = 0, sum_actual = 0;
  uint64_t over = 0, under = 0;
  std::array<double, kPredictionParts.size()> part_sums{};
  std::array<uint64_t, kPredictionParts.size()> part_counts{};
  for (size_t i = 0; i < predicted.size() && i < actual_ttft_s.size(); ++i) {
    const TtftPrediction& p = predicted[i];
    const double actual = actual_ttft_s[i];
    if (!p.present() || !(actual > 0)) continue;
    const double e = (p.ttft_s - actual) / actual;
    abs_errors.push_back(std::fabs(e));
    sum_error += e;
    over += e > 0;
    under += e < 0;
    sum_predicted += p.ttft_s;
    sum_actual += actual;
    for (size_t k = 0; k < kPredictionParts.size(); ++k) {
      if (std::isnan(p.parts_s[k])) continue;
      part_sums[k] += p.parts_s[k];
      ++part_counts[k];
    }
  }
  if (abs_errors.empty()) return s;
  const double n = static_cast<double>(abs_errors.size());
  // The same nearest-rank convention as the latency percentiles.
  const LatencySummary abs = Summarize(std::move(abs_errors));
  s.count = abs.count;
  s.abs_error_p50 = abs.p50;
  s.abs_error_p90 = abs.p90;
  s.bias = sum_error / n;
  s.over_share = over / n;
  s.under_share = under / n;
  s.predicted_ttft_mean_s = sum_predicted / n;
  s.actual_ttft_mean_s = sum_actual / n;
  for (size_t k = 0; k < kPredictionParts.size(); ++k) {
    if (part_counts[k] > 0) s.part_means_s[k] = part_sums[k] / part_counts[k];
  }
  return s;
}

CachedPredictionSummary SummarizeCachedPredictions(const std::vector<int64_t>& predicted,
                                                   const std::vector<uint64_t>& reported,
                                                   const std::vector<uint64_t>& prompt_tokens) {
  CachedPredictionSummary s;
  std::vector<uint64_t> errors;
  uint64_t prompts = 0, total = 0;
  for (size_t i = 0; i < predicted.size() && i < reported.size(); ++i) {
    if (predicted[i] < 0) continue;
    const uint64_t p = static_cast<uint64_t>(predicted[i]);
    const uint64_t r = reported[i];
    ++s.count;
    if (p == r) ++s.exact;
    if (p > r) s.over_tokens += p - r;
    if (r > p) s.under_tokens += r - p;
    errors.push_back(p > r ? p - r : r - p);
    total += errors.back();
    prompts += i < prompt_tokens.size() ? prompt_tokens[i] : 0;
  }
  if (s.count == 0) return s;
  std::sort(errors.begin(), errors.end());
  const size_t rank = (errors.size() * 9 + 9) / 10;  // nearest rank: ceil(0.9 n)
  s.abs_error_p90 = errors[std::max<size_t>(rank, 1) - 1];
  s.abs_error_max = errors.back();
  s.abs_error_mean = static_cast<double>(total) / static_cast<double>(s.count);
  s.abs_error_share = prompts > 0 ? static_cast<double>(total) / static_cast<double>(prompts) : 0;
  return s;
}

}  // namespace kvgate::replay
