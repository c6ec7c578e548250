#include "common/url.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/strings.h"

namespace kvgate::common {

std::string HttpUrl::Authority() const {
  const bool v6 = host.find(':') != std::string::npos;
  return common::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

std::string HttpUrl::ToString() const {
  return common::StrCat(scheme, "://", Authority(), base_path);
}

absl::StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(std::string_view hp) {
  std::string_view host;
  std::string_view port;
  if (hp.starts_with("[")) {
    const size_t close = hp.find(']');
    if (close == std::string_view::npos || close + 1 >= hp.size() || hp[close + 1] != ':') {
      return absl::InvalidArgumentError(common::StrCat("'", hp, "' is not [IPV6]:PORT"));
    }
    host = hp.substr(1, close - 1);
    port = hp.substr(close + 2);
  } else {
    const size_t colon = hp.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(common::StrCat("'", hp, "' has no port (want HOST:PORT)"));
    }
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  uint64_t p = 0;
  if (host.empty()) {
    return absl::InvalidArgumentError(common::StrCat("'", hp, "' has an empty host"));
  }
  if (!ParseUint64(port, &p) || p > 65535) {
    return absl::InvalidArgumentError(common::StrCat("'", hp, "' has an invalid port"));
  }
  return std::make_pair(std::string(host), static_cast<uint16_t>(p));
}

absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url, bool allow_https) {
  HttpUrl out;
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return absl::InvalidArgumentError(common::StrCat("'", url, "' is not an absolute URL"));
  }
  out.scheme = std::string(url.substr(0, sep));
  const bool https = allow_https && out.scheme == "https";
  if (out.scheme != "http" && !https) {
    return absl::InvalidArgumentError(common::StrCat("'", url, "': scheme must be http",
                                                     allow_https ? " or https" : "", " (got '",
                                                     out.scheme, "')"));
  }
  std::string_view rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    out.base_path = std::string(path);
  }
  if (authority.find('@') != std::string_view::npos ||
      authority.find('?') != std::string_view::npos) {
    return absl::InvalidArgumentError(common::StrCat("'", url, "' has userinfo or a query"));
  }
  std::string with_port(authority);
  const bool bare_v6 = !authority.empty() && authority.front() == '[' && authority.back() == ']';
  if (authority.find(':') == std::string_view::npos || bare_v6) with_port += https ? ":443" : ":80";
  auto hp = ParseHostPort(with_port);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(common::StrCat("'", url, "': ", hp.status().message()));
  }
  out.host = hp->first;
  out.port = hp->second;
  if (out.port == 0) {
    return absl::InvalidArgumentError(common::StrCat("'", url, "' has port 0"));
  }
  return out;
}

absl::StatusOr<std::string> ListenAddress(std::string_view host) {
  const std::string h(host);
  in6_addr probe{};
  if (::inet_pton(AF_INET, h.c_str(), &probe) == 1 ||
      ::inet_pton(AF_INET6, h.c_str(), &probe) == 1) {
    return h;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(h.c_str(), nullptr, &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        common::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      pick->ai_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr)
          : static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr);
  const bool ok = ::inet_ntop(pick->ai_family, addr, text, sizeof(text)) != nullptr;
  ::freeaddrinfo(res);
  if (!ok) return absl::InvalidArgumentError(common::StrCat("cannot resolve '", host, "'"));
  return std::string(text);
}

}  // namespace kvgate::common
