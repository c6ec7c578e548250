#include "router/fleet/prefill_model.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace kvgate::router {
namespace {

struct Line {
  double intercept = 0, slope = 0;
};

// Least squares over `n` samples with weights `weight(i)`; nullopt when the samples do not
// determine a line.
template <typename Samples, typename Weight>
std::optional<Line> WeightedLine(const Samples& s, size_t n, Weight weight) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    const double u = weight(i);
    sw += u;
    sx += u * s[i].work;
    sy += u * s[i].seconds;
    sxx += u * s[i].work * s[i].work;
    sxy += u * s[i].work * s[i].seconds;
  }
  const double det = sw * sxx - sx * sx;
  if (!(det > 0) || !std::isfinite(det)) return std::nullopt;
  Line l;
  l.slope = (sw * sxy - sx * sy) / det;
  l.intercept = (sy - l.slope * sx) / sw;
  return l;
}

}  // namespace

void PrefillModel::Observe(double work, double seconds) {
  if (!(seconds > 0) || !(work >= 0) || !std::isfinite(work) || !std::isfinite(seconds)) return;
  window_[next_] = {work, seconds};
  next_ = (next_ + 1) % kWindow;
  ++samples_;
  Fit();
}

void PrefillModel::Fit() {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(samples_, kWindow));
  double sum_w = 0, sum_t = 0, sum_ww = 0;
  for (size_t i = 0; i < n; ++i) {
    sum_w += window_[i].work;
    sum_t += window_[i].seconds;
    sum_ww += window_[i].work * window_[i].work;
  }
  const double mean_w = sum_w / static_cast<double>(n);
  const double var_w = std::max(0.0, sum_ww / static_cast<double>(n) - mean_w * mean_w);
  // Through the origin: the rate the samples show as a whole.
  const double ratio_rate = sum_t > 0 && sum_w > 0 ? sum_w / sum_t : 0;
  const bool was_fitted = fitted_;
  fitted_ = false;
  if (n < kMinSamples || mean_w <= 0 || var_w < kMinCv * kMinCv * mean_w * mean_w) {
    rate_ = ratio_rate;
    overhead_ = 0;
    return;
  }
  // The spread checked above makes the unweighted line determined.
  Line line = was_fitted ? Line{overhead_, 1 / rate_}
                         : WeightedLine(window_, n, [](size_t) { return 1.0; }).value_or(Line{});
  for (int round = 0; round < kRounds; ++round) {
    // Weighted least squares with weight 1 / (seconds x |residual|) has the least sum of
    // |residual| / seconds as its fixed point. The floor keeps exact samples finite.
    const std::optional<Line> next = WeightedLine(window_, n, [&](size_t i) {
      const double t = window_[i].seconds;
      const double r = std::abs(t - line.intercept - line.slope * window_[i].work);
      return 1 / (t * std::max(r, 1e-4 * t));
    });
    if (!next) break;
    line = *next;
  }
  // A line that is not a cost (time falling with work, or negative at no work) is noise: keep
  // the ratio.
  if (!(line.slope > 0) || line.intercept < 0 || !std::isfinite(line.intercept)) {
    rate_ = ratio_rate;
    overhead_ = 0;
    return;
  }
  rate_ = 1 / line.slope;
  overhead_ = line.intercept;
  fitted_ = true;
}

double PrefillModel::Seconds(double work, double fallback_rate) const {
  return rate_ > 0 ? overhead_ + work / rate_ : work / fallback_rate;
}

}  // namespace kvgate::router
