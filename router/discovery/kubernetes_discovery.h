// File: router/discovery/kubernetes_discovery.h
// Workers found by watching a Service's EndpointSlices through the Kubernetes API: list them,
// then watch from the list's resourceVersion (bookmarks on, the server ending each watch after
// watch_timeout_s); a dropped watch is resumed from the last resourceVersion seen, and a 410
// Gone (an HTTP answer or an ERROR event: that version was compacted away) re-lists. Each
// endpoint is a worker in the state its conditions give (ready, not ready, terminating), with
// kvgate.io/* settings from the Service's labels and, with pod_metadata, its pod's labels and
// annotations (read once per pod). A failing API server keeps the last set. Runs on the
// control io_context; Stop may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "config/config.h"
#include "net/asio.h"
#include "router/discovery/discovery_source.h"

namespace kvgate::router {

class KubernetesDiscovery : public DiscoverySource {
 public:
  /// Endpoints outside the source's bounds are left out and reported to `on_refused`.
  KubernetesDiscovery(net::io_context& ioc, size_t index, config::KubernetesDiscoveryConfig source,
                      OnChange on_change, OnRefused on_refused = {});
  ~KubernetesDiscovery() override;

  void Start() override;
  void Stop() override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvgate::router
