// File: router/fleet/sharded_metrics.h
// Counters and histograms for the request path, sharded by gateway thread and merged when
// /metrics is scraped (Envoy's thread-local stats). prometheus-cpp takes a mutex per
// histogram observation and shares each counter's cache line between threads; here every
// thread writes only its own shard, with relaxed single-writer stores, and a scrape sums the
// shards into the same Prometheus families (names, labels and meanings as before).
// Thread-safe as stated per method.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "prometheus/metric_family.h"

namespace kvgate::router {

class ShardedFamily {
 public:
  enum class Type : uint8_t { kCounter, kHistogram };

  /// One label set on one shard. Written only by the shard's thread; read by scrapes.
  class Series {
   public:
    explicit Series(const std::vector<double>* bounds);
    /// Counter: adds `v` (>= 0).
    void Increment(double v = 1) {
      value_.store(value_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    }
    /// Histogram: one observation.
    void Observe(double v);

   private:
    friend class ShardedFamily;
    const std::vector<double>* bounds_;  // null for counters
    std::atomic<double> value_{0};       // counter value, or histogram sum
    std::atomic<uint64_t> count_{0};
    std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // non-cumulative, bounds + 1 (+Inf)
  };

  /// `bounds`: ascending histogram bucket bounds (+Inf implied); empty for counters.
  ShardedFamily(std::string name, std::string help, Type type, std::vector<std::string> labels,
                std::vector<double> bounds, size_t shards);
  ShardedFamily(const ShardedFamily&) = delete;
  ShardedFamily& operator=(const ShardedFamily&) = delete;

  /// The series for `values` (one per label name) on `shard`, created on first use. The
  /// pointer stays valid for the family's lifetime. Call only from the shard's own thread
  /// (each gateway thread uses its own index); lookups are lock-free, creation locks.
  Series* Get(size_t shard, absl::Span<const std::string_view> values);

  /// The merged family. `keep` (may be empty) filters series by their label values, e.g. to
  /// leave out workers a reload removed. Thread-safe.
  prometheus::MetricFamily Collect(
      const std::function<bool(absl::Span<const std::string>)>& keep = nullptr) const;

  const std::string& name() const { return name_; }
  size_t shards() const { return shards_.size(); }

 private:
  struct Entry {
    std::vector<std::string> values;
    std::unique_ptr<Series> series;
  };
  struct Shard {
    mutable common::Mutex mu;  // creation (by the owner) against scrapes
    absl::flat_hash_map<std::string, Entry> series ABSL_GUARDED_BY(mu);
    // The owner thread's lock-free lookup. Not analysed: the owner is the only writer, so
    // its unlocked read races with nothing, which capabilities cannot express.
    Series* FindOwned(const std::string& key) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      auto it = series.find(key);
      return it == series.end() ? nullptr : it->second.series.get();
    }
  };

  const std::string name_;
  const std::string help_;
  const Type type_;
  const std::vector<std::string> labels_;
  std::vector<size_t> label_order_;  // label indexes sorted by name: exposition order
  const std::vector<double> bounds_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace kvgate::router
