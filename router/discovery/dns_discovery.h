// File: router/discovery/dns_discovery.h
// Workers found by DNS, beside the static list: each `discovery.dns` source resolves its name
// every interval_ms — A and AAAA records (every address on `port`), or SRV records (each
// target on its port, the target's addresses from the additional section or its own A/AAAA
// query) — and reports the workers it found when that set changes. A name that does not exist
// or has no records means no workers (a headless Service with no ready pod); a failed lookup
// (timeout, SERVFAIL) keeps the last set, so a DNS blip does not empty the fleet. Only records
// owned by the name asked (or its CNAME chain) count, and only addresses and ports within the
// source's bounds (address_policy.h): the others are logged and counted once, not workers.
// Runs on the control io_context. Thread-compatible: Start/Stop from the thread that owns that
// context.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "config/config.h"
#include "net/asio.h"
#include "router/discovery/discovery_source.h"

namespace kvgate::router {

class DnsDiscovery : public DiscoverySource {
 public:
  /// `index` is the number this source reports itself under; every worker it finds is ready.
  /// Addresses outside the source's bounds (allowed_networks, allowed_ports, and the ranges
  /// refused by default) are left out and reported to `on_refused`.
  DnsDiscovery(net::io_context& ioc, size_t index, config::DnsDiscoveryConfig source,
               OnChange on_change, OnRefused on_refused = {});
  ~DnsDiscovery() override;

  /// Starts the loop (the first lookup at once).
  void Start() override;
  void Stop() override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvgate::router
