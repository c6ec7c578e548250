#include "router/discovery/dns_discovery.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "common/strings.h"
#include "router/discovery/address_policy.h"
#include "router/discovery/dns_client.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

// The URL of a worker at `address` (IPv6 in brackets) and `port`.
std::string DnsWorkerUrl(const std::string& address, uint16_t port) {
  const bool v6 = address.find(':') != std::string::npos;
  return common::StrCat("http://", v6 ? "[" : "", address, v6 ? "]" : "", ":", port);
}

// Every address of `name`: its A and AAAA records (those the answer gives `name` itself or the
// end of a CNAME chain from it). nullopt when a lookup failed.
net::awaitable<std::optional<std::vector<std::string>>> Addresses(net::io_context& ioc,
                                                                  const dns::udp::endpoint& server,
                                                                  const std::string& name,
                                                                  milliseconds timeout) {
  std::vector<std::string> out;
  for (dns::RecordType type : {dns::RecordType::kA, dns::RecordType::kAaaa}) {
    auto r = co_await dns::Query(ioc, server, name, type, timeout);
    if (!r.ok() || (r->rcode != 0 && r->rcode != dns::kNxDomain)) {
      spdlog::warn("discovery: {} lookup of {} failed: {}",
                   type == dns::RecordType::kA ? "A" : "AAAA", name,
                   r.ok() ? common::StrCat("rcode ", r->rcode) : std::string(r.status().message()));
      co_return std::nullopt;
    }
    for (const auto& a : dns::OwnedBy(r->answers, name, type)) out.push_back(a.address);
  }
  co_return out;
}

}  // namespace

struct DnsDiscovery::Impl : std::enable_shared_from_this<Impl> {
  Impl(net::io_context& ioc, size_t index, config::DnsDiscoveryConfig source, OnChange on_change,
       OnRefused on_refused)
      : ioc(ioc),
        index(index),
        source(std::move(source)),
        on_change(std::move(on_change)),
        on_refused(std::move(on_refused)),
        policy(this->source.allowed_networks, this->source.allowed_ports) {}

  // Keeps `address`:`port` as a worker when the policy allows it, else notes the refusal.
  void Admit(const std::string& address, uint16_t port, std::vector<std::string>* urls,
             std::vector<RefusedAddress>* refused) const {
    const AddressRefusal why = policy.Check(address, port);
    if (why == AddressRefusal::kNone) {
      urls->push_back(DnsWorkerUrl(address, port));
    } else {
      refused->push_back({address, port, why});
    }
  }

  // The workers `source` resolves to now; nullopt when a lookup failed.
  net::awaitable<std::optional<std::vector<std::string>>> Resolve(
      const config::DnsDiscoveryConfig& s, const dns::udp::endpoint& server,
      std::vector<RefusedAddress>* refused) {
    const milliseconds timeout(s.timeout_ms);
    std::vector<std::string> urls;
    if (!s.srv) {
      auto addrs = co_await Addresses(ioc, server, s.name, timeout);
      if (!addrs) co_return std::nullopt;
      for (const auto& a : *addrs) Admit(a, s.port, &urls, refused);
    } else {
      auto r = co_await dns::Query(ioc, server, s.name, dns::RecordType::kSrv, timeout);
      if (!r.ok() || (r->rcode != 0 && r->rcode != dns::kNxDomain)) {
        spdlog::warn(
            "discovery: SRV lookup of {} failed: {}", s.name,
            r.ok() ? common::StrCat("rcode ", r->rcode) : std::string(r.status().message()));
        co_return std::nullopt;
      }
      for (const auto& srv : dns::OwnedBy(r->answers, s.name, dns::RecordType::kSrv)) {
        // The additional section's addresses count only when owned by the target itself.
        std::vector<std::string> addrs;
        for (const auto& extra : r->additional) {
          if (extra.name == srv.target &&
              (extra.type == dns::RecordType::kA || extra.type == dns::RecordType::kAaaa)) {
            addrs.push_back(extra.address);
          }
        }
        if (addrs.empty()) {  // not in the additional section: ask for the target itself
          auto own = co_await Addresses(ioc, server, srv.target, timeout);
          if (!own) co_return std::nullopt;
          addrs = *std::move(own);
        }
        for (const auto& a : addrs) Admit(a, srv.port, &urls, refused);
      }
    }
    std::sort(urls.begin(), urls.end());
    urls.erase(std::unique(urls.begin(), urls.end()), urls.end());
    co_return urls;
  }

  // Logs and reports the refusals that are new since the last lookup.
  void Report(const std::vector<RefusedAddress>& refused) {
    for (const auto& r : refused_seen.Update(refused)) {
      spdlog::warn(
          "discovery: {} names {}:{}, refused ({}): not a worker; allowed_networks / "
          "allowed_ports admit it (docs/configuration.md, discovery)",
          source.name, r.address, r.port, AddressRefusalName(r.reason));
      if (on_refused) on_refused(source.name, AddressRefusalName(r.reason));
    }
  }

  // Reports the workers of one lookup when they changed.
  void Publish(std::vector<std::string> urls, std::optional<std::vector<std::string>>* last) {
    if (urls == *last) return;
    std::vector<DiscoveredWorker> workers;
    for (const auto& u : urls) {
      auto url = common::ParseHttpUrl(u);
      if (!url.ok()) continue;
      DiscoveredWorker w{source.worker, EndpointState::kReady};
      w.config.url = *std::move(url);
      workers.push_back(std::move(w));
    }
    spdlog::info("discovery: {} resolves to {} worker(s){}{}", source.name, workers.size(),
                 urls.empty() ? "" : ": ", common::StrJoin(urls, ", "));
    *last = std::move(urls);
    on_change(index, std::move(workers));
  }

  net::awaitable<void> Loop() {
    auto self = shared_from_this();
    const config::DnsDiscoveryConfig& s = source;
    std::optional<std::vector<std::string>> last;
    net::steady_timer timer(ioc);
    while (!stopped) {
      if (auto server = dns::ServerEndpoint(s.server); !server.ok()) {
        spdlog::error("discovery: {}: {}", s.name, server.status().message());
      } else {
        std::vector<RefusedAddress> refused;
        auto urls = co_await Resolve(s, *server, &refused);
        if (urls && !stopped) {
          Report(refused);
          Publish(*std::move(urls), &last);
        }
      }
      if (stopped) break;
      timer.expires_after(milliseconds(s.interval_ms));
      co_await timer.async_wait(kNoThrow);
    }
  }

  net::io_context& ioc;
  const size_t index;
  const config::DnsDiscoveryConfig source;
  const OnChange on_change;
  const OnRefused on_refused;
  const AddressPolicy policy;
  RefusedAddresses refused_seen;  // control thread only
  std::atomic<bool> stopped{false};
};

DnsDiscovery::DnsDiscovery(net::io_context& ioc, size_t index, config::DnsDiscoveryConfig source,
                           OnChange on_change, OnRefused on_refused)
    : impl_(std::make_shared<Impl>(ioc, index, std::move(source), std::move(on_change),
                                   std::move(on_refused))) {}

DnsDiscovery::~DnsDiscovery() { Stop(); }

void DnsDiscovery::Start() { net::co_spawn(impl_->ioc, impl_->Loop(), net::detached); }

void DnsDiscovery::Stop() { impl_->stopped = true; }

}  // namespace kvgate::router
