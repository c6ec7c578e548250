#include "router/fleet/sharded_metrics.h"

#include <algorithm>
#include <limits>
#include <map>

#include "common/assert.h"
#include "common/mutex.h"

namespace kvgate::router {
namespace {

std::string KeyOf(absl::Span<const std::string_view> values) {
  std::string key;
  for (std::string_view v : values) {
    key.append(v);
    key.push_back('\x1f');
  }
  return key;
}

}  // namespace

ShardedFamily::Series::Series(const std::vector<double>* bounds) : bounds_(bounds) {
  if (bounds_ != nullptr) {
    buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_->size() + 1);
    for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
  }
}

void ShardedFamily::Series::Observe(double v) {
  const auto& b = *bounds_;
  const size_t i = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
  buckets_[i].store(buckets_[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  count_.store(count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  value_.store(value_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

ShardedFamily::ShardedFamily(std::string name, std::string help, Type type,
                             std::vector<std::string> labels, std::vector<double> bounds,
                             size_t shards)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      labels_(std::move(labels)),
      bounds_(std::move(bounds)) {
  for (size_t i = 0; i < std::max<size_t>(1, shards); ++i) {
    shards_.push_back(std::make_unique<Shard>());
  }
  // Labels sorted by name, as prometheus-cpp prints them.
  for (size_t i = 0; i < labels_.size(); ++i) label_order_.push_back(i);
  std::sort(label_order_.begin(), label_order_.end(),
            [this](size_t a, size_t b) { return labels_[a] < labels_[b]; });
}

ShardedFamily::Series* ShardedFamily::Get(size_t shard, absl::Span<const std::string_view> values) {
  KVGATE_ASSERT(shard < shards_.size(), "metric shard out of range");
  Shard& s = *shards_[shard % shards_.size()];
  std::string key = KeyOf(values);
  if (Series* found = s.FindOwned(key)) return found;
  Entry e;
  e.values.assign(values.begin(), values.end());
  e.series = std::make_unique<Series>(type_ == Type::kHistogram ? &bounds_ : nullptr);
  Series* out = e.series.get();
  common::MutexLock lock(&s.mu);
  s.series.emplace(std::move(key), std::move(e));
  return out;
}

prometheus::MetricFamily ShardedFamily::Collect(
    const std::function<bool(absl::Span<const std::string>)>& keep) const {
  struct Merged {
    // A copy: the owner thread may grow its shard's map (moving the entries) once the shard's
    // lock is released.
    std::vector<std::string> values;
    double value = 0;
    uint64_t count = 0;
    std::vector<uint64_t> buckets;
  };
  std::map<std::string, Merged> merged;  // sorted: a stable exposition order
  for (const auto& shard : shards_) {
    common::MutexLock lock(&shard->mu);
    for (const auto& [key, e] : shard->series) {
      if (keep && !keep(e.values)) continue;
      Merged& m = merged[key];
      if (m.values.empty()) m.values = e.values;
      const Series& s = *e.series;
      m.value += s.value_.load(std::memory_order_relaxed);
      if (type_ == Type::kHistogram) {
        m.buckets.resize(bounds_.size() + 1);
        for (size_t i = 0; i <= bounds_.size(); ++i) {
          m.buckets[i] += s.buckets_[i].load(std::memory_order_relaxed);
        }
        m.count += s.count_.load(std::memory_order_relaxed);
      }
    }
  }
  prometheus::MetricFamily f;
  f.name = name_;
  f.help = help_;
  f.type =
      type_ == Type::kCounter ? prometheus::MetricType::Counter : prometheus::MetricType::Histogram;
  for (auto& [key, m] : merged) {
    prometheus::ClientMetric c;
    for (size_t i : label_order_) c.label.push_back({labels_[i], m.values[i]});
    if (type_ == Type::kCounter) {
      c.counter.value = m.value;
    } else {
      // The counts were read bucket by bucket while the owner kept writing: make them
      // cumulative and consistent with the total (a scrape must never see a bucket above
      // +Inf's count).
      KVGATE_ASSERT(m.buckets.size() == bounds_.size() + 1, "histogram series without buckets");
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += m.buckets[i];
        prometheus::ClientMetric::Bucket b;
        b.cumulative_count = cumulative;
        b.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
        c.histogram.bucket.push_back(b);
      }
      c.histogram.sample_count = cumulative;
      c.histogram.sample_sum = m.value;
    }
    f.metric.push_back(std::move(c));
  }
  return f;
}

}  // namespace kvgate::router
