// File: router/cluster/cluster_internal.h
// What the replica sync's publishing side (cluster_sync.cc) and receiving side
// (cluster_apply.cc) share: the kvgate_cluster_* metrics, wall-clock stamps, ids as hex and
// the bound on a snapshot's blocks per worker. Internal to cluster/.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "router/cluster/cluster_sync.h"

namespace kvgate::router::cluster {

// A snapshot carries at most this many blocks of one worker (16 MiB of hashes).
inline constexpr size_t kMaxHeldBlocksPerWorker = size_t{1} << 21;

// Microseconds since the epoch: frames carry wall-clock stamps (replicas share no clock).
inline int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A replica id as 16 hex digits (logs, /admin/cluster, snapshot keys).
inline std::string Hex(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  return s;
}

struct ClusterSync::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : connected(Gauge(r, "kvgate_cluster_connected",
                        "1 when both links to the cluster's Redis are up, else 0")),
        degraded(Gauge(r, "kvgate_cluster_degraded",
                       "1 while this replica routes on its own state only (Redis unreachable)")),
        peers(Gauge(r, "kvgate_cluster_peers", "Other replicas heard within the peer timeout")),
        sent(Counter(r, "kvgate_cluster_messages_sent_total", "Frames published")),
        received(Counter(r, "kvgate_cluster_messages_received_total",
                         "Frames received from other replicas")),
        bytes_sent(Counter(r, "kvgate_cluster_bytes_sent_total", "Bytes of frames published")),
        bytes_received(
            Counter(r, "kvgate_cluster_bytes_received_total", "Bytes of frames received")),
        lost(Counter(r, "kvgate_cluster_messages_lost_total",
                     "Frames of other replicas never received (sequence gaps)")),
        dropped(Counter(r, "kvgate_cluster_messages_dropped_total",
                        "Updates not published: the queue was full or Redis unreachable")),
        decode_errors(Counter(r, "kvgate_cluster_decode_errors_total",
                              "Frames or snapshots refused as malformed")),
        snapshots_merged(Counter(r, "kvgate_cluster_snapshots_merged_total",
                                 "Other replicas' snapshots loaded (join, loss, reconnect)")),
        snapshots_written(Counter(r, "kvgate_cluster_snapshots_written_total",
                                  "This replica's snapshots written to Redis")),
        lag(prometheus::BuildHistogram()
                .Name("kvgate_cluster_visibility_lag_seconds")
                .Help("A reservation change on another replica until this one applied it")
                .Register(r)
                .Add({},
                     prometheus::Histogram::BucketBoundaries{
                         0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5})) {}

  static prometheus::Gauge& Gauge(prometheus::Registry& r, const char* name, const char* help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
  }
  static prometheus::Counter& Counter(prometheus::Registry& r, const char* name, const char* help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
  }

  prometheus::Gauge& connected;
  prometheus::Gauge& degraded;
  prometheus::Gauge& peers;
  prometheus::Counter& sent;
  prometheus::Counter& received;
  prometheus::Counter& bytes_sent;
  prometheus::Counter& bytes_received;
  prometheus::Counter& lost;
  prometheus::Counter& dropped;
  prometheus::Counter& decode_errors;
  prometheus::Counter& snapshots_merged;
  prometheus::Counter& snapshots_written;
  prometheus::Histogram& lag;
};

}  // namespace kvgate::router::cluster
