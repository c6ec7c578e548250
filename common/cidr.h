// File: common/cidr.h
// IP addresses and CIDR networks as bytes, for the checks that decide which addresses a
// discovery source may turn into workers (router/discovery/address_policy.h) and the loader's
// validation of `allowed_networks`. IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) count as the
// IPv4 address they carry, so that an AAAA record cannot smuggle a refused IPv4 address in.
// Pure value types; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvgate::common {

struct IpAddress {
  bool v4 = true;
  std::array<uint8_t, 16> bytes{};  // IPv4: the first 4

  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

struct Cidr {
  IpAddress base;       // host bits cleared
  uint32_t prefix = 0;  // 0..32 (IPv4), 0..128 (IPv6)

  bool Contains(const IpAddress& a) const;
  std::string ToString() const;

  friend bool operator==(const Cidr&, const Cidr&) = default;
};

/// A literal IPv4 or IPv6 address (IPv6 may be bracketed; no zone ids). nullopt otherwise.
std::optional<IpAddress> ParseIpAddress(std::string_view text);

/// "10.0.0.0/8", "fd00::/8", or a bare address (a /32 or /128). Host bits set beyond the
/// prefix ("10.0.0.1/8") are an error: they usually mean a typo.
/// @return kInvalidArgument naming what is wrong.
absl::StatusOr<Cidr> ParseCidr(std::string_view text);

}  // namespace kvgate::common
