// File: router/server/gateway.h
// The kvgate gateway: listener, per-thread event loops, control plane (health checks, model
// discovery), reload and drain. Beast stays behind this header.
//
// Threading: Start() launches `threads` gateway threads, each running its own io_context, plus
// one control thread. Public methods are thread-safe unless noted.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvgate::router {

class Gateway {
 public:
  /// Validates `config` (policy, access log) without binding anything.
  static absl::StatusOr<std::unique_ptr<Gateway>> Create(config::Config config);
  ~Gateway();

  /// Binds the listener and starts all threads. @return kUnavailable when the bind fails.
  absl::Status Start();

  /// The bound port (useful with port 0). Valid after Start().
  uint16_t port() const;
  /// The admin listener's port, 0 when admin endpoints share the main listener.
  uint16_t admin_port() const;

  /// Swaps in a new worker list, routing policy and limits without dropping connections.
  /// The listen address and thread count are fixed at start; changes to them are logged and
  /// ignored. @return kInvalidArgument when `config` is rejected (the old one stays; counted
  /// and logged as ReloadRejected does).
  absl::Status Reload(config::Config config);

  /// A reload refused before Reload (the file did not parse or resolve): counted as
  /// kvgate_config_reloads_total{result="rejected"} and logged in one line, as Reload does
  /// with its own refusals.
  void ReloadRejected(const absl::Status& why);

  /// Opens the access log's file again (SIGUSR1: logrotate moved it away).
  absl::Status ReopenLogs();

  /// Stops accepting, closes idle connections, lets in-flight requests finish, and returns
  /// when none is left or `deadline` passed (then remaining connections are closed).
  /// @return true when every request finished in time.
  bool Drain(std::chrono::milliseconds deadline);

  /// Turns /ready to 503 while everything else keeps serving: the first step of a shutdown,
  /// so that load balancers (Kubernetes endpoints) stop sending before the listeners close.
  void StopReadiness();

  /// Stops every thread at once and joins them. Idempotent; called by the destructor.
  void Stop();

  /// Blocks until Stop() or Drain() finished.
  void Wait();

  /// Prometheus exposition of the gateway's metrics (same as GET /metrics).
  std::string MetricsText() const;

 private:
  struct Impl;
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::router
