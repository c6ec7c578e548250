#include "common/cidr.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/strings.h"

namespace kvgate::common {

std::optional<IpAddress> ParseIpAddress(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  if (text.empty() || text.size() > 45) return std::nullopt;
  const std::string s(text);
  IpAddress a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) {
    a.v4 = true;
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) != 1) return std::nullopt;
  a.v4 = false;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.bytes.data(), kMapped, sizeof(kMapped)) == 0) {
    IpAddress v4;
    std::memcpy(v4.bytes.data(), a.bytes.data() + 12, 4);
    return v4;
  }
  return a;
}

bool Cidr::Contains(const IpAddress& a) const {
  if (a.v4 != base.v4) return false;
  uint32_t bits = prefix;
  for (size_t i = 0; bits > 0; ++i, bits = bits >= 8 ? bits - 8 : 0) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a.bytes[i] & mask) != base.bytes[i]) return false;
  }
  return true;
}

std::string Cidr::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(base.v4 ? AF_INET : AF_INET6, base.bytes.data(), buf, sizeof(buf));
  return StrCat(buf, "/", prefix);
}

absl::StatusOr<Cidr> ParseCidr(std::string_view text) {
  const size_t slash = text.find('/');
  const auto address = ParseIpAddress(text.substr(0, slash));
  if (!address) {
    return absl::InvalidArgumentError(
        StrCat("'", text, "' is not a network (expected e.g. 10.0.0.0/8 or fd00::/8)"));
  }
  Cidr c;
  c.base = *address;
  const uint32_t max = address->v4 ? 32 : 128;
  c.prefix = max;
  if (slash != std::string_view::npos) {
    uint64_t p = 0;
    if (!ParseUint64(text.substr(slash + 1), &p) || p > max) {
      return absl::InvalidArgumentError(
          StrCat("'", text, "': the prefix length must be 0 to ", max));
    }
    c.prefix = static_cast<uint32_t>(p);
  }
  // Host bits beyond the prefix: refused rather than silently cleared.
  const size_t bytes = address->v4 ? 4 : 16;
  for (size_t i = 0; i < bytes; ++i) {
    const uint32_t first_bit = static_cast<uint32_t>(i) * 8;
    uint8_t keep = 0;
    if (c.prefix >= first_bit + 8) {
      keep = 0xff;
    } else if (c.prefix > first_bit) {
      keep = static_cast<uint8_t>(0xff << (8 - (c.prefix - first_bit)));
    }
    if ((c.base.bytes[i] & ~keep) != 0) {
      return absl::InvalidArgumentError(
          StrCat("'", text, "' has host bits set beyond /", c.prefix));
    }
  }
  return c;
}

}  // namespace kvgate::common
