// File: transfer/metadata/http_client.h
// A minimal blocking HTTP/1.1 client for control-plane calls (the etcd v3 JSON gateway): one
// request per connection, every step bounded by a time-out. Not for the data path. Stateless;
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvgate::transfer {

struct HttpResponse {
  int status = 0;
  std::string body;
};

/// POSTs `body` (application/json) to http://host:port`path`.
/// @return kUnavailable when the server cannot be reached or the connection breaks;
/// kDeadlineExceeded after `timeout`; kInternal for a malformed response.
absl::StatusOr<HttpResponse> HttpPost(const std::string& host, uint16_t port, std::string_view path,
                                      std::string_view body, std::chrono::milliseconds timeout);

}  // namespace kvgate::transfer
