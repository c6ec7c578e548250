// File: router/net/control_http.h
// One HTTP request on a fresh connection, for the control plane (health checks, model
// discovery, metric scrapes, precise-mode probes): not on the request path, so no pooling.
// Speaks HTTP/1.1 with the gateway's own parser. Include only from .cc files (Asio).
// Thread-compatible: runs on the caller's io_context.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/url.h"
#include "router/net/asio.h"

namespace boost::asio::ssl {
class context;
}

namespace kvgate::router {

struct HttpResult {
  int status = 0;
  std::string body;
};

/// Sends `method path` (with `body` as application/json when non-empty) to `url` and reads the
/// whole response (at most 4 MiB) within `timeout`. An https:// `url` is reached over TLS with
/// `tls` (the snapshot's upstream context).
/// @return kUnavailable on transport errors (and TLS failures), kDeadlineExceeded on timeout.
net::awaitable<absl::StatusOr<HttpResult>> HttpCall(
    net::io_context& ioc, const common::HttpUrl& url, std::string_view method, std::string path,
    std::string body, std::chrono::milliseconds timeout,
    std::vector<std::pair<std::string, std::string>> headers = {},
    std::shared_ptr<boost::asio::ssl::context> tls = nullptr);

}  // namespace kvgate::router
