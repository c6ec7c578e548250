// File: common/url.h
// Parsing of worker base URLs ("http://host:port[/prefix]"). Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvgate::common {

struct HttpUrl {
  std::string scheme;  // "http"; "https" only where the caller allows it (the Kubernetes API)
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // without trailing '/', empty for the root

  /// "host:port", the Host header value and the key of connection pools.
  std::string Authority() const;
  /// "http://host:port[/base]", the canonical spelling used in logs, metrics and headers.
  std::string ToString() const;

  friend bool operator==(const HttpUrl&, const HttpUrl&) = default;
};

/// Parses an absolute http URL (or https, port 443 by default, with `allow_https`; workers
/// are http only until TLS to workers exists). Errors are kInvalidArgument with a reason.
absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url, bool allow_https = false);

/// Parses "HOST:PORT" (IPv6 as "[::1]:PORT"); port 0 is allowed (pick any).
absl::StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(std::string_view hostport);

/// A listen address's host as the IP address to bind: an IP literal as it is, a name
/// ("localhost", a pod's hostname) resolved once, an IPv4 address preferred. Errors name the
/// host and the resolver's reason, so `--check` refuses what start would fail to bind.
absl::StatusOr<std::string> ListenAddress(std::string_view host);

}  // namespace kvgate::common
