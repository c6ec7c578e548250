// File: tests/fakes/test_client.h
// A small blocking HTTP/1.1 client for tests: whole requests, and streamed responses read
// piece by piece. Thread-compatible; one per test thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvgate::testing {

struct HttpResponse {
  int status = 0;                              // 0 when the request failed at the transport level
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;
  std::string Header(const std::string& name) const;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

/// One request on a new connection.
HttpResponse Fetch(uint16_t port, const std::string& method, const std::string& target,
                   const std::string& body = "", const Headers& headers = {},
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// The admin token (admin.token) the tests' gateways are configured with: without one, admin
/// endpoints are off the API listener.
inline constexpr char kAdminToken[] = "kvgate-test-admin";

/// Fetch with "Authorization: Bearer <kAdminToken>" added.
HttpResponse AdminFetch(uint16_t port, const std::string& method, const std::string& target,
                        const std::string& body = "", Headers headers = {});

/// What the gateway still holds for requests that ended: each worker whose load in
/// /admin/workers (in-flight requests, pending prefill tokens, decode slots, KV blocks — the
/// routing reservations) is not back to zero, described; "" when every one is. Needs
/// admin.token = kAdminToken.
std::string HeldReservations(uint16_t port);

/// /admin/workers?blocks=1: each worker's approximate-index blocks (the sorted hash list as
/// shown), by worker URL. Replicas in sync list the same (issue 29).
std::map<std::string, std::string> AdminIndexBlocks(uint16_t port);

/// A worker's in-flight requests in /admin/workers: {load (this replica's plus the other
/// replicas'), local_load (this replica's)}; {-1, -1} when the worker is not listed.
std::pair<int64_t, int64_t> AdminInFlight(uint16_t port, const std::string& worker);

/// A streamed response read as it arrives.
class StreamingRequest {
 public:
  StreamingRequest(uint16_t port, const std::string& target, const std::string& body,
                   const Headers& headers = {});
  ~StreamingRequest();

  /// Status and headers; false on failure.
  bool ReadHeader(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  int status() const;
  std::string Header(const std::string& name) const;

  /// Next piece of body as it arrived (may be several events); empty at the end or on error.
  std::string ReadSome(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Everything until the end of the body.
  std::string ReadAll(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  bool done() const;
  /// Closes the connection abruptly (client disconnect).
  void Close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A chat completion body: {"model":..., "messages":[...], "stream":...} padded to `bytes`.
std::string ChatBody(bool stream, size_t bytes = 0, const std::string& model = "fake-model");

}  // namespace kvgate::testing
