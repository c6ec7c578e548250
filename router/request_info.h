// File: router/request_info.h
// The few fields of an OpenAI request body the gateway needs before routing, read with
// simdjson on-demand (no DOM). Stateless; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kvgate::router {

struct RequestInfo {
  std::string model;
  std::string user;
  bool stream = false;
};

/// Parses a JSON object body. `body` may grow in capacity (simdjson needs padding) but its
/// contents are unchanged. @return kInvalidArgument with a client-facing message when the body
/// is not a JSON object or a known field has the wrong type.
absl::StatusOr<RequestInfo> ParseRequestInfo(std::string& body);

}  // namespace kvgate::router
