#include "kvevents/endpoints.h"

#include <charconv>

namespace kvgate::kvevents {

std::string OffsetEndpoint(std::string_view endpoint, uint32_t offset) {
  std::string ep(endpoint);
  if (offset == 0) return ep;
  if (ep.starts_with("ipc://") || ep.starts_with("inproc://")) {
    return ep + "_dp" + std::to_string(offset);
  }
  const size_t colon = ep.rfind(':');
  if (colon == std::string::npos) return ep;
  uint64_t port = 0;
  const char* begin = ep.data() + colon + 1;
  const char* end = ep.data() + ep.size();
  auto [ptr, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || ptr != end || begin == end || port == 0) return ep;
  return ep.substr(0, colon + 1) + std::to_string(port + offset);
}

bool ShouldBind(std::string_view endpoint) {
  return endpoint.find('*') != std::string_view::npos ||
         endpoint.find("::") != std::string_view::npos || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

bool IsLoopbackEndpoint(std::string_view e) {
  if (e.starts_with("ipc://") || e.starts_with("inproc://")) return true;
  if (!e.starts_with("tcp://")) return false;
  std::string_view host = e.substr(6);
  host = host.substr(0, host.rfind(':'));
  return host.starts_with("127.") || host == "[::1]" || host == "localhost";
}

}  // namespace kvgate::kvevents
