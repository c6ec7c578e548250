// File: router/discovery/dns_discovery.h
// Workers found by DNS, beside the static list: each `discovery.dns` source resolves its name
// every interval_ms — A and AAAA records (every address on `port`), or SRV records (each
// target on its port, the target's addresses from the additional section or its own A/AAAA
// query) — and reports the workers it found when that set changes. A name that does not exist
// or has no records means no workers (a headless Service with no ready pod); a failed lookup
// (timeout, SERVFAIL) keeps the last set, so a DNS blip does not empty the fleet. Runs on the
// control io_context. Thread-compatible: Start/Stop from the thread that owns that context.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "config/config.h"
#include "router/internal/asio.h"

namespace kvgate::router {

class DnsDiscovery {
 public:
  /// Called with a source's index and every worker it now resolves to, on the io_context.
  using OnChange = std::function<void(size_t source, std::vector<config::WorkerConfig>)>;

  DnsDiscovery(net::io_context& ioc, std::vector<config::DnsDiscoveryConfig> sources,
               OnChange on_change);
  ~DnsDiscovery();

  /// Starts one loop per source (the first lookup at once).
  void Start();
  /// Ends the loops (a lookup in flight ends at its timeout, reporting nothing).
  void Stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvgate::router
