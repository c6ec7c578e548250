// File: net/http_client.h
// The house's one HTTP/1.1 client for calls off the request path: the gateway's health checks,
// model discovery, metric scrapes, precise-mode probes and the Kubernetes API, and (blocking)
// the etcd calls of transfer/'s segment metadata and store/'s leader election. One request per
// fresh connection (`connection: close`), plain or over TLS (TlsSocket, with SNI and the
// certificate checked against the host), the response head parsed by the gateway's own parser
// and its body decoded as it arrives, read whole or a line at a time (a Kubernetes watch).
// Include only from .cc files (Asio). Thread-compatible: runs on the caller's io_context;
// HttpCallBlocking is thread-safe (each call runs its own).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/url.h"
#include "net/asio.h"

namespace boost::asio::ssl {
class context;
}

namespace kvgate::router {

struct HttpClientRequest {
  std::string method = "GET";
  std::string target;  // path and query, after the URL's base path
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // sent as application/json when not empty
  std::string user_agent = "kvgate";
};

/// A response being read: its status, then its body as it arrives. Destroying it closes the
/// connection.
class HttpClientResponse {
 public:
  virtual ~HttpClientResponse() = default;
  virtual int status() const = 0;
  /// The next '\n'-terminated line of the body (without it; a last line without one too);
  /// nullopt once the body ended. Fails on transport errors, malformed framing, a line over
  /// `max_line` bytes, or `idle` without a byte.
  virtual net::awaitable<absl::StatusOr<std::optional<std::string>>> NextLine(
      std::chrono::milliseconds idle, size_t max_line) = 0;
  /// The rest of the body (at most `max_bytes`), within `timeout`.
  virtual net::awaitable<absl::StatusOr<std::string>> ReadAll(std::chrono::milliseconds timeout,
                                                              size_t max_bytes) = 0;
};

/// Connects to `url` (over TLS with `tls` for https://), sends `request` and reads the
/// response head, all within `timeout`.
/// @return kUnavailable on transport, TLS or framing errors; kDeadlineExceeded on timeout.
net::awaitable<absl::StatusOr<std::unique_ptr<HttpClientResponse>>> HttpOpen(
    net::io_context& ioc, const common::HttpUrl& url, HttpClientRequest request,
    std::chrono::milliseconds timeout, std::shared_ptr<boost::asio::ssl::context> tls = nullptr);

struct HttpResult {
  int status = 0;
  std::string body;
};

/// One whole call: `method path` (with `body` as application/json when non-empty) to `url`,
/// the response read whole (at most 4 MiB) within `timeout` in all.
net::awaitable<absl::StatusOr<HttpResult>> HttpCall(
    net::io_context& ioc, const common::HttpUrl& url, std::string_view method, std::string path,
    std::string body, std::chrono::milliseconds timeout,
    std::vector<std::pair<std::string, std::string>> headers = {},
    std::shared_ptr<boost::asio::ssl::context> tls = nullptr);

/// HttpCall for code without an io_context (etcd clients in transfer/ and store/): runs the
/// call on a private io_context on the caller's thread and returns when it ends, within
/// `timeout` in all (name resolution aside, as for HttpCall). Same results and errors as
/// HttpCall: kUnavailable on transport, TLS or framing errors, kDeadlineExceeded on timeout.
absl::StatusOr<HttpResult> HttpCallBlocking(
    const common::HttpUrl& url, std::string_view method, std::string path, std::string body,
    std::chrono::milliseconds timeout,
    std::vector<std::pair<std::string, std::string>> headers = {},
    std::shared_ptr<boost::asio::ssl::context> tls = nullptr);

}  // namespace kvgate::router
