#include "router/discovery/address_policy.h"

#include <algorithm>
#include <utility>

#include "common/strings.h"

namespace kvgate::router {
namespace {

struct SpecialRange {
  const char* cidr;
  AddressRefusal reason;
};

// Most specific first: an address is classed by the first range that holds it (the metadata
// address before the link-local range around it).
constexpr SpecialRange kSpecial[] = {
    {"169.254.169.254/32", AddressRefusal::kMetadata},
    {"fd00:ec2::254/128", AddressRefusal::kMetadata},
    {"0.0.0.0/32", AddressRefusal::kUnspecified},
    {"::/128", AddressRefusal::kUnspecified},
    {"::1/128", AddressRefusal::kLoopback},
    {"127.0.0.0/8", AddressRefusal::kLoopback},
    {"169.254.0.0/16", AddressRefusal::kLinkLocal},
    {"fe80::/10", AddressRefusal::kLinkLocal},
};

const std::vector<common::Cidr>& SpecialCidrs() {
  static const std::vector<common::Cidr> cidrs = [] {
    std::vector<common::Cidr> out;
    for (const auto& s : kSpecial) out.push_back(*common::ParseCidr(s.cidr));
    return out;
  }();
  return cidrs;
}

}  // namespace

const char* AddressRefusalName(AddressRefusal r) {
  switch (r) {
    case AddressRefusal::kNone:
      return "none";
    case AddressRefusal::kMalformed:
      return "malformed";
    case AddressRefusal::kUnspecified:
      return "unspecified";
    case AddressRefusal::kLoopback:
      return "loopback";
    case AddressRefusal::kLinkLocal:
      return "link_local";
    case AddressRefusal::kMetadata:
      return "metadata";
    case AddressRefusal::kNetwork:
      return "network";
    case AddressRefusal::kPort:
      return "port";
  }
  return "unknown";
}

AddressPolicy::AddressPolicy(const std::vector<std::string>& allowed_networks,
                             std::vector<uint16_t> allowed_ports)
    : ports_(std::move(allowed_ports)) {
  for (const auto& n : allowed_networks) {
    if (auto c = common::ParseCidr(n); c.ok()) networks_.push_back(*c);
  }
}

AddressRefusal AddressPolicy::Check(std::string_view address, uint16_t port) const {
  const auto a = common::ParseIpAddress(address);
  if (!a) return AddressRefusal::kMalformed;
  const auto& special = SpecialCidrs();
  for (size_t i = 0; i < special.size(); ++i) {
    if (!special[i].Contains(*a)) continue;
    // Only an entry inside the special range names it on purpose.
    const bool explicitly = std::any_of(networks_.begin(), networks_.end(), [&](const auto& n) {
      return n.prefix >= special[i].prefix && n.Contains(*a);
    });
    if (!explicitly) return kSpecial[i].reason;
    break;
  }
  if (!networks_.empty() && std::none_of(networks_.begin(), networks_.end(),
                                         [&](const auto& n) { return n.Contains(*a); })) {
    return AddressRefusal::kNetwork;
  }
  if (!ports_.empty() && std::find(ports_.begin(), ports_.end(), port) == ports_.end()) {
    return AddressRefusal::kPort;
  }
  return AddressRefusal::kNone;
}

std::vector<RefusedAddress> RefusedAddresses::Update(const std::vector<RefusedAddress>& now) {
  std::set<std::string> keys;
  std::vector<RefusedAddress> fresh;
  for (const auto& r : now) {
    std::string key = common::StrCat(r.address, "|", r.port, "|", AddressRefusalName(r.reason));
    if (!last_.count(key) && !keys.count(key)) fresh.push_back(r);
    keys.insert(std::move(key));
  }
  last_ = std::move(keys);
  return fresh;
}

}  // namespace kvgate::router
