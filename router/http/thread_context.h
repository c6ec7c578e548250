// File: router/http/thread_context.h
// What one gateway thread owns: its io_context (run by that thread alone, hence an implicit
// strand: nothing here needs a lock), its upstream pool, buffer pool and scratch buffer, its
// client connections and the deadline sweep over them, its view of the published snapshot and
// its shard of the request metrics. It is not where stages find each other: the gateway gives
// each stage (upstream, dispatcher, proxy handler) what it uses when it makes it.
// Thread-compatible: touched only from its own thread, or via net::post.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "net/asio.h"
#include "net/upstream_pool.h"
#include "router/fleet/sharded_metrics.h"
#include "router/http/client_connection.h"
#include "router/http/exchange.h"
#include "router/runtime/buffer_pool.h"
#include "router/runtime/gateway_state.h"
#include "router/runtime/snapshot_lease.h"

namespace kvgate::router {

/// Cached handles of this thread's shard, per worker.
struct WorkerSeries {
  ShardedFamily::Series* ttfb = nullptr;
  ShardedFamily::Series* ttft = nullptr;
  ShardedFamily::Series* ttft_error = nullptr;
  ShardedFamily::Series* ttft_predicted = nullptr;
  ShardedFamily::Series* ttft_observed = nullptr;
  ShardedFamily::Series* predicted = nullptr;
  ShardedFamily::Series* actual = nullptr;
  ShardedFamily::Series* over = nullptr;
  ShardedFamily::Series* under = nullptr;
};

class ThreadContext {
 private:
  friend class SnapshotLease;
  // Declared before the io_context, so destroyed after it: a request still suspended when the
  // io_context is destroyed ends its lease in here.
  std::deque<SnapshotLease::Entry> snapshots_;  // newest last; older ones while leased
  uint64_t seen_version_ = ~uint64_t{0};

 public:
  ThreadContext(GatewayState& state, uint32_t index);
  ~ThreadContext();

  net::io_context ioc{1};
  const uint32_t index;
  BufferPool buffers;
  UpstreamPool pool{ioc};
  absl::flat_hash_set<ClientConnectionPtr> connections;

  /// 64 KiB this thread reuses for bytes that are written on before it yields (response
  /// relay): never hold it across a co_await.
  char* scratch() { return scratch_.get(); }
  static constexpr size_t kScratchBytes = 64 * 1024;

  /// The published snapshot as this thread last saw it, refreshed when the state's version
  /// changed; held until the lease ends.
  SnapshotLease Lease();
  /// The current snapshot's config, for code that does not outlive the current step.
  const config::Config& config();

  /// The gateway is draining: connections close after their request in progress.
  bool draining() const { return state_.draining.load(std::memory_order_relaxed); }
  AccessLog& access_log() { return state_.access_log; }
  /// A client's TLS handshake failed (kvgate_tls_handshake_errors_total{side="client"}).
  void CountClientTlsFailure();

  /// Starts the sweep (every 100 ms from the first connection on): it expires deadlines, arms
  /// the disconnect watches requests asked for (WatchForDisconnect) and watches the worker
  /// connections idle since the last one (UpstreamPool::WatchIdle).
  void StartSweep();

  // Idle client connections (no request in progress), oldest first, in two lists: those on
  // the probe reserve and the others. When the connection table is full, a new connection
  // takes the place of the one idle longest (issue 27: idle keep-alives held every place and
  // the reserve, and probes were refused).
  /// Puts `c` at the end of its idle list, unless it is there already (idle since then).
  void MarkIdle(ClientConnection& c);
  /// Takes `c` off its idle list (a request started, or it closes).
  void MarkBusy(ClientConnection& c);
  /// Ends the connection idle longest (of the reserve's with `reserve`), giving back its place
  /// at once; its session closes it. False when there is none.
  bool ReapOldestIdle(bool reserve);
  /// Idle connections not on the reserve; read by other threads' acceptors.
  size_t idle_count() const { return idle_count_.load(std::memory_order_relaxed); }
  /// Gives back `c`'s place in the connection table and in its address's count, once.
  void ReleasePlace(ClientConnection& c);

  // This thread's metric series.
  /// `worker_id` -1 when the gateway answered itself.
  ShardedFamily::Series& RequestSeries(EndpointLabel endpoint, int code, int64_t worker_id,
                                       std::string_view worker);
  ShardedFamily::Series& DurationSeries(EndpointLabel endpoint);
  ShardedFamily::Series& OverheadSeries();
  /// kvgate_api_key_requests_total{key,code}, cached per thread.
  prometheus::Counter& ApiKeySeries(const std::string& key, int code);
  const WorkerSeries& ForWorker(uint32_t worker_id, std::string_view name);

 private:
  void Refresh();
  void ReleaseEntry(SnapshotLease::Entry* e);
  net::awaitable<void> Sweep();

  // The gateway-wide state, read here only for what the thread's sessions need (the
  // snapshot, draining, the access log, the connection table and the metric families);
  // the stages above get what they use from the gateway when it makes them.
  GatewayState& state_;
  std::unique_ptr<char[]> scratch_;
  absl::flat_hash_map<uint64_t, ShardedFamily::Series*> requests_;
  ShardedFamily::Series* durations_[kNumEndpointLabels] = {};
  ShardedFamily::Series* overhead_ = nullptr;
  absl::flat_hash_map<uint32_t, WorkerSeries> worker_series_;
  absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*> api_key_series_;
  bool sweeping_ = false;
  std::list<ClientConnection*> idle_;          // oldest first; not on the reserve
  std::list<ClientConnection*> idle_reserve_;  // oldest first; on the reserve
  std::atomic<size_t> idle_count_{0};          // idle_.size(), for other threads
};

}  // namespace kvgate::router
