// File: router/discovery/address_policy.h
// Which addresses and ports a discovery source may turn into workers (issue 27): whatever a DNS
// answer or an EndpointSlice names receives client prompts, so a source accepts only
//  - addresses inside its `allowed_networks` when that list is set, and never, unless an entry
//    at least as specific as the range names it explicitly, the unspecified address (0.0.0.0,
//    ::), loopback (127/8, ::1), link-local (169.254/16, fe80::/10) or the cloud metadata
//    address (169.254.169.254, fd00:ec2::254) — "0.0.0.0/0" does not admit them, "127.0.0.0/8"
//    admits loopback;
//  - ports in its `allowed_ports` when that list is set.
// RefusedAddresses remembers what a source refused so that each refusal is logged and counted
// once while it lasts, not at every poll. Pure, no I/O. Thread-compatible.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/cidr.h"

namespace kvgate::router {

enum class AddressRefusal : uint8_t {
  kNone = 0,
  kMalformed,    // not an IP address literal
  kUnspecified,  // 0.0.0.0, ::
  kLoopback,     // 127.0.0.0/8, ::1
  kLinkLocal,    // 169.254.0.0/16, fe80::/10
  kMetadata,     // 169.254.169.254, fd00:ec2::254
  kNetwork,      // outside allowed_networks
  kPort,         // not in allowed_ports
};

/// The `reason` label of kvgate_discovery_refused_total: "unspecified", "loopback", ...
const char* AddressRefusalName(AddressRefusal r);

class AddressPolicy {
 public:
  /// `allowed_networks` as the loader validated them (an entry that does not parse is
  /// ignored, which only narrows what is accepted); empty lists: no network / port bound.
  AddressPolicy(const std::vector<std::string>& allowed_networks,
                std::vector<uint16_t> allowed_ports);

  /// kNone when a worker at `address` (an IP literal, IPv6 bracketed or not) and `port` may
  /// be used.
  AddressRefusal Check(std::string_view address, uint16_t port) const;

 private:
  std::vector<common::Cidr> networks_;
  std::vector<uint16_t> ports_;
};

/// One refused worker address, for logs and the metric.
struct RefusedAddress {
  std::string address;
  uint16_t port = 0;
  AddressRefusal reason = AddressRefusal::kNone;
};

class RefusedAddresses {
 public:
  /// Records the refusals of one lookup; returns those not in the previous lookup's (to log
  /// and count). One that disappears and comes back counts again.
  std::vector<RefusedAddress> Update(const std::vector<RefusedAddress>& now);

 private:
  std::set<std::string> last_;
};

}  // namespace kvgate::router
