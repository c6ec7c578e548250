// File: router/routing/cluster_sink.h
// What one replica tells the others (router/cluster/, docs/scale-out.md): the routing
// decisions and admin actions other kvgate replicas must know to route as one. The planner,
// the proxy handler and /admin/drain call it on the request path, so every method only queues
// (never waits for the network). The default sink, for a replica alone, does nothing.
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "kvindex/types.h"

namespace kvgate::router {

class Worker;

class ClusterSink {
 public:
  virtual ~ClusterSink() = default;
  /// A reservation was made or released on some worker: the load table is due.
  virtual void LoadChanged() {}
  /// Approximate learning: `worker` will hold `chain` (prompt_tokens long).
  virtual void Learned(const Worker& /*worker*/, absl::Span<const kvindex::BlockHash> /*chain*/,
                       uint32_t /*prompt_tokens*/) {}
  /// An attempt `worker` did not serve: the `blocks` its decision taught are not cached there.
  virtual void Forgot(const Worker& /*worker*/, absl::Span<const kvindex::BlockHash> /*blocks*/) {}
  /// An OpenAI Responses response was stored on `worker` (or, Unpinned, deleted).
  virtual void Pinned(std::string_view /*response_id*/, const Worker& /*worker*/) {}
  virtual void Unpinned(std::string_view /*response_id*/) {}
  /// POST /admin/drain changed `worker`'s drain flag.
  virtual void Drained(const Worker& /*worker*/, bool /*draining*/) {}
  /// GET /admin/cluster: the sync's state as a JSON object.
  virtual std::string StatusJson() const { return R"({"enabled":false})"; }
};

/// The sink of a replica that syncs with no one.
inline ClusterSink& NoClusterSink() {
  static ClusterSink sink;
  return sink;
}

}  // namespace kvgate::router
